"""Regime rules: data that names the regime of a workload, first matching rule wins.

A family writes its rules as YAML (``OperatorFamily.regime_rules``); ``load_regime_rules`` checks them and
``assign_regime`` applies them to anything with the attributes the conditions read (``label``, ``axes``,
``fraction_of_floor``, ``length_ratio``): the controller's measured ``WorkloadStat`` or a ``RegimeFacts``
of an unmeasured workload. A condition whose data is missing (no timing on this host, request lengths
unknown) does not hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

import yaml


def length_ratio(lengths: Optional[Sequence[int]]) -> Optional[float]:
    """max / mean of request lengths (1.0 for a uniform batch); None if unknown or empty."""
    if lengths is None or len(lengths) == 0:
        return None
    mean = sum(lengths) / len(lengths)
    return max(lengths) / mean if mean > 0 else None


@dataclass
class RegimeFacts:
    """What the rules can read of a workload that has not been measured."""

    label: str = ""
    axes: dict[str, int] = field(default_factory=dict)
    lengths: Optional[Sequence[int]] = None
    fraction_of_floor: Optional[float] = None

    @property
    def length_ratio(self) -> Optional[float]:
        return length_ratio(self.lengths)


def _axes_cmp(w: Any, arg: Mapping[str, float], op: Any) -> bool:
    return all(w.axes.get(a) is not None and op(w.axes[a], float(x)) for a, x in arg.items())


REGIME_CONDITIONS = {
    "label_regex": lambda w, arg: bool(w.label) and re.search(str(arg), w.label) is not None,
    "axis_at_most": lambda w, arg: _axes_cmp(w, arg, lambda a, b: a <= b),
    "axis_above": lambda w, arg: _axes_cmp(w, arg, lambda a, b: a > b),
    "fraction_of_floor_below": lambda w, x: w.fraction_of_floor is not None and w.fraction_of_floor < float(x),
    "fraction_of_floor_at_least": lambda w, x: w.fraction_of_floor is not None and w.fraction_of_floor >= float(x),
    "length_max_over_mean_above": lambda w, x: w.length_ratio is not None and w.length_ratio > float(x),
}


def load_regime_rules(source: Union[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Rules from YAML text or a list of dicts, checked: a name, one of all/any, known conditions only."""
    rules = yaml.safe_load(source) if isinstance(source, str) else list(source)
    if not isinstance(rules, list) or not rules:
        raise ValueError("regime rules must be a non-empty list")
    out = []
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or not isinstance(rule.get("name"), str) or not rule["name"]:
            raise ValueError(f"regime rule {i}: needs a `name`")
        if "mode" in rule and "conditions" in rule:  # already loaded
            out.append(dict(rule))
            continue
        modes = [m for m in ("all", "any") if m in rule]
        extra = set(rule) - {"name", "all", "any"}
        if len(modes) > 1 or extra:
            raise ValueError(f"regime rule {rule['name']!r}: use one of `all` / `any` (extra keys: {sorted(extra)})")
        mode = modes[0] if modes else "all"
        conds = rule.get(mode) or {}
        if not isinstance(conds, dict):
            raise ValueError(f"regime rule {rule['name']!r}: `{mode}` must be a mapping of conditions")
        bad = set(conds) - set(REGIME_CONDITIONS)
        if bad:
            raise ValueError(f"regime rule {rule['name']!r}: unknown conditions {sorted(bad)}; "
                             f"known: {sorted(REGIME_CONDITIONS)}")
        out.append({"name": rule["name"], "mode": mode, "conditions": dict(conds)})
    return out


def assign_regime(w: Any, rules: Sequence[Mapping[str, Any]]) -> str:
    """The name of the first rule the workload satisfies ("other" if none does)."""
    for rule in rules:
        results = [REGIME_CONDITIONS[c](w, arg) for c, arg in rule["conditions"].items()]
        if all(results) if rule["mode"] == "all" else any(results):
            return rule["name"]
    return "other"
