"""Red team round nine: what got through.

Hostile: attention in plain Python on values parsed back out of `repr()` of int16 bit views (PyTorch formats a tensor
with the modes turned off), in numpy on a DLPack capsule made by `torch.utils.dlpack.to_dlpack` (the function, which
no mode sees), and on `.tolist()`s taken inside a launch's grid function (the interpreter's own reads were exempted by
a flag that covered the candidate's code run inside the launch); and a shell run by
`torch._inductor.cpp_builder.run_compile_cmd`, which the gate took for a torch call.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from harness.audits.static_gate import scan_sources
from harness.sandbox import library_ops

from support import INTERPRETED_HEAD, run_interpreted


def _host_reads(fn) -> dict:
    with library_ops.Counter() as counter:
        fn()
    assert torch._C._len_torch_function_stack() == 0
    return {name: n for name, (kind, n) in counter.host.ops.items()}


X = torch.randn(4, 128, dtype=torch.bfloat16)
BIG = torch.randn(64, 64)  # 4,096 elements: past the print options' threshold, printed as a summary
PAGES = torch.arange(512, dtype=torch.int32)


@pytest.mark.parametrize("name,fn,want", [
    ("repr of bit views", lambda: [repr(r) for r in X.view(torch.int16)], {"host: Tensor.__repr__": X.numel()}),
    ("str", lambda: str(X[0]), {"host: Tensor.__repr__": 128}),
    ("format of a 0-d tensor", lambda: [format(v, ".6f") for v in X[0, :5].float()], {"host: Tensor.__format__": 5}),
    ("an f-string", lambda: f"{X[1]}", {"host: Tensor.__format__": 128}),
    ("a summary holds its corners only", lambda: repr(BIG), {"host: Tensor.__repr__": 6 * 6}),
    ("printed in full past the threshold", lambda: _printed_in_full(BIG), {"host: Tensor.__repr__": BIG.numel()}),
    ("the DLPack function", lambda: np.from_dlpack(_Capsule(torch.utils.dlpack.to_dlpack(X.view(torch.int16)))),
     {"host: Tensor.to_dlpack": X.numel()}),
    ("torch.to_dlpack", lambda: torch.to_dlpack(X), {"host: Tensor.to_dlpack": X.numel()}),
    ("the method, counted once", lambda: np.from_dlpack(X.float()), {"host: Tensor.__dlpack__": X.numel()}),
    ("a page table's text is integers", lambda: (repr(PAGES), torch.to_dlpack(PAGES)),
     {"host: Tensor.__repr__ (integers)": 512, "host: Tensor.to_dlpack (integers)": 512}),
    ("a mask's answer is nothing", lambda: bool((X > 0).any()), {}),
    ("a shape's text is bookkeeping", lambda: f"{X.shape} {X.dtype}", {}),
])
def test_values_leaving_as_text_or_capsules_are_host_reads(name, fn, want):
    assert _host_reads(fn) == want, name


class _Capsule:
    """What numpy's from_dlpack takes: an object with `__dlpack__` (the attack's wrapper around a bare capsule)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def _printed_in_full(t):
    torch.set_printoptions(threshold=10 ** 9)
    try:
        return repr(t)
    finally:
        torch.set_printoptions(profile="default")


def test_dlpack_outside_a_counted_call_runs_unchanged():
    assert torch.from_dlpack(torch.utils.dlpack.to_dlpack(X)).equal(X)
    assert torch._C._to_dlpack.__name__ == "to_dlpack"  # the worker's, installed at import


