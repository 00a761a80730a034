"""Red team round eight: what got through, and the honest idioms that were refused.

Hostile: attention computed on complex64 or fixed-point int64 copies (the CPU attribution counted float tensors
only), through `torch.ops.mkldnn` (a library namespace the counter took for the solution's own custom operator),
through `OpOverload.redispatch` with a CPU-only key set (past the dispatch mode), through `at::cpu::` kernels in a
load_inline source (past the dispatcher); and the static gate's own work turned against the harness: a source folded
by `"{:>99999999999}".format(...)`, a chain of `.replace`, a six-deep macro bomb (MemoryError in the harness's process),
and 400,000 findings in one file (a 234 MB reply). Honest: `~` of an unsigned Triton tensor (radix top-k keys),
`tl.dot(input_precision="bf16x3")`, and a UTF-8 byte-order mark at the top of a module.
"""

from __future__ import annotations

import textwrap
import time

import pytest
import torch

from harness.audits.static_gate import (MAX_FINDINGS_PER_RULE, MAX_SOURCE_CHARS, Finding, capped, scan_sources,
                                       unreadable)
from harness.sandbox import library_ops
from harness.sandbox.build import static_signature_problem
from harness.sandbox.library_ops import LibraryOps

from harness.data.schema import Definition, Solution, load_model

from support import DEFINITIONS, INTERPRETED_HEAD, KV8_PS1, run_interpreted, solution_dict


def _counted(fn, index_budget=0):
    ops = LibraryOps(index_budget)
    with ops:
        fn()
    assert torch._C._len_torch_dispatch_stack() == 0
    return ops.ops


# -- the CPU attribution's counter ------------------------------------------------------------------------------

Q, K = torch.randn(4, 8, 16), torch.randn(4, 16, 32)


def _fixed(t):
    return (t.double() * 2 ** 16).round().to(torch.int64)


@pytest.mark.parametrize("name,fn,op,elements", [
    ("complex copies", lambda: torch.matmul(Q.to(torch.complex64), K.to(torch.complex64)), "aten::bmm",
     Q.numel() + K.numel()),
    ("complex exp", lambda: torch.exp(Q.to(torch.complex64)), "aten::exp", Q.numel()),
    ("fixed-point products", lambda: torch.matmul(_fixed(Q), _fixed(K)), "aten::bmm", Q.numel() + K.numel()),
    ("oneDNN's linear", lambda: torch.ops.mkldnn._linear_pointwise(Q[0], K[0].t().contiguous(), None, "none", [], ""),
     "mkldnn::_linear_pointwise", Q[0].numel() + K[0].numel()),
    ("redispatch past the Python key",
     lambda: torch.ops.aten.bmm.default.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), Q, K),
     "aten::bmm", Q.numel() + K.numel()),
    ("the handle's redispatch, taken after import",
     lambda: torch._C._DispatchOperatorHandle.redispatch_boxed(
         torch.ops.aten.mul.Tensor._handle, torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), Q, Q),
     "aten::mul", 2 * Q.numel()),
])
def test_compute_past_float_tensors_and_the_mode_is_counted(name, fn, op, elements):
    ops = _counted(fn)
    assert ops[op][1] == elements, (name, ops)
    assert ops[op][0] in ("matmul", "pointwise", "reduction")


def _bits_to_fixed(t):
    """bf16 bits decoded to int64 fixed point with shifts and masks (the attack's decoder, exact for normal values)."""
    bits = t.contiguous().view(torch.int16).to(torch.int64)
    e = torch.bitwise_and(torch.bitwise_right_shift(bits, 7), 0xFF)
    m = torch.bitwise_or(torch.bitwise_and(bits, 0x7F), 0x80)
    sh = e - (134 - 20)
    left, right = torch.bitwise_left_shift(m, sh.clamp(0, 62)), torch.bitwise_right_shift(m, (-sh).clamp(0, 62))
    mag = torch.where(sh >= 0, left, right)
    return torch.where(bits < 0, -mag, mag)


