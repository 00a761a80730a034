"""PyTorch's own operators, proven to run PyTorch's own kernels after candidate code ran in the worker.

Every torch call the worker makes after the candidate's goes through PyTorch's dispatcher: ``torch.equal`` of the
mutation check, the zeroing of the timer's L2 flush buffer, the copies of the outputs for the reply. A kernel
registered for one of those operators replaces PyTorch's for the whole process: ``Library("aten", "IMPL").impl(
"equal", lambda a, b: True, "CPU")`` (red team round 4) hid an input the candidate used as scratch, and a flush
that zeroes nothing would time every call on a warm L2. The static gate refuses the spellings it knows; this is the
run-time proof behind it, read from the dispatcher itself.

Before the candidate is imported, the worker records the registrations of every ``aten::`` and ``prims::``
operator (``torch._C._dispatch_dump``: one line per dispatch key, with where its kernel was registered). Later, a
registration line that is new is foreign unless PyTorch registered it lazily from its own source files (not through
its public registration APIs, ``torch/library.py`` and ``torch/_library/``, whose line is the caller's business):
a kernel moved aside ("(inactive)") is always a replacement, and so is a new one from anywhere else. Meta kernels
(shapes for tracing, never the computation) are left out. Operators that did not exist at the start are not judged:
the worker calls none of them.
"""

from __future__ import annotations

import os
import re

_NAMESPACES = ("aten::", "prims::")
_LINE = re.compile(r"^(?P<key>[^:]+): registered at (?P<site>.+?):\d+")
_NOT_KERNELS = frozenset({"name", "schema", "debug", "alias analysis kind"})
_SHAPE_ONLY_KEYS = frozenset({"Meta"})


class DispatcherGuard:
    """The registrations at the start, and which lines differ now."""

    def __init__(self) -> None:
        import torch

        c = torch._C
        # held from before the candidate ran: replacing torch._C's names later changes nothing of the check
        self._names, self._dump = c._dispatch_get_all_op_names, c._dispatch_dump
        self._before = {op: self._dump(op) for op in self._operators()}
        self._lines = {}
        torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
        self._torch_own = torch_dir + os.sep
        self._user_apis = (os.path.join(torch_dir, "library.py"), os.path.join(torch_dir, "_library") + os.sep)
        # where PyTorch's C++ kernels say they were registered (its build tree: "/__w/pytorch/pytorch/..."): a library
        # of its own loaded later (torch.linalg's CUDA kernels are dlopened on first use) registers from there too
        cpp_sites = [m["site"] for dump in self._before.values() for line in dump.splitlines()
                     if (m := _LINE.match(line)) and m["site"].endswith((".cpp", ".cu", ".h"))]
        root = os.path.commonpath(cpp_sites) if len(cpp_sites) > 1 else ""
        self._build_tree = (root.rstrip(os.sep) + os.sep) if root.count(os.sep) >= 2 else None

    def _operators(self) -> list[str]:
        return [name for name in self._names() if name.startswith(_NAMESPACES)]

    def _foreign(self, line: str) -> str | None:
        match = _LINE.match(line)
        if match is None:
            return None
        key, site = match["key"].strip(), match["site"]
        if key in _NOT_KERNELS or key in _SHAPE_ONLY_KEYS:
            return None
        if "(inactive)" not in key and (
                (site.startswith(self._torch_own) and not site.startswith(self._user_apis))
                or (self._build_tree is not None and site.startswith(self._build_tree))):
            return None  # PyTorch's own lazy registration
        if "(inactive)" in key:
            return f"PyTorch's {key.replace(' (inactive)', '')} kernel (registered at {site}) was replaced"
        return f"{key} kernel registered at {site}"

    def foreign(self) -> list[str]:
        """``aten::equal: CPU kernel registered at /path/main.py`` for every kernel of PyTorch's operators that is
        not PyTorch's, now."""
        found: list[str] = []
        for op in self._operators():
            before = self._before.get(op)
            if before is None:
                continue
            now = self._dump(op)
            if now == before:
                continue
            old = self._lines.get(op)
            if old is None:
                old = self._lines[op] = frozenset(before.splitlines())
            for line in now.splitlines():
                if line not in old and (what := self._foreign(line)) is not None:
                    found.append(f"{op}: {what}")
        return sorted(set(found))
