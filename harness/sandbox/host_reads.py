"""CPU run-time attribution, the host's half (``harness.sandbox.library_ops`` counts the ATen operators): the values a
candidate's call takes out of PyTorch (``Tensor.numpy``, ``__array__``, ``tolist``, ``item``, its storage, its text, a
DLPack capsule by the method or by the function), counted by a ``TorchFunctionMode`` as ``host`` reads. Compute on the
host outside ATen (numpy, Python lists) is invisible to the operators' count; a call that took no values out cannot
have computed on them anywhere but in ATen and its kernels. The interpreter's own copies of a launch's tensors are
left out; what the candidate's code reads while a launch runs is not (red team round 9).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable, Optional

import torch
from torch.overrides import TorchFunctionMode

from . import triton_interp

# Through the type, never the tensor: a method set on a tensor itself counts nothing (red team round 10).
_numel = torch.Tensor.numel

HOST_READS = frozenset({"numpy", "__array__", "tolist", "item", "__float__", "__int__", "__index__", "__complex__",
                        "__bool__", "__dlpack__", "untyped_storage", "storage", "_typed_storage", "__repr__",
                        "__format__", "to_dlpack"})
_AS_TEXT = frozenset({"__repr__", "__format__"})
class HostReads(TorchFunctionMode):
    """Counts, per method (``host: Tensor.numpy``), the float elements a call took out of PyTorch to the host outside
    Triton's launches (``HOST_READS``); every call runs exactly as it would without the mode."""

    def __init__(self, holds_values: Callable[[torch.Tensor], bool] = lambda t: True) -> None:
        """``holds_values``: whether a tensor holds values (the operators' count's marks, ``library_ops``); a read
        of one that does not (a page table, lengths) is ``host_integers``."""
        super().__init__()
        self.ops: dict[str, tuple[str, int]] = {}
        self._holds_values = holds_values

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        self._seen(getattr(func, "__name__", ""), args)
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> "HostReads":
        _HOST_ENTERED.append(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            _HOST_ENTERED.remove(self)

    def _seen(self, name: str, args: tuple) -> None:
        if name not in HOST_READS or not args or not isinstance(args[0], torch.Tensor) or args[0].dtype == torch.bool:
            return
        if triton_interp.IN_LAUNCH[0] and _by_the_interpreter():
            return
        # Values, and integers no value was seen moving into: page tables and lengths, but also value bits a kernel
        # stored (red team round 9): those count toward the share only (`host_integers`), as a plan's reads are small
        kind, key = ("host", f"host: Tensor.{name}") if self._holds_values(args[0]) else \
            ("host_integers", f"host: Tensor.{name} (integers)")
        read = (_shown(args[0]) if name in _AS_TEXT else _in_storage(args[0]) if name in _STORAGES
                else _numel(args[0]))
        self.ops[key] = (kind, self.ops.get(key, (kind, 0))[1] + read)


# A storage exposes every element of the buffer, not a view's (red team round 11b: `buf[:1].untyped_storage()` read
# as one element while `_write_file` gave Python the whole buffer).
_STORAGES = frozenset({"untyped_storage", "storage", "_typed_storage"})


def _in_storage(t: torch.Tensor) -> int:
    """The elements of the tensor's type its whole storage holds."""
    return torch.Tensor.untyped_storage(t).nbytes() // max(1, t.element_size())


def _shown(t: torch.Tensor) -> int:
    """The elements a tensor's text holds: all of them up to the print options' threshold, else the summary's corners
    (``edgeitems`` at each end of every dimension)."""
    options = torch._tensor_str.PRINT_OPTS
    if _numel(t) <= options.threshold:
        return _numel(t)
    shown = 1
    for size in t.shape:
        shown *= min(size, 2 * options.edgeitems)
    return shown


# The interpreter's own copies of a launch's tensors (`_to_cpu`, `_from_cpu` in GridExecutor's argument copies; the fp8
# casts of triton_interp), measured on this Triton: the only host reads during a launch that are not the candidate's.
# What the candidate runs inside a launch (a grid function, a pre-run hook, a helper called from a kernel body) reads
# for itself (red team round 9: attention in plain Python on `.tolist()`s taken inside a grid function was exempt
# while the launch flag was the only test), and so does any other interpreter function it hands a tensor to.
def _interpreter_copies() -> frozenset[tuple[str, str]]:
    triton = importlib.util.find_spec("triton")  # found, not imported: the worker imports it when a solution does
    ours = os.path.realpath(os.path.join(os.path.dirname(triton_interp.__file__), "triton_interp.py"))
    copies = {(ours, "_torch_fp8_cast")}
    if triton is not None and triton.origin:
        interpreter = os.path.realpath(os.path.join(os.path.dirname(triton.origin), "runtime", "interpreter.py"))
        copies |= {(interpreter, "_to_cpu"), (interpreter, "_from_cpu")}
    return frozenset(copies)


_INTERPRETER_COPIES = _interpreter_copies()
_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep


def _by_the_interpreter() -> bool:
    """Whether the tensor method now being handled was called by one of the interpreter's copies: the first frame
    outside PyTorch (whose wrappers may stand between) and outside this module."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == __file__
                                 or os.path.realpath(frame.f_code.co_filename).startswith(_TORCH_DIR)):
        frame = frame.f_back
    return frame is not None and (os.path.realpath(frame.f_code.co_filename),
                                  frame.f_code.co_name) in _INTERPRETER_COPIES


def _counted_to_dlpack(original: Any) -> Any:
    """``torch.to_dlpack`` as the worker runs it: a capsule of a tensor's values made while a count runs is a host read
    (``Tensor.__dlpack__``, the method, is seen by the mode; the function is not: red team round 9, attention in numpy
    on ``np.from_dlpack`` of a capsule from ``torch.utils.dlpack.to_dlpack``)."""
    def to_dlpack(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if _HOST_ENTERED and torch._C._is_torch_function_mode_enabled():  # not the method's own inner call
            _HOST_ENTERED[-1]._seen("to_dlpack", (tensor,))
        return original(tensor, *args, **kwargs)
    return to_dlpack


_HOST_ENTERED: list[HostReads] = []  # the function modes entered now, innermost last


def _printed(elements: int) -> None:
    """The elements a kernel's `tl.device_print` showed under the interpreter: values on the host, in text."""
    if _HOST_ENTERED and elements:
        ops, key = _HOST_ENTERED[-1].ops, "host: tl.device_print"
        ops[key] = ("host", ops.get(key, ("host", 0))[1] + elements)


triton_interp.PRINTED.append(_printed)
for _module in (torch, torch._C, torch.utils.dlpack):
    for _name in ("to_dlpack", "_to_dlpack", "_to_dlpack_versioned"):
        if hasattr(_module, _name):
            setattr(_module, _name, _counted_to_dlpack(getattr(_module, _name)))


