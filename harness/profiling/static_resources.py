"""What a Triton kernel costs an SM before it runs: registers, spills and shared memory for a GPU architecture,
compiled on any host (no GPU needed: Triton's NVIDIA backend ships ptxas), and the occupancy they allow.

The compile is the one the GPU would do: the launch's arguments are recorded from the solution's own host code
(every ``kernel[grid](...)`` call, with the kernel replaced by a recorder, so nothing runs), then specialised as
Triton's JIT specialises them (pointers and integers divisible by 16 marked so, constexprs and launch options as
given). On an H200 the default fused split-KV decode kernel compiles here to 162 registers and 73,728 bytes of
shared memory, what ncu reported for it on the card (run 12). ``occupancy`` and ``parse_resource_usage`` are pure.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

# Per-SM limits of the architectures the contest targets (CUDA occupancy calculator's tables).
SM_LIMITS = {
    90: {"registers": 65536, "warps": 64, "blocks": 32, "shared": 233472, "shared_per_block_reserved": 1024,
         "register_unit": 256, "max_registers": 255},
    100: {"registers": 65536, "warps": 64, "blocks": 32, "shared": 233472, "shared_per_block_reserved": 1024,
          "register_unit": 256, "max_registers": 255},
}


@dataclass
class Occupancy:
    """Resident blocks per SM by each limit, the binding one, and warps resident out of the SM's maximum."""
    by_registers: int
    by_shared_memory: int
    by_warps: int
    by_blocks: int
    blocks_per_sm: int
    limiter: str
    theoretical_pct: float


def occupancy(registers: int, shared_bytes: int, warps: int, arch: int = 90) -> Occupancy:
    """Blocks of ``warps`` warps that fit on one SM with ``registers`` per thread and ``shared_bytes`` of shared
    memory per block (static + dynamic). Registers are allocated per warp in units of 256."""
    lim = SM_LIMITS[arch]
    unit = lim["register_unit"]
    per_warp = math.ceil(max(registers, 1) * 32 / unit) * unit
    by_registers = lim["registers"] // (per_warp * warps)
    per_block_shared = shared_bytes + lim["shared_per_block_reserved"]
    by_shared = lim["shared"] // per_block_shared if shared_bytes else lim["blocks"]
    by_warps = lim["warps"] // warps
    # On a tie the first named binds (ncu names registers before shared memory; no shared memory binds nothing).
    limits = {"registers": by_registers, "warps": by_warps, "blocks": lim["blocks"], "shared-memory": by_shared}
    limiter = min(limits, key=lambda k: limits[k])
    blocks = limits[limiter]
    return Occupancy(by_registers=by_registers, by_shared_memory=by_shared, by_warps=by_warps,
                     by_blocks=lim["blocks"], blocks_per_sm=blocks, limiter=limiter,
                     theoretical_pct=round(100.0 * blocks * warps / lim["warps"], 1))


_RES_LINE = re.compile(r"Function (?P<name>[^:\s]+):\s*\n\s*REG:(?P<reg>\d+) STACK:(?P<stack>\d+)"
                       r" SHARED:(?P<shared>\d+) LOCAL:(?P<local>\d+)")


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage`` output -> {function: {registers, stack, shared_static, local}}."""
    return {m["name"]: {"registers": int(m["reg"]), "stack": int(m["stack"]), "shared_static": int(m["shared"]),
                        "local": int(m["local"])} for m in _RES_LINE.finditer(text)}


# -- recording launches ------------------------------------------------------------------------------------


@dataclass
class Launch:
    """One ``kernel[grid](*args, **kwargs)`` call of the solution's host code, as it would have been made."""
    kernel: Any  # the JITFunction
    args: tuple
    kwargs: dict


class _Recorder:
    def __init__(self, kernel: Any, sink: list[Launch]):
        self.kernel, self.sink = kernel, sink

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.sink.append(Launch(self.kernel, args, kwargs))
        return launch


def record_launches(module: Any, call: Callable[[], Any]) -> list[Launch]:
    """Run ``call`` (the solution's setup and run on small host tensors) with every Triton kernel of ``module``
    replaced by a recorder: what each launch would pass, nothing launched."""
    from triton.runtime.jit import JITFunction

    kernels = {name: value for name, value in vars(module).items() if isinstance(value, JITFunction)}
    launches: list[Launch] = []
    for name, kernel in kernels.items():
        setattr(module, name, _Recorder(kernel, launches))
    try:
        call()
    finally:
        for name, kernel in kernels.items():
            setattr(module, name, kernel)
    return launches


