"""Workload weights (definitions/workload_weights.yaml): how much each workload counts in the shares of time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import yaml

WEIGHTS_FILE = "workload_weights.yaml"
NO_WEIGHTS = {"default": 1.0, "by_label": {}, "by_definition": {}}


def load_workload_weights(path: Union[str, Path, None]) -> dict[str, Any]:
    """The optional weights file (a path, or the dataset folder holding it). Missing -> every weight 1."""
    if path is None:
        return dict(NO_WEIGHTS)
    path = Path(path)
    if path.is_dir():
        path = path / WEIGHTS_FILE
    if not path.exists():
        return dict(NO_WEIGHTS)
    return validate_weights(yaml.safe_load(path.read_text()) or {}, str(path))


def validate_weights(data: Any, where: str = "weights") -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping with default / by_label / by_definition")
    unknown = set(data) - {"default", "by_label", "by_definition"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (allowed: default, by_label, by_definition)")
    out = {"default": data.get("default", 1.0), "by_label": data.get("by_label") or {},
           "by_definition": data.get("by_definition") or {}}

    def check(x: Any, what: str) -> None:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 or not math.isfinite(x):
            raise ValueError(f"{where}: {what} must be a number >= 0, got {x!r}")

    check(out["default"], "default")
    if not isinstance(out["by_label"], dict):
        raise ValueError(f"{where}: by_label must map workload labels or uuids to weights")
    for k, x in out["by_label"].items():
        check(x, f"by_label.{k}")
    if not isinstance(out["by_definition"], dict):
        raise ValueError(f"{where}: by_definition must map definition names to tables")
    for d, table in out["by_definition"].items():
        if not isinstance(table, dict):
            raise ValueError(f"{where}: by_definition.{d} must map workload labels or uuids to weights")
        for k, x in table.items():
            check(x, f"by_definition.{d}.{k}")
    return out


def weight_for(weights: Optional[Mapping[str, Any]], definition: str, uuid: str, label: str) -> float:
    """by_definition[definition][uuid or label], else by_label[uuid or label], else default (1)."""
    if not weights:
        return 1.0
    table = (weights.get("by_definition") or {}).get(definition) or {}
    for key in (uuid, label):
        if key in table:
            return float(table[key])
    by_label = weights.get("by_label") or {}
    for key in (uuid, label):
        if key in by_label:
            return float(by_label[key])
    return float(weights.get("default", 1.0))
