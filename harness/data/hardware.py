"""Target GPUs as data: definitions/hardware.yaml (per target, its SM count and architecture), read once."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

HARDWARE_PATH = Path(__file__).resolve().parents[2] / "definitions" / "hardware.yaml"
DEFAULT_TARGET = "H200"  # what a target missing from the file is taken to be


@dataclass(frozen=True)
class Hardware:
    name: str
    sm_count: int
    architecture: str


@lru_cache(maxsize=None)
def _table(path: str) -> dict[str, Hardware]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of target name to its facts")
    table = {}
    for name, facts in data.items():
        try:
            table[str(name)] = Hardware(str(name), int(facts["sm_count"]), str(facts["architecture"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: target {name}: needs sm_count (an integer) and architecture ({err})") from err
    if DEFAULT_TARGET not in table:
        raise ValueError(f"{path}: the default target {DEFAULT_TARGET} is missing")
    return table


def hardware_table() -> dict[str, Hardware]:
    """Every target in the file (read from ``HARDWARE_PATH`` once per path)."""
    return _table(str(HARDWARE_PATH))


def hardware(target: str) -> Hardware:
    """The facts of ``target``; a target the file does not list gets the default target's."""
    table = hardware_table()
    return table.get(target, table[DEFAULT_TARGET])


def sm_count(target: str) -> int:
    return hardware(target).sm_count