# -- compiling them ----------------------------------------------------------------------------------------

_TORCH_TO_TRITON = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64", "int32": "i32",
                    "int64": "i64", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1",
                    "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@dataclass
class KernelResources:
    """One launch compiled for ``arch``: what ptxas allotted and the occupancy it allows."""
    kernel: str
    arch: int
    num_warps: int
    num_stages: Optional[int]
    registers: int
    spill_stack_bytes: int
    local_bytes: int
    shared_bytes: int  # static + dynamic per block
    occupancy: Occupancy
    constexprs: dict[str, Any] = field(default_factory=dict)
    # The shared-memory buffers Triton allocated, as "stages x tile" (e.g. "1x128x128xbf16": a K or V tile held once,
    # loaded one step ahead; "2x...": double-buffered). How deep the software pipeline really is: NUM_STAGES asks,
    # and the pipeliner may give less (an indirect load's index takes a stage of its latency budget).
    shared_buffers: list[str] = field(default_factory=list)


_ALLOC = re.compile(r"ttg\.local_alloc[^\n]*?-> !ttg\.memdesc<([0-9x]+x[a-z]+[0-9]*)")


def buffer_shapes(ttgir: str) -> list[str]:
    """The shapes of the shared-memory buffers a kernel's TTGIR allocates, sorted."""
    return sorted(_ALLOC.findall(ttgir))


def _specialise(launch: Launch) -> tuple[dict[str, str], dict[str, Any], dict, dict[str, Any]]:
    """(signature, constexprs, attrs, options) as Triton's JIT would specialise this launch."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    fn = launch.kernel
    names = list(fn.arg_names)
    options = {k: v for k, v in launch.kwargs.items() if k in OPTIONS}
    bound = dict(zip(names, launch.args))
    bound.update({k: v for k, v in launch.kwargs.items() if k not in OPTIONS})
    constexpr_names = {names[i] for i in fn.constexprs}
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(names):
        value = bound.get(name, fn.params[i].default if fn.params[i].has_default else None)
        if name in constexpr_names:
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + _TORCH_TO_TRITON[str(value.dtype).removeprefix("torch.")]
            if value.data_ptr() % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, TensorDescriptor):  # a host TMA descriptor: its element type and box
            dtype = _TORCH_TO_TRITON[str(value.base.dtype).removeprefix("torch.")]
            signature[name] = f"tensordesc<{dtype}[{','.join(str(b) for b in value.block_shape)}]>"
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if value == 1:  # Triton specialises 1 away as a constant
                signature[name], constexprs[name] = "constexpr", 1
            elif value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value is None:
            signature[name], constexprs[name] = "constexpr", None
        else:
            raise TypeError(f"{fn.__name__}: argument {name} of type {type(value).__name__} cannot be specialised")
    return signature, constexprs, attrs, options


def compile_launch(launch: Launch, arch: int = 90) -> KernelResources:
    """Compile one recorded launch for ``sm_<arch>`` on this host and read the cubin's resource usage."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs, attrs, options = _specialise(launch)
    compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", arch, 32), options=options)
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        text = subprocess.run([str(cuobjdump), "-res-usage", str(cubin)], capture_output=True, text=True,
                              timeout=60).stdout
    usage = parse_resource_usage(text).get(compiled.metadata.name)
    if usage is None:
        raise RuntimeError(f"cuobjdump named no function {compiled.metadata.name!r}: {text[-500:]}")
    warps = int(options.get("num_warps", 4))
    shared = int(compiled.metadata.shared) + usage["shared_static"]
    return KernelResources(kernel=launch.kernel.__name__, arch=arch, num_warps=warps,
                           num_stages=options.get("num_stages"), registers=usage["registers"],
                           spill_stack_bytes=usage["stack"], local_bytes=usage["local"], shared_bytes=shared,
                           occupancy=occupancy(usage["registers"], shared, warps, arch),
                           constexprs={k: v for k, v in constexprs.items() if isinstance(v, (int, float, bool))},
                           shared_buffers=buffer_shapes(compiled.asm.get("ttgir", "")))
