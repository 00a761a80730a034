"""bf16 arithmetic under Triton's CPU interpreter, as a GPU computes it (applied in the worker, by triton_interp).

The interpreter keeps a bf16 tensor as its uint16 bit patterns and hands those to numpy as they are, so every float
operation on bf16 operands was integer arithmetic on the bits:
- `x * y` of two bf16 loads gave -1.5e22 for 1.52, `x + y` 2.5e38;
- `x < y` compared sign-magnitude patterns as unsigned integers, and `tl.sum` of bf16 wrapped around;
- a cast from an integer to bf16 kept the integer as the bits;
- a float literal beside a bf16 tensor (`x * 2.0`, a bf16 constant on a GPU) had no constructor ("no attribute
  'get_bf16'"), and an atomic on bf16 (`tl.atomic_add` into a bf16 output, as Hopper has it) was refused
  ("Unsupported data type").
Kernels that upcast to fp32 first never met it; kernels that multiply bf16 loads directly (a contestant's GDN prefill:
`b_k * b_b[:, None]` before a `tl.dot`) came out as NaN on the CPU.

On a GPU those operations compute in fp32 and round the result to bf16 (to nearest even). Here each one does the
same: its bf16 operands are widened to fp32 exactly, the interpreter's own fp32 operation runs, and a float result is
rounded back to bf16 (a comparison's stays boolean). Reductions (`tl.sum`, `tl.max`, `tl.min`, the arg variants) and
scans (`tl.cumsum`, `tl.cumprod`) of bf16 are widened the same way.
"""

from __future__ import annotations

import numpy as np

# InterpreterBuilder operations on floats: each gets fp32 operands where it was given bf16 ones. Casts are not here
# (triton_interp.cast_impl rounds them), nor bit-level operations that are right on the bits (abs, select, bitcast).
FLOAT_OPERATIONS = (
    "create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_precise_divf",
    "create_minimumf", "create_minnumf", "create_maximumf", "create_maxnumf",
    "create_fcmpOEQ", "create_fcmpOGE", "create_fcmpOGT", "create_fcmpOLE", "create_fcmpOLT", "create_fcmpONE",
    "create_fcmpUEQ", "create_fcmpUGE", "create_fcmpUGT", "create_fcmpULE", "create_fcmpULT", "create_fcmpUNE",
    "create_fma", "create_clampf",
    "create_exp", "create_exp2", "create_log", "create_log2", "create_sqrt", "create_precise_sqrt", "create_rsqrt",
    "create_sin", "create_cos", "create_floor", "create_ceil", "create_erf",
)