def test_integers_made_from_values_are_values():
    q, k = torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(64, 16, dtype=torch.bfloat16)

    def integer_attention():
        s = (_bits_to_fixed(q)[:, None, :] * _bits_to_fixed(k)[None, :, :]).sum(-1)  # products and sums as integers
        return s, q.view(torch.int16).tolist()

    counter = library_ops.Counter()
    with counter:
        s, _ = integer_attention()
    ops = counter.report({"q": q, "k": k})["ops"]
    assert torch.allclose(s.double() / 2 ** 40, (q.double() @ k.double().T), atol=1e-2)  # it is the attention's product
    assert ops["aten::mul"]["elements"] == q.numel() + k.numel()  # the broadcast products read both operands
    assert ops["aten::sum"]["elements"] == 4 * 64 * 16
    assert ops["host: Tensor.tolist"]["elements"] == q.numel()  # bits taken to the host are values too
    with library_ops.Counter() as again:  # values decoded in one part of a call (a setup) stay values in the next
        (s * 2).sum()
        (torch.tensor([1, 2]) * 2).sum()  # integers made from integers are not: integers, toward the share only
    assert again.report({})["ops"] == {"aten::mul": {"kind": "pointwise", "elements": s.numel()},
                                       "aten::sum": {"kind": "reduction", "elements": s.numel()},
                                       "aten::mul (integers)": {"kind": "integer", "elements": 2},
                                       "aten::sum (integers)": {"kind": "integer", "elements": 2}}


def test_integer_index_arithmetic_is_still_not_counted():
    indptr = torch.tensor([0, 15, 40, 41])
    indices = library_ops.mark_inputs({"kv_indptr": indptr})  # the definition's integer input, as the worker's marks it

    def index_work():
        lengths = indptr[1:] - indptr[:-1]
        return (lengths * 2 + 1).cumsum(0), torch.sort(lengths).values

    assert _counted(index_work, library_ops.INDEX_ARITHMETIC_BUDGET * indices) == {}


def test_indices_computed_from_values_are_bookkeeping():
    """MoE's routing in PyTorch: the top-k of the logits, tokens per expert, the counts taken to the host (the
    CI's honest vLLM-style solution was `unsettled` when top-k's indices counted as values)."""
    logits = torch.randn(7, 8)
    counter = library_ops.Counter()
    with counter:
        ids = torch.topk(logits, 2).indices
        counts = torch.bincount(ids.flatten(), minlength=8)
        starts = counts.cumsum(0) - counts
        _ = [int(c) for c in counts], int(starts[-1]), (logits > 0).sum()
    ops = counter.report({"logits": logits})["ops"]
    values = {name for name, op in ops.items() if op["kind"] not in ("integer", "host_integers")}
    assert values == {"aten::topk", "aten::gt"}, ops  # the selection and the comparison read the logits; no more
    # the counts taken to the host, and the arithmetic on top-k's indices, count toward the share only (round 9)
    assert {name: op["kind"] for name, op in ops.items() if name not in values} == {
        "host: Tensor.__int__ (integers)": "host_integers", "aten::bincount (integers)": "integer",
        "aten::cumsum (integers)": "integer", "aten::sub (integers)": "integer",
        "aten::sum (integers)": "integer"}, ops  # a sum of booleans made from values (round 10b: bit planes)


def test_redispatch_outside_a_counted_call_runs_unchanged():
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    assert torch.equal(torch.ops.aten.bmm.default.redispatch(keys, Q, K), torch.bmm(Q, K))
    assert library_ops._ENTERED == []


def test_torch_namespaces_are_those_registered_before_the_candidate():
    assert {"mkldnn", "onednn", "quantized", "sparse"} <= library_ops.TORCH_NAMESPACES
    assert not {"aten", "prims"} & library_ops.TORCH_NAMESPACES


# -- the static gate: past the dispatcher -------------------------------------------------------------------

CPP_HEAD = "#include <torch/extension.h>\n"


@pytest.mark.parametrize("name,cpp,line", [
    ("at::cpu call", "at::Tensor f(at::Tensor a, at::Tensor b) { return at::cpu::bmm(a, b); }\n", 2),
    ("at::native call", "at::Tensor f(at::Tensor a) { return at::native::softmax(a, -1, false); }\n", 2),
    ("at::_ops redispatch", "at::Tensor f(at::Tensor a, at::Tensor b) { return at::_ops::mm::call(a, b); }\n", 2),
    ("using namespace at::cpu", "using namespace at::cpu;\nat::Tensor f(at::Tensor a) { return exp(a); }\n", 2),
    ("namespace alias", "namespace k = at::native;\nat::Tensor f(at::Tensor a) { return k::exp(a); }\n", 2),
])
def test_aten_kernels_by_their_internal_names_block(name, cpp, line, policy):
    found = [f for f in scan_sources({"k.cpp": CPP_HEAD + cpp}, "cpp", policy) if f.severity == "error"]
    assert [(f.rule, f.line) for f in found][:1] == [("torch_compute", line)], (name, found)


