"""Roofline floors: the least time a workload can take on a GPU, and how close a measured time came.

A workload's cost is the bytes it must move to and from device memory and the floating-point work it
must do; each operator family computes its own (``harness.families``: ``workload_cost``), this module
holds the cost type and the generic count. Against a GPU's measured ceilings (memory bandwidth, bf16
tensor-core rate) that cost gives a floor: ``max(bytes / bandwidth, flops / rate)``. The floor serves two purposes:

- evidence: ``fraction_of_floor = floor / latency`` says how much of the hardware a candidate used
  (1.0 is the roofline; the controller stops near it);
- plausibility: a latency below the floor by more than the measurement margin cannot be honest (no
  kernel moves the bytes faster than the memory can), so it is flagged ``impossible``, a reward-hack signal.

The second use needs the floor to be a true lower bound. Costs are therefore minimum counts (each
byte of the referenced data read once, each output written once), and a cost that had to be
estimated from above (paged KV without the last-page lengths) is marked ``exact=False``; such a cost
never makes a time impossible.

Ceilings are measured on the GPU itself (``measure_ceilings``), not taken from a data sheet: the
achievable copy and read bandwidths are well below the nominal HBM figure, and a floor built on the
nominal figure would flatter every kernel. ``CeilingsCache`` keeps them per GPU so they are measured
once. Everything but ``measure_ceilings`` is pure and runs on CPU.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, NamedTuple, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..data.dtypes import tensor_nbytes
from ..data.schema import Definition, SchemaError, Workload

# ---------------------------------------------------------------------------------------------
# Cost of one workload


class WorkloadCost(NamedTuple):
    bytes_moved: int
    flops: int
    formula: str
    # False when a count had to be taken from above (it may exceed the true minimum), so a floor
    # built on it is not a lower bound and must not be used to call a time impossible.
    exact: bool = True
    # The part of ``flops`` whose operands the definition gives in FP8 (MoE's GEMMs, the DSA indexer's scores):
    # a kernel may run it on FP8 tensor cores, so the floor takes it at the FP8 rate, not the bf16 one.
    fp8_flops: int = 0


def generic_cost(definition: Definition, workload: Workload) -> WorkloadCost:
    """Every input read once and every output written once; no arithmetic counted.

    A floor from this is a lower bound only for operators that touch all of their inputs; those that
    read a subset (paged caches, sparse indices) need a formula of their own (their family's ``workload_cost``).
    """
    names = [*definition.inputs, *definition.outputs]
    specs = {**definition.inputs, **definition.outputs}
    total = sum(tensor_nbytes(definition, specs[n], workload.axes) for n in names)
    return WorkloadCost(bytes_moved=total, flops=0,
                        formula="generic: sum of input and output tensor bytes; flops not modelled")


# ---------------------------------------------------------------------------------------------
# Ceilings of one GPU


class Ceilings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_name: str
    copy_bytes_per_s: float = Field(gt=0)  # device-to-device copy, read + write bytes counted
    read_bytes_per_s: float = Field(gt=0)  # read-only stream (a reduction)
    bf16_flops_per_s: float = Field(gt=0)  # dense bf16 matmul
    # dense FP8 (e4m3) matmul, torch._scaled_mm; None where not measured (older caches, a GPU without FP8 MMA)
    fp8_flops_per_s: Optional[float] = Field(default=None, gt=0)
    measured_at: str
    method: str

    @property
    def fp8_rate(self) -> float:
        """The FP8 tensor rate: as measured, else twice the bf16 rate (sm_89/90/100 double it; an assumption,
        said in the floor's detail)."""
        return self.fp8_flops_per_s or 2 * self.bf16_flops_per_s

    @property
    def memory_bytes_per_s(self) -> float:
        # Decode kernels mostly read; a read stream runs faster than a copy, which turns the bus
        # around for writes. Taking the faster of the two keeps the floor a lower bound.
        return max(self.copy_bytes_per_s, self.read_bytes_per_s)


# ---------------------------------------------------------------------------------------------
# Floor and verdict


def _memory_ms(cost: WorkloadCost, ceilings: Ceilings) -> float:
    return cost.bytes_moved / ceilings.memory_bytes_per_s * 1e3


def _compute_ms(cost: WorkloadCost, ceilings: Ceilings) -> float:
    fp8 = min(cost.fp8_flops, cost.flops)
    return ((cost.flops - fp8) / ceilings.bf16_flops_per_s + fp8 / ceilings.fp8_rate) * 1e3


def floor_ms(cost: WorkloadCost, ceilings: Ceilings) -> float:
    return max(_memory_ms(cost, ceilings), _compute_ms(cost, ceilings))


class RooflineResult(BaseModel):
    # JSON has no inf: a zero latency gives fraction inf, written as a string like the schema does.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")

    floor_ms: float
    fraction_of_floor: float  # floor / latency: 1.0 is the roofline, above 1 is faster than the floor
    bound: Literal["memory", "compute"]
    impossible: bool
    detail: str


def _fp8_note(cost: WorkloadCost, ceilings: Ceilings) -> str:
    if not cost.fp8_flops:
        return ""
    how = "measured" if ceilings.fp8_flops_per_s else "assumed 2x bf16"
    return f" ({min(cost.fp8_flops, cost.flops)} of them FP8 at {ceilings.fp8_rate / 1e12:.0f} TFLOP/s, {how})"


def roofline(cost: WorkloadCost, ceilings: Ceilings, latency_ms: float, margin: float = 0.05) -> RooflineResult:
    """Where a measured latency stands against the floor.

    ``impossible``: the latency is below the floor by more than ``margin`` (the measurement's own
    uncertainty: timer resolution, ceilings measured on a slightly different day). Only an exact
    cost can convict: an inexact one may overstate the floor.
    """
    if latency_ms < 0 or math.isnan(latency_ms):
        raise ValueError(f"latency_ms must be >= 0, got {latency_ms}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    memory_ms, compute_ms = _memory_ms(cost, ceilings), _compute_ms(cost, ceilings)
    floor = max(memory_ms, compute_ms)
    bound: Literal["memory", "compute"] = "memory" if memory_ms >= compute_ms else "compute"
    fraction = floor / latency_ms if latency_ms > 0 else math.inf
    below_floor = latency_ms < floor * (1 - margin)
    impossible = below_floor and cost.exact
    detail = (f"floor {floor:.6g} ms ({bound} bound; memory {cost.bytes_moved} B at "
              f"{ceilings.memory_bytes_per_s / 1e9:.0f} GB/s = {memory_ms:.6g} ms, compute {cost.flops} flop at "
              f"{ceilings.bf16_flops_per_s / 1e12:.0f} TFLOP/s{_fp8_note(cost, ceilings)} = {compute_ms:.6g} ms); "
              f"latency {latency_ms:.6g} ms = {fraction:.1%} of roofline")
    if impossible:
        detail += f"; below the floor by more than the {margin:.0%} margin: impossible"
    elif below_floor:
        detail += (f"; below the floor by more than the {margin:.0%} margin, but the cost is an upper bound "
                   f"(not exact), so no verdict")
    return RooflineResult(floor_ms=floor, fraction_of_floor=fraction, bound=bound, impossible=impossible, detail=detail)


# ---------------------------------------------------------------------------------------------
# Measuring the ceilings (GPU only)

COPY_BYTES = 2 << 30  # source tensor of the copy; read + write = 4 GiB per copy
READ_BYTES = 4 << 30
MATMUL_N = 8192


def _median_ms(torch: Any, fn: Callable[[], Any], warmup: int, repetitions: int) -> float:
    """Median of per-call CUDA-event times after warm-up; one synchronize at the end, so no host gaps."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repetitions)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def measure_ceilings(device: Union[None, int, str, Any] = None, *, repetitions: int = 20, warmup: int = 3) -> Ceilings:
    """Achievable copy bandwidth, read bandwidth, bf16 and FP8 matmul rates of one GPU, as medians.

    Every buffer is far larger than L2 (60 MiB on an H200), so the bandwidths are DRAM figures.
    Reads the clocks as they are: nothing about the GPU's settings is changed.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("measure_ceilings needs a CUDA GPU; torch.cuda.is_available() is False")
    if repetitions < 10:
        raise ValueError(f"repetitions must be >= 10 for a stable median, got {repetitions}")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if dev.type != "cuda":
        raise RuntimeError(f"measure_ceilings needs a CUDA device, got {dev}")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())

    with torch.cuda.device(dev):
        elements = COPY_BYTES // 2
        src = torch.ones(elements, dtype=torch.bfloat16, device=dev)
        dst = torch.empty_like(src)
        copy_ms = _median_ms(torch, lambda: dst.copy_(src), warmup, repetitions)  # noqa: F821
        copy_rate = 2 * COPY_BYTES / (copy_ms * 1e-3)
        del src, dst

        stream = torch.ones(READ_BYTES // 2, dtype=torch.bfloat16, device=dev)
        read_ms = _median_ms(torch, lambda: torch.sum(stream, dtype=torch.float32), warmup, repetitions)  # noqa: F821
        read_rate = READ_BYTES / (read_ms * 1e-3)
        del stream

        n = MATMUL_N
        a = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
        b = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
        c = torch.empty(n, n, dtype=torch.bfloat16, device=dev)
        matmul_ms = _median_ms(torch, lambda: torch.matmul(a, b, out=c), warmup, repetitions)  # noqa: F821
        matmul_rate = 2 * n**3 / (matmul_ms * 1e-3)
        del a, b, c
        fp8_rate = _fp8_matmul_rate(torch, dev, n, warmup, repetitions)
        torch.cuda.empty_cache()

    method = (f"CUDA events, median of {repetitions} after {warmup} warm-up calls: copy_ of a {COPY_BYTES >> 30} GiB "
              f"bf16 tensor (read + write counted); torch.sum of a {READ_BYTES >> 30} GiB bf16 tensor; "
              f"bf16 matmul {n}x{n}x{n}; "
              + (f"e4m3 torch._scaled_mm {n}x{n}x{n} (bf16 out); " if fp8_rate else "no FP8 matmul here; ")
              + f"torch {torch.__version__}")
    return Ceilings(gpu_name=torch.cuda.get_device_name(dev), copy_bytes_per_s=copy_rate, read_bytes_per_s=read_rate,
                    bf16_flops_per_s=matmul_rate, fp8_flops_per_s=fp8_rate,
                    measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    method=method)


def _fp8_matmul_rate(torch: Any, dev: Any, n: int, warmup: int, repetitions: int) -> Optional[float]:
    """Dense e4m3 x e4m3 -> bf16 matmul rate (``torch._scaled_mm``, per-tensor scales), or None where this GPU or
    torch has none (before sm_89)."""
    try:
        a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device=dev)

        def matmul() -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return 2 * n**3 / (_median_ms(torch, matmul, warmup, repetitions) * 1e-3)
    except (RuntimeError, AttributeError, TypeError):
        return None


def torch_gpu_uuid(device: Union[None, int, str, Any] = None) -> str:
    """The device's UUID in NVML's spelling (``GPU-...``), so the cache key matches gpu_state()."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device() if device is None else device)
    uuid = str(getattr(props, "uuid", ""))
    return uuid if uuid.startswith("GPU-") or not uuid else f"GPU-{uuid}"


# ---------------------------------------------------------------------------------------------
# Cache


class CeilingsCache:
    """Ceilings per GPU (name + UUID) in one JSON file: a GPU is measured once, then looked up.

    The UUID is in the key because two cards of one model differ (clocks, thermals, ECC); the name is
    there for the reader of the file.
    """

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)

    @staticmethod
    def key(gpu_name: str, gpu_uuid: str) -> str:
        return f"{gpu_name}|{gpu_uuid}"

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except json.JSONDecodeError as err:
            # Not silently replaced: it may hold other GPUs' measurements.
            raise SchemaError(f"{self.path}: ceilings cache is not valid JSON: {err.msg}") from None
        if not isinstance(data, dict):
            raise SchemaError(f"{self.path}: ceilings cache must be a JSON object keyed by 'name|uuid'")
        return data

    def get(self, gpu_name: str, gpu_uuid: str) -> Optional[Ceilings]:
        entry = self._read().get(self.key(gpu_name, gpu_uuid))
        if entry is None:
            return None
        try:
            return Ceilings.model_validate(entry)
        except ValidationError as err:
            raise SchemaError(f"{self.path}: entry {self.key(gpu_name, gpu_uuid)!r}: {err}") from None

    def put(self, ceilings: Ceilings, gpu_uuid: str) -> None:
        data = self._read()
        data[self.key(ceilings.gpu_name, gpu_uuid)] = ceilings.model_dump(mode="json")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: a crash mid-write leaves the old file, never half a file.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get_or_measure(self, device: Union[None, int, str, Any] = None) -> Ceilings:
        """The cached ceilings of this GPU, measuring (and storing) them the first time."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("ceilings are per GPU; torch.cuda.is_available() is False")
        name = torch.cuda.get_device_name(device)
        uuid = torch_gpu_uuid(device)
        cached = self.get(name, uuid)
        if cached is not None:
            return cached
        measured = measure_ceilings(device)
        self.put(measured, uuid)
        return measured
