"""`harness profile`: profile a candidate's kernels with ncu and print the evidence a model would read.

A controller command, since the evidence is the controller's (controller/evidence/); the controller adds it
to the `harness` group through the "harness.commands" entry point (pyproject.toml), so the harness itself
never imports the controller. `controller profile` is the same command.

    harness profile SUBMISSION_ID            # its solution; measured results give regimes and gaps
    harness profile SOLUTION.json            # the latest archived submission of that solution, if any
        [--workload W]...                    # default: one representative workload per regime
        [--backend auto|ncu|nsight] [--arch sm_90] [--timeout 600] [--seed 0] [--json]

Exit codes: 0 every profile ok; 1 some profile failed (target error, timeout, no kernels); 2 usage
errors; 3 no profiler here (ncu missing, counters restricted: ERR_NVGPUCTRPERM).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import click

from harness.cli_common import POSITIVE_SECONDS

EXIT_UNAVAILABLE = 3
# Fewer bytes hold no more than the evidence's title: the model would read "[evidence truncated]" alone.
MIN_EVIDENCE_BYTES = 256


def _arch(ctx: Any, param: Any, value: Optional[str]) -> Optional[str]:
    """--arch: an architecture as nvcc and ncu spell it (sm_90, sm_90a, sm_100, sm_100f); any other text would pick
    a metric table by the digits it happens to hold (controller/evidence/ncu_metrics.py table_arch)."""
    import re

    if value is not None and not re.fullmatch(r"sm_[0-9]{2,3}[af]?", value):
        raise click.BadParameter(f"{value!r} is no architecture (give one such as sm_90, sm_90a or sm_100)")
    return value


def _latest_submission(archive: Any, solution_hash: str) -> Optional[int]:
    from harness.archive.queries import latest_finished_submission_id

    return latest_finished_submission_id(archive.db, solution_hash)


@click.command("profile")
@click.argument("target")
@click.option("--workload", "-w", "workloads", multiple=True,
              help="Workload uuid, uuid prefix, label or index (repeatable, or comma-separated). "
                   "Default: one representative per regime.")
@click.option("--archive", "archive_path", type=click.Path(),
              help="Archive folder (default: $CRUCIBLE_ARCHIVE, else ./artifacts).")
@click.option("--dataset", type=click.Path(), help="Trace-set folder with definitions and workloads.")
@click.option("--json", "as_json", is_flag=True, help="Print the profiles and the evidence as JSON.")
@click.option("--backend", type=click.Choice(["auto", "ncu", "nsight"]), default="auto", show_default=True,
              help="nsight needs nsight-python 1.x and ncu >= 2026.2.1; auto falls back to raw ncu.")
@click.option("--arch", callback=_arch,
              help="Metric table to request (sm_90, sm_100). Default: from nvidia-smi, else sm_90.")
@click.option("--timeout", type=POSITIVE_SECONDS, default=600.0, show_default=True, help="Seconds per workload.")
@click.option("--seed", type=int, default=0, show_default=True, help="Input seed of the profiled call.")
@click.option("--max-bytes", type=click.IntRange(MIN_EVIDENCE_BYTES), default=4096, show_default=True,
              help="Bound of the Markdown evidence.")
@click.option("--no-net-isolation", is_flag=True, help="Let the profiled process use the network.")
@click.option("--no-sandbox", is_flag=True,
              help="Run ncu and the candidate outside the candidate's sandbox (trusted code only; said in the output).")
def profile(target: str, workloads: tuple[str, ...], archive_path: Optional[str], dataset: Optional[str],
            as_json: bool, backend: str, arch: Optional[str], timeout: float, seed: int, max_bytes: int,
            no_net_isolation: bool, no_sandbox: bool) -> None:
    """Profile SUBMISSION_ID's (or SOLUTION.json's) kernels with Nsight Compute on chosen workloads.

    Each workload runs once in a fresh process under ncu (clock control off, NVTX range around the one
    profiled call), ncu and the candidate inside the candidate's sandbox. The raw report goes into the
    archive as a blob, the digest as a row
    of the `profiles` table; the evidence (regimes, kernel digests, largest gaps) is printed.
    """
    from harness.archive.database import ArchiveError
    from harness.cli_common import err, fail, open_archive, open_dataset, out
    from harness.profiling import NO_PERMISSION, OK, UNAVAILABLE, detect_arch, profile_workloads, select_backend
    from harness.data.schema import SchemaError, Solution, dump_json, load_model

    from .evidence import build_evidence, representatives, requested_metrics
    from .evidence.profiles import archive_profiles, measured_stats

    path = Path(target)
    if not path.exists() and not target.isdigit():
        fail(f"{target!r} is neither a solution file nor a submission id")
    ds = open_dataset(dataset)
    archive = open_archive(archive_path, reading=not path.exists())  # a submission id needs an existing archive
    submission: Optional[dict[str, Any]] = None
    try:
        if path.exists():
            solution = load_model(Solution, path)
            sub_id = _latest_submission(archive, solution.content_hash)
            submission = archive.submission(sub_id) if sub_id is not None else None
        else:  # a submission id
            submission = archive.submission(int(target))
            solution = Solution.model_validate(archive.solution_json(submission["solution_hash"]))
        definition = ds.definition(solution.definition)
        selection = [w for item in workloads for w in item.split(",") if w]
        chosen = ds.workloads_for(definition.name, selection) if selection else None
    except (SchemaError, ArchiveError) as e:
        fail(str(e))
    all_workloads = ds.workloads_for(definition.name)
    if not all_workloads:
        fail(f"definition {definition.name} has no workloads in {ds.root}")

    try:
        measured = measured_stats(ds, definition, submission, all_workloads)
    except ValueError as e:  # a malformed workload_weights.yaml
        fail(str(e))
    stats, roofline_bytes = measured.stats, measured.roofline_bytes
    uuids = [w.uuid for w in chosen] if chosen else list(representatives(stats).values())

    notes: list[str] = []
    if arch is None:
        arch, why = detect_arch()
        if arch is None:
            arch = "sm_90"
            notes.append(f"architecture not detected ({why}); requested the sm_90 metric names")
    profiler = select_backend(backend)
    available, why = profiler.available()
    if not available:
        notes.append(f"profiler unavailable: {why}")
    labels = measured.labels
    err.print(f"profiling {solution.name} on {len(uuids)} workload(s) with {profiler.name}: {why}", highlight=False,
              markup=False)

    def on_progress(uuid: str, summary: Any) -> None:
        err.print(f"  {labels.get(uuid, uuid)}: {summary.status}" + (f" ({summary.reason[:200]})" if summary.reason
                                                                     else ""), highlight=False, markup=False)

    summaries = profile_workloads(profiler, dump_json(solution), solution.content_hash, uuids, ds.root,
                                  requested_metrics(arch), seed=seed, timeout_s=timeout,
                                  isolate_network=not no_net_isolation, progress=on_progress,
                                  sandbox=not no_sandbox, hidden=[str(archive.folder)])
    records = archive_profiles(archive, summaries, measured, definition.name, arch,
                               submission_id=submission["id"] if submission else None)
    hardware = ((submission or {}).get("environment") or {}).get("hardware", "")
    evidence = build_evidence(definition.name, solution.name, stats, summaries, hardware=hardware, notes=notes,
                              roofline_bytes=roofline_bytes)
    markdown = evidence.to_markdown(max_bytes=max_bytes)
    if as_json:
        out.print_json(json.dumps({"solution": solution.name, "definition": definition.name,
                                   "submission_id": submission["id"] if submission else None,
                                   "backend": profiler.name, "backend_reason": why, "profiles": records,
                                   "evidence": evidence.to_json(), "markdown": markdown}, default=str))
    else:
        out.print(markdown, markup=False, highlight=False)
    statuses = {s.status for s in summaries}
    if statuses <= {OK}:
        sys.exit(0)
    if statuses <= {UNAVAILABLE, NO_PERMISSION}:
        sys.exit(EXIT_UNAVAILABLE)
    sys.exit(1)
