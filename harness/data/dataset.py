"""Load a trace-set folder: definitions, workloads, aliases and evaluation presets.

The folder follows FlashInfer-Bench's layout (definitions/<op_type>/<name>.json,
workloads/<op_type>/<name>.jsonl, blob/...), so the official ``TraceSet.from_path`` reads it too.
Crucible's own data sits beside it: ``aliases.yaml`` (names for families of definitions),
``eval_config.yaml`` (tolerances and timing presets per op_type and definition) and
``workloads/**/labels.json`` (readable names for workload uuids).
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field

from .dtypes import io_nbytes
from .schema import Definition, SchemaError, Solution, Trace, Workload, load_jsonl, load_model, read_text

# Workload selectors that mean the same in every definition: by the workload's input and output bytes.
SIZE_SELECTORS = {"largest": max, "smallest": min}

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "definitions"


def default_root() -> Path:
    return Path(os.environ.get("CRUCIBLE_DATASET", DEFAULT_ROOT))


class EvalPreset(BaseModel):
    """How one definition is judged and timed; layered default -> op_type -> definition."""

    model_config = ConfigDict(extra="forbid")
    atol: float = Field(1e-2, ge=0)
    rtol: float = Field(1e-2, ge=0)
    required_matched_ratio: float = Field(1.0, gt=0, le=1)
    num_trials: int = Field(3, ge=1)
    warmup: int = Field(10, ge=0)
    iterations: int = Field(50, ge=1)
    timeout_s: float = Field(300.0, gt=0)
    # The reference timed as a yardstick (the score where no library baseline runs, `--time-reference`): at most
    # this many warm-up calls, timed calls and draws. It is slow Python (1.3-6.9 s per DSA workload with the
    # solutions' 10 / 50 / 3, most of a loop round's wall on the H200), and a multi-millisecond figure needs no 150
    # timed calls to be known to a percent; solutions are always timed with the settings above.
    reference_warmup: int = Field(3, ge=0)
    reference_iterations: int = Field(10, ge=1)
    reference_trials: int = Field(1, ge=1)
    # Official rule: any inf/nan in a candidate output fails. A definition whose reference
    # legitimately yields -inf (empty sequences' lse) may opt in to accepting non-finite values
    # exactly where the reference has the same value.
    allow_matching_nonfinite: bool = False


def _yaml(path: Path) -> Any:
    """A dataset's YAML file: a regular file of at most 1 MiB (a FIFO there would block every command), parsed;
    SchemaError on one line otherwise."""
    try:
        return yaml.safe_load(read_text(path, 1 << 20)) or {}
    except (yaml.YAMLError, RecursionError) as err:
        raise SchemaError(f"{path}: not valid YAML ({' '.join(str(err).split())[:200]})") from None


class Dataset:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_root()
        if not self.root.is_dir():
            raise SchemaError(f"{self.root}: " + ("not a folder (a dataset is a folder)" if self.root.exists() else
                                                  "dataset folder does not exist"))

    @cached_property
    def definitions(self) -> dict[str, Definition]:
        out: dict[str, Definition] = {}
        for path in sorted((self.root / "definitions").rglob("*.json")):
            d = load_model(Definition, path)
            if d.name in out:
                raise SchemaError(f"{path}: definition {d.name!r} is defined twice")
            out[d.name] = d
        return out

    @cached_property
    def workloads(self) -> dict[str, list[Workload]]:
        out: dict[str, list[Workload]] = {}
        for path in sorted((self.root / "workloads").rglob("*.jsonl")):
            for trace in load_jsonl(Trace, path):
                out.setdefault(trace.definition, []).append(trace.workload)
        return out

    @cached_property
    def definition_files(self) -> dict[str, Path]:
        """Where each definition was read from: an export copies the file itself, byte for byte."""
        return {load_model(Definition, path).name: path for path in sorted((self.root / "definitions").rglob("*.json"))}

    @cached_property
    def workload_lines(self) -> dict[tuple[str, str], str]:
        """(definition, workload uuid) -> the workload's line as written: an export keeps it where it can."""
        out: dict[tuple[str, str], str] = {}
        for path in sorted((self.root / "workloads").rglob("*.jsonl")):
            for line in path.read_text().splitlines():
                if line.strip():
                    trace = Trace.model_validate_json(line)
                    out[(trace.definition, trace.workload.uuid)] = line
        return out

    @cached_property
    def labels(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for path in sorted((self.root / "workloads").rglob("labels.json")):
            out.update(json.loads(path.read_text()))
        return out

    @cached_property
    def aliases(self) -> dict[str, list[str]]:
        path = self.root / "aliases.yaml"
        if not path.exists():
            return {}
        data = _yaml(path)
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise SchemaError(f"{path}: expected a mapping of alias -> list of definition names")
        return data

    @cached_property
    def _eval_config(self) -> dict[str, Any]:
        path = self.root / "eval_config.yaml"
        data = _yaml(path) if path.exists() else {}
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected a mapping (default, op_type and definition sections)")
        return data

    def resolve(self, name: str) -> list[str]:
        """A definition name or an alias -> definition names. Unknown names list what exists."""
        if name in self.definitions:
            return [name]
        if name in self.aliases:
            missing = [n for n in self.aliases[name] if n not in self.definitions]
            if missing:
                raise SchemaError(f"alias {name!r} names unknown definitions: {missing}")
            return list(self.aliases[name])
        known = sorted(self.definitions) + sorted(self.aliases)
        raise SchemaError(f"unknown definition {name!r}; known: {', '.join(known)}")

    def definition(self, name: str) -> Definition:
        if name not in self.definitions:
            self.resolve(name)  # raises with the list of known names
        return self.definitions[name]

    def workloads_for(self, definition: str, selection: Optional[list[str]] = None) -> list[Workload]:
        """All workloads of a definition, or those whose uuid, uuid prefix, label or index is selected.

        ``largest`` and ``smallest`` select by the workload's input and output bytes, in any definition: one
        selection that means the same thing for every definition of a multi-definition submission."""
        wls = self.workloads.get(definition, [])
        if not selection:
            return list(wls)
        chosen: list[Workload] = []
        for key in selection:
            if key in SIZE_SELECTORS and wls:
                d = self.definition(definition)
                hits = [SIZE_SELECTORS[key](wls, key=lambda w: io_nbytes(d, w.axes))]
            else:
                hits = [
                    w for i, w in enumerate(wls)
                    if key in (w.uuid, self.labels.get(w.uuid), str(i))
                    or (len(key) >= 6 and w.uuid.startswith(key))
                ]
            if not hits:
                raise SchemaError(f"no workload {key!r} for {definition}; "
                                  "use a uuid, a label, an index, largest or smallest")
            chosen.extend(h for h in hits if h not in chosen)
        return chosen

    def baselines(self, definition: str) -> list[Solution]:
        """Solutions by author ``baseline`` (solutions/baseline/<op_type>/<definition>/*.json)."""
        return [s for s in self._solutions.get(definition, []) if s.author == "baseline"]

    def is_baseline(self, solution: Solution) -> bool:
        """Is this byte for byte one of the dataset's own baselines? Only then may the library be its kernel:
        the author field alone proves nothing, since any candidate can claim ``baseline``."""
        return solution.author == "baseline" and any(
            b.content_hash == solution.content_hash for b in self.baselines(solution.definition))

    @cached_property
    def _solutions(self) -> dict[str, list[Solution]]:
        out: dict[str, list[Solution]] = {}
        for path in sorted((self.root / "solutions").rglob("*.json")):
            s = load_model(Solution, path)
            out.setdefault(s.definition, []).append(s)
        return out

    def label(self, workload: Workload) -> str:
        return self.labels.get(workload.uuid) or workload.uuid[:8]

    def preset(self, definition: str) -> EvalPreset:
        cfg = self._eval_config
        d = self.definition(definition)
        merged: dict[str, Any] = {}
        merged.update(cfg.get("default") or {})
        merged.update((cfg.get("op_type") or {}).get(d.op_type) or {})
        merged.update((cfg.get("definition") or {}).get(definition) or {})
        try:
            return EvalPreset(**merged)
        except Exception as err:  # pydantic error: name the file
            raise SchemaError(f"{self.root / 'eval_config.yaml'}: preset for {definition}: {err}") from None
