"""Static gate, C++ (red team round 7): ATen called unqualified (found by argument-dependent lookup on a tensor, or
through `using namespace at;`) is torch_compute as `at::matmul` is, unless the solution defines a function of that
name itself; `.sum_to_size()` is a reduction; torch::dispatch / TORCH_FN register an operator and compute nothing."""

from __future__ import annotations

import textwrap

import pytest

from harness.audits.static_gate import scan_sources
from harness.audits.static_gate.cpp_aten import defined_functions

from static_gate_support import describe, scan_cpp, scan_py

TORCH = "#include <torch/extension.h>\n"

UNQUALIFIED_ATEN = [
    # (line, call, source): each must be torch_compute on that line, naming the call
    (3, "matmul", TORCH + "torch::Tensor f(torch::Tensor a, torch::Tensor b) {\n  return matmul(a, b);\n}\n"),
    (4, "softmax", TORCH + "using namespace at;\nTensor f(Tensor sc) {\n  auto p = softmax(sc, -1);\n  return p;\n}\n"),
    (3, "logsumexp", TORCH + "at::Tensor f(at::Tensor sc) {\n  return logsumexp(sc, -1) / std::log(2.0);\n}\n"),
    (3, "index_select", TORCH + "at::Tensor f(at::Tensor k, at::Tensor idx) {\n"
                                "  auto kk = index_select(k, 0, idx).select(1, 0);\n  return kk;\n}\n"),
    (2, "sum_to_size", "at::Tensor f(at::Tensor x) {\n  return x.sum_to_size({1, 4});\n}\n"),
    # an ATen header alone, no torch:: name in the text
    (3, "bmm", "#include <ATen/ATen.h>\nusing namespace at;\nauto g(Tensor a, Tensor b) { return bmm(a, b); }\n"),
    # taken qualified and called by another name
    (2, "at::matmul", TORCH + "auto mm_fn = &at::matmul;\nat::Tensor f(at::Tensor a, at::Tensor b) { return mm_fn(a, b); }\n"),
    (2, "at::softmax", TORCH + "using at::softmax;\n"),
    # a product is no declaration of the solution's own `softmax`
    (2, "softmax", TORCH + "at::Tensor f(at::Tensor s, double scale) { return scale * softmax(s, -1); }\n"),
]


@pytest.mark.parametrize(("line", "call", "source"), UNQUALIFIED_ATEN, ids=[c for _, c, _ in UNQUALIFIED_ATEN])
def test_unqualified_aten_is_torch_compute(line, call, source, policy):
    findings = scan_cpp(source, policy)
    hits = [f for f in findings if f.rule == "torch_compute" and f.line == line and call in f.message]
    assert hits, describe(findings)
    assert hits[0].severity == "warning"


def test_the_red_teams_load_inline_attention_is_found(policy):
    source = '''\
        from torch.utils.cpp_extension import load_inline
        SRC = r"""
        #include <torch/extension.h>
        std::vector<torch::Tensor> attend(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor idx) {
          auto kk = index_select(k, 0, idx).permute({1, 0, 2});
          auto sc = matmul(q, transpose(kk, 1, 2));
          auto p = softmax(sc, -1);
          auto lse = logsumexp(sc, -1);
          return {matmul(p, v), lse};
        }
        """
        ext = load_inline(name="adl", cpp_sources=[SRC], functions=["attend"])
        '''
    findings = scan_py(source, policy)
    found = {(f.line, name) for f in findings if f.rule == "torch_compute"
             for name in ("index_select", "matmul", "softmax", "logsumexp") if f"`{name}` unqualified" in f.message}
    assert found == {(5, "index_select"), (6, "matmul"), (7, "softmax"), (8, "logsumexp"), (9, "matmul")}, \
        describe(findings)
    assert not any("transpose" in f.message for f in findings)  # a view, as at::transpose is never compute


