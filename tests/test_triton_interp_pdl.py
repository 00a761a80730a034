"""Programmatic dependent launch under Triton's CPU interpreter: `tl.extra.cuda.gdc_wait()` and
`gdc_launch_dependents()` are no-ops there (every launch has finished before the next starts), so a PDL kernel is
checked instead of SKIPPED; a loop index and a float argument are the scalar tensors the compiler makes of them;
and a Triton builtin the interpreter cannot call is named in the SKIPPED reason (it was always "a libdevice (extern)
call")."""

from __future__ import annotations

import textwrap

import pytest

from harness.pipeline.workload_evaluation import interpreter_limit

from support import run_interpreted

pytest.importorskip("triton")

KERNELS = textwrap.dedent('''
    import json, sys, traceback
    import torch, triton, triton.language as tl
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import triton_interp
    triton_interp.apply()
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit
    def pdl(x_ptr, y_ptr, N: tl.constexpr):
        tl.extra.cuda.gdc_wait()
        o = tl.arange(0, N)
        tl.store(y_ptr + o, tl.load(x_ptr + o) * 2)
        tl.extra.cuda.gdc_launch_dependents()

    @triton.jit
    def pdl_imported(x_ptr, y_ptr, N: tl.constexpr):
        gdc_wait()
        o = tl.arange(0, N)
        tl.store(y_ptr + o, tl.load(x_ptr + o) + 1)
        gdc_launch_dependents()

    @triton.jit
    def sm_id(y_ptr):
        s = tl.extra.cuda.smid()
        tl.store(y_ptr, s)

    @triton.jit
    def staged_sum(x_ptr, y_ptr, N: tl.constexpr):
        acc = tl.zeros([1], dtype=tl.float32)
        for i in range(0, N, num_stages=2, loop_unroll_factor=1):  # the compiler drops a builtin range's keywords
            acc += tl.load(x_ptr + i + tl.arange(0, 1))
        for i in range(N, step=2):  # step too: the compiler reads positional bounds only
            acc += tl.load(x_ptr + i + tl.arange(0, 1))
        for i in tl.range(0, N, 4, num_stages=2):  # tl.range keeps its own
            acc += tl.load(x_ptr + i + tl.arange(0, 1))
        tl.store(y_ptr + tl.arange(0, 1), acc)

    @triton.jit
    def wide_offsets(x_ptr, y_ptr, NT, B: tl.constexpr):
        # a loop index is a scalar tensor when compiled: `.to` before a 64-bit offset (a contestant's GDN prefill)
        acc = tl.zeros([B], dtype=tl.float32)
        for i_t in range(NT):
            acc += tl.load(x_ptr + i_t.to(tl.int64) * B + tl.arange(0, B))
        for j in tl.range(0, NT, 2, num_stages=2):
            acc += tl.load(x_ptr + j.to(tl.int64, bitcast=False) * B + tl.arange(0, B))
        for s in tl.static_range(3):  # a compile-time constant, a plain int under the interpreter as before
            acc += s
        tl.store(y_ptr + tl.arange(0, B), acc)

    @triton.jit
    def scaled(x_ptr, y_ptr, z_ptr, scale, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(x_ptr + o)  # bf16
        tl.store(y_ptr + o, x * scale.to(tl.float32))  # Inductor's fp64 scalar kept fp32, as Liger's kernels do
        tl.store(z_ptr + o, x * scale)  # an fp32 scalar promotes bf16 to fp32 on a GPU

    out = {}
    xb = torch.ones(4, dtype=torch.bfloat16)
    yb, zb = torch.empty(4), torch.empty(4)
    scaled[(1,)](xb, yb, zb, 1.0 + 2.0 ** -10, N=4)  # not a bf16 value: a bf16 product would round it to 1.0
    out["scaled"] = [yb.tolist(), zb.tolist()]
    x = torch.arange(8, dtype=torch.float32)
    s = torch.empty(1)
    staged_sum[(1,)](x, s, 8)
    out["staged"] = s.tolist()
    w = torch.empty(2)
    wide_offsets[(1,)](x, w, 4, B=2)
    out["wide"] = w.tolist()
    y, z = torch.empty(8), torch.empty(8)
    pdl[(1,)](x, y, 8, launch_pdl=True)
    pdl_imported[(1,)](y, z, 8, launch_pdl=True)
    out["pdl"] = z.tolist()
    try:
        sm_id[(1,)](torch.zeros(1, dtype=torch.int32))
        out["smid"] = None
    except BaseException as e:
        out["smid"] = [f"{type(e).__name__}: {e}", traceback.format_exc()]
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreted(tmp_path_factory.mktemp("pdl"), KERNELS)


def test_grid_dependency_control_is_a_no_op_under_the_interpreter(results):
    assert results["pdl"] == [2.0 * i + 1 for i in range(8)]


def test_a_builtin_range_with_loop_keywords_runs_as_the_compiler_runs_it(results):
    assert results["staged"] == [sum(range(8)) * 2 + 0 + 4]


def test_a_loop_index_takes_the_scalar_tensor_methods_it_has_when_compiled(results):
    x = list(range(8))
    every = [sum(x[2 * t + c] for t in range(4)) for c in range(2)]
    even = [sum(x[2 * t + c] for t in (0, 2)) for c in range(2)]
    assert results["wide"] == [a + b + 3 for a, b in zip(every, even)]


def test_a_float_argument_is_the_fp32_scalar_tensor_it_is_when_compiled(results):
    exact = 1.0 + 2.0 ** -10
    assert results["scaled"] == [[exact] * 4, [exact] * 4]


def test_a_builtin_the_interpreter_cannot_call_is_named(results):
    assert results["smid"] is not None
    limit = interpreter_limit(*results["smid"])
    assert limit == "`tl.extra.cuda.smid`, a Triton builtin the interpreter cannot call", limit


def test_the_builtin_is_named_without_carets_and_unnamed_without_a_frame():
    error = "InterpreterError: ValueError('(`_semantic` argument must be provided outside of JIT functions.)')"
    frames = ('  File "/x/triton/runtime/interpreter.py", line 1357, in __call__\n    self.fn(**args)\n'
              '  File "/w/pkg/main.py", line 8, in k\n    tl.extra.cuda.globaltimer()\n'
              '  File "/x/triton/language/core.py", line 41, in wrapper\n    raise ValueError("Did you forget")\n')
    assert interpreter_limit(error, frames).startswith("`tl.extra.cuda.globaltimer`")
    assert interpreter_limit(error, '  File "/x/triton/runtime/interpreter.py", line 1, in f\n') == \
        "a Triton builtin the interpreter cannot call"
