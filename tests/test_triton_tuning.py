"""The replay audit's diagnosis: which of the solution's Triton kernels autotuned during a call."""

import importlib
import sys
import textwrap

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


def test_the_solution_s_autotuners_are_found_through_their_decorators(solution):
    folder = triton_tuning.solution_folder(solution.run)
    assert folder is not None and folder.endswith("solution/")
    found = triton_tuning.autotuners(folder)
    assert len(found) == 2  # the plain jit kernel is no autotuner; the heuristics' inner one is
    assert {id(t) for t in found} == {id(solution.tuned), id(solution.tuned_under_heuristics.fn)}


def test_keys_tuned_since_a_snapshot_are_counted_and_new_autotuners_count_whole(solution):
    folder = triton_tuning.solution_folder(solution.run)
    before = triton_tuning.tuned_keys(triton_tuning.autotuners(folder))
    assert triton_tuning.tunings_since(before, folder) == 0
    solution.tuned.cache[(7, "torch.int32")] = solution.CONFIGS[0]  # what Autotuner.run does on a new key
    solution.tuned.cache[(9, "torch.int32")] = solution.CONFIGS[1]
    assert triton_tuning.tunings_since(before, folder) == 2
    solution.tuned_under_heuristics.fn.cache[(3,)] = solution.CONFIGS[0]
    assert triton_tuning.tunings_since({}, folder) == 3  # nothing known before: every key counts


def test_a_solution_imported_as_a_package_is_scanned_whole(tmp_path, monkeypatch):
    """The harness imports a solution as a package: the entry point in one folder, kernels in a sibling one."""
    root = tmp_path / "src" / "crucible_solution_probe"
    (root / "entry").mkdir(parents=True)
    (root / "ops").mkdir()
    (root / "ops" / "gemm.py").write_text(KERNELS)
    (root / "entry" / "main.py").write_text("from ..ops import gemm\n\ndef run(x):\n    return gemm.run(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    try:
        main = importlib.import_module("crucible_solution_probe.entry.main")
        folder = triton_tuning.solution_folder(main.run)
        assert folder == str(root) + "/"
        assert len(triton_tuning.autotuners(folder)) == 2  # the kernels in ops/, beside the entry point's folder
    finally:
        for name in [n for n in sys.modules if n.startswith("crucible_solution_probe")]:
            sys.modules.pop(name)


def test_modules_outside_the_solution_and_callables_without_a_module_are_not_scanned(solution, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert triton_tuning.autotuners(str(other) + "/") == []
    assert triton_tuning.autotuners(None) == []
    assert triton_tuning.solution_folder(len) is None  # a builtin: no file


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
    folder = triton_tuning.solution_folder(solution.run)
    assert len(triton_tuning.autotuners(folder)) == 2