LAUNCHES = INTERPRETED_HEAD + textwrap.dedent('''

    @triton.jit
    def copy(x_ptr, y_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.float8e4nv).to(tl.float32))

    x, y = torch.randn(64), torch.empty(64)

    def reads(launch):
        with library_ops.Counter() as counter:
            launch()
        return {name: n for name, (kind, n) in counter.host.ops.items()}

    def grid(meta):  # the attack: the values taken to Python while the launch runs
        x.tolist()
        return (1,)

    def hook(*args, **kwargs):
        x.numpy().sum()

    @triton.jit
    def bits(x_ptr, y_ptr, N: tl.constexpr):  # the attack: value bits stored where no ATen operator marks them
        o = tl.arange(0, N)
        tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.int16, bitcast=True))

    xb, stored = torch.randn(64).to(torch.bfloat16), torch.empty(64, dtype=torch.int16)
    bits[(1,)](xb, stored, N=64)

    def decoded():
        wide = stored.to(torch.int32)
        return (((wide >> 7) & 0xFF) * 3).sum(), stored.tolist()

    with library_ops.Counter() as counter:
        decoded()
    after = {name: [kind, n] for name, (kind, n) in {**counter.aten.ops, **counter.host.ops}.items()}

    def through_the_interpreter(meta):  # values read by an interpreter function the candidate hands them to
        from triton.runtime.interpreter import interpreter_builder
        [interpreter_builder.get_fp32(v) for v in x]
        return (1,)

    copy.add_pre_run_hook(hook)
    hooked = reads(lambda: copy[(1,)](x, y, N=64))
    copy.pre_run_hooks.clear()
    print(json.dumps({"honest": reads(lambda: copy[(1,)](x, y, N=64)), "grid": reads(lambda: copy[grid](x, y, N=64)),
                      "hook": hooked, "builder": reads(lambda: copy[through_the_interpreter](x, y, N=64)),
                      "stored bits": after}))
''')


def test_reads_of_the_candidates_code_inside_a_launch_count(tmp_path):
    pytest.importorskip("triton")
    got = run_interpreted(tmp_path, LAUNCHES)
    assert got["honest"] == {}  # the interpreter's own copies and fp8 casts of the launch's tensors
    assert got["grid"] == {"host: Tensor.tolist": 64}
    assert got["hook"] == {"host: Tensor.numpy": 64}
    assert sum(got["builder"].values()) >= 64, got["builder"]
    # the int32 arithmetic on the stored bits (9c) and the host read of the buffer count toward the share; the cast
    # that widened them is data movement
    integers = {f"{op} (integers)": ["integer", 64] for op in ("aten::__rshift__", "aten::bitwise_and", "aten::mul",
                                                                "aten::sum")}
    assert got["stored bits"] == {"host: Tensor.tolist (integers)": ["host_integers", 64], **integers}


@pytest.mark.parametrize("name,source", [
    ("inductor's command runner", "import torch._inductor.cpp_builder as cb\ncb.run_compile_cmd('sh -c true', '.')\n"),
    ("from-import", "from torch._inductor.codecache import CppCodeCache\nCppCodeCache.load('int x;')\n"),
    ("torch's test shell", "import torch.testing._internal.common_utils as u\nu.shell(['sh', '-c', 'true'])\n"),
    ("Triton's disassembler", "from triton.tools.disasm import get_sass\nget_sass(b'')\n"),
    ("uuid's command runner (9c)", "import uuid, functools\nj = functools.partial(uuid._get_command_stdout, 'x')\n"),
])
def test_library_helpers_that_run_commands_are_concurrency(name, source, policy):
    found = [(f.rule, f.line) for f in scan_sources({"main.py": source}, "python", policy) if f.severity == "error"]
    assert ("concurrency", 1) in found or ("concurrency", 2) in found, (name, found)


@pytest.mark.parametrize("name,source,rule", [
    ("Inductor past Dynamo (9c)", "import torch._inductor\nf = torch._inductor.compile(g, [x])\n", "dynamic_code"),
    ("Inductor's compile_fx", "from torch._inductor.compile_fx import compile_fx\nf = compile_fx(g, [x])\n",
     "dynamic_code"),
    ("a storage from an address (9c)",
     "import torch\ns = torch._C._construct_storage_from_data_pointer(p, d, n)\n", "native_ffi"),
])
def test_compiled_code_and_raw_addresses_block(name, source, rule, policy):
    found = [(f.rule, f.line) for f in scan_sources({"main.py": source}, "python", policy) if f.severity == "error"]
    assert (rule, 2) in found, (name, found)


