"""The messages between the harness and its workers, one model per request and per reply.

The framing stays ``harness.sandbox.protocol``'s (a JSON header plus a safetensors payload); these models are what
the JSON header holds. A request names its ``op``; ``parse_request`` turns a header into the one model of that op
(a discriminated union), so the worker dispatches on a validated request instead of reading keys of a dict. The
wire form is the same JSON as before the models (``Request.wire``): archived data and recorded replies keep meaning.

Replies come from a process that runs untrusted candidate code: ``parse_reply`` validates a header against the
model of the op it answers, and a reply that does not fit (a missing ``ok``, a number sent as text, an ``ok`` reply
without what it must carry) is a ``MalformedReply``, which the runner turns into a crashed worker, recorded as the
workload's status like any other broken worker. Unknown keys are refused on both sides: a renamed field fails
loudly instead of being read as missing.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_serializer, model_serializer,
                      model_validator)

from ..data.schema import Definition, EvaluationStatus, Solution, Workload, dump_json
from ..measure.tolerance import Tolerance
from ..measure.roofline import Ceilings
from ..measure.timing_records import TrialTiming


UNAVAILABLE = "UNAVAILABLE"  # a failed request's status where this host lacks what it needs (no GPU, no disassembler)
# what a failed request may say it ended as: never PASSED (a worker that runs candidate code cannot pass itself)
FAILURE_STATUSES = frozenset({s.value for s in EvaluationStatus if s is not EvaluationStatus.PASSED} | {UNAVAILABLE})


class RequestError(ValueError):
    """A request header that is no valid request: the worker answers it with ``ok: False`` naming the problem."""


class MalformedReply(ValueError):
    """A reply header that does not fit the reply model of its op: the worker broke the protocol."""


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _problems(err: ValidationError, skip: int = 0) -> str:
    """A validation error in one line per problem: where (past ``skip`` leading parts: the union's tag), what."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'][skip:]) or '(header)'}: {e['msg']}" for e in err.errors())


# -- requests ------------------------------------------------------------------------------------------------------


class _Request(_Message):
    op: str = Field(description="the request's kind: which handler of the worker answers it")

    def wire(self) -> dict[str, Any]:
        """The JSON header: the op and the fields the caller set (not None); the worker's model fills in the
        defaults of the others, as the handlers of the dict requests did."""
        return {k: v for k, v in self.model_dump(mode="json").items()
                if k == "op" or (k in self.model_fields_set and v is not None)}


class HelloRequest(_Request):
    """Is the worker ready (its imports done)? The reply carries its environment."""

    op: Literal["hello"] = Field("hello", description="the request's kind")


class ExitRequest(_Request):
    """End the worker: it answers ``ok`` and returns."""

    op: Literal["exit"] = Field("exit", description="the request's kind")


class SyncRequest(_Request):
    """Sent after every reply: answered at once, so a frame found before its answer was not that loop's reply to
    the request before (a forged one came first: harness.sandbox.runner.WorkerProcess.request)."""

    op: Literal["sync"] = Field("sync", description="the request's kind")


class CeilingsRequest(_Request):
    """Measure this GPU's copy and read bandwidth and its bf16 matmul rate (the roofline's ceilings)."""

    op: Literal["ceilings"] = Field("ceilings", description="the request's kind")


class SassRequest(_Request):
    """Disassemble what the candidate built (and what Triton compiled while it ran) into opcode histograms."""

    op: Literal["sass"] = Field("sass", description="the request's kind")
    timeout_s: float = Field(120.0, gt=0, description="time limit of the disassembler, seconds")


class CompiledRequest(_Request):
    """The C++/CUDA sources the candidate's builds compiled since the last report (its calls' load_inline)."""

    op: Literal["compiled"] = Field("compiled", description="the request's kind")


class BuildRequest(_Request):
    """Build one solution against its definition; later requests of a candidate worker call what it built."""

    op: Literal["build"] = Field("build", description="the request's kind")
    solution: Solution = Field(description="the solution to build (its sources and build spec)")
    definition: Definition = Field(description="the definition the solution implements")

    @field_serializer("solution")
    def _solution_wire(self, solution: Solution) -> dict[str, Any]:
        return dump_json(solution)  # the official wire form: unused extensions left out


