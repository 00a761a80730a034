"""`harness`: a thin command line over the library. Parses, calls, prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import click
from rich.markup import escape
from rich.table import Table

from .archive.database import ArchiveError
from .archive.storage import database_refusal, storage_message
from .cli_progress import submit_progress
from .cli_common import (ARCHIVE_HELP, NOT_A_FOLDER, POSITIVE_SECONDS, dump_stacks_from_env, err, fail, fmt,
                         open_archive, open_dataset, out, run_as_program, styled)
from .pipeline.phases import timeline
from .result_view import print_promotability, print_result, print_submission_audits, seconds, times
from .archive_cli import copy_archive, dataset_names, list_cmd
from .report_cli import browse, diff, report
from .data.schema import SchemaError, Solution, load_model
from .archive.seal import MODIFIED_WARNING

@click.group()
@click.version_option("0.1.0", prog_name="harness")
def main() -> None:
    """Crucible harness: build, check, time and archive kernel solutions."""
    from .sandbox.runner import exit_on_sigterm

    exit_on_sigterm()
    timeline("cli_imported")
    dump_stacks_from_env()


@main.command()
@click.argument("solutions", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--workloads", "-w", multiple=True,
              help="Workload uuid, uuid prefix, label, index, or largest/smallest (by input+output bytes, per "
                   "definition); repeatable, or comma-separated.")
@click.option("--archive", "archive_path", type=click.Path(), help=ARCHIVE_HELP)
@click.option("--dataset", type=click.Path(), help="Trace-set folder with definitions and workloads.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per solution.")
@click.option("--timeout", type=POSITIVE_SECONDS,
              help="Seconds per workload, build included (default: the preset's, 300).")
@click.option("--all-workloads", is_flag=True, help="On CPU, also run workloads too large for the Triton interpreter.")
@click.option("--no-timing", is_flag=True, help="Correctness only, even on a GPU.")
@click.option("--no-baselines", is_flag=True, help="Do not measure the FlashInfer baselines.")
@click.option("--time-reference", is_flag=True,
              help="Also time the Python reference (speedup vs reference, complete FlashInfer-Bench traces); "
                   "otherwise only figures already in the archive are used.")
@click.option("--audit-level", type=click.Choice(["fast", "full", "off"]), default="fast", show_default=True,
              help="fast: static gate, mutation, aliasing, fresh-input recheck, precision, kernel attribution; "
                   "full: more recheck calls and ncu instruction counters; off: none (never promotable).")
@click.option("--no-net-isolation", is_flag=True, help="Let the worker use the network (not recommended).")
@click.option("--require-sandbox", is_flag=True, help="Refuse to run where the host cannot give the full sandbox.")
@click.option("--no-sandbox", is_flag=True, help="Run workers without namespaces (results say 'sandbox: reduced').")
@click.option("--fresh-seeds", is_flag=True,
              help="Draw this run's input seeds afresh instead of from the archive's secret (the reference's "
                   "outputs of earlier runs are then not reused).")
@click.option("--fresh-builds", is_flag=True,
              help="Compile every torch extension afresh instead of reusing the solution's earlier build (nothing a "
                   "solution wrote in an earlier evaluation reaches this one).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this host's GPUs; ray: one lane per GPU of a Ray cluster (extra `ray`).")
@click.option("--address", help="--executor ray: the cluster (HOST:PORT or auto); default: a new one on this host.")
@click.option("--lanes", type=click.IntRange(1),
              help="--executor ray: at most this many lanes (on a cluster without GPUs: this many CPU lanes).")
@click.option("--resume", is_flag=True, help="Skip solutions the archive already holds a verdict for (same code, "
                                             "definition, workloads and audit level): continue a killed run.")
@click.option("--progress", type=click.Choice(["auto", "lines", "off"]), default="auto", show_default=True,
              help="auto: bars on a terminal, nothing elsewhere; lines: a timestamped line per workload on stderr "
                   "(CI logs, scripts); off: nothing.")
def submit(solutions: tuple[str, ...], workloads: tuple[str, ...], archive_path: Optional[str], dataset: Optional[str],
           as_json: bool, timeout: Optional[float], all_workloads: bool, no_timing: bool, no_baselines: bool,
           time_reference: bool, audit_level: str, no_net_isolation: bool, require_sandbox: bool,
           no_sandbox: bool, fresh_seeds: bool, fresh_builds: bool, executor: str, address: Optional[str],
           lanes: Optional[int], resume: bool, progress: str) -> None:
    """Evaluate SOLUTION.json files (or folders of them) and archive the results.

    With several solutions on a host with several GPUs, evaluations run in parallel, one per GPU.
    """
    # Nothing here imports torch before the first workers are launched (harness.pipeline.early_workers): they
    # import it while this process does.
    from .data.options import SubmitOptions
    from .pipeline import early_workers
    from .pipeline.worker_options import one_lane_certain
    from .sandbox.isolation import human_bytes, load_sandbox_policy, probe

    for flag, value in (("--address", address), ("--lanes", lanes)):
        if value is not None and executor != "ray":  # the local executor has no cluster and one lane per GPU
            fail(f"{flag} is for --executor ray only (it would be ignored)")
    if require_sandbox and (no_sandbox or not probe()[0]):
        fail("--require-sandbox: " + ("--no-sandbox switches it off" if no_sandbox else
                                      f"this host cannot give the full sandbox: {probe()[1]}"))
    files: list[Path] = []
    for s in solutions:
        p = Path(s)
        found = sorted(p.rglob("*.json")) if p.is_dir() else [p]  # in a folder, every JSON file is a solution
        if not found:
            fail(f"no solution JSON in {s}")
        files.extend(found)
    loaded: list[Solution] = []
    ds = open_dataset(dataset)
    try:
        policy = load_sandbox_policy(ds.root)
    except ValueError as e:
        fail(str(e))
    for f in files:
        try:
            size = f.stat().st_size
        except OSError as e:  # a link to nothing in a folder of solutions
            fail(f"{f}: cannot be read: {e.strerror or e}")
        if size > policy.solution_bytes:
            fail(f"{f}: {human_bytes(size)} is over the {human_bytes(policy.solution_bytes)} limit for a solution "
                 f"file (solution_bytes in sandbox.yaml); nothing was archived")
        try:
            sol = load_model(Solution, f)
            ds.definition(sol.definition)
        except SchemaError as e:
            fail(str(e))
        loaded.append(sol)
    archive = open_archive(archive_path)
    selection = [w.strip() for item in workloads for w in item.split(",") if w.strip()] or None
    if workloads and selection is None:  # `-w ''`: a selector that names nothing must not mean everything
        fail("--workloads/-w names no workload (give a uuid, a label, an index, largest or smallest)")
    opts = SubmitOptions(workloads=selection, timeout_s=timeout, all_workloads_on_cpu=all_workloads,
                         timing=not no_timing, baselines=not no_baselines, reference_timing=time_reference,
                         audit_level=audit_level, fresh_seeds=fresh_seeds, fresh_builds=fresh_builds,
                         isolate_network=not no_net_isolation, spare_worker=len(loaded) > 1,
                         sandbox=not no_sandbox, require_sandbox=require_sandbox, sandbox_policy=policy)
    if selection:
        for sol in loaded:
            try:
                ds.workloads_for(sol.definition, selection)
            except SchemaError as e:
                fail(str(e))
    if resume:
        loaded = _unfinished(loaded, ds, archive, selection, audit_level)
        if not loaded:
            err.print("resume: every solution already has a verdict in the archive; nothing to do", highlight=False)
            sys.exit(0)
    # The arguments hold and there is work: launch the reference worker and the first candidate now, for this host's
    # one lane (a Ray cluster's lanes, or several GPUs with a lane each, launch their own).
    timeline("arguments_checked")
    if executor == "local" and one_lane_certain(len(loaded)):
        early_workers.launch_for_submit(opts, ds.root, archive.folder)
        timeline("early_workers_launched")
    try:
        _run_submit(loaded, ds, archive, opts, as_json, executor, address, lanes, progress)
    except Exception as e:
        line = storage_message(e, archive.folder)  # a full disk: one line, the record closed where it can be
        if line is None:
            raise
        fail(line)
    finally:
        early_workers.stop_all()  # those no session took


def _run_submit(loaded: list[Solution], ds: Any, archive: Any, opts: Any, as_json: bool, executor: str,
                address: Optional[str], lanes: Optional[int], progress: str = "auto") -> None:
    """``submit`` once its arguments are checked: evaluate, print, exit."""
    from .pipeline.evaluate import ReferenceFailed, SandboxUnavailable
    from .pipeline.parallel import submit_all

    timeline("pipeline_imported")  # torch with it
    exit_code = 0

    def on_result(result: Any) -> None:
        nonlocal exit_code
        if as_json:
            out.print_json(json.dumps(result.to_json(), default=str))
        else:
            print_result(result)
        if not result.all_passed:
            exit_code = 1

    if executor == "ray":
        _submit_on_ray(loaded, ds, archive, opts, address, lanes, on_result)
        sys.exit(exit_code)
    with submit_progress(err, progress) as on_event:
        try:
            submit_all(loaded, ds, archive.folder, opts, progress=on_event, on_result=on_result)
        except (SchemaError, SandboxUnavailable) as e:
            fail(str(e))
        except ReferenceFailed as e:  # the dataset's workload, not the solution: archived as HARNESS_ERROR
            fail(f"{e}; the submission is archived as HARNESS_ERROR")
    sys.exit(exit_code)


def _unfinished(loaded: list[Solution], ds: Any, archive: Any, selection: Optional[list[str]],
                audit_level: str) -> list[Solution]:
    """--resume: the solutions without a verdict in the archive (each submission is archived whole, so one with a
    verdict is complete), each reported as skipped."""
    from .archive.transfer import finished_keys

    done, left = finished_keys(archive), []
    for sol in loaded:
        uuids = tuple(w.uuid for w in ds.workloads_for(sol.definition, selection))
        if (sol.content_hash, sol.definition, uuids, audit_level) in done:
            err.print(escape(f"resume: {sol.name} [{sol.definition}] already archived, skipped"), highlight=False)
        else:
            left.append(sol)
    return left


def _submit_on_ray(loaded: list[Solution], ds: Any, archive: Any, opts: Any, address: Optional[str],
                   lanes: Optional[int], on_result: Any) -> None:
    try:
        from .pipeline.ray_executor import RaySettings, submit_on_ray
    except ImportError as e:
        fail(f"--executor ray needs Ray: pip install -e '.[ray]' ({e})")
    from .pipeline.ray_progress import ClusterProgress

    settings = RaySettings(address=address, cpu_lanes=lanes, max_lanes=lanes)
    try:
        with ClusterProgress(err) as progress:
            submit_on_ray(loaded, ds, archive, opts, settings, on_event=progress, on_result=on_result)
    except KeyboardInterrupt:  # the driver writes only finished submissions: nothing is left half-archived
        fail("interrupted: every finished submission is archived; continue with the same command and --resume", 130)


@main.command()
@click.argument("submission_id", type=int)
@click.option("--archive", "archive_path", type=click.Path(), help=ARCHIVE_HELP)
@click.option("--json", "as_json", is_flag=True)
@click.option("--log", "log_for", help="Print the log of this workload (label or uuid).")
def show(submission_id: int, archive_path: Optional[str], as_json: bool, log_for: Optional[str]) -> None:
    """Show one submission: its evaluations, environment and audits."""
    archive = open_archive(archive_path, reading=True)
    try:
        row = archive.submission(submission_id)
        seal = archive.verify_seal(submission_id)
    except ArchiveError as e:
        fail(str(e))
    if log_for:
        ev = next((e for e in row["evaluations"] if log_for in (e["workload_label"], e["workload_uuid"])), None)
        if ev is None:
            fail(f"submission {submission_id} has no workload {log_for!r}")
        out.print(archive.get_blob(ev["log_blob"]).decode(errors="replace") if ev["log_blob"] else "(empty log)",
                  markup=False, highlight=False)
        return
    if as_json:
        for e in row["evaluations"]:
            e.pop("trace", None)
        row["seal"] = seal.to_json()
        out.print_json(json.dumps(row, default=str))
        return
    env = row["environment"]
    out.print(f"[bold]submission {row['id']}[/]: {escape(row['solution_name'])} by {escape(row['author'])} on "
              f"{escape(row['definition'])} "
              f"- {styled(row['status'])}", highlight=False)
    out.print(f"created {row['created_at']}, finished {row['finished_at'] or '(not finished)'}; "
              f"hardware: {env.get('hardware', '?')}; torch {env.get('torch', '?')}, triton {env.get('triton', '?')}; "
              f"{env.get('network_isolation', '')}", highlight=False)
    host = f"host: {env.get('host', '?')}; driver {env.get('driver') or '-'}, CUDA {env.get('cuda') or '-'}"
    lane = row["options"].get("lane") or {}
    if lane:  # evaluated by a Ray lane (harness/pipeline/ray_executor.py) and imported by its driver
        host += (f"; ray {lane.get('lane')} (actor {str(lane.get('actor_id'))[:12]}, node "
                 f"{str(lane.get('node_id'))[:12]}, GPU {','.join(lane.get('gpu_ids') or []) or 'none'}, "
                 f"attempt {lane.get('attempt')})")
    out.print(escape(host), highlight=False)
    if seal.modified:
        out.print(f"[bold red]{MODIFIED_WARNING}: {escape(seal.detail)}[/]", highlight=False)
    elif seal.state == "unverifiable":
        out.print(f"[yellow]seal: {escape(seal.detail)}[/]", highlight=False)
    if row["message"]:
        out.print(f"[yellow]{escape(row['message'])}[/]", highlight=False)
    if "promotable" in row["scores"]:
        print_promotability(row["scores"].get("promotion_blockers", []),
                            row["options"].get("static_gate", {}).get("findings", []))
    print_submission_audits(row["scores"].get("audits") or [])
    table = Table()
    for col in ("workload", "status", "max abs err", "max rel err", "latency ms", "vs FlashInfer", "own kernels",
                "GPU memory", "audits", "s"):
        table.add_column(col, no_wrap=True)
    table.add_column("message", no_wrap=True, overflow="ellipsis", max_width=60)
    for e in row["evaluations"]:
        extra = e["extra"]
        audits = extra.get("audits", [])
        failed = [a["name"] for a in audits if not a["passed"]]
        share = next((a.get("share") for a in audits if a["name"] == "attribution"), None)
        memory = extra.get("memory") or {}
        mem = (f"{memory['together_bytes'] / (1 << 30):.1f}/{memory['budget_bytes'] / (1 << 30):.0f} GiB"
               if memory.get("budget_bytes") else "-")
        if memory and not memory.get("within_budget", True):
            mem = f"[red]{mem}[/]"
        note = e["message"] or "; ".join(extra.get("baseline_failures") or []) or e["timing_note"] or ""
        table.add_row(escape(e["workload_label"]), styled(e["status"]), fmt(e["max_absolute_error"]),
                      fmt(e["max_relative_error"]), fmt(e["latency_ms"], 4),
                      times(extra.get("speedup_vs_flashinfer_kernel")),
                      "-" if share is None else f"{100 * share:.0f}%", mem,
                      ("[red]" + ", ".join(failed) + "[/]") if failed else ("clean" if audits else "-"),
                      seconds(extra.get("phases_s")), escape(note.split("\n")[0]))
    out.print(table)
    processes = [(e["workload_label"], e["extra"].get("memory")) for e in row["evaluations"]
                 if e["extra"].get("memory")]
    if processes:
        from .measure.memory import describe

        label, worst = max(processes, key=lambda lm: lm[1]["together_bytes"])
        out.print(f"GPU memory, largest workload ({label}): {describe(worst)}", highlight=False)


@main.command()
@click.argument("directory", type=click.Path())
@click.option("--archive", "archive_path", type=click.Path(), help=ARCHIVE_HELP)
@click.option("--dataset", type=click.Path())
@click.option("--definition", "definitions", multiple=True, help="Only these definitions (names or aliases).")
def export(directory: str, archive_path: Optional[str], dataset: Optional[str], definitions: tuple[str, ...]) -> None:
    """Write the archive as a FlashInfer-Bench trace set (definitions, workloads, solutions, traces)."""
    from .archive.export import export_trace_set

    archive = open_archive(archive_path, reading=True)
    ds = open_dataset(dataset)
    try:
        names = [n for d in definitions for n in ds.resolve(d)] or None
    except SchemaError as e:
        fail(str(e))
    target = Path(directory)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        fail(f"cannot write the trace set to {directory}: {NOT_A_FOLDER}")
    if target.is_dir() and any(target.iterdir()):
        # never over a person's files, nor through links planted in the folder (red team round 12, V5)
        fail(f"cannot write the trace set to {directory}: it holds files already (name a new or empty folder)")
    try:
        report = export_trace_set(archive, ds, target, names)
    except SchemaError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write the trace set to {directory}: "
             + (NOT_A_FOLDER if isinstance(e, FileExistsError) else str(e.strerror or e)))
    out.print(f"wrote {report.definitions} definitions, {report.workloads} workloads, {report.solutions} solutions, "
              f"{report.traces} traces to {directory}", highlight=False)
    for n in report.notices:
        out.print(f"[yellow]notice:[/] {n}", highlight=False)


@main.command("import")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--archive", "archive_path", type=click.Path(), help=ARCHIVE_HELP)
@click.option("--dataset", type=click.Path(), help="The dataset its definitions and workloads are checked against.")
def import_cmd(directory: str, archive_path: Optional[str], dataset: Optional[str]) -> None:
    """Read a FlashInfer-Bench trace set's solutions and traces into the archive, all or nothing.

    Solutions and traces the archive already holds (the same code; the same trace of the same code) are not added
    again: importing the same trace set twice adds nothing the second time, and says so.
    """
    from .archive.export import import_trace_set

    archive = open_archive(archive_path)
    ds = open_dataset(dataset)
    try:
        report = import_trace_set(archive, Path(directory), ds)
    except SchemaError as e:
        fail(str(e))
    except Exception as e:
        line = storage_message(e, archive.folder)  # a full disk: the one transaction wrote nothing
        line = line or database_refusal(e)  # the database itself refused (a trigger of its own, a held lock)
        if line is None:
            raise
        fail(f"{line}; nothing was imported")
    present = (f"{report.solutions_present} solutions and {report.traces_present} traces already in the archive"
               if report.solutions_present or report.traces_present else "")
    if report.nothing_new:
        out.print(f"nothing new in {directory}: {present or 'it holds no solutions or traces'}", highlight=False)
    else:
        out.print(f"imported {report.solutions} solutions and {report.traces} traces from {directory}"
                  + (f" ({present})" if present else ""), highlight=False)
    for n in report.notices:  # what was left out, and why (harness.archive.trace_import)
        out.print(f"[yellow]notice:[/] {escape(n)}", highlight=False)


# Files `harness pack` takes from a folder: Python, CUDA and C++ sources and headers, and the text data a solution
# reads at import (a tuning table in JSON or YAML next to its module).
PACKED_SUFFIXES = {".py", ".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".inl", ".inc",
                   ".json", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini", ".csv"}


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--definition", required=True)
@click.option("--dataset", type=click.Path(), help="Trace-set folder that defines --definition.")
@click.option("--entry-point", required=True, help="file.py::symbol")
@click.option("--language", required=True, type=click.Choice(["python", "triton", "cuda", "cpp"]))
@click.option("--name", required=True)
@click.option("--author", required=True)
@click.option("--binding", type=click.Choice(["torch", "tvm-ffi"]),
              help="--language cuda or cpp: how the extension is bound (default: tvm-ffi).")
@click.option("--target", "targets", multiple=True, default=("H200",), show_default=True)
@click.option("--value-returning", is_flag=True, help="The entry point returns outputs instead of writing them.")
@click.option("--setup", help="file.py::symbol called once per input set outside the kernel figure (a plan), "
                              "its result passed to the entry point last.")
@click.option("--instruction-claim", "claims", multiple=True,
              help="An instruction family the built code must be shown to use (wgmma, tma, ...); repeatable.")
@click.option("--output", "-o", type=click.Path(), help="Write here (default: stdout).")
def pack(folder: str, definition: str, dataset: Optional[str], entry_point: str, language: str, name: str,
         author: str, binding: Optional[str], targets: tuple[str, ...], value_returning: bool, setup: Optional[str],
         claims: tuple[str, ...], output: Optional[str]) -> None:
    """Pack the source files of FOLDER into a solution JSON."""
    from .data.schema import parse_model
    from .sandbox.build import require_native_entry
    from .sandbox.isolation import SandboxPolicy, human_bytes

    if binding and language not in ("cuda", "cpp"):  # only a native extension is bound; Python is imported
        fail(f"--binding is for --language cuda or cpp only (a {language} solution is imported, not bound: "
             "it would be ignored)")
    if any(not t.strip() for t in targets):  # "" names no GPU, yet would be written as a target of the solution
        fail("--target names no hardware (an empty value); give a GPU such as H100 or H200")
    root, limit, total = Path(folder), SandboxPolicy().solution_bytes, 0
    sources, left_out = [], []
    for p in sorted(root.rglob("*")):
        parts = p.relative_to(root).parts
        if "__pycache__" in parts or any(part.startswith(".") for part in parts[:-1]) or (
                p.is_dir() and not p.is_symlink()):
            continue  # bytecode, and hidden folders (.git, a virtual environment, caches)
        if p.suffix not in PACKED_SUFFIXES:
            left_out.append(str(p.relative_to(root)))
            continue
        if p.is_symlink():  # a link may point anywhere (/etc/passwd): a solution holds its own files only
            fail(f"{p}: a link; copy the file into the folder instead")
        total += p.stat().st_size if p.is_file() else 0  # a FIFO or a device is never read (it could never end)
        if not p.is_file() or total > limit:
            fail(f"{p}: " + ("not a regular file (a FIFO, a device or a socket)" if not p.is_file() else
                             f"the sources pass {human_bytes(limit)}, the most a solution file may hold"))
        try:
            sources.append({"path": str(p.relative_to(root)), "content": p.read_text()})
        except (OSError, UnicodeDecodeError) as err:
            fail(f"{p}: cannot be packed as source text: {getattr(err, 'strerror', None) or err}")
    names = dataset_names(definition, dataset)
    if names != [definition]:  # the solution names one definition: an alias would be unknown to every reader
        fail(f"--definition {definition!r} is an alias of {', '.join(names)}: give one definition's name")
    spec = {"language": language, "target_hardware": list(targets), "entry_point": entry_point,
            "dependencies": [], "destination_passing_style": not value_returning, "binding": binding,
            **({"setup": setup} if setup else {}), **({"instruction_claims": list(claims)} if claims else {})}
    data = {"name": name, "definition": definition, "author": author, "spec": spec, "sources": sources}
    try:  # a Python entry point with language cuda is refused as the build would refuse it
        require_native_entry(parse_model(Solution, data, folder))
    except SchemaError as e:
        fail(str(e))
    text = json.dumps(data, indent=2) + "\n"
    if left_out:  # said, not failed: a README or a build output belongs in no solution
        shown = ", ".join(left_out[:10]) + (f" and {len(left_out) - 10} more" if len(left_out) > 10 else "")
        click.echo(f"left out (not source or text data, {' '.join(sorted(PACKED_SUFFIXES))}): {shown}", err=True)
    if output:
        try:
            Path(output).write_text(text)
        except OSError as err:
            fail(f"cannot write {output}: {err.strerror or err}")
    else:
        sys.stdout.write(text)


for _command in (list_cmd, report, browse, diff, copy_archive):
    main.add_command(_command)


def _add_installed_commands() -> None:
    """Commands other installed packages add to `harness` (entry points of the group "harness.commands"): the
    controller adds `profile`, which prints the controller's evidence. The harness never imports them by name."""
    from importlib.metadata import entry_points

    for entry in entry_points(group="harness.commands"):
        if entry.name not in main.commands:
            main.add_command(entry.load(), entry.name)


_add_installed_commands()


def program() -> None:
    """The `harness` program (``python -m harness.cli``; the console script and ``python -m harness`` come through
    harness/__main__.py, which sets the bytecode folder first): ``main``, then a quick exit."""
    run_as_program(main)


if __name__ == "__main__":
    program()