def test_honest_triton_tools_and_inductor_settings_stay_clear(policy):
    source = ("import torch\nimport torch._inductor.config\n"
              "from triton.tools.tensor_descriptor import TensorDescriptor\n"
              "torch._inductor.config.fallback_random = True\n")
    found = [f for f in scan_sources({"main.py": source}, "python", policy) if f.rule == "concurrency"]
    assert found == []


# -- honest: functions compiled with torch.compile, counted on the CPU --------------------------------------------

def test_compiled_glue_runs_eagerly_and_is_counted_while_counting():
    @torch.compile(fullgraph=True, dynamic=False)
    def gates(a, b):
        return torch.sigmoid(a) * b

    a, b = torch.randn(8), torch.randn(8)
    with library_ops.Counter() as counter:
        got = gates(a, b)  # Dynamo compiles nothing under a dispatch mode; with fullgraph=True it raised
    assert torch.allclose(got, torch.sigmoid(a) * b)
    assert counter.aten.ops == {"aten::sigmoid": ("pointwise", 8), "aten::mul": ("pointwise", 16)}
    assert torch._C._len_torch_dispatch_stack() == 0


# -- integers toward the share ------------------------------------------------------------------------------------

INDPTR = torch.tensor([0, 100, 300, 512], dtype=torch.int32)


@pytest.mark.parametrize("name,fn,want", [
    ("arithmetic on int16 bits", lambda: ((X.view(torch.int16).clone() >> 7) & 0xFF), {}),  # derived: values
    ("arithmetic on unmarked int16", lambda: (torch.zeros(4, 128, dtype=torch.int16) >> 7) & 0xFF,
     {"aten::__rshift__ (integers)": ("integer", 512), "aten::bitwise_and (integers)": ("integer", 512)}),
    ("uint8 sums", lambda: torch.ones(100, dtype=torch.uint8).sum(), {"aten::sum (integers)": ("integer", 100)}),
    ("int64 fixed point (9c)", lambda: (torch.ones(64, dtype=torch.int64) * 3).sum(),
     {"aten::mul (integers)": ("integer", 64), "aten::sum (integers)": ("integer", 64)}),
    ("a page table's arithmetic", lambda: PAGES * 64 + 3, {}),
    ("lengths from the indptr, then theirs", lambda: ((INDPTR[1:] - INDPTR[:-1]) * 2).cumsum(0), {}),
    ("a gather of the page table", lambda: PAGES[INDPTR[:-1].long()] + 1, {}),
])
def test_integer_arithmetic_counts_unless_indices(name, fn, want):
    with library_ops.Counter({"kv_indices": PAGES, "kv_indptr": INDPTR, "q": X}) as counter:
        fn()
    got = {k: v for k, v in counter.aten.ops.items() if v[0] == "integer"}
    assert got == want, (name, counter.aten.ops)


def test_packed_fp8_inputs_are_part_of_the_whole():
    inputs = {"q": torch.randn(2, 4), "k_cache": torch.zeros(3, 8, dtype=torch.int8), "lengths": PAGES}
    assert library_ops.Counter().report(inputs)["input_elements"] == 8 + 24


@pytest.mark.parametrize("kind,elements,rank", [
    ("host_integers", 100, 2), ("integer", 100, 2), ("host_integers", 1, 0), ("integer", 1, 0), ("host", 1, 1),
])
def test_integers_count_toward_the_share_only(kind, elements, rank):
    from harness.audits.cpu_attribution import call_verdict

    assert call_verdict((100, {"op": (kind, elements)}))[0] == rank
