"""Profile a solution's kernels on chosen workloads, archive each profile, and assemble the Evidence.

The I/O half of controller/evidence.py, shared by `harness profile` (harness/profile_cli.py) and the
loop (controller/loop.py), so both compute workload statistics, pick representatives, archive profiles
and build the Markdown the same way:

- ``measured_stats``: workload statistics of a solution from its archived evaluations (or none);
- ``archive_profiles``: one `profiles` row per ProfileSummary (raw report blob + digest JSON);
- ``archived_summaries``: the OK profiles already archived for a solution (a resumed loop reuses them);
- ``build_evidence`` (from controller.evidence) then turns stats + summaries into the record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Optional, Sequence

from harness.profile import OK, ProfileSummary, archived_profiles, record_profile

from .evidence import WorkloadStat, digest_summary, load_workload_weights, representatives, workload_stats


def workload_facts(dataset: Any, definition: Any, workload: Any) -> tuple[Optional[list[int]], Optional[int]]:
    """(request lengths in tokens, roofline bytes) of a workload, from its index blobs where it has them."""
    from harness.inputs import _load_safetensors
    from harness.roofline import paged_token_count, workload_cost
    from harness.schema import SafetensorsInput

    page_size = definition.const_axes.get("page_size", 1)
    specs = {n: workload.inputs.get(n) for n in ("kv_indptr", "kv_last_page_len")}
    tensors: dict[str, list[int]] = {}
    for name, spec in specs.items():
        if isinstance(spec, SafetensorsInput):
            try:
                t = _load_safetensors(str((dataset.root / spec.path).resolve()), "cpu")[spec.tensor_key]
                tensors[name] = [int(x) for x in t.tolist()]
            except Exception:
                pass
    lengths: Optional[list[int]] = None
    tokens: Optional[int] = None
    indptr = tensors.get("kv_indptr")
    if indptr is not None:
        pages = [b - a for a, b in zip(indptr, indptr[1:])]
        last = tensors.get("kv_last_page_len")
        if page_size == 1:
            lengths = pages
        elif last is not None and len(last) == len(pages):
            lengths = [(p - 1) * page_size + lp if p else 0 for p, lp in zip(pages, last)]
            tokens = paged_token_count(indptr, last, page_size)
    try:
        cost = workload_cost(definition, workload, tokens=tokens)
        roofline_bytes = cost.bytes_moved
    except Exception:
        roofline_bytes = None
    return lengths, roofline_bytes


@dataclass
class MeasuredStats:
    stats: list[WorkloadStat]
    roofline_bytes: dict[str, float]  # uuid -> minimum bytes (names the extra-dram-traffic limiter)
    labels: dict[str, str]  # uuid -> workload label


def measured_stats(dataset: Any, definition: Any, submission: Optional[Mapping[str, Any]],
                   workloads: Optional[Sequence[Any]] = None) -> MeasuredStats:
    """Per-workload statistics of a solution from its archived submission (``archive.submission(id)``), over
    ``workloads`` (default: every workload of the definition); unevaluated workloads have no latency.
    Raises ValueError on a malformed weights file."""
    all_workloads = list(workloads) if workloads is not None else dataset.workloads_for(definition.name)
    evaluations = {e["workload_uuid"]: e for e in (submission or {}).get("evaluations", [])}
    results, axes, lengths, roofline_bytes, labels = [], {}, {}, {}, {}
    for w in all_workloads:
        labels[w.uuid] = dataset.label(w)
        row = evaluations.get(w.uuid) or {"workload_uuid": w.uuid, "status": "NOT_EVALUATED"}
        results.append({**row, "workload_label": labels[w.uuid]})
        axes[w.uuid] = {**definition.const_axes, **w.axes}
        lens, rbytes = workload_facts(dataset, definition, w)
        if lens is not None:
            lengths[w.uuid] = lens
        if rbytes is not None:
            roofline_bytes[w.uuid] = rbytes
    weights = load_workload_weights(dataset.root)
    stats = workload_stats(results, axes, definition=definition.name, weights=weights, lengths=lengths)
    return MeasuredStats(stats, roofline_bytes, labels)


def profile_targets(stats: Sequence[WorkloadStat], other_regimes: Optional[Mapping[str, str]] = None) -> list[str]:
    """One representative workload per evidence regime (``representatives``); with ``other_regimes`` (uuid ->
    another grouping, e.g. the loop's latency-/memory-bound), also one per group of that grouping not yet
    covered, so every group a planner may pick has a profile. Deduplicated, in order."""
    uuids = list(representatives(stats).values())
    if other_regimes:
        relabelled = [replace(w, regime=other_regimes.get(w.uuid, "all")) for w in stats]
        covered = {other_regimes.get(u) for u in uuids}
        uuids += [u for group, u in representatives(relabelled).items() if group not in covered]
    return list(dict.fromkeys(uuids))


def archive_profiles(archive: Any, summaries: Iterable[ProfileSummary], measured: MeasuredStats, definition: str,
                     arch: Optional[str], submission_id: Optional[int] = None) -> list[dict[str, Any]]:
    """Record each profile (any status: a failure is evidence too); returns one record per row."""
    by_uuid = {w.uuid: w for w in measured.stats}
    records = []
    for s in summaries:
        w = by_uuid.get(s.workload_uuid)
        label = measured.labels.get(s.workload_uuid, "")
        digests = (digest_summary(s, fraction_of_floor=w.fraction_of_floor if w else None,
                                  roofline_bytes=measured.roofline_bytes.get(s.workload_uuid)) if s.status == OK
                   else [])
        digest = {"definition": definition, "workload_label": label, "regime": w.regime if w else "",
                  "arch_requested": arch, "digests": [d.to_json() for d in digests]}
        row_id = record_profile(archive, s, digest, submission_id=submission_id)
        records.append({"id": row_id, "workload": s.workload_uuid, "label": label, "backend": s.backend,
                        "status": s.status, "reason": s.reason, **digest})
    return records


def archived_summaries(archive: Any, solution_hash: str, workload_uuids: Iterable[str]) -> dict[str, ProfileSummary]:
    """uuid -> the newest OK profile of this solution on that workload, read back from the archive (the
    digest row keeps every kernel's metrics). Failed profiles are not reused: they may succeed next time."""
    wanted = set(workload_uuids)
    found: dict[str, ProfileSummary] = {}
    for row in archived_profiles(archive, solution_hash=solution_hash):  # newest first
        uuid = row["workload_uuid"]
        if uuid in wanted and uuid not in found and row["status"] == OK and row["digest"].get("kernels"):
            found[uuid] = ProfileSummary.from_json(row["digest"])
    return found
