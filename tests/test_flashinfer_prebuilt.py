"""FlashInfer loads the modules the baselines' workers compiled before, on this host or one they were carried to
(harness/sandbox/flashinfer_prebuilt: the stand-in ``flashinfer_jit_cache`` names FlashInfer's own JIT folder as
its prebuilt folder); only the baselines' workers get it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.data.options import SubmitOptions
from harness.pipeline.worker_options import FLASHINFER_PREBUILT, worker_options_for
from harness.sandbox.isolation import SandboxPolicy
from harness.sandbox.runner import scrubbed_environment


def fake_flashinfer(site: Path, version: str, archs: str) -> None:
    """The two FlashInfer modules the stand-in reads, as loaded when flashinfer.jit.env asks it."""
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("")
    (site / "flashinfer" / "version.py").write_text(f"__version__ = {version!r}\n")
    (site / "flashinfer" / "compilation_context.py").write_text(
        f"class CompilationContext:\n    def __init__(self):\n        self.TARGET_CUDA_ARCHS = {archs}\n")


def ask(site: Path, workspace: Path, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FLASHINFER_PREBUILT), str(site)]),
           "FLASHINFER_WORKSPACE_BASE": str(workspace)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("archs, folder", [("{(9, '0a')}", "90a"), ("{(10, '0a'), (9, '0a')}", "90a_100a"),
                                           ("{(12, '0f'), (9, '0a'), (10, '3a')}", "90a_103a_120f")])
def test_the_stand_in_answers_flashinfers_own_jit_folder(tmp_path, archs, folder):
    fake_flashinfer(tmp_path / "site", "0.6.18.post1", archs)
    out = ask(tmp_path / "site", tmp_path / "ws", """
        import importlib.util
        assert importlib.util.find_spec("flashinfer_jit_cache") is not None  # what FlashInfer asks first
        import flashinfer_jit_cache
        print(flashinfer_jit_cache.__version__, flashinfer_jit_cache.get_jit_cache_dir())
    """)
    version, where = out.split()
    assert version == "0.6.18.post1"  # FlashInfer refuses a prebuilt folder of another version
    assert Path(where) == tmp_path / "ws" / ".cache" / "flashinfer" / "0.6.18.post1" / folder / "cached_ops"


def test_only_the_baselines_workers_get_it(tmp_path):
    assert (FLASHINFER_PREBUILT / "flashinfer_jit_cache" / "__init__.py").is_file()
    package_root = str(Path(__file__).resolve().parents[1])
    for role, first in (("baseline", str(FLASHINFER_PREBUILT)), ("reference", package_root),
                        ("candidate", package_root)):
        options = worker_options_for(role, SubmitOptions(), SandboxPolicy(), tmp_path, tmp_path / "archive", True)
        path = scrubbed_environment(dict(options.environment))["PYTHONPATH"].split(os.pathsep)
        assert path[0] == first, role  # the stand-in first, then the harness package, never in its place
        assert package_root in path and (str(FLASHINFER_PREBUILT) in path) == (role == "baseline"), role


@pytest.mark.gpu
def test_real_flashinfer_takes_its_jit_folder_as_prebuilt(tmp_path):
    # found, not imported: importing FlashInfer initialises CUDA in this process, and the GPU tests after this one
    # assert that the harness's process never does (test_gpu_harness)
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.origin:
        pytest.skip("flashinfer is not installed")
    site = Path(spec.origin).resolve().parents[1]
    out = ask(site, tmp_path / "ws", """
        from flashinfer.jit import env
        assert env.FLASHINFER_AOT_DIR == env.FLASHINFER_JIT_DIR, (env.FLASHINFER_AOT_DIR, env.FLASHINFER_JIT_DIR)
        print(env.FLASHINFER_JIT_DIR)
    """)
    assert Path(out).is_relative_to(tmp_path / "ws")
