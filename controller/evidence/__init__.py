"""Evidence for a generation request: kernel digests, workload statistics, regimes and the largest gaps.

The package root exports the pure part: functions of their arguments (profiles, measured results, workload
axes, weights, rules); the only file it reads is the ncu-profiling skill (ncu_metrics).

- ncu_metrics: the skill's metric names per architecture, classification thresholds and limiters;
- quantities: three significant digits with units;
- kernel_digest: ``KernelDigest`` (one kernel, one Markdown bullet) and ``RegimeProfile`` (one regime's digests);
- diagnosis: classification (at-roofline, latency-, memory-, compute-bound) and the limiter id;
- digest: ``digest_kernel`` / ``digest_summary``, a ``harness.profiling.ProfileSummary`` into digests;
- weights: the optional workload weights file;
- workloads: ``workload_stats``, per workload latency, share, % of floor, speedup and regime (the regime
  rules are the operator family's: harness.families);
- regimes: the regime table, the workload to profile per regime, the largest gaps;
- record: ``build_evidence`` -> ``EvidenceRecord`` (JSON both ways, ``to_markdown``);
- markdown: the bounded Markdown a model reads.

Imported by their own path, since they do I/O or reach further into the controller:

- profiles: workload statistics from the archive, profile targets, archiving profiles (`harness profile`
  and the loop share it);
- incumbent: the loop profiles its incumbent and renders the record for requests;
- latency: the latency-only table from archived evaluations, used when no profile is at hand.
"""

from harness.families.regimes import REGIME_CONDITIONS, assign_regime, length_ratio

from .diagnosis import CLASSES, OCCUPANCY_LIMITS, classify, name_limiter, occupancy_limiter
from .digest import digest_kernel, digest_summary
from .kernel_digest import KernelDigest, RegimeProfile, short_kernel_name
from .ncu_metrics import FIELD_UNITS, SKILL_PATH, metric_table, ncu_config, requested_metrics, stall_metrics, table_arch
from .quantities import fmt_quantity, sig
from .record import EvidenceRecord, build_evidence
from .regimes import Gap, RegimeRow, largest_gaps, regime_table, representatives
from .weights import NO_WEIGHTS, WEIGHTS_FILE, load_workload_weights, validate_weights, weight_for
from .workloads import DEFAULT_OP_TYPE, WorkloadStat, load_regime_rules, workload_stats

__all__ = [
    "CLASSES", "DEFAULT_OP_TYPE", "FIELD_UNITS", "NO_WEIGHTS", "OCCUPANCY_LIMITS", "REGIME_CONDITIONS", "SKILL_PATH",
    "WEIGHTS_FILE", "EvidenceRecord", "Gap", "KernelDigest", "RegimeProfile", "RegimeRow", "WorkloadStat",
    "assign_regime", "build_evidence", "classify", "digest_kernel", "digest_summary", "fmt_quantity",
    "largest_gaps", "length_ratio", "load_regime_rules", "load_workload_weights", "metric_table", "name_limiter",
    "ncu_config", "occupancy_limiter", "regime_table", "representatives", "requested_metrics", "short_kernel_name",
    "sig", "stall_metrics", "table_arch", "validate_weights", "weight_for", "workload_stats",
]