class _OnWorkload(_Request):
    workload: Workload = Field(description="the workload whose inputs the worker draws itself")
    dataset_root: str = Field(description="the dataset's folder (its blob/ files hold stored inputs)")


class _OnSeed(_OnWorkload):
    seed: int = Field(description="the secret seed the inputs are drawn from")


class RunRequest(_OnSeed):
    """One call of the built candidate on fresh inputs; its outputs come back as the payload."""

    op: Literal["run"] = Field("run", description="the request's kind")


class ReferenceRequest(_OnSeed):
    """One call of the definition's reference (reference worker only); its outputs come back as the payload."""

    op: Literal["reference"] = Field("reference", description="the request's kind")
    definition: Definition = Field(description="the definition whose reference runs")


class OracleRequest(_OnSeed):
    """The reference in float64 throughout (reference worker only): the precision audit's yardstick."""

    op: Literal["oracle"] = Field("oracle", description="the request's kind")
    definition: Definition = Field(description="the definition whose reference runs in float64")


class JudgeRequest(_OnSeed):
    """The family's official check of one call, with the call's inputs drawn again (reference worker only).

    The payload holds the candidate's outputs as ``got/<name>`` and the reference's as ``want/<name>``."""

    op: Literal["judge"] = Field("judge", description="the request's kind")
    definition: Definition = Field(description="the definition whose family's check judges")
    tolerance: Tolerance = Field(description="the workload's tolerances (atol, rtol, matched ratio, non-finite)")


class TimeRequest(_OnWorkload):
    """The official timer over ``seeds``, one trial each on fresh inputs."""

    op: Literal["time"] = Field("time", description="the request's kind")
    definition: Optional[Definition] = Field(
        None, description="the definition to time (the reference worker); None: the candidate's, from its build")
    seeds: list[int] = Field(min_length=1, description="one trial per seed, on inputs drawn from it")
    warmup: int = Field(ge=0, description="untimed calls before each trial")
    iterations: int = Field(ge=1, description="timed calls per trial")
    clock_truth_calls: int = Field(
        0, ge=0, description="wall-clock calls (plain, then as many under CUPTI tracing) in the last trial, next to "
                             "that trial's CUPTI span (the clock-truth audit); 0: none")
    backend: str = Field("auto", description="the timer's backend: auto, cupti or cuda_events")


