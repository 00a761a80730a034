"""Static gate: C++ held in Python strings (torch.utils.cpp_extension load/load_inline sources and their build
flags) gets the C++ rules, each at the line of the string in the .py file."""

from __future__ import annotations

import pytest

from harness.audits.static_gate import RULES, gate_passed

from static_gate_support import describe, scan_py


# --------------------------------------------------------------------------------------------------
# torch.utils.cpp_extension load/load_inline: the supported build path (no native_ffi); the C++ they compile
# is scanned instead, at the line of the string in the .py file.

EMBEDDED_CPP_POSITIVES = [
    # a module constant (raw triple-quoted) given in a list: the finding is at the C++ line
    ("stream_event_graph", 5, '''\
        from torch.utils.cpp_extension import load_inline
        CUDA = r"""
        #include <torch/extension.h>
        void run(torch::Tensor x) {
          cudaStream_t s; cudaStreamCreate(&s);
        }
        """
        mod = load_inline(name="k", cpp_sources="void run(torch::Tensor x);", cuda_sources=[CUDA], functions=["run"])
        '''),
    ("timer_tampering", 4, '''\
        import torch.utils.cpp_extension as ext
        mod = ext.load_inline(
            name="k", cpp_sources="", cuda_sources="""
        #include <cupti.h>
        __global__ void k() {}
        """)
        '''),
    ("device_state_tamper", 2, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "", f"void f() {{ cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, {N}); }}")
        '''),
    ("concurrency", 4, '''\
        from torch.utils.cpp_extension import load_inline
        TEMPLATE = """
        void launch() {{
          std::thread t([] {{ work(); }}); t.detach();
        }}
        constexpr int kBlock = {block};
        """
        m = load_inline("k", "", TEMPLATE.format(block=128))
        '''),
    ("env_probe", 3, '''\
        import torch.utils.cpp_extension as ext
        def source(n):
            return "int f() { return getenv(\\"PYTEST_CURRENT_TEST\\") != nullptr; }"
        m = ext.load_inline("k", source(3), "")
        '''),
    ("file_cache", 2, '''\
        from torch.utils.cpp_extension import load_inline
        BODY = "void save(const float* o) { FILE* f = fopen(\\"out.bin\\", \\"wb\\"); }"
        m = load_inline("k", "", HEADER + BODY)
        HEADER = "#include <cstdio>\\n"
        '''),
    ("library_fallback", 3, '''\
        from torch.utils.cpp_extension import load_inline
        SRC = """
        void gemm() { cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &a, A, t, m, B, t, k, &b, C, t, m, ct, al); }
        """
        m = load_inline("k", "", SRC)
        '''),
    ("harness_internals", 2, '''\
        from torch.utils.cpp_extension import load_inline
        CPP = '#include "../../harness/reference.h"\\nvoid f();'
        m = load_inline("k", CPP, "")
        '''),
    ("timer_tampering", 2, '''\
        from torch.utils.cpp_extension import load_inline
        SRC = 'extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaSuccess; }'
        m = load_inline("k", "", SRC)
        '''),
    ("library_fallback", 3, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "", "__global__ void k() {}",
                        extra_ldflags=["-lcublas"])
        '''),
    ("timer_tampering", 2, '''\
        from torch.utils.cpp_extension import load_inline
        FLAGS = ["-O3", "-Wl,--wrap=cudaEventRecord"]
        m = load_inline("k", "", "__global__ void k() {}", extra_ldflags=FLAGS)
        '''),
    ("dynamic_code", 2, '''\
        import torch.utils.cpp_extension
        ext = torch.utils.cpp_extension.load("k", ["k.cu"], extra_ldflags=["-lnvrtc"])
        '''),
    ("native_ffi", 3, '''\
        import torch.utils.cpp_extension
        ext = torch.utils.cpp_extension.load("k", ["k.cu"], extra_cuda_cflags=["-lineinfo"],
                                             extra_ldflags=["-lcuda", "-L/opt/hooks", "-lhook"])
        '''),
    ("native_ffi", 2, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "", "__global__ void k() {}", extra_ldflags=["prebuilt/libkernels.so"])
        '''),
    ("concurrency", 2, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "void f();", "", extra_cflags=["-O3", "-fopenmp"])
        '''),
    # shell syntax in a flag: ninja runs the build line in a shell (red team round 10)
    ("concurrency", 2, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "void f();", "", extra_cflags=["-O2 `python3 -c 'print(1)'`"])
        '''),
    ("concurrency", 2, '''\
        from torch.utils.cpp_extension import load_inline
        FLAGS = ["-O3", "-DX=1; id"]  # named where the text is
        m = load_inline("k", "void f();", "", extra_cuda_cflags=FLAGS)
        '''),
    ("harness_internals", 3, '''\
        import os
        import torch.utils.cpp_extension
        ext = torch.utils.cpp_extension.load("k", [os.path.join(HERE, "..", "shared", "kernel.cu")])
        '''),
    ("harness_internals", 2, '''\
        from torch.utils.cpp_extension import load
        ext = load("k", sources=["/work/main/harness/kernel.cu"])
        '''),
    # options spread into the call
    ("concurrency", 2, '''\
        from torch.utils.cpp_extension import load_inline
        OPTIONS = dict(name="k", cpp_sources="", cuda_sources="void f() { system(\\"nvidia-smi\\"); }")
        m = load_inline(**OPTIONS)
        '''),
    # a string that looks like C++ is still checked as a Python string outside C++ comments
    ("env_probe", 1, "P = '/proc/self/status // __global__'\n"),
    ("file_cache", 1, "CACHE = '__global__ x; /tmp/answers.bin'\n"),
    # C++ source in a string, whatever compiles it
    ("stream_event_graph", 1, '''\
        SRC = "__global__ void k() {}\\nvoid g(cudaGraphExec_t g, cudaStream_t s) { cudaGraphLaunch(g, s); }"
        '''),
]


@pytest.mark.parametrize(("rule", "line", "source"), EMBEDDED_CPP_POSITIVES,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(EMBEDDED_CPP_POSITIVES)])
def test_cpp_in_python_strings_gets_the_cpp_rules(rule, line, source, gqa_policy):
    findings = scan_py(source, gqa_policy)
    hit = next((f for f in findings if f.rule == rule and f.line == line), None)
    assert hit is not None, describe(findings)
    assert hit.severity == RULES[rule].default_severity
    assert gate_passed(findings) == (hit.severity == "warning" and gate_passed([f for f in findings if f is not hit]))
    assert not any("`torch.utils.cpp_extension" in f.message for f in findings), describe(findings)  # the build call
