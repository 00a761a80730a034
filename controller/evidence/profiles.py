"""Profile a solution's kernels on chosen workloads, archive each profile, and assemble the Evidence.

The I/O half of the evidence package, shared by `harness profile` (controller/profile_cli.py) and the
loop (controller/loop.py), so both compute workload statistics, pick representatives, archive profiles
and build the Markdown the same way:

- ``measured_stats``: workload statistics of a solution from its archived evaluations (or none);
- ``archive_profiles``: one `profiles` row per ProfileSummary (raw report blob + digest JSON);
- ``archived_summaries``: the OK profiles already archived for a solution (a resumed loop reuses them);
- ``build_evidence`` (evidence.record) then turns stats + summaries into the record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Optional, Sequence

from harness.profiling import OK, ProfileSummary, archived_profiles, record_profile

from .digest import digest_summary
from .regimes import representatives
from .weights import load_workload_weights
from .workloads import WorkloadStat, workload_stats


def workload_facts(dataset: Any, definition: Any, workload: Any) -> tuple[Optional[list[int]], Optional[int]]:
    """(request lengths in tokens, roofline bytes) of a workload, by its operator family, from its index blobs
    where it has them (an unreadable blob leaves the lengths unknown and the cost counted without it)."""
    from harness.families import family_for

    family = family_for(definition.op_type)
    lengths = family.request_lengths(definition, workload, dataset.root)
    roofline_bytes: Optional[int] = None
    for root in (dataset.root, None):
        try:
            roofline_bytes = family.workload_cost(definition, workload, root=root).bytes_moved
            break
        except Exception:
            continue
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
    stats = workload_stats(results, axes, definition=definition.name, weights=weights, lengths=lengths,
                           op_type=definition.op_type)
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
