"""Honest idioms the GPU compiler takes that Triton's CPU interpreter refused (red team round 10), run under the
interpreter with the harness's patches (``harness.sandbox.triton_interp_scalars``): arithmetic on a loop index keeps
the scalar tensor's ``.to``, numpy float64 and bool arguments are the fp32 and int1 scalars the compiler makes of
them, math functions work as tensor methods, and ``tl.atomic_xchg`` exchanges floats. Each kernel's failure is kept
as its message, so each test fails alone without its fix."""

from __future__ import annotations

import textwrap

import pytest
import torch

from support import run_interpreted

pytest.importorskip("triton")

KERNELS = textwrap.dedent('''
    import inspect, json, sys, traceback
    import numpy as np
    import torch, triton, triton.language as tl
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import triton_interp
    triton_interp.apply()

    @triton.jit
    def loop_index_expressions(x_ptr, y_ptr, n, B: tl.constexpr, N: tl.constexpr):
        acc = tl.zeros([B], dtype=tl.float32)
        for blk in range(n):
            acc += tl.load(x_ptr + (blk * B).to(tl.int64) + tl.arange(0, B))  # a 64-bit block offset
        for t in tl.range(0, n):
            acc += (t % N).to(tl.float32) + (t + 1).to(tl.float32) * 10 + (B * t).to(tl.float32) * 100
            acc += ((t - 3) // 2).to(tl.float32) * 1000 + ((t - 3) % 2).to(tl.float32) * 10000  # i32: toward zero
            acc += (-t).to(tl.float32) + abs(t - 2).to(tl.float32) + ((t << 1) | (t >> 1) ^ (t & 1)).to(tl.float32)
        tl.store(y_ptr + tl.arange(0, B), acc)

    @triton.jit
    def float_scale(x_ptr, y_ptr, z_ptr, scale, B: tl.constexpr):
        r = tl.arange(0, B)
        x = tl.load(x_ptr + r)  # bf16
        tl.store(y_ptr + r, x * scale.to(tl.float32))
        tl.store(z_ptr + r, x * scale)  # an fp32 scalar promotes bf16 to fp32 on a GPU

    @triton.jit
    def bool_flag(x_ptr, y_ptr, flag, B: tl.constexpr):
        r = tl.arange(0, B)
        v = tl.load(x_ptr + r)
        v = tl.where(flag, v * 2, v)
        if flag:
            v = v + 1
        if not flag:
            v = v - 1
        tl.store(y_ptr + r, v + flag.to(tl.float32) * 100)

    @triton.jit
    def _method_in_helper(v, NAME: tl.constexpr):
        return getattr(v, NAME)()

    @triton.jit
    def math_method(x_ptr, m_ptr, f_ptr, NAME: tl.constexpr, B: tl.constexpr):
        r = tl.arange(0, B)
        v = tl.load(x_ptr + r)
        tl.store(m_ptr + r, getattr(v, NAME)())  # x.exp2() and the like
        tl.store(m_ptr + B + r, _method_in_helper(v, NAME))  # in a jit helper, whose call patches again
        tl.store(f_ptr + r, getattr(tl, NAME)(v))  # tl.exp2(x): the free function

    @triton.jit
    def exchange(o_ptr, v_ptr, old_ptr, B: tl.constexpr):
        r = tl.arange(0, B)
        old = tl.atomic_xchg(o_ptr + r, tl.load(v_ptr + r), mask=r < B - 1, sem="release", scope="gpu")
        tl.store(old_ptr + r, old, mask=r < B - 1)

    def attempt(name, call):
        try:
            out[name] = call()
        except BaseException as e:
            out[name] = f"{type(e).__name__}: {e}"[:2000] + traceback.format_exc()[-2000:]

    out = {}

    def loops():
        y = torch.empty(4)
        loop_index_expressions[(1,)](torch.arange(24, dtype=torch.float32), y, 6, 4, 4)
        return y.tolist()

    def floats():
        x = torch.ones(4, dtype=torch.bfloat16)
        y, z = torch.empty(4), torch.empty(4)
        float_scale[(1,)](x, y, z, np.float64(1.0 + 2.0 ** -10), 4)  # not a bf16 value: bf16 would make it 1.0
        try:
            float_scale[(1,)](x, y, z, np.float32(2.0), 4)
            refused = None
        except TypeError as e:  # mangle_type refuses it at a GPU launch too
            refused = str(e)
        return [y.tolist(), z.tolist(), refused]

    def bools():
        x = torch.arange(4, dtype=torch.float32)
        y, z = torch.empty(4), torch.empty(4)
        bool_flag[(1,)](x, y, True, 4)
        bool_flag[(1,)](x, z, False, 4)
        return [y.tolist(), z.tolist()]

    def methods():
        # every method Triton attaches to tl.tensor from a math function: taking `_semantic`, not a marked builtin
        names = sorted(name for name, m in inspect.getmembers(tl.tensor) if inspect.isfunction(m)
                       and not tl.core.is_builtin(m) and "_semantic" in inspect.signature(m).parameters)
        x = torch.tensor([0.3, 0.7, 1.5, 2.9])
        results = {}
        for name in names:
            m, f = torch.empty(8), torch.empty(4)
            try:
                math_method[(1,)](x, m, f, name, 4)
                results[name] = [m.tolist(), f.tolist()]
            except BaseException as e:
                results[name] = f"{type(e).__name__}: {e}"[:500]
        return results

    def exchanges():
        results = {}
        for dtype in ("float32", "float64"):
            t = getattr(torch, dtype)
            o = torch.tensor([10.0, -0.0, 12.5, 13.0], dtype=t)
            v = torch.tensor([-0.0, 1.5, float("inf"), 3.0], dtype=t)
            old = torch.zeros(4, dtype=t)
            exchange[(1,)](o, v, old, 4)
            results[dtype] = [o.tolist(), old.tolist(), torch.signbit(o).tolist(), torch.signbit(old).tolist()]
        return results

    attempt("loops", loops)
    attempt("floats", floats)
    attempt("bools", bools)
    attempt("methods", methods)
    attempt("exchanges", exchanges)
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreted(tmp_path_factory.mktemp("scalars"), KERNELS)


def test_arithmetic_on_a_loop_index_keeps_the_scalar_tensor_to(results):
    assert isinstance(results["loops"], list), results["loops"]
    x, t = torch.arange(24, dtype=torch.float32).view(6, 4), torch.arange(6, dtype=torch.int32)
    per_step = ((t % 4) + (t + 1) * 10 + 4 * t * 100 + torch.div(t - 3, 2, rounding_mode="trunc") * 1000
                + torch.fmod(t - 3, 2) * 10000 - t + (t - 2).abs() + ((t << 1) | (t >> 1) ^ (t & 1)))
    assert results["loops"] == (x.sum(0) + per_step.sum().float()).tolist()


def test_a_numpy_float64_argument_is_an_fp32_scalar_and_float32_is_refused_as_at_launch(results):
    assert isinstance(results["floats"], list), results["floats"]
    y, z, refused = results["floats"]
    exact = torch.tensor(1.0 + 2.0 ** -10, dtype=torch.float32).item()
    assert y == [exact] * 4 and z == [exact] * 4
    assert refused == "failed to specialize argument of type: numpy.float32"


def test_a_bool_argument_is_an_int1_scalar(results):
    assert isinstance(results["bools"], list), results["bools"]
    x = torch.arange(4, dtype=torch.float32)
    assert results["bools"] == [(x * 2 + 1 + 100).tolist(), (x - 1).tolist()]


def test_every_math_function_works_as_a_tensor_method(results):
    methods = results["methods"]
    assert isinstance(methods, dict), methods
    assert {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "floor", "ceil"} <= set(methods)
    x = torch.tensor([0.3, 0.7, 1.5, 2.9])
    for name, got in methods.items():
        assert isinstance(got, list), (name, got)
        method, function = got
        assert method == function * 2, name  # the method and the free function: the same numbers, bit for bit
        reference = {"rsqrt": torch.rsqrt, "sqrt_rn": torch.sqrt}.get(name) or getattr(torch, name)
        torch.testing.assert_close(torch.tensor(function), reference(x), rtol=2e-7, atol=0, msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_atomic_xchg_exchanges_floats_bit_for_bit(results, dtype):
    assert isinstance(results["exchanges"], dict), results["exchanges"]
    o, old, o_negative, old_negative = results["exchanges"][dtype]
    assert o == [-0.0, 1.5, float("inf"), 13.0] and o_negative == [True, False, False, False]  # the last is masked
    assert old[:3] == [10.0, -0.0, 12.5] and old_negative[:3] == [False, True, False]
