"""The CPU count's modes kept over the candidate's code while a call is counted (``harness.sandbox.library_ops``).

The count sees ATen operators through a dispatch mode and values leaving PyTorch through a function mode. PyTorch has
functions that step past both for the code in their scope: they pop the modes, exclude the Python dispatch key, or
disable torch functions. Red team round 12 hid a matmul with `torch._C._SetExcludeDispatchKeyGuard(DispatchKey.Python,
True)`, a `.numpy()` with `torch._C.DisableTorchFunction()`, and attention with `_disable_current_modes()`. The last
was reached by a name the gate cannot see. PyTorch calls these functions itself, for its own subclasses and modes;
a candidate's kernel never needs them. So, in a worker that counts, each of them is wrapped: a call made while a count
is running, from a frame outside PyTorch and the harness, is recorded for that count (``library_ops``), and the count
then reads as a fallback. The call itself still runs, so nothing honest breaks.

Reaching one through a PyTorch function that calls it on the candidate's behalf (a callback) is not seen here; the
gate refuses the names (`python_banned`).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch
import torch.overrides
import torch.utils._python_dispatch as _python_dispatch

ACTIVE = [0]  # counts running now (library_ops.Counter enters and leaves)
SEEN: list[Callable[[str], None]] = []  # called with the function's name (library_ops records it)
_TRUSTED_DIRS = (os.path.dirname(os.path.realpath(torch.__file__)) + os.sep,
                 os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep)
_TRUSTED: dict[str, bool] = {}  # file name -> inside PyTorch or the harness (realpath once per file)

GUARDED = (
    (torch._C, "torch._C", ("DisableTorchFunction", "DisableTorchFunctionSubclass", "_DisableTorchFunction",
                            "_DisableTorchFunctionSubclass", "_DisableTorchDispatch", "_DisablePythonDispatcher",
                            "ExcludeDispatchKeyGuard", "_ExcludeDispatchKeyGuard", "_SetExcludeDispatchKeyGuard",
                            "_ForceDispatchKeyGuard", "_pop_torch_dispatch_stack", "_pop_torch_function_stack",
                            "_unset_dispatch_mode", "_set_dispatch_mode", "_dispatch_tls_set_dispatch_key_excluded")),
    (_python_dispatch, "torch.utils._python_dispatch", ("_disable_current_modes", "_pop_mode", "_pop_mode_temporarily",
                                                        "_disable_infra_mode", "_unset_infra_mode")),
    (torch.overrides, "torch.overrides", ("_pop_mode", "_pop_mode_temporarily")),
)


def _trusted(filename: str) -> bool:
    known = _TRUSTED.get(filename)
    if known is None:
        known = _TRUSTED[filename] = os.path.realpath(filename).startswith(_TRUSTED_DIRS)
    return known


def _guarded(qualname: str, original: Any) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if ACTIVE[0] and not _trusted(sys._getframe(1).f_code.co_filename):
            for seen in SEEN:
                seen(qualname)
        return original(*args, **kwargs)

    guarded.__name__ = getattr(original, "__name__", qualname.rpartition(".")[2])
    guarded.__qualname__ = guarded.__name__
    guarded.__doc__ = getattr(original, "__doc__", None)
    return guarded


def apply() -> None:
    """Wrap every guarded function once per process (the worker, before any candidate code)."""
    for module, prefix, names in GUARDED:
        for name in names:
            original = getattr(module, name, None)
            if original is not None and not getattr(original, "_crucible_guarded", False):
                wrapped = _guarded(f"{prefix}.{name}", original)
                wrapped._crucible_guarded = True  # type: ignore[attr-defined]
                setattr(module, name, wrapped)
