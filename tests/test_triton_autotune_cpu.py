"""``@triton.autotune`` with several configs on a CPU host. Under TRITON_INTERPRET=1 Triton's autotuner benchmarks
through the GPU driver and fails ("0 active drivers"); the worker's interpreter patches make it keep the first config
that survives pruning, everything else of the autotuner as on a GPU. Kernels run in subprocesses with the variable
set before Triton is imported, patched and raw; then honest autotuned solutions go through the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import KV8_PS1, ROOT, solution_dict

pytest.importorskip("triton")

SCRIPT = textwrap.dedent('''
    import json
    import sys

    import torch
    import triton
    import triton.language as tl

    sys.path.insert(0, sys.argv[2])
    if sys.argv[1] == "patched":
        from harness.sandbox import triton_interp
        triton_interp.apply()

    out = {}
    runs = []  # (name, BLOCK) per kernel execution: a config's pre_hook runs right before each launch with it


    def cfg(block, name="", warps=4):
        return triton.Config({"BLOCK": block}, num_warps=warps, pre_hook=lambda a: runs.append((name, a["BLOCK"])))


    @triton.jit
    def _write_block(out_ptr, n, BLOCK: tl.constexpr):
        tl.store(out_ptr, BLOCK + n * 0)


    def attempt(name, fn):
        try:
            out[name] = fn()
        except Exception as err:
            out[name] = {"error": f"{type(err).__name__}: {err}"}


    plain = triton.autotune(configs=[cfg(16, "plain"), cfg(32, "plain", 8)], key=["n"])(_write_block)

    def basic():
        y = torch.zeros(1, dtype=torch.int32)
        plain[(1,)](y, 3)
        first = y.item()
        plain[(1,)](y, 3)  # same key: cached, no new tuning
        plain[(1,)](y, 5)  # new key: tuned again
        return {"block": first, "keys": len(plain.cache), "runs": [r for r in runs if r[0] == "plain"]}

    attempt("basic", basic)

    pruned = triton.autotune(configs=[cfg(16), cfg(32), cfg(64)], key=["n"], prune_configs_by={
        "early_config_prune": lambda configs, nargs, **kw: [c for c in configs if c.kwargs["BLOCK"] > 16]})(
        _write_block)
    modelled = triton.autotune(configs=[cfg(16), cfg(32), cfg(64)], key=["n"], prune_configs_by={
        "perf_model": lambda **kw: abs(kw["BLOCK"] - 64), "top_k": 1})(_write_block)

    def choose(kernel):
        y = torch.zeros(1, dtype=torch.int32)
        kernel[(1,)](y, 1)
        return y.item()

    attempt("early_prune", lambda: choose(pruned))
    attempt("perf_model", lambda: choose(modelled))

    # heuristics on either side of autotune
    @triton.heuristics({"BLOCK": lambda a: 128})
    @triton.autotune(configs=[triton.Config({}, num_warps=4), triton.Config({}, num_warps=8)], key=["n"])
    @triton.jit
    def outer_heuristic(out_ptr, n, BLOCK: tl.constexpr):
        tl.store(out_ptr, BLOCK + n * 0)

    @triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 4})], key=["n"])
    @triton.heuristics({"TWICE": lambda a: a["BLOCK"] * 2})
    @triton.jit
    def inner_heuristic(out_ptr, n, BLOCK: tl.constexpr, TWICE: tl.constexpr):
        tl.store(out_ptr, TWICE + n * 0)

    attempt("outer_heuristic", lambda: choose(outer_heuristic))
    attempt("inner_heuristic", lambda: choose(inner_heuristic))

    @triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})], key=["n"],
                     reset_to_zero=["acc_ptr"])
    @triton.jit
    def accumulate(acc_ptr, n, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        tl.atomic_add(acc_ptr + o, tl.full([BLOCK], 1.0, tl.float32) + n * 0)

    def reset():
        acc = torch.full((8,), 5.0)
        accumulate[(1,)](acc, 0)  # zeroed once after tuning (as on a GPU), then one launch with BLOCK 4
        return acc.tolist()

    attempt("reset_to_zero", reset)

    @triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})], key=["n"],
                     restore_value=["x_ptr"])
    @triton.jit
    def increment(x_ptr, n, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        tl.store(x_ptr + o, tl.load(x_ptr + o) + 1.0 + n * 0)

    def restore():
        x = torch.zeros(4)
        increment[(1,)](x, 0)
        return x.tolist()

    attempt("restore_value", restore)

    hooked = []
    with_hook = triton.autotune(configs=[cfg(16), cfg(32)], key=["n"],
                                pre_hook=lambda a, reset_only=False: hooked.append(reset_only))(_write_block)
    attempt("user_pre_hook", lambda: [choose(with_hook), hooked])

    def conflict():
        y = torch.zeros(1, dtype=torch.int32)
        plain[(1,)](y, 99, BLOCK=64)
        return y.item()

    attempt("conflict", conflict)

    def off_the_interpreter():  # a GPU process: the autotuner asks the driver for its benchmarker, as ever
        import os
        os.environ["TRITON_INTERPRET"] = "0"
        try:
            return str(triton.autotune(configs=[cfg(16), cfg(32)], key=["n"])(_write_block).do_bench)
        finally:
            os.environ["TRITON_INTERPRET"] = "1"

    attempt("off_the_interpreter", off_the_interpreter)
    print(json.dumps(out))
''')


def _run(mode: str, tmp_path: Path) -> subprocess.Popen:
    script = tmp_path / "autotune.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.Popen([sys.executable, str(script), mode, str(ROOT)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    procs = {mode: _run(mode, tmp_path_factory.mktemp(mode)) for mode in ("patched", "raw")}
    out = {}
    for mode, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr[-3000:]
        out[mode] = json.loads(stdout.strip().splitlines()[-1])
    return out


def test_the_raw_interpreter_cannot_autotune(results):
    assert "0 active drivers" in results["raw"]["basic"]["error"]


def test_the_first_config_is_kept_once_per_key_and_run_once_per_call(results):
    basic = results["patched"]["basic"]
    assert basic["block"] == 16 and basic["keys"] == 2
    assert basic["runs"] == [["plain", 16]] * 3  # no config is run to be timed


def test_pruning_decides_which_config_is_first(results):
    assert results["patched"]["early_prune"] == 32
    assert results["patched"]["perf_model"] == 64  # the model's best estimate


def test_heuristics_stacked_with_autotune(results):
    assert results["patched"]["outer_heuristic"] == 128
    assert results["patched"]["inner_heuristic"] == 16


def test_reset_restore_and_hooks_as_on_a_gpu(results):
    patched = results["patched"]
    assert patched["reset_to_zero"] == [1.0] * 4 + [0.0] * 4
    assert patched["restore_value"] == [1.0] * 4
    assert patched["user_pre_hook"] == [16, [True]]  # the autotuner's reset-only call after tuning


def test_autotuned_meta_parameters_passed_at_launch_still_conflict(results):
    assert "Conflicting meta-parameters: BLOCK" in results["patched"]["conflict"]["error"]


def test_off_the_interpreter_the_driver_benchmarks(results):
    assert "0 active drivers" in results["patched"]["off_the_interpreter"]["error"]


# -- through the harness: honest autotuned solutions pass on CPU ----------------------------------------------


def _autotuned_example() -> dict:
    """The shipped example with its BLOCK_N / warps / stages left to a two-config autotune."""
    source = (ROOT / "examples" / "triton_gqa_decode" / "kernel.py").read_text()
    source = source.replace("@triton.jit\ndef _gqa_decode_kernel(", (
        "@triton.autotune(configs=[triton.Config({'BLOCK_N': 64}, num_warps=4, num_stages=2),\n"
        "                          triton.Config({'BLOCK_N': 32}, num_warps=8, num_stages=3)],\n"
        "                 key=['GROUP', 'HEAD_DIM', 'PAGE_SIZE'])\n"
        "@triton.jit\ndef _gqa_decode_kernel("), 1)
    launch = "HAS_LAST_LEN=kv_last_page_len is not None, BLOCK_N=64,\n        num_warps=4, num_stages=2,\n"
    assert "@triton.autotune" in source and launch in source
    return solution_dict(source.replace(launch, "HAS_LAST_LEN=kv_last_page_len is not None,\n"),
                         language="triton", name="autotuned_example")


def _gate_corpus_autotune() -> dict:
    folder = ROOT / "tests" / "gate_corpus" / "honest" / "triton_autotune"
    return solution_dict((folder / "main.py").read_text(), entry="main.py::run", language="triton",
                         name="gate_corpus_autotune")


def test_autotuned_solutions_pass_through_the_harness_on_cpu(tiny_dataset_root, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session, SubmitOptions

    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], audit_level="off", timeout_s=120)) as s:
        for data in (_autotuned_example(), _gate_corpus_autotune()):
            assert data["definition"] == KV8_PS1
            result = s.submit(Solution.model_validate(data))
            assert [w.status for w in result.workloads] == ["PASSED"], [w.message for w in result.workloads]
