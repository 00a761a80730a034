"""libdevice under Triton's CPU interpreter: a kernel that calls it (both the backend-neutral module and the CUDA one,
imported as a module or by name) runs in the worker's interpreter and gives libdevice's values; without the fix it
does not run at all. One subprocess each way, TRITON_INTERPRET=1 set before Triton is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from support import ROOT

pytest.importorskip("triton")

SCRIPT = textwrap.dedent('''
    import json
    import sys

    import torch

    sys.path.insert(0, sys.argv[2])
    if sys.argv[1] == "patched":
        from harness.sandbox import triton_interp
        triton_interp.apply()

    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.language.extra.cuda import libdevice as cuda_libdevice
    from triton.language.extra.libdevice import fast_expf


    @triton.jit
    def gates(x_ptr, y_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(x_ptr + o)
        softplus = tl.where(x > 20.0, x, libdevice.log1p(fast_expf(x)))
        y = libdevice.tanh(x) + cuda_libdevice.rsqrt(tl.abs(x) + 1.0) + libdevice.pow(tl.abs(x), 1.5)
        y = y + softplus + tl.extra.cuda.libdevice.exp2(x) + libdevice.fast_dividef(x, 3.0)
        y = y + tl.where(libdevice.isnan(x / x), 0.0, 1.0)
        tl.store(y_ptr + o, y.to(y_ptr.dtype.element_ty))


    x = torch.linspace(-3, 3, 64)
    x[0] = 0.0
    y = torch.empty(64)
    try:
        gates[(1,)](x, y, N=64)
    except Exception as err:
        print(json.dumps({"error": f"{type(err).__name__}: {err}"[:300]}))
        raise SystemExit(0)
    ref = (torch.tanh(x) + torch.rsqrt(x.abs() + 1) + x.abs() ** 1.5 + torch.nn.functional.softplus(x)
           + torch.exp2(x) + x / 3 + torch.where(torch.isnan(x / x), 0.0, 1.0))
    print(json.dumps({"max_err": (y - ref).abs().max().item(), "dtype": str(y.dtype)}))
''')


def _run(mode: str, tmp_path) -> dict:
    path = tmp_path / "kernels.py"
    path.write_text(SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(path), mode, str(ROOT)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_libdevice_runs_under_the_interpreter_with_the_fix_and_not_without(tmp_path):
    patched = _run("patched", tmp_path)
    assert "error" not in patched and patched["max_err"] < 1e-4, patched
    assert "error" in _run("plain", tmp_path)


def test_a_libdevice_function_the_table_lacks_names_itself():
    from harness.sandbox.triton_libdevice import _function

    assert _function("__nv_fast_expf")(1.0) == pytest.approx(2.718281828)
    assert _function("__nv_fmaxf")(1.0, 2.0) == 2.0 and _function("__nv_umax")(3, 4) == 4
    assert _function("__nv_fmaf_rn")(2.0, 3.0, 1.0) == 7.0 and _function("__nv_fdiv_rn")(1.0, 4.0) == 0.25
    with pytest.raises(NotImplementedError, match="__nv_byte_perm"):
        _function("__nv_byte_perm")