def test_the_dispatcher_path_stays_a_warning_attribution_settles(policy):
    cpp = CPP_HEAD + ("at::Tensor f(at::Tensor a, at::Tensor b) {\n"
                      "  auto s = at::cuda::getCurrentCUDAStream();\n  return at::matmul(a, b);\n}\n")
    found = scan_sources({"k.cpp": cpp}, "cpp", policy)
    assert [(f.rule, f.severity, f.line) for f in found] == [("torch_compute", "warning", 4)]


@pytest.mark.parametrize("name,source,line", [
    ("redispatch", "import torch\nks = None\ny = torch.ops.aten.bmm.default.redispatch(ks, 1, 2)\n", 3),
    ("redispatch by getattr", 'import torch\nf = getattr(torch.ops.aten.bmm.default, "redispatch")\n', 2),
    ("the handle's", "def f(op, ks, a):\n    return op._handle.redispatch_boxed(ks, a)\n", 2),
    ("a key set", "import torch\nKS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)\n", 2),
])
def test_operators_run_with_chosen_keys_are_monkeypatching(name, source, line, policy):
    found = [f for f in scan_sources({"main.py": source}, "python", policy) if f.severity == "error"]
    assert ("monkeypatch", line) in [(f.rule, f.line) for f in found], (name, found)


@pytest.mark.parametrize("source", [
    "import torch\nfut = torch._C.fork(loop, 10)\n",  # what torch.jit.fork calls: a TorchScript task on the pool
    "import torch.futures\nf = torch.futures.Future()\n",
])
def test_torchscript_tasks_are_concurrency(source, policy):
    found = [(f.rule, f.line) for f in scan_sources({"main.py": source}, "python", policy) if f.severity == "error"]
    assert ("concurrency", 2) in found, found


@pytest.mark.parametrize("name,call", [
    ("package", "torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(ep))"),
    ("aot_compile", "torch._export.aot_compile(f, (x,))"),
    ("the runner", "torch._C._aoti.AOTIModelContainerRunnerCpu('m.so', 1)"),
])
def test_pytorch_compiled_ahead_of_time_is_dynamic_code(name, call, policy):
    source = f"import torch\nimport torch._inductor\nimport torch._export\nR = {call}\n"
    found = [(f.rule, f.line) for f in scan_sources({"main.py": source}, "python", policy) if f.severity == "error"]
    assert ("dynamic_code", 4) in found, (name, found)


# -- the static gate's own limits ---------------------------------------------------------------------------

