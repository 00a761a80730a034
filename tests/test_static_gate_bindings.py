"""A library callable kept somewhere and called later is judged like the call itself, wherever it was kept: the
static gate is all that judges library compute on a host without a GPU (run-time attribution needs CUPTI), so a
callable bound where no alias shows (a default, `:=`, a conditional, an attribute) must not make a solution
promotable there."""

from __future__ import annotations


import pytest

from harness.audits.static_gate import scan_sources
from sandbox_attacks import HONEST
from support import submit_triton_cli

H = "import torch\n"
HIDDEN = {
    "default": H + "def run(q, k, op=torch.matmul):\n    return op(q, k)\n",
    "keyword_only_default": H + "def run(q, k, *, op=torch.matmul):\n    return op(q, k)\n",
    "lambda_default": H + "g = lambda q, k, op=torch.matmul: op(q, k)\ndef run(q, k):\n    return g(q, k)\n",
    "nested_default": H + "def run(q, k):\n    def inner(a, b, op=torch.matmul):\n        return op(a, b)\n"
                          "    return inner(q, k)\n",
    "constructor_default": H + "class A:\n    def __init__(self, op=torch.matmul):\n        self.op = op\n"
                               "def run(q, k):\n    return A().op(q, k)\n",
    "walrus": H + "def run(q, k):\n    return (op := torch.matmul)(q, k)\n",
    "annotated": H + "op: object = torch.matmul\ndef run(q, k):\n    return op(q, k)\n",
    "conditional": H + "def run(q, k):\n    op = torch.matmul if q is not None else None\n    return op(q, k)\n",
    "or": H + "op = None or torch.matmul\ndef run(q, k):\n    return op(q, k)\n",
    "lambda_result": H + "g = lambda: torch.matmul\ndef run(q, k):\n    return g()(q, k)\n",
    "yielded": H + "def g():\n    yield torch.matmul\ndef run(q, k):\n    return next(g())(q, k)\n",
    "match": H + "def run(q, k):\n    match torch.matmul:\n        case op:\n            return op(q, k)\n",
    "attribute_stored": H + "class A:\n    pass\na = A()\na.op = torch.matmul\ndef run(q, k):\n    return a.op(q, k)\n",
    "self_stored": H + "class A:\n    def __init__(self):\n        self.op = torch.matmul\n"
                       "def run(q, k):\n    return A().op(q, k)\n",
    "item_stored": H + "ops = {}\nops['op'] = torch.matmul\ndef run(q, k):\n    return ops['op'](q, k)\n",
    "class_attribute": H + "class A:\n    op = torch.matmul\n    def go(self, q, k):\n        return self.op(q, k)\n"
                           "def run(q, k):\n    return A().go(q, k)\n",
    "method_taken": "def run(q, k):\n    op = q.matmul\n    return op(k)\n",
    "method_walrus": "def run(q, k):\n    return (op := q.matmul)(k)\n",
    "method_default": "def run(q, k):\n    g = lambda a, b, op=type(q).matmul: op(a, b)\n    return g(q, k)\n",
    "method_or": "def run(q, k, op=None):\n    op = op or q.softmax\n    return op(-1)\n",
}


@pytest.mark.parametrize("name", list(HIDDEN))
def test_a_library_callable_kept_anywhere_is_a_finding(policy, name):
    findings = scan_sources({"kernel.py": HIDDEN[name]}, "triton", policy)
    assert any(f.rule == "torch_compute" for f in findings), (name, findings)


@pytest.mark.parametrize("source", [
    H + "def run(q, dtype=torch.float32, device=torch.device('cpu')):\n    return torch.empty(4, dtype=dtype)\n",
    H + "def run(q):\n    dt = torch.bfloat16 if q.is_cuda else torch.float32\n    return torch.zeros(2, dtype=dt)\n",
    H + "class Config:\n    dtype: object = torch.float16\n    block = 64\n",
    "def run(q, scale=None):\n    scale = scale or q.shape[-1] ** -0.5\n    return scale\n",
])
def test_constants_kept_the_same_ways_are_not(policy, source):
    assert [f for f in scan_sources({"kernel.py": source}, "triton", policy) if f.rule == "torch_compute"] == []


def test_a_hidden_library_call_is_not_promotable_on_a_cpu_host(tiny_dataset_root, tmp_path):
    """Through `harness submit`: the honest kernel plus a torch matmul reached through a default argument."""
    source = HONEST.replace(
        "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n",
        "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse, _mm=torch.matmul):\n"
        "    _mm(q[0], q[0].T)\n")
    assert "_mm=torch.matmul" in source
    result = submit_triton_cli(source, "hidden", tmp_path, tiny_dataset_root, ("tiny_b2_t40",))
    assert result["status"] == "PASSED"
    assert result["promotable"] is False
    # the gate's torch_compute warning awaits the run's attribution, which counted the product on the CPU: a matrix
    # product is never glue, so it blocks (harness.audits.cpu_attribution), named
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "_mm=torch.matmul" in text)  # the binding
    assert any(f["rule"] == "torch_compute" and f["line"] == line for f in result["static_findings"]), line
    blockers = result["promotion_blockers"]
    assert any("attribution" in b and "aten::mm" in b for b in blockers), blockers


@pytest.mark.parametrize("module, use, rule", [
    ("posix", "posix.writev(13, [b'forged'])", "harness_internals"),  # os.writev: the reply channel
    ("posix", "posix.write(13, b'forged')", "file_cache"),
    ("posix", "posix.fork()", "concurrency"),
    ("posix", "posix.system('id')", "concurrency"),
    ("posix", "posix.environ.get('HOME')", "env_probe"),
    ("_posixsubprocess", "_posixsubprocess.fork_exec", "concurrency"),
    ("_imp", "_imp.create_dynamic", "dynamic_code"),
    ("_operator", "_operator.matmul(q, q)", "torch_compute"),
])
def test_the_c_module_behind_a_standard_one_is_judged_as_that_module(policy, module, use, rule):
    """`posix` is what `os` wraps: every rule on `os.*` holds for `posix.*` (and the like for `_io`, `_imp`...)."""
    source = f"import {module}\ndef run(q):\n    {use}\n    return q\n"
    assert rule in {f.rule for f in scan_sources({"kernel.py": source}, "triton", policy)}


@pytest.mark.parametrize("source, rule", [
    ("import functools, os\ndef run(q):\n    return functools.reduce(getattr, ['environ'], os)\n", "dynamic_code"),
    ("import os\ndef run(q):\n    return list(map(getattr, [os], ['environ']))\n", "dynamic_code"),
    ("import os\ndef run(q):\n    object.__getattribute__(os, 'writev')(13, [b'x'])\n", "harness_internals"),
    ("import os\ndef run(q):\n    os.__getattribute__('writev')(13, [b'x'])\n", "harness_internals"),
    ("import os\ndef run(q):\n    return type(os).__getattribute__(os, 'environ')\n", "env_probe"),
    ("import os\nN = 'environ'\ndef run(q):\n    return os.__getattribute__(N)\n", "dynamic_code"),
    ("def run(q, k):\n    return q.__getattribute__('matmul')(k)\n", "torch_compute"),
])
def test_getattr_by_any_spelling_is_judged_as_getattr(policy, source, rule):
    """getattr handed on as a value, or spelled `__getattribute__` (bound, or through object/type): the attribute it
    reaches is judged as if written out, and a computed one on a module is dynamic code."""
    assert rule in {f.rule for f in scan_sources({"kernel.py": source}, "triton", policy)}