class RecheckStep(_Message):
    """One call of the fresh-input recheck (harness.audits.verdicts.plan_recheck)."""

    kind: Literal["fresh", "reuse", "known"] = Field(
        description="fresh: new inputs and NaN-poisoned outputs; reuse: an earlier step's buffers refilled with "
                    "content never seen; known: refilled with the content the official timer timed")
    seed: int = Field(description="the seed the step's input content is drawn from")
    buffers_of: Optional[int] = Field(None, ge=0,
                                      description="reuse and known: the earlier step whose buffers are refilled")

    @model_validator(mode="after")
    def _buffers_for_reuse(self) -> "RecheckStep":
        if (self.kind != "fresh") != (self.buffers_of is not None):
            raise ValueError("a reuse or known step names the buffers it refills (buffers_of), a fresh step none")
        return self

    @model_serializer(mode="wrap")
    def _wire(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("buffers_of") is None:
            data.pop("buffers_of", None)  # a fresh step, as plan_recheck writes it
        return data


class RecheckRequest(_OnWorkload):
    """Fresh and reused-buffer calls in the given order; every step's outputs come back as ``<i>/<name>``."""

    op: Literal["recheck"] = Field("recheck", description="the request's kind")
    steps: list[RecheckStep] = Field(min_length=1, description="the calls, in the order they run")

    @model_validator(mode="after")
    def _reuse_earlier_fresh(self) -> "RecheckRequest":
        for i, step in enumerate(self.steps):
            if step.buffers_of is not None and not (step.buffers_of < i and self.steps[step.buffers_of].kind
                                                    == "fresh"):
                raise ValueError(f"step {i} reuses the buffers of step {step.buffers_of}, not an earlier fresh step")
        return self


Request = Annotated[Union[HelloRequest, ExitRequest, SyncRequest, CeilingsRequest, SassRequest, BuildRequest,
                          RunRequest, ReferenceRequest, OracleRequest, JudgeRequest, TimeRequest, RecheckRequest,
                          CompiledRequest],
                    Field(discriminator="op")]
_REQUEST = TypeAdapter(Request)
OPS = ("hello", "exit", "sync", "ceilings", "sass", "build", "run", "reference", "oracle", "judge", "time", "recheck",
       "compiled")


def parse_request(header: dict[str, Any]) -> Request:
    """The request model of a header, or a RequestError that names what is wrong with it."""
    if not isinstance(header, dict):
        raise RequestError("a request is a JSON object")
    op = header.get("op")
    if op not in OPS:
        raise RequestError(f"unknown op {op!r} (known: {', '.join(OPS)})")
    try:
        return _REQUEST.validate_python(header)
    except ValidationError as err:
        raise RequestError(f"invalid {op} request: {_problems(err, skip=1)}") from None


# -- replies -------------------------------------------------------------------------------------------------------


class MemoryReport(_Message):
    """GPU memory as the worker reports it after a request (harness.measure.device_measure.memory_release)."""

    peak_bytes: int = Field(0, ge=0, description="the most the request held (reserved by the allocator)")
    resident_bytes: int = Field(0, ge=0, description="what the worker still holds between requests")


class Reply(_Message):
    """What every reply may carry; an ``ok: False`` reply says why in ``error`` (and ``status`` where it has one)."""

    ok: bool = Field(description="whether the request did what it asked")
    status: Optional[str] = Field(
        None, description="a failed request's status (an EvaluationStatus, or UNAVAILABLE for what this host lacks)")
    error: Optional[str] = Field(None, description="why the request failed, in one line")
    traceback: Optional[str] = Field(None, description="the failed request's Python traceback")
    context_broken: bool = Field(False, description="after a failure: the worker's CUDA context is unusable")
    memory: Optional[MemoryReport] = Field(None, description="GPU memory of the request (on a GPU only)")
    spent_s: Optional[dict[str, float]] = Field(
        None, description="where the worker's time went in this request: seconds per step (inputs, call, digest, "
                          "timer...); a measure of the harness's own cost, never of the candidate's speed")
    # fields an ok reply of this op must carry (the harness reads them without a default)
    when_ok: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _complete_when_ok(self) -> "Reply":
        if self.status is not None and self.status not in FAILURE_STATUSES:
            raise ValueError(f"status {self.status!r} is not a failure status ({', '.join(sorted(FAILURE_STATUSES))})")
        missing = [name for name in self.when_ok if getattr(self, name) is None]
        if self.ok and missing:
            raise ValueError(f"an ok reply must carry {', '.join(missing)}")
        return self

    def wire(self) -> dict[str, Any]:
        """The header as the worker sent it (the keys it set): what the archive keeps."""
        return self.model_dump(mode="json", exclude_unset=True)


class HelloReply(Reply):
    role: Optional[Literal["candidate", "reference"]] = Field(None, description="the worker's role")
    environment: dict[str, Any] = Field(default_factory=dict,
                                        description="versions, device and GPU state of the worker (archived as is)")


class CompiledSource(_Message):
    """A C++/CUDA source the build compiled, read back after the import (harness.sandbox.compiled_sources)."""

    path: str = Field(description="where the worker read it")
    text: str = Field(description="its text")
    defines: dict[str, str] = Field(default_factory=dict, description="the -D macros of the build that compiled it")


class CompiledReply(Reply):
    compiled_sources: list[CompiledSource] = Field(default_factory=list,
                                                   description="the C++/CUDA sources compiled since the last report")
    compiled_unread: list[str] = Field(default_factory=list, description="sources compiled that could not be read")


class BuildReply(Reply):
    compile_only: bool = Field(False, description="built but not callable on this host (CUDA without a GPU)")
    note: str = Field("", description="why a build is compile-only, or another remark of the build")
    log: str = Field("", description="the build's output (compiler messages)")
    artifacts: dict[str, str] = Field(default_factory=dict, description="kind -> path of what the build made")
    build_s: Optional[float] = Field(None, ge=0, description="seconds the build took")
    extensions: str = Field("", description="an earlier build's torch extensions put back before the import, if any")
    compiled_sources: list[CompiledSource] = Field(default_factory=list,
                                                   description="the C++/CUDA sources the build compiled, as text")
    compiled_unread: list[str] = Field(default_factory=list, description="sources it compiled that it could not read")


class LibraryOp(_Message):
    """One ATen operator's computing, or one way values left PyTorch, in a call on a host without a GPU
    (harness.sandbox.library_ops)."""

    kind: Literal["pointwise", "reduction", "matmul", "host", "integer", "host_integers"] = Field(
        description="pointwise: an elementwise map; matmul: a matrix product, convolution, attention or linear "
                    "algebra; reduction: any other computing operator (reductions, scans, sorts, top-k, softmax); "
                    "host: values taken out of PyTorch (Tensor.numpy, tolist...), computed on where no count sees; "
                    "integer: arithmetic on integers neither values nor the definition's indices; host_integers: "
                    "other integers taken out of PyTorch (a plan's lengths, or value bits a kernel stored)")
    elements: int = Field(ge=0, description="elements it read over the call (of values; integers for the integer "
                                            "kinds)")


class LibraryCompute(_Message):
    """The ATen compute of one checked call of a Triton or Python solution under Triton's CPU interpreter: the
    evidence of the CPU's attribution (harness.audits.cpu_attribution)."""

    input_elements: int = Field(ge=0, description="floating-point (and 8-bit integer: FP8 packed) elements of the "
                                                  "call's inputs (the definition's)")
    ops: dict[str, LibraryOp] = Field(default_factory=dict,
                                      description="operator (aten::mul) -> its kind and the float elements it read")


class RunReply(Reply):
    input_fingerprint: Optional[str] = Field(None, description="the content hash of the inputs the call got")
    mutated_inputs: list[str] = Field(default_factory=list, description="inputs the call modified")
    aliased_outputs: list[str] = Field(default_factory=list,
                                       description="outputs sharing memory with an input or another output")
    elapsed_s: Optional[float] = Field(None, ge=0, description="wall seconds of the call (not the official timer)")
    note: str = Field("", description="a remark on the call (a DPS entry point that returned a value)")
    own_kernels: Optional[int] = Field(None, ge=0, description="Triton kernels of the solution the interpreter "
                                       "launched in the call (CPU); None where not counted")
    library_compute: Optional[LibraryCompute] = Field(
        None, description="the ATen compute of the call (a Triton or Python solution on a CPU); None where not counted")
    when_ok: ClassVar[tuple[str, ...]] = ("input_fingerprint",)


class ReferenceReply(Reply):
    """The reply to ``reference`` and to ``oracle`` (the outputs are the payload)."""

    input_fingerprint: Optional[str] = Field(None, description="the content hash of the inputs the reference got")
    elapsed_s: Optional[float] = Field(None, ge=0, description="wall seconds of the reference's call")
    when_ok: ClassVar[tuple[str, ...]] = ("input_fingerprint",)


class CheckReport(_Message):
    """A CheckResult as JSON (harness.measure.correctness.CheckResult.to_json)."""

    status: EvaluationStatus = Field(description="the check's verdict")
    max_absolute_error: float = Field(description="largest absolute error over the outputs")
    max_relative_error: float = Field(description="largest relative error over the outputs")
    matched_ratio: float = Field(ge=0, le=1, description="share of elements within the tolerances")
    message: str = Field("", description="why the check failed, or a remark")
    per_output: dict[str, Any] = Field(default_factory=dict, description="the figures per output")


class JudgeReply(Reply):
    check: Optional[CheckReport] = Field(None, description="the family's verdict on the call")
    when_ok: ClassVar[tuple[str, ...]] = ("check",)


class TimedTrial(TrialTiming):
    """One trial of the official timer, with the clock-truth audit's wall times where they were taken."""

    model_config = ConfigDict(extra="forbid")
    wall_ms: Optional[list[float]] = Field(None, description="synchronised wall time per call, cold L2")


class TimeReply(Reply):
    trials: Optional[list[TimedTrial]] = Field(None, min_length=1, description="the official figure's trials")
    kernel_trials: Optional[list[TimedTrial]] = Field(
        None, description="with a setup: the trials with setup outside the timed call (the kernel figure)")
    gpu_state_before: Optional[dict[str, Any]] = Field(None, description="clocks, temperature, throttling before")
    gpu_state_after: Optional[dict[str, Any]] = Field(None, description="the same after the trials")
    triton_kernels_elsewhere: list[str] = Field(
        default_factory=list, description="Triton kernels the worker compiled from files outside the solution: a "
                                          "library's, whatever the solution calls its own (sandbox.triton_cache)")
    when_ok: ClassVar[tuple[str, ...]] = ("trials",)

    @staticmethod
    def as_dicts(trials: Optional[list[TimedTrial]]) -> list[dict[str, Any]]:
        """Trials as the archive keeps them: the keys the worker sent."""
        return [t.model_dump(mode="json", exclude_unset=True) for t in trials or []]


class RecheckReply(Reply):
    wall_ms: Optional[list[float]] = Field(None, description="wall time of each step's call, cold L2")
    repeat_wall_ms: list[float] = Field(default_factory=list,
                                        description="on a GPU: a repeat of each step's call on the same buffers")
    tunings: list[int] = Field(
        default_factory=list, description="on a GPU: keys Triton's autotuner tuned during each step's call (the "
                                          "solution's kernels; a diagnosis only: harness.sandbox.triton_tuning)")
    input_fingerprints: Optional[list[str]] = Field(None, description="the content hash of each step's inputs")
    threads_before: Optional[int] = Field(None, ge=0, description="the worker's threads before the recheck")
    threads_after: Optional[int] = Field(None, ge=0, description="and after it (a thread left running shows)")
    candidate_threads: list[str] = Field(
        default_factory=list, description="Python threads alive that were not when the worker started: the "
                                          "candidate's, whenever it started them (harness.sandbox.integrity)")
    candidate_processes: list[str] = Field(
        default_factory=list, description="processes alive beside the worker that were not when it started, and "
                                          "those the candidate started since (alive or not): the candidate's "
                                          "(harness.sandbox.integrity.other_processes, harness.sandbox.process_log)")
    library_compute: list[LibraryCompute] = Field(
        default_factory=list, description="on a CPU, the ATen compute of each step's call (RunReply's)")
    when_ok: ClassVar[tuple[str, ...]] = ("wall_ms", "input_fingerprints", "threads_before", "threads_after")


class KernelReport(_Message):
    """One kernel's opcode histogram (harness.audits.sass.KernelSass.to_json)."""

    name: str = Field(description="the kernel's (mangled) name")
    arch: str = Field("", description="the architecture it was compiled for (sm_90a...)")
    opcodes: dict[str, int] = Field(description="opcode -> count in the kernel's SASS")


class SassReply(Reply):
    kernels: Optional[list[KernelReport]] = Field(None, description="every kernel found in the binaries")
    notes: list[str] = Field(default_factory=list, description="what the disassembly could not read, and why")
    tool: Optional[str] = Field(None, description="the disassembler that ran (cuobjdump or nvdisasm)")
    files: Optional[list[str]] = Field(None, description="the binaries disassembled (file names)")
    when_ok: ClassVar[tuple[str, ...]] = ("kernels", "tool", "files")


class CeilingsReply(Reply):
    ceilings: Optional[Ceilings] = Field(None, description="the GPU's measured ceilings")
    when_ok: ClassVar[tuple[str, ...]] = ("ceilings",)


REPLIES: dict[str, type[Reply]] = {
    "hello": HelloReply, "exit": Reply, "sync": Reply, "ceilings": CeilingsReply, "sass": SassReply,
    "build": BuildReply, "run": RunReply, "reference": ReferenceReply, "oracle": ReferenceReply, "judge": JudgeReply,
    "time": TimeReply, "recheck": RecheckReply, "compiled": CompiledReply}


def parse_reply(op: str, header: Any) -> Reply:
    """The reply model of ``op`` from a worker's header, or a MalformedReply that names what is wrong."""
    if not isinstance(header, dict):
        raise MalformedReply(f"the {op} reply is not a JSON object")
    try:
        return REPLIES[op].model_validate(header)
    except ValidationError as err:
        raise MalformedReply(f"malformed {op} reply: {_problems(err)}") from None


def failure(error: str, status: Optional[str] = None, **fields: Any) -> dict[str, Any]:
    """An ``ok: False`` reply header (the worker's side)."""
    return {"ok": False, "status": status or EvaluationStatus.RUNTIME_ERROR.value, "error": error, **fields}
