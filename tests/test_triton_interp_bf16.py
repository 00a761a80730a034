"""bf16 arithmetic under Triton's CPU interpreter, with the worker's patches: what a GPU computes (fp32, rounded to
nearest even), where the interpreter alone did integer arithmetic on the bit patterns (harness/sandbox/
triton_interp_bf16.py). torch's own bf16 operations on the CPU round the same way, so they are the expectation."""

from __future__ import annotations

import textwrap

import pytest
import torch

from support import run_interpreted

pytest.importorskip("triton")

KERNELS = textwrap.dedent('''
    import json, sys
    import torch, triton, triton.language as tl
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import triton_interp
    triton_interp.apply()

    @triton.jit
    def elementwise(x_ptr, y_ptr, out_ptr, flags_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(x_ptr + o)
        y = tl.load(y_ptr + o)
        tl.store(out_ptr + 0 * N + o, x * y)
        tl.store(out_ptr + 1 * N + o, x + y)
        tl.store(out_ptr + 2 * N + o, x - y)
        tl.store(out_ptr + 3 * N + o, x / y)
        tl.store(out_ptr + 4 * N + o, -x)
        tl.store(out_ptr + 5 * N + o, tl.fma(x, y, x))
        tl.store(out_ptr + 6 * N + o, tl.minimum(x, y))
        tl.store(out_ptr + 7 * N + o, tl.exp(x.to(tl.float32)).to(tl.bfloat16) * x)
        tl.store(flags_ptr + o, (x < y).to(tl.int32))

    @triton.jit
    def reductions_and_casts(x_ptr, i_ptr, red_ptr, cast_ptr, back_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(x_ptr + o)
        tl.store(red_ptr + 0, tl.sum(x, axis=0))
        tl.store(red_ptr + 1, tl.max(x, axis=0))
        tl.store(red_ptr + 2, tl.min(x, axis=0))
        tl.store(red_ptr + 3, tl.argmax(x, axis=0).to(tl.bfloat16))
        tl.store(cast_ptr + o, tl.load(i_ptr + o).to(tl.bfloat16))       # int32 -> bf16
        tl.store(back_ptr + o, (x * 100.0).to(tl.bfloat16).to(tl.int32))  # bf16 -> int32 (truncation)

    @triton.jit
    def accumulate(x_ptr, acc_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.atomic_add(acc_ptr + o % 4, tl.load(x_ptr + o))  # four lanes per address, two programs

    torch.manual_seed(0)
    N = 32
    x = torch.randn(N).to(torch.bfloat16)
    y = (torch.randn(N) + 0.05).to(torch.bfloat16)
    out = torch.empty(8 * N, dtype=torch.bfloat16)
    flags = torch.empty(N, dtype=torch.int32)
    elementwise[(1,)](x, y, out, flags, N=N)
    ints = torch.arange(-N // 2, N // 2, dtype=torch.int32) * 37
    red = torch.empty(4, dtype=torch.bfloat16)
    cast = torch.empty(N, dtype=torch.bfloat16)
    back = torch.empty(N, dtype=torch.int32)
    reductions_and_casts[(1,)](x, ints, red, cast, back, N=N)
    acc = torch.zeros(4, dtype=torch.bfloat16)
    accumulate[(2,)](x, acc, N=N)
    f = lambda t: t.float().tolist()
    print(json.dumps({"x": f(x), "y": f(y), "out": f(out), "flags": flags.tolist(), "ints": ints.tolist(),
                      "red": f(red), "cast": f(cast), "back": back.tolist(),
                      "acc": f(acc)}))
''')


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreted(tmp_path_factory.mktemp("bf16"), KERNELS)


def _bf16(values):
    return torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)


@pytest.mark.parametrize("row, name, expected", [
    (0, "x * y", lambda x, y: x * y),
    (1, "x + y", lambda x, y: x + y),
    (2, "x - y", lambda x, y: x - y),
    (3, "x / y", lambda x, y: (x.float() / y.float()).bfloat16()),  # Triton divides bf16 in fp32
    (4, "-x", lambda x, y: -x),
    (5, "fma", lambda x, y: (x.float() * y.float() + x.float()).bfloat16()),
    (6, "minimum", lambda x, y: torch.minimum(x, y)),
    (7, "exp(x) * x", lambda x, y: x.float().exp().bfloat16() * x),
])
def test_bf16_elementwise_operations_are_the_rounded_fp32_ones(results, row, name, expected):
    x, y = _bf16(results["x"]), _bf16(results["y"])
    n = len(results["x"])
    got = results["out"][row * n:(row + 1) * n]
    assert got == expected(x, y).float().tolist(), name  # bit for bit: both round fp32 to nearest even


def test_bf16_comparisons_compare_values_not_bit_patterns(results):
    assert results["flags"] == [int(a < b) for a, b in zip(results["x"], results["y"])]
    assert 0 < sum(results["flags"]) < len(results["flags"])  # both outcomes occur, negative values among them
    assert any(a < 0 for a in results["x"])


def test_bf16_reductions_and_casts_use_the_values(results):
    x = results["x"]
    total, largest, smallest, arg = results["red"]
    assert abs(total - sum(x)) <= 0.02 * max(1.0, abs(sum(x)))
    assert (largest, smallest, arg) == (max(x), min(x), float(x.index(max(x))))
    assert results["cast"] == _bf16([float(i) for i in results["ints"]]).float().tolist()
    scaled = _bf16([v * 100.0 for v in x]).float().tolist()
    assert results["back"] == [int(v) for v in scaled]  # toward zero, as fptosi


def test_a_bf16_atomic_add_accumulates_values_lane_by_lane(results):
    x = _bf16(results["x"])
    acc = torch.zeros(4, dtype=torch.bfloat16)
    for _program in range(2):
        for lane, value in enumerate(x):  # each add rounded to bf16, in lane order
            acc[lane % 4] = (acc[lane % 4].float() + value.float()).bfloat16()
    assert results["acc"] == acc.float().tolist()