HONEST_OWN_HELPERS = [
    # kernels' own helpers named like ATen's, defined in the same text
    TORCH + "__device__ __forceinline__ float softmax(float x, float m) { return __expf(x - m); }\n"
            "__global__ void k(float* o) { o[0] = softmax(o[1], o[2]); }\n",
    TORCH + "template <typename T>\n__device__ T silu(T x) { return x / (1.f + __expf(-x)); }\n"
            "__global__ void k(float* o) { o[0] = silu<float>(o[1]) + silu(o[2]); }\n",
    TORCH + "static inline float sum(const float* p, int n) {\n  float s = 0; for (int i = 0; i < n; ++i) s += p[i];\n"
            "  return s;\n}\nfloat g(const float* p) { return sum(p, 4); }\n",
    # a prototype of a function another source defines
    TORCH + "torch::Tensor gather(torch::Tensor x, torch::Tensor idx);\n"
            "torch::Tensor run(torch::Tensor x, torch::Tensor i) { return gather(x, i); }\n",
    # names that are only ATen's by a longer spelling, methods, other namespaces, plain CUDA without torch
    TORCH + "__global__ void k(float* o) { o[0] = warp_sum(o[1]) + my::softmax(o[2]) + ::mean(o); }\n",
    "__device__ float f(float* o) { return sum(o) + mean(o); }\n",
    TORCH + "void f(std::vector<int>& v) { std::sort(v.begin(), v.end()); auto m = std::max(1, 2); }\n",
]


@pytest.mark.parametrize("source", HONEST_OWN_HELPERS, ids=range(len(HONEST_OWN_HELPERS)))
def test_the_solutions_own_functions_are_no_aten(source, policy):
    findings = [f for f in scan_cpp(source, policy) if f.rule == "torch_compute"]
    assert not findings, describe(findings)


def test_a_helper_defined_in_another_file_is_the_solutions_own(policy):
    sources = {
        "csrc/helpers.cuh": "#pragma once\n__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }\n",
        "csrc/kernel.cu": TORCH + '#include "helpers.cuh"\n'
                                  "__global__ void k(float* o) { o[0] = silu(o[1]); }\n"
                                  "torch::Tensor run(torch::Tensor x) { return x; }\n",
    }
    assert not [f for f in scan_sources(sources, "cuda", policy) if f.rule == "torch_compute"]
    alone = scan_sources({"csrc/kernel.cu": sources["csrc/kernel.cu"]}, "cuda", policy)
    assert [f.line for f in alone if f.rule == "torch_compute" and "`silu` unqualified" in f.message] == [3]


def test_defined_functions():
    assert defined_functions(["__device__ float softmax(float x) { return x; }",
                              "torch::Tensor gather(torch::Tensor x, torch::Tensor i);",
                              "def matmul(a, b):\n    return a @ b\n",  # Python's, not C++'s
                              "auto y = scale * sum(x);\nreturn mean(x);\nmean(x);\n"]) == {"softmax", "gather"}


def test_operator_registration_is_no_compute(policy):
    source = textwrap.dedent('''\
        #include <torch/library.h>
        void decode(const at::Tensor& q, at::Tensor& out);
        TORCH_LIBRARY(rt7o, m) {
          m.def("decode(Tensor q, Tensor(a!) out) -> ()", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(decode)));
          m.impl("decode", torch::CppFunction::makeFromUnboxedFunction(TORCH_FN(decode)));
        }
        ''')
    assert not [f for f in scan_cpp(source, policy) if f.rule == "torch_compute"], describe(scan_cpp(source, policy))


def test_the_compiled_gate_judges_unqualified_aten_as_the_gate_does(policy):
    """What a build compiled (read back after the import) gets the same rule, and the same exemption for a helper
    another of its files defines (a header the load_inline source includes)."""
    from harness.audits.compiled_gate import compiled_findings

    header = "__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }\n"
    main = TORCH + '#include "act.cuh"\n__global__ void k(float* o) { o[0] = silu(o[1]); }\n' \
                   "at::Tensor f(at::Tensor s) {\n  return softmax(s, -1);\n}\n"
    files = [{"path": "/w/k/cuda.cu", "text": main}, {"path": "/w/k/act.cuh", "text": header}]
    findings = [f for f in compiled_findings(files, [], {}, policy) if f.rule == "torch_compute"]
    assert [(f.path, f.line) for f in findings] == [("/w/k/cuda.cu", 5)], describe(findings)
    assert "`softmax` unqualified" in findings[0].message
