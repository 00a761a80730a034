"""What Triton's CPU interpreter cannot run though a GPU runs it (inline PTX, libdevice calls, a bitwise operation
on a block and a scalar of booleans) is said so, SKIPPED, instead of blamed on the candidate as a RUNTIME_ERROR;
an error the candidate's own code raises, or an interpreter message it wrote itself, stays its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness.pipeline.workload_evaluation import interpreter_limit

KERNELS = textwrap.dedent('''
    import json, sys, traceback
    import torch, triton, triton.language as tl
    from triton.language.extra.cuda import libdevice
    from harness.sandbox import triton_interp
    triton_interp.apply()

    @triton.jit
    def inline_ptx(x, y, n: tl.constexpr):
        o = tl.arange(0, n)
        r = tl.inline_asm_elementwise("ex2.approx.f32 $0, $1;", "=r,r", [tl.load(x + o)], dtype=tl.float32,
                                      is_pure=True, pack=1)
        tl.store(y + o, r)

    @triton.jit
    def libdevice_call(x, y, n: tl.constexpr):  # evaluated with numpy (harness/sandbox/triton_libdevice.py)
        o = tl.arange(0, n)
        tl.store(y + o, libdevice.exp2(tl.load(x + o)))

    @triton.jit
    def libdevice_unknown(x, y, n: tl.constexpr):  # one the numpy table lacks
        o = tl.arange(0, n)
        v = tl.load(x + o).to(tl.int32, bitcast=True)
        tl.store(y + o, libdevice.byte_perm(v, v, v).to(tl.float32, bitcast=True))

    @triton.jit
    def block_and_scalar(x, y, n: tl.constexpr):
        o = tl.arange(0, n)
        v = tl.load(x + o)
        tl.store(y + o, v, mask=(o < 8) & (tl.max(v, 0) > float("-inf")))

    @triton.jit
    def own_mistake(x, y, n: tl.constexpr):
        o = tl.arange(0, n)
        tl.store(y + o, tl.load(x + tl.arange(0, 8)) + tl.load(x + o))  # 8 against 16: the kernel's own error

    out = {}
    try:  # outside any kernel: Triton's tutorials ask its driver for the device and its SM count
        triton.runtime.driver.active.utils.get_device_properties(0)
        out["driver_query"] = None
    except BaseException as e:
        out["driver_query"] = [f"{type(e).__name__}: {e}", traceback.format_exc()]
    try:  # a workspace on the GPU by name, as code that only ever ran on one writes it
        torch.empty(16, device="cuda")
        out["cuda_device"] = None
    except BaseException as e:
        out["cuda_device"] = [f"{type(e).__name__}: {e}", traceback.format_exc()]
    x, y = torch.rand(16), torch.empty(16)
    for k in (inline_ptx, libdevice_call, libdevice_unknown, block_and_scalar, own_mistake):
        try:
            k[(1,)](x, y, 16)
            out[k.fn.__name__] = None
        except BaseException as e:
            out[k.fn.__name__] = [f"{type(e).__name__}: {e}", traceback.format_exc()]
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def errors():
    proc = subprocess.run([sys.executable, "-c", KERNELS], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel, limit", [
    ("inline_ptx", "inline PTX"),
    ("libdevice_unknown", "libdevice"),
    ("block_and_scalar", "bitwise operation"),
    ("driver_query", "GPU driver"),
    ("cuda_device", "CUDA device"),
])
def test_interpreter_limits_are_named(errors, kernel, limit):
    if kernel in ("driver_query", "cuda_device") and errors[kernel] is None:
        pytest.skip("this host has a GPU")
    assert errors[kernel] is not None
    assert limit in (interpreter_limit(*errors[kernel]) or ""), errors[kernel][0]


def test_libdevice_runs(errors):
    assert errors["libdevice_call"] is None


def test_the_candidates_own_errors_stay_its_own(errors):
    assert errors["own_mistake"] is not None and interpreter_limit(*errors["own_mistake"]) is None
    # a message the candidate wrote itself, raised from its own code, is not the interpreter's
    assert interpreter_limit("InterpreterError: inline_asm not supported in interpreter mode",
                             'File "/tmp/work/pkg/main.py", line 3, in run\n    raise InterpreterError(...)') is None
    assert interpreter_limit("AssertionError: Torch not compiled with CUDA enabled",
                             'File "/tmp/work/pkg/main.py", line 3, in run\n    raise AssertionError(...)') is None


def test_a_workload_the_solution_made_unchecked_blocks_promotion(tiny_dataset_root, tmp_path):
    """A solution wrong on one workload can stop the interpreter there on purpose (inline PTX on that batch size
    only): the workload is SKIPPED, as an honest one's is, but it was never checked, so it is not promotable."""
    from sandbox_attacks import HONEST
    from support import submit_triton_cli

    source = HONEST.replace(
        "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n",
        "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
        "    if q.shape[0] == 3:  # the workload this solution gets wrong\n"
        "        _asm[(1,)](kv_indptr.clone())\n"
        "        output.zero_()\n"
        "        return\n") + textwrap.dedent('''

        @triton.jit
        def _asm(x_ptr):
            x = tl.load(x_ptr)
            tl.store(x_ptr, tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32,
                                                      is_pure=True, pack=1))
        ''')
    result = submit_triton_cli(source, "unchecked", tmp_path, tiny_dataset_root, ("tiny_b2_t40", "tiny_b3_t96"))
    assert [w["status"] for w in result["workloads"]] == ["PASSED", "SKIPPED"], result["workloads"]
    assert result["promotable"] is False  # and for that alone: nothing else about it is wrong on this host
    assert [b.split(":")[0] for b in result["promotion_blockers"]] == ["tiny_b3_t96"], result["promotion_blockers"]
    assert "never checked" in result["promotion_blockers"][0]
