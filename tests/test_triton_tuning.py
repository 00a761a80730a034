"""The replay audit's diagnosis: which of the solution's Triton kernels autotuned during a call."""

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

from harness.sandbox import triton_tuning  # noqa: E402

KERNELS = textwrap.dedent('''
    import triton
    import triton.language as tl

    CONFIGS = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]


    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit
    def tuned(x, n, BLOCK: tl.constexpr):
        pass


    @triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})
    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit
    def tuned_under_heuristics(x, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        pass


    @triton.jit
    def plain(x):
        pass


    def run(x):
        pass
''')


@pytest.fixture
def solution(tmp_path, monkeypatch):
    folder = tmp_path / "solution"
    folder.mkdir()
    (folder / "crucible_tuning_probe.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("crucible_tuning_probe")
    yield module
    sys.modules.pop("crucible_tuning_probe", None)


def _folder(module):
    return Path(module.__file__).parent


def test_the_solution_s_autotuners_are_found_through_their_decorators(solution):
    folder = _folder(solution)
    found = triton_tuning.autotuners(folder)
    assert len(found) == 2  # the plain jit kernel is no autotuner; the heuristics' inner one is
    assert {id(t) for t in found} == {id(solution.tuned), id(solution.tuned_under_heuristics.fn)}


def test_keys_tuned_since_a_snapshot_are_counted_and_new_autotuners_count_whole(solution):
    folder = _folder(solution)
    before = triton_tuning.tuned_keys(triton_tuning.autotuners(folder))
    assert triton_tuning.tunings_since(before, folder) == 0
    solution.tuned.cache[(7, "torch.int32")] = solution.CONFIGS[0]  # what Autotuner.run does on a new key
    solution.tuned.cache[(9, "torch.int32")] = solution.CONFIGS[1]
    assert triton_tuning.tunings_since(before, folder) == 2
    solution.tuned_under_heuristics.fn.cache[(3,)] = solution.CONFIGS[0]
    assert triton_tuning.tunings_since({}, folder) == 3  # nothing known before: every key counts


def test_the_build_s_package_is_scanned_whole(tmp_path, monkeypatch):
    """The harness imports a solution as a package (Built.package): the entry point in one folder, its autotuned
    kernels in a sibling one, both under the package."""
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.sandbox.build import build, package_folder
    from support import KV8_PS1

    entry = ("from ..ops import gemm  # noqa: F401\n\n\n"
             "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n    pass\n")
    solution = Solution.model_validate({
        "name": "tuned_package", "definition": KV8_PS1, "author": "tests",
        "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "entry/main.py::run",
                 "destination_passing_style": True},
        "sources": [{"path": "entry/main.py", "content": entry}, {"path": "ops/gemm.py", "content": KERNELS}]})
    monkeypatch.setattr(sys, "path", list(sys.path))  # the build puts its source root on the path
    built = build(solution, Dataset().definition(KV8_PS1), tmp_path, have_gpu=False)
    try:
        assert built.fn is not None, built.log
        assert built.package == package_folder(solution, tmp_path)
        assert len(triton_tuning.autotuners(built.package)) == 2  # the kernels in ops/, beside the entry's folder
    finally:
        for name in [n for n in sys.modules if n.startswith(built.package.name if built.package else "-")]:
            sys.modules.pop(name)


def test_modules_outside_the_solution_and_solutions_without_a_package_are_not_scanned(solution, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert triton_tuning.autotuners(other) == []
    assert triton_tuning.autotuners(None) == []  # no Python package (a CUDA solution): nothing to scan


def test_hostile_entries_in_sys_modules_and_raising_attributes_do_not_break_the_scan(solution, monkeypatch):
    class Raises:
        @property
        def __file__(self):
            raise RuntimeError("no")

    class Decoy:  # claims to be Triton's, and its `fn` raises
        __module__ = "triton.runtime.jit"

        @property
        def fn(self):
            raise RuntimeError("no")

    monkeypatch.setitem(sys.modules, "crucible_hostile_entry", Raises())
    monkeypatch.setattr(solution, "decoy", Decoy(), raising=False)
    assert len(triton_tuning.autotuners(_folder(solution))) == 2
