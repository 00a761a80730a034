"""The audit thresholds a policy document may set (audit_policy.yaml `thresholds:`, per layer).

Below both users: the runtime audits (harness/audits/verdicts.py) apply them, and the static gate's policy loader
(harness/audits/static_gate/policy.py) checks them when the policy loads, so a typo fails there.
"""

from __future__ import annotations

from typing import Any, Optional

# Thresholds a policy may set (audit_policy.yaml `thresholds:`, per layer); the level's set sizes stay the level's.
POLICY_THRESHOLDS = ("precision_error_multiple", "precision_error_floor", "precision_relative_floor", "clock_ratio",
                     "clock_slack_ms", "clock_floor_ratio", "replay_ratio", "replay_slack_ms", "setup_work_ratio",
                     "setup_work_slack_ms", "attribution_min_share",
                     "attribution_allowance_us", "attribution_pointwise_us",
                     "attribution_aten_glue_us", "attribution_aten_glue_share", "attribution_cpu_max_share",
                     "attribution_cpu_reduction_share", "speedup_bound", "roofline_margin")

# Thresholds that are shares, with their largest value (a roofline margin of 1 would leave no floor).
SHARES = {"attribution_min_share": 1.0, "attribution_aten_glue_share": 1.0, "attribution_cpu_max_share": 1.0,
          "attribution_cpu_reduction_share": 1.0, "roofline_margin": 0.99}


def policy_thresholds(data: Optional[dict[str, Any]], definition: Optional[str],
                      op_type: Optional[str]) -> dict[str, float]:
    """Audit thresholds from the policy document: layers default -> op_type -> definition, a later layer's key
    wins. Raises ValueError naming the layer and key for an unknown key or a value that is not a positive number."""
    data = data or {}
    out: dict[str, float] = {}
    layers = [("default", data.get("default"))]
    for section, key in (("op_type", op_type), ("definition", definition)):
        if key:
            layers.append((f"{section}.{key}", (data.get(section) or {}).get(key)))
    for where, layer in layers:
        values = (layer or {}).get("thresholds") or {}
        if not isinstance(values, dict):
            raise ValueError(f"{where}.thresholds: expected a mapping, got {type(values).__name__}")
        for name, value in values.items():
            if name not in POLICY_THRESHOLDS:
                raise ValueError(f"{where}.thresholds: unknown threshold {name!r}; known: {list(POLICY_THRESHOLDS)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{where}.thresholds.{name}: expected a positive number, got {value!r}")
            if name in SHARES and value > SHARES[name]:
                raise ValueError(f"{where}.thresholds.{name}: a share, at most {SHARES[name]:g}, got {value!r}")
            out[name] = float(value)
    return out
