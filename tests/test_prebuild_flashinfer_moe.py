"""scripts/prebuild_flashinfer_moe.py: a clear refusal without a cache folder, and a budget that stops the whole
build (the Python that starts it and every compile job under it), leaving the cache for the next run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from support import ROOT

SCRIPT = ROOT / "scripts" / "prebuild_flashinfer_moe.py"


def run(*args: str, env_extra: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CRUCIBLE_FLASHINFER_CACHE"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**env, **env_extra})


def fake_flashinfer(root, body: str) -> str:
    """A stand-in `flashinfer.fused_moe.core` whose module build runs ``body``."""
    pkg = root / "flashinfer" / "fused_moe"
    pkg.mkdir(parents=True)
    (root / "flashinfer" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(f"def get_cutlass_fused_moe_module(backend):\n{body}")
    # the module's build folder: two objects of three sources on disk (how far a cut build got), named as
    # FlashInfer's ninja file names them (folder prefix), not as its get_object_paths() does
    objs = root / "objs"
    objs.mkdir()
    (objs / "moe_gemm_unit0.cuda.o").write_text("")
    (objs / "moe_gemm_unit2.cuda.o").write_text("")
    (objs / "build.ninja").write_text("")
    jit = root / "flashinfer" / "jit"
    jit.mkdir()
    (jit / "__init__.py").write_text("")
    (jit / "fused_moe.py").write_text(
        "from pathlib import Path\n"
        "class _Spec:\n"
        f"    build_dir = Path({str(objs)!r})\n"
        "    sources = [Path(f'/src/moe_gemm/unit{i}.cu') for i in range(3)]\n"
        "    def get_object_paths(self):\n        return [Path('/nowhere') / s.name for s in self.sources]\n"
        "def gen_cutlass_fused_moe_sm90_module(use_fast_build):\n    return _Spec()\n")
    return str(root)


def test_without_a_cache_folder_it_refuses_on_one_line():
    done = run(env_extra={})
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "CRUCIBLE_FLASHINFER_CACHE" in done.stderr


def test_a_build_that_loads_reports_it_and_uses_the_cache_as_flashinfers_workspace(tmp_path):
    seen = tmp_path / "seen"
    body = (f"    import os\n    open({str(seen)!r}, 'w').write(os.environ['FLASHINFER_WORKSPACE_BASE'] + ' ' + "
            f"os.environ['MAX_JOBS'])\n")
    path = fake_flashinfer(tmp_path / "site", body)
    done = run("--jobs", "3", env_extra={"PYTHONPATH": path, "CRUCIBLE_FLASHINFER_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0 and "built and loaded" in done.stdout, done.stdout + done.stderr
    assert seen.read_text() == f"{(tmp_path / 'cache').resolve()} 3"


def test_the_budget_stops_the_build_and_its_compile_jobs(tmp_path):
    marker = tmp_path / "child.pid"
    # the build starts a compile job of its own (as ninja starts nvcc), then waits on it
    body = ("    import subprocess, sys\n"
            "    job = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"    open({str(marker)!r}, 'w').write(str(job.pid))\n"
            "    job.wait()\n")
    path = fake_flashinfer(tmp_path / "site", body)
    started = time.monotonic()
    done = run("--budget-s", "3", "--cache", str(tmp_path / "cache"), env_extra={"PYTHONPATH": path})
    assert done.returncode == 1 and "cut by the budget" in done.stdout, done.stdout + done.stderr
    assert "2 of 3 objects built" in done.stdout, done.stdout  # what the next run on this host starts from
    assert time.monotonic() - started < 30
    job = int(marker.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(job, 0)
        except ProcessLookupError:
            return  # the compile job is gone too
        time.sleep(0.1)
    raise AssertionError(f"the build's compile job {job} outlived the budget")
