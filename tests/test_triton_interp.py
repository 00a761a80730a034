"""The Triton interpreter fixes. Kernels run in subprocesses with TRITON_INTERPRET=1 set before Triton is
imported, once with ``harness.sandbox.triton_interp.apply()`` and once without, to show each fix matters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from harness.sandbox.triton_interp import _bf16_bits_to_f32, _f32_to_bf16_bits_rtne

from support import ROOT

pytest.importorskip("triton")

KERNELS = textwrap.dedent('''
    import json
    import sys

    import torch
    import triton
    import triton.language as tl

    sys.path.insert(0, sys.argv[2])
    applied = None
    if sys.argv[1] == "patched":
        from harness.sandbox import triton_interp
        applied = [triton_interp.apply(), triton_interp.apply()]


    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
        m = tl.arange(0, M)
        k = tl.arange(0, K)
        n = tl.arange(0, N)
        a = tl.load(a_ptr + m[:, None] * K + k[None, :])
        b = tl.load(b_ptr + k[:, None] * N + n[None, :])
        tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b))


    @triton.jit
    def cast_kernel(x_ptr, y_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(y_ptr + o, tl.load(x_ptr + o).to(y_ptr.dtype.element_ty))


    g = torch.Generator().manual_seed(0)
    a = torch.randn(16, 32, generator=g).to(torch.bfloat16)
    b = torch.randn(32, 16, generator=g).to(torch.bfloat16)
    c = torch.empty(16, 16, dtype=torch.float32)
    dot_kernel[(1,)](a, b, c, 16, 32, 16)
    ref = a.float() @ b.float()
    dot_rel = ((c - ref).norm() / ref.norm()).item()

    x = torch.tensor(json.loads(sys.argv[3]), dtype=torch.float32)
    y = torch.empty(x.numel(), dtype=torch.bfloat16)
    cast_kernel[(1,)](x, y, x.numel())

    x8 = torch.tensor(json.loads(sys.argv[4]), dtype=torch.float32)
    y8 = torch.empty(x8.numel(), dtype=torch.float8_e4m3fn)
    cast_kernel[(1,)](x8, y8, x8.numel())

    print(json.dumps({"applied": applied, "dot_rel": dot_rel,
                      "bf16_bits": y.view(torch.int16).tolist(), "fp8": y8.float().tolist()}))
''')

ONE_ULP = 2.0 ** -7  # bf16 spacing at 1.0
# fp32 values around bf16 rounding boundaries (16 of them: tl.arange needs a power of two)
BF16_CASES = [
    1.00390625 + 1e-6,       # just above half an ulp: rounds up to 1.0078125 (truncation gives 1.0)
    1.00390625,              # exactly half, even neighbour is 1.0: stays 1.0
    1.0 + 1.5 * ONE_ULP,     # exactly half between 1+ulp (odd) and 1+2ulp (even): rounds up
    1.00390625 - 1e-6,       # just below half: 1.0
    -(1.00390625 + 1e-6),    # negative values round the same way
    3.0, 1e-3, -7.5, 0.1, -0.1, 65504.0, 1e30, -1e-30, 0.0, -0.0, 2.0 ** -130,
]
FP8_CASES = [1.953, -1.953, 0.3, 3.3, 100.0, 0.01, 1.0, -2.5, 447.0, 0.0, 1.9375, 1.97, 6.1, -0.7, 17.0, 240.0]


def _run(mode: str, tmp_path) -> subprocess.Popen:
    script = tmp_path / "kernels.py"
    script.write_text(KERNELS)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.Popen([sys.executable, str(script), mode, str(ROOT), json.dumps(BF16_CASES),
                             json.dumps(FP8_CASES)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    procs = {mode: _run(mode, tmp_path_factory.mktemp(mode)) for mode in ("patched", "raw")}  # both at once
    out = {}
    for mode, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-3000:]
        out[mode] = json.loads(stdout.strip().splitlines()[-1])
    return out


def test_apply_reports_success_and_is_idempotent(results):
    assert results["patched"]["applied"] == [True, True]
    assert results["raw"]["applied"] is None


def test_bf16_dot_matches_torch_after_apply(results):
    assert results["patched"]["dot_rel"] < 1e-2


def test_bf16_dot_is_wrong_without_apply(results):
    # the unpatched interpreter multiplies the raw uint16 bit patterns
    assert results["raw"]["dot_rel"] > 1e3


def _torch_bf16_bits(values) -> list[int]:
    return torch.tensor(values, dtype=torch.float32).to(torch.bfloat16).view(torch.int16).tolist()


def test_fp32_to_bf16_rounds_to_nearest_even_after_apply(results):
    got = results["patched"]["bf16_bits"]
    assert got == _torch_bf16_bits(BF16_CASES)
    as_float = torch.tensor(got, dtype=torch.int16).view(torch.bfloat16).float().tolist()
    assert as_float[:4] == [1.0078125, 1.0, 1.015625, 1.0]


def test_fp32_to_bf16_truncates_without_apply(results):
    got = results["raw"]["bf16_bits"]
    assert got != _torch_bf16_bits(BF16_CASES)
    assert torch.tensor(got[:1], dtype=torch.int16).view(torch.bfloat16).item() == 1.0  # truncated


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this torch has no float8")
def test_fp8_cast_rounds_like_torch_after_apply(results):
    got = results["patched"]["fp8"]
    assert got == torch.tensor(FP8_CASES).to(torch.float8_e4m3fn).float().tolist()
    assert got[:2] == [2.0, -2.0]


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this torch has no float8")
def test_fp8_cast_is_wrong_without_apply(results):
    assert results["raw"]["fp8"][0] == 1.0  # 1.953 -> 1.0: the bug the fix exists for


# -- the bit arithmetic itself, in-process (numpy only) ---------------------------------------------


def test_rtne_matches_torch_on_many_values():
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2 ** 31), 2 ** 31 - 1, (200_000,), generator=g, dtype=torch.int64).to(torch.int32)
    values = bits.view(torch.float32)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 3.4028235e38, -3.4028235e38, 1e-45, -1e-45,
                            1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.17549435e-38])
    values = torch.cat([values, special])
    finite = ~torch.isnan(values)
    ours = _f32_to_bf16_bits_rtne(values.numpy())
    want = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours[finite.numpy()], want[finite.numpy()])
    # NaNs become the canonical quiet NaN, still a NaN
    assert (ours[~finite.numpy()] == 0x7FC0).all() and (~finite).sum() > 0


def test_bf16_bits_widen_exactly():
    values = torch.randn(1000, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    widened = _bf16_bits_to_f32(values.view(torch.int16).numpy().view(np.uint16))
    assert np.array_equal(widened, values.float().numpy())