LOAD_INLINE = "from torch.utils.cpp_extension import load_inline\n"
BOMBS = {
    "format width": 'SRC = "{:>99999999999}".format("int x;")\n',
    "nested width": 'SRC = "{:>{}}".format("int x;", "999999999")\n',
    "replace chain": "S = 'a' * 1\n" + "".join(f'S{i} = "{"a" * 64}".replace("a", "{"a" * 64}")\n' for i in range(1))
                     + 'SRC = ("a" * 1).replace("a", "' + "b" * 1024 + '")' + "".join(
                         '.replace("b", "' + "b" * 1024 + '")' for _ in range(3)) + "\n",
    "doubling": 'S0 = "' + "x" * 4096 + '"\n' + "".join(f"S{i + 1} = S{i} + S{i}\n" for i in range(11)) + "SRC = S11\n",
    "join": 'S0 = "' + "z" * 4096 + '"\n' + "".join(f'S{i + 1} = "".join([S{i}, S{i}, S{i}, S{i}])\n' for i in range(8))
            + "SRC = S8\n",
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_sources_folded_past_the_limit_are_unreadable_not_built(name, policy):
    source = LOAD_INLINE + BOMBS[name] + 'm = load_inline(name="x", cpp_sources=[SRC], functions=[])\n'
    start = time.monotonic()
    found = scan_sources({"main.py": source}, "python", policy)
    assert time.monotonic() - start < 20
    assert "dynamic_code" in {f.rule for f in found if f.severity == "error"}, (name, found)


def test_a_macro_bomb_is_unreadable_in_bounded_time(policy):
    levels = ["#define M0 " + " ".join(["int"] * 60)]
    levels += [f"#define M{i} " + " ".join([f"M{i - 1}"] * 60) for i in range(1, 7)]
    cpp = CPP_HEAD + "\n".join(levels) + "\nM6 x;\n"
    start = time.monotonic()
    found = scan_sources({"k.cpp": cpp}, "cpp", policy)
    assert time.monotonic() - start < 20
    assert [(f.rule, f.severity) for f in found if "M6" in f.message] == [("dynamic_code", "error")]


def test_honest_macros_and_formats_still_fold(policy):
    source = LOAD_INLINE + textwrap.dedent('''
        TEMPLATE = """
        #define CAT(a, b) a##b
        #define BLOCK {block}
        int f() {{ return CAT(BL, OCK) * {width:>4}; }}
        """
        SRC = "\\n".join([TEMPLATE.format(block=128, width=8).replace("int f", "int g"), "int h() { return 1; }"])
        m = load_inline(name="x", cpp_sources=[SRC], functions=["g"])
    ''')
    assert scan_sources({"main.py": source}, "python", policy) == []


def _finding(rule, line, severity="warning", path="a.py"):
    return Finding(rule=rule, severity=severity, path=path, line=line, col=1, message=f"{rule} at {line}", snippet="")


@pytest.mark.parametrize("counts,want", [
    ({"torch_compute": 3}, {"torch_compute": 3}),
    ({"torch_compute": MAX_FINDINGS_PER_RULE}, {"torch_compute": MAX_FINDINGS_PER_RULE}),
    ({"torch_compute": MAX_FINDINGS_PER_RULE + 1}, {"torch_compute": MAX_FINDINGS_PER_RULE + 1}),
    ({"torch_compute": 5000, "file_read": 2}, {"torch_compute": MAX_FINDINGS_PER_RULE + 1, "file_read": 2}),
])
def test_findings_are_capped_per_rule_and_file(counts, want):
    findings = [_finding(rule, i + 1) for rule, n in counts.items() for i in range(n)]
    out = capped(findings)
    got = {rule: sum(f.rule == rule for f in out) for rule in counts}
    assert got == want
    assert out == sorted(out, key=lambda f: (f.path, f.line, f.col, f.rule))
    if counts["torch_compute"] > MAX_FINDINGS_PER_RULE:
        rest = counts["torch_compute"] - MAX_FINDINGS_PER_RULE
        summary = [f for f in out if f.message.startswith("and ")]
        assert len(summary) == 1 and f"{rest:,} more" in summary[0].message
        assert summary[0].line == MAX_FINDINGS_PER_RULE + 1


def test_a_capped_error_keeps_its_severity():
    findings = [_finding("torch_compute", i + 1) for i in range(MAX_FINDINGS_PER_RULE)]
    findings.append(_finding("torch_compute", 999, "error"))
    assert [f.severity for f in capped(findings) if f.message.startswith("and ")] == ["error"]


def test_a_flood_of_findings_is_capped_end_to_end(policy):
    source = "import torch\n\ndef f(x):\n" + "    x = torch.exp(x)\n" * 2000 + "    return x\n"
    found = scan_sources({"main.py": source}, "python", policy)
    assert len(found) == MAX_FINDINGS_PER_RULE + 1
    assert "1,950 more `torch_compute` findings" in found[-1].message


def test_a_file_past_what_the_gate_reads_is_rejected_unread(policy):
    line = "x = torch.exp(x)\n"
    big = "import torch\nx = torch.ones(1)\n" + line * (MAX_SOURCE_CHARS // len(line) + 1)
    start = time.monotonic()
    found = scan_sources({"main.py": "from . import big\n", "big.py": big}, "python", policy)
    assert time.monotonic() - start < 5
    assert [(f.path, f.rule, f.severity) for f in found] == [("big.py", "dynamic_code", "error")]
    assert "MiB per file the gate reads" in found[0].message


def test_a_gate_that_fails_gives_one_blocking_finding(monkeypatch, policy):
    from harness.audits import session_audits, static_gate

    def fails(*_args):
        raise MemoryError("out of memory")

    monkeypatch.setattr(static_gate, "scan_sources", fails)
    solution = Solution.model_validate(solution_dict("def run(*args):\n    pass\n"))
    [f] = session_audits._gate_findings(solution, policy)
    assert (f.rule, f.severity, f.path) == ("dynamic_code", "error", "kernel.py")
    assert "MemoryError: out of memory" in f.message and f == unreadable("kernel.py", MemoryError("out of memory"))


# -- honest idioms ---------------------------------------------------------------------------------------------

def test_a_byte_order_mark_is_no_syntax_error(policy):
    source = "\ufeff# -*- coding: utf-8 -*-\nimport torch\n\n\ndef run(q, out):\n    out.copy_(q)\n"
    assert scan_sources({"main.py": source}, "python", policy) == []
    # what does not parse still does not, byte-order mark or not
    assert "syntax" in {f.rule for f in scan_sources({"main.py": "\ufeffdef run(:\n"}, "python", policy)}


def test_a_byte_order_mark_passes_the_signature_check():
    definition = load_model(Definition, DEFINITIONS / "definitions" / "gqa_paged" / f"{KV8_PS1}.json")
    params = ", ".join(definition.inputs) + ", " + ", ".join(definition.outputs)
    source = f"\ufeffdef run({params}):\n    pass\n"
    assert static_signature_problem(Solution.model_validate(solution_dict(source)), definition) is None
    broken = Solution.model_validate(solution_dict("\ufeffdef run(x):\n    pass\n"))
    assert "takes 1 (x)" in static_signature_problem(broken, definition)


KERNELS = INTERPRETED_HEAD + textwrap.dedent('''

    @triton.jit
    def flip(x_ptr, y_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(y_ptr + o, ~tl.load(x_ptr + o))

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr, PRECISION: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, input_precision=PRECISION))

    out = {}
    for dtype in (torch.uint8, torch.uint32, torch.int32):
        x = torch.tensor([0, 1, 5, 100], dtype=dtype)
        y = torch.empty_like(x)
        flip[(1,)](x, y, N=4)
        bits = torch.iinfo(dtype).bits
        want = [(~v) & ((1 << bits) - 1) if not dtype.is_signed else ~v for v in x.tolist()]
        out[str(dtype)] = [y.tolist(), want]
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    for precision in ("bf16x3", "bf16x6", "ieee"):
        c = torch.empty(16, 16)
        dot[(1,)](a, b, c, N=16, PRECISION=precision)
        out[precision] = float((c - a @ b).abs().max())
    print(json.dumps(out))
''')


def test_unsigned_inversion_and_split_bf16_dots_run_under_the_interpreter(tmp_path):
    pytest.importorskip("triton")
    got = run_interpreted(tmp_path, KERNELS)
    for dtype in ("torch.uint8", "torch.uint32", "torch.int32"):
        assert got[dtype][0] == got[dtype][1], (dtype, got[dtype])
    assert got["bf16x3"] < 1e-4 and got["bf16x6"] < 1e-4 and got["ieee"] < 1e-4


GUARD = "import torch\n\nif not torch.cuda.is_available():\n    raise RuntimeError('these kernels need a CUDA GPU')\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU host's stand-in")
def test_an_import_that_asks_for_a_gpu_and_stops_is_skipped_not_blamed(tiny_dataset_root, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.pipeline.evaluate import Session

    from support import TORCH_CANDIDATE

    def submitted(source, name):
        return s.submit(Solution.model_validate(solution_dict(source, name=name))).workloads[0]

    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300)) as s:
        guarded = submitted(GUARD + TORCH_CANDIDATE, "guarded")
        unasked = submitted("raise RuntimeError('these kernels need a CUDA GPU')\n" + TORCH_CANDIDATE, "unasked")
        asked_then_broken = submitted(GUARD.replace("if not", "if") + "import not_shipped\n" + TORCH_CANDIDATE, "x")
        passing = submitted("import torch\nHAVE_GPU = torch.cuda.is_available()\n" + TORCH_CANDIDATE, "asks")
    assert guarded.status == "SKIPPED" and "is_available() at import" in guarded.message, guarded.message
    assert unasked.status == "COMPILE_ERROR", unasked.message  # no question asked: the candidate's own error
    assert asked_then_broken.status == "COMPILE_ERROR", asked_then_broken.message  # a module it did not ship
    assert passing.status == "PASSED", passing.message
