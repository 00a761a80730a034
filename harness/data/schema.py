"""FlashInfer Trace data model: Definition, Workload, Solution, Trace, Evaluation.

Field for field the JSON objects of FlashInfer-Bench, so files move both ways. What Crucible adds
(audits, baselines, roofline, raw samples) lives in the archive or in ``extra``; it never changes
the meaning of an official field.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, Optional, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .json_files import JSON_READ_LIMIT, SchemaError, load_json, read_text  # noqa: F401 (schema's names for them)
from .json_files import _parse_json, _read_text
from .names import source_path_problem, source_paths_problem
from .statuses import EvaluationStatus  # defined with the other statuses; still importable from here


class _Model(BaseModel):
    # Unknown keys are errors: a typo in a field name must not silently change the meaning.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ---------------------------------------------------------------------------------------------
# Definition


class DType(str, Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e5m2 = "float8_e5m2"
    float4_e2m1 = "float4_e2m1"
    int64 = "int64"
    int32 = "int32"
    int16 = "int16"
    int8 = "int8"
    bool = "bool"


class AxisConst(_Model):
    type: Literal["const"]
    value: int = Field(ge=0)
    description: Optional[str] = None


class AxisVar(_Model):
    type: Literal["var"]
    description: Optional[str] = None


Axis = Annotated[Union[AxisConst, AxisVar], Field(discriminator="type")]


class TensorSpec(_Model):
    shape: Optional[list[str]]  # None: a scalar
    dtype: DType
    description: Optional[str] = None
    # The official GDN definitions mark the recurrent state ``optional`` (their references start from zeros when
    # it is None); None when a definition does not say, and then left out of the wire form.
    optional: Optional[bool] = None


class Definition(_Model):
    name: str = Field(min_length=1)
    op_type: str = Field(min_length=1)
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str
    tags: list[str] = Field(default_factory=list)
    description: Optional[str] = None
    constraints: list[str] = Field(default_factory=list)

    @field_validator("reference")
    @classmethod
    def _reference_defines_run(cls, source: str) -> str:
        try:
            tree = ast.parse(source)
        except SyntaxError as err:
            raise ValueError(f"reference does not parse: line {err.lineno}: {err.msg}") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            raise ValueError("reference must define a top-level function `run`")
        return source

    @field_validator("constraints")
    @classmethod
    def _constraints_parse(cls, constraints: list[str]) -> list[str]:
        for i, expr in enumerate(constraints):
            try:
                ast.parse(expr, mode="eval")
            except SyntaxError as err:
                raise ValueError(f"constraint {i} ({expr!r}) is not a Python expression: {err.msg}") from None
        return constraints

    @model_validator(mode="after")
    def _names_and_axes_consistent(self) -> "Definition":
        both = set(self.inputs) & set(self.outputs)
        if both:
            raise ValueError(f"names used as both input and output: {sorted(both)}")
        for kind, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
            for name, spec in specs.items():
                for axis in spec.shape or []:
                    if axis not in self.axes:
                        raise ValueError(f"{kind}.{name}.shape uses axis {axis!r}, which is not in axes")
        return self

    @property
    def const_axes(self) -> dict[str, int]:
        return {k: a.value for k, a in self.axes.items() if isinstance(a, AxisConst)}

    @property
    def var_axes(self) -> list[str]:
        return [k for k, a in self.axes.items() if isinstance(a, AxisVar)]

    def shape_of(self, spec: TensorSpec, var_values: dict[str, int]) -> tuple[int, ...]:
        axes = {**self.const_axes, **var_values}
        return tuple(axes[a] for a in spec.shape or [])

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Workload


class RandomInput(_Model):
    type: Literal["random"]


class ScalarInput(_Model):
    type: Literal["scalar"]
    value: Union[bool, int, float]


class SafetensorsInput(_Model):
    type: Literal["safetensors"]
    path: str
    tensor_key: str

    @field_validator("path")
    @classmethod
    def _inside_the_blob_folder(cls, path: str) -> str:
        # Workloads come from trace sets anyone can hand over (`harness import`): a path that leaves the dataset's
        # blob/ folder would make the harness read (and an export copy out) any file, the archive's seal key too.
        parts = [p for p in PurePosixPath(path).parts if p != "."]
        if (PurePosixPath(path).is_absolute() or "\\" in path or ".." in parts or len(parts) < 2
                or parts[0] != "blob"):
            raise ValueError(f"safetensors input {path!r}: a relative path inside the dataset's blob/ folder "
                             "(blob/..., no '..')")
        return path


InputSpec = Annotated[Union[RandomInput, ScalarInput, SafetensorsInput], Field(discriminator="type")]


class Workload(_Model):
    uuid: str = Field(min_length=1)
    axes: dict[str, Annotated[int, Field(ge=0)]]
    inputs: dict[str, InputSpec]


# ---------------------------------------------------------------------------------------------
# Solution


class Language(str, Enum):
    python = "python"
    triton = "triton"
    cpp = "cpp"
    cuda = "cuda"
    tilelang = "tilelang"


class BuildSpec(_Model):
    language: Language
    target_hardware: list[str] = Field(min_length=1)
    entry_point: str
    dependencies: list[str] = Field(default_factory=list)
    destination_passing_style: bool = True
    binding: Optional[Literal["tvm-ffi", "torch"]] = None
    # Crucible's extension, after flashinfer-bench's open setup() proposal: "file.py::symbol" called once
    # per workload and input set with the inputs, outside the timed region; its result is passed to the
    # entry point as one extra trailing argument. Left out of exported JSON when unset.
    setup: Optional[str] = None
    # Crucible's extension: instruction families the solution claims to use (harness/audits/sass.py FAMILIES, e.g.
    # "wgmma"); the instruction_proof audit checks them against the built code's SASS and, at the full audit
    # level, against Nsight Compute counters. Left out of exported JSON when unset.
    instruction_claims: Optional[list[str]] = None

    @field_validator("instruction_claims")
    @classmethod
    def _known_families(cls, value: Optional[list[str]]) -> Optional[list[str]]:
        from ..audits.sass import FAMILIES, unknown_claims

        unknown = unknown_claims(value or [])
        if unknown:
            raise ValueError(f"unknown instruction families {unknown}; known: {', '.join(FAMILIES)}")
        return value

    @field_validator("entry_point", "setup")
    @classmethod
    def _entry_point_form(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        if value.count("::") != 1:
            raise ValueError(f"must look like 'file.py::symbol' (exactly one '::'), got {value!r}")
        file, symbol = value.split("::")
        if not file or not symbol:
            raise ValueError(f"needs both a file and a symbol, got {value!r}")
        return value

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        return self.entry_point.split("::")[1]


class SourceFile(_Model):
    path: str
    content: str

    @field_validator("path")
    @classmethod
    def _path_stays_inside(cls, value: str) -> str:
        # A source path is written under the build folder: it must not climb out of it.
        problem = source_path_problem(value)
        if problem:
            raise ValueError(problem)
        return value


NAME_CHARS = 256  # a solution's name and author: printed by every command that lists it (a 3 MB name took 16 s)


class Solution(_Model):
    name: str = Field(min_length=1, max_length=NAME_CHARS)
    definition: str = Field(min_length=1)
    author: str = Field(min_length=1, max_length=NAME_CHARS)
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)
    description: Optional[str] = None

    @model_validator(mode="after")
    def _sources_consistent(self) -> "Solution":
        # "./kernel.py" and "kernel.py" are the same file once written out.
        paths = [PurePosixPath(s.path).as_posix() for s in self.sources]
        if problem := source_paths_problem(paths):
            raise ValueError(problem)
        if PurePosixPath(self.spec.entry_file).as_posix() not in paths:
            raise ValueError(f"entry file {self.spec.entry_file!r} is not among the sources {paths}")
        if self.spec.setup and PurePosixPath(self.spec.setup.split("::")[0]).as_posix() not in paths:
            raise ValueError(f"setup file {self.spec.setup.split('::')[0]!r} is not among the sources {paths}")
        return self

    @property
    def content_hash(self) -> str:
        """Build-cache key: everything that changes what gets built, not the name."""
        h = hashlib.sha256()
        payload = {
            "definition": self.definition,
            "language": self.spec.language.value,
            "entry_point": self.spec.entry_point,
            "binding": self.spec.binding,
            "dependencies": sorted(self.spec.dependencies),
            "dps": self.spec.destination_passing_style,
            "setup": self.spec.setup,
            "sources": sorted((s.path, s.content) for s in self.sources),
        }
        if self.spec.instruction_claims:  # only when set: hashes of solutions without claims stay as they were
            payload["instruction_claims"] = sorted(self.spec.instruction_claims)
        h.update(json.dumps(payload, sort_keys=True).encode())
        return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Trace and Evaluation


def _finite_or_str(x: float) -> Union[float, str]:
    # JSON has no inf/nan; the official models write them as strings.
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


class Correctness(_Model):
    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: Optional[dict[str, Any]] = None

    @field_validator("max_relative_error", "max_absolute_error", mode="before")
    @classmethod
    def _parse_special(cls, v: Any) -> Any:
        return float(v) if isinstance(v, str) else v

    def to_json_dict(self) -> dict[str, Any]:
        d = self.model_dump()
        d["max_relative_error"] = _finite_or_str(d["max_relative_error"])
        d["max_absolute_error"] = _finite_or_str(d["max_absolute_error"])
        return d


class Performance(_Model):
    latency_ms: float = Field(ge=0)
    reference_latency_ms: float = Field(ge=0)
    speedup_factor: float = Field(ge=0)


class Environment(_Model):
    hardware: str
    libs: dict[str, str] = Field(default_factory=dict)


class Evaluation(_Model):
    status: EvaluationStatus
    environment: Environment
    timestamp: str
    log: str = ""
    correctness: Optional[Correctness] = None
    performance: Optional[Performance] = None

    @model_validator(mode="after")
    def _fields_match_status(self) -> "Evaluation":
        # The official rule: PASSED carries both, INCORRECT_NUMERICAL correctness only, the rest neither.
        if self.status == EvaluationStatus.PASSED:
            if self.correctness is None or self.performance is None:
                raise ValueError("a PASSED evaluation needs correctness and performance")
        elif self.status == EvaluationStatus.INCORRECT_NUMERICAL:
            if self.correctness is None or self.performance is not None:
                raise ValueError("an INCORRECT_NUMERICAL evaluation carries correctness only")
        elif self.correctness is not None or self.performance is not None:
            raise ValueError(f"a {self.status.value} evaluation carries neither correctness nor performance")
        return self


class Trace(_Model):
    definition: str
    workload: Workload
    solution: Optional[str] = None
    evaluation: Optional[Evaluation] = None


# ---------------------------------------------------------------------------------------------
# Loading with errors that name the file and the field

M = TypeVar("M", bound=BaseModel)


def format_validation_error(source: str, err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}")
    return f"{source}: " + "; ".join(parts)


def parse_model(model: type[M], data: Any, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise SchemaError(format_validation_error(source, err)) from None
    except RecursionError:
        raise SchemaError(f"{source}: nested too deeply") from None


def load_model(model: type[M], path: Union[str, Path], limit: int = JSON_READ_LIMIT) -> M:
    return parse_model(model, load_json(path, limit), str(path))


def load_jsonl(model: type[M], path: Union[str, Path]) -> list[M]:
    path = Path(path)
    out = []
    for lineno, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        out.append(parse_model(model, _parse_json(line, f"{path}:{lineno}"), f"{path}:{lineno}"))
    return out


def dump_json(model: BaseModel) -> dict[str, Any]:
    """The wire form: None-valued optional fields kept as the official writer keeps them."""
    data = model.model_dump(mode="json")
    if isinstance(model, Solution) and data["spec"].get("setup") is None:
        data["spec"].pop("setup", None)  # keep the official wire format when the extension is unused
    if isinstance(model, Solution) and data["spec"].get("instruction_claims") is None:
        data["spec"].pop("instruction_claims", None)
    if isinstance(model, Definition):
        for spec in (*data["inputs"].values(), *data["outputs"].values()):
            if spec.get("optional") is None:
                spec.pop("optional", None)  # only the definitions that say it carry it, as in the official files
    if isinstance(model, Evaluation) and model.correctness is not None:
        data["correctness"] = model.correctness.to_json_dict()
    if isinstance(model, Trace) and model.evaluation is not None and model.evaluation.correctness is not None:
        data["evaluation"]["correctness"] = model.evaluation.correctness.to_json_dict()
    return data
