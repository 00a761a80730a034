"""libdevice under Triton's CPU interpreter (TRITON_INTERPRET=1), applied in the worker, never to candidate code.

Triton's interpreter has no libdevice: the backend-neutral ``triton.language.extra.libdevice`` functions are stubs
that the GPU compiler swaps for the backend's, so under the interpreter they return None, and the CUDA module's
(``triton.language.extra.cuda.libdevice``) end in "extern_elementwise not supported in interpreter mode". An honest
kernel that calls ``libdevice.fast_expf`` or ``libdevice.tanh`` would crash on a host without a GPU for want of
them. Here each ``__nv_*`` function is evaluated with numpy in its own type (fp32 stays fp32: ``fast_`` variants
are computed exactly, as the CPU can), the neutral names are bound to the CUDA module's functions, and calls made
inside an interpreted kernel get the interpreter's semantic, as ``triton.language`` builtins do. A libdevice
function this table lacks still fails, naming itself.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _ieee_remainder(x, y):
    return x - np.rint(x / y) * y


# libdevice's names (after "__nv_", a "fast_" prefix, an integer type's "u"/"ll"/"ull", a float's "f" at either end
# and a rounding mode's "_rn"/"_rz"/"_rd"/"_ru" are taken off) -> numpy.
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x), "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "logb": lambda x: np.floor(np.log2(np.abs(x))),
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt, "rcbrt": lambda x: 1 / np.cbrt(x),
    "rcp": lambda x: 1 / x, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sinpi": lambda x: np.sin(np.pi * x), "cospi": lambda x: np.cos(np.pi * x),
    "erf": _erf, "erfc": _erfc, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint,
    "nearbyint": np.rint, "round": lambda x: np.copysign(np.floor(np.abs(x) + 0.5), x), "abs": np.abs,
    "saturate": lambda x: np.clip(x, 0, 1), "pow": np.power, "powi": np.power, "max": np.maximum,
    "min": np.minimum, "mod": np.fmod, "remainder": _ieee_remainder, "atan2": np.arctan2, "hypot": np.hypot,
    "copysign": np.copysign, "dim": lambda x, y: np.maximum(x - y, 0), "div": np.divide, "dividef": np.divide,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "ma": lambda a, b, c: a * b + c,
    "ldexp": lambda x, e: np.ldexp(x, e.astype(np.int32)), "isnan": np.isnan, "isinf": np.isinf,
    "isfinite": np.isfinite, "finite": np.isfinite, "isfinited": np.isfinite, "signbit": np.signbit,
    "popc": lambda x: np.vectorize(lambda v: bin(int(v) & 0xFFFFFFFFFFFFFFFF).count("1"))(x),
    "mulhi": lambda a, b: ((a.astype(np.int64) * b.astype(np.int64)) >> 32),
}
_ROUNDING = re.compile(r"_r[nzdu]$")


def _function(symbol: str) -> Callable[..., Any]:
    name = _ROUNDING.sub("", symbol.removeprefix("__nv_")).removeprefix("fast_")
    candidates = [name, name.removesuffix("f"), name.removeprefix("f"), name.removeprefix("f").removesuffix("f"),
                  name.removeprefix("d"), name.removeprefix("ull"), name.removeprefix("ll"), name.removeprefix("u")]
    candidates += [{"fma": "ma", "fmaf": "ma", "fdivide": "div", "fdiv": "div", "ddiv": "div"}.get(name, "")]
    for candidate in candidates:
        if candidate in _FUNCTIONS:
            return _FUNCTIONS[candidate]
    raise NotImplementedError(f"libdevice's {symbol} is not available under Triton's CPU interpreter")


def apply(tl: Any, interp: Any) -> None:
    """Evaluate extern calls with numpy and make the libdevice modules callable inside interpreted kernels."""
    import importlib

    def create_extern_elementwise(self, lib_name, lib_path, symbol, args, ret_type, is_pure):
        scalar = getattr(ret_type, "scalar", ret_type)
        np_type = interp._get_np_dtype(scalar)
        data = [a.data for a in args]
        with np.errstate(all="ignore"):  # inf and nan come out as on the GPU
            result = np.asarray(_function(symbol)(*data))
        shape = np.broadcast_shapes(*(d.shape for d in data)) if data else result.shape
        return interp.TensorHandle(np.broadcast_to(result, shape).astype(np_type), scalar)

    interp.InterpreterBuilder.create_extern_elementwise = create_extern_elementwise
    try:
        neutral = importlib.import_module("triton.language.extra.libdevice")
        cuda = importlib.import_module("triton.language.extra.cuda.libdevice")
    except Exception:
        return
    semantic = interp.interpreter_semantic
    for name, function in list(vars(cuda).items()):
        if not callable(function) or name.startswith("_") or not tl.core.is_builtin(function):
            continue
        wrapped = _with_semantic(function, semantic)
        setattr(cuda, name, wrapped)
        if callable(getattr(neutral, name, None)):
            setattr(neutral, name, wrapped)


def _with_semantic(function: Callable[..., Any], semantic: Any) -> Callable[..., Any]:
    def call(*args, _semantic=None, **kwargs):
        return function(*args, _semantic=_semantic or semantic, **kwargs)

    call.__name__ = call.__qualname__ = function.__name__
    call.__doc__ = function.__doc__
    return call