def bf16_bits_to_f32(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) as the fp32 values they are: exact, shape kept."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values) -> np.ndarray:
    """fp32 values rounded to bf16 (to nearest, ties to even; NaN stays NaN) as uint16 bit patterns, shape kept."""
    values = np.array(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = np.uint16(0x7FC0)
    return rounded


def _widened_operation(original, interp, bf16, f32):
    def operation(self, *args):
        if not any(isinstance(a, interp.TensorHandle) and a.dtype.scalar == bf16 for a in args):
            return original(self, *args)
        wide = [interp.TensorHandle(bf16_bits_to_f32(a.data), f32)
                if isinstance(a, interp.TensorHandle) and a.dtype.scalar == bf16 else a for a in args]
        out = original(self, *wide)
        if isinstance(out, interp.TensorHandle) and out.dtype.scalar == f32:
            return interp.TensorHandle(f32_to_bf16_bits(out.data), bf16)
        return out

    operation._crucible_bf16 = True
    return operation


def _widened_reduction(original, interp, tl):
    """A ReduceOps/ScanOps method taking the input tensor (or a (value, index) tuple) first: bf16 in as fp32, a bf16
    value out (indices as they come)."""

    def as_f32(t):
        return tl.core.tensor(interp.TensorHandle(bf16_bits_to_f32(t.handle.data), tl.float32),
                              t.type.with_element_ty(tl.float32) if t.type.is_block() else tl.float32)

    def as_bf16(t):
        if not isinstance(t, tl.core.tensor) or t.dtype != tl.float32:
            return t
        return tl.core.tensor(interp.TensorHandle(f32_to_bf16_bits(t.handle.data), tl.bfloat16),
                              t.type.with_element_ty(tl.bfloat16) if t.type.is_block() else tl.bfloat16)

    def reduction(self, input, *args, **kwargs):
        first = input[0] if isinstance(input, tuple) else input
        if not isinstance(first, tl.core.tensor) or first.dtype != tl.bfloat16:
            return original(self, input, *args, **kwargs)
        wide = (as_f32(first), *input[1:]) if isinstance(input, tuple) else as_f32(first)
        out = original(self, wide, *args, **kwargs)
        if isinstance(out, (list, tuple)):
            return type(out)(as_bf16(o) for o in out)
        return as_bf16(out)

    reduction._crucible_bf16 = True
    return reduction


def _atomic_rmw(original, interp, bf16):
    """bf16 atomics (the interpreter's native ones refuse the type: "Unsupported data type"): lane by lane, in lane
    order, each lane reading what the one before wrote (programs run one at a time here, so that is atomic)."""
    rmw = interp._ir.ATOMIC_OP
    combine = {rmw.FADD: np.add, rmw.MAX: np.maximum, rmw.MIN: np.minimum, rmw.XCHG: lambda old, new: new}

    def create_atomic_rmw(self, op, ptr, val, mask, sem, scope):
        if val.dtype.scalar != bf16 or op not in combine:
            return original(self, op, ptr, val, mask, sem, scope)
        ptrs = np.asarray(ptr.data).reshape(-1)
        values = bf16_bits_to_f32(np.broadcast_to(val.data, np.shape(ptr.data))).reshape(-1)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptr.data)).reshape(-1)
        old = np.zeros(ptrs.shape, dtype=np.uint16)
        one, uint16 = np.ones(1, dtype=bool), np.dtype(np.uint16)
        for lane in np.flatnonzero(active):
            address = ptrs[lane:lane + 1]
            current = interp._interpreter.load(address, one, np.zeros(1, dtype=np.uint16), uint16)
            old[lane] = current[0]
            result = combine[op](bf16_bits_to_f32(current), values[lane:lane + 1])
            interp._interpreter.store(address, f32_to_bf16_bits(result), one)
        return interp.TensorHandle(old.reshape(np.shape(ptr.data)), bf16)

    create_atomic_rmw._crucible_bf16 = True
    return create_atomic_rmw


def apply(tl, interp) -> None:
    """Patch the interpreter's float operations, reductions and scans for bf16 operands (idempotent)."""
    builder = interp.InterpreterBuilder
    if not hasattr(builder, "get_bf16"):  # a float literal beside a bf16 tensor (`x * 100.0`) is a bf16 constant
        builder.get_bf16 = lambda self, value: interp.TensorHandle(f32_to_bf16_bits([value]), tl.bfloat16)
    rmw = getattr(builder, "create_atomic_rmw", None)
    if rmw is not None and not getattr(rmw, "_crucible_bf16", False) and hasattr(interp, "_ir"):
        builder.create_atomic_rmw = _atomic_rmw(rmw, interp, tl.bfloat16)
    for name in FLOAT_OPERATIONS:
        original = getattr(builder, name, None)
        if original is not None and not getattr(original, "_crucible_bf16", False):
            setattr(builder, name, _widened_operation(original, interp, tl.bfloat16, tl.float32))
    for owner, names in ((getattr(interp, "ReduceOps", None), ("sum", "min_max")),
                         (getattr(interp, "ScanOps", None), ("cumsum", "cumprod"))):
        for name in names:
            original = getattr(owner, name, None)
            if original is not None and not getattr(original, "_crucible_bf16", False):
                setattr(owner, name, _widened_reduction(original, interp, tl))
