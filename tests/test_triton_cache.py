"""A library's Triton kernel under the name of a function of the solution's own: the worker's private Triton
cache says where each compiled kernel was defined (harness.sandbox.triton_cache), and attribution counts a kernel
compiled from outside the solution as the library's."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap

import pytest

from harness.sandbox.triton_cache import compiled_kernels, kernels_outside

pytest.importorskip("triton")

KERNEL = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def merge_state_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
''')


def _compile_into(cache, module_dir, module_name, monkeypatch):
    """Compile the module's kernel for sm_90 (no GPU needed) into ``cache``, as a worker's first launch does."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.syspath_prepend(str(module_dir))
    module = importlib.import_module(module_name)
    try:
        src = ASTSource(module.merge_state_kernel, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                        constexprs={"BLOCK": 128})
        triton.compile(src, target=GPUTarget("cuda", 90, 32))
    finally:
        sys.modules.pop(module_name, None)


def test_a_library_kernel_and_a_solution_s_own_are_told_apart_by_where_triton_says_they_were_defined(
        tmp_path, monkeypatch):
    cache = tmp_path / "home" / ".triton"
    library = tmp_path / "site-packages" / "somelib"
    solution = tmp_path / "work" / "src" / "crucible_solution_abc"
    # other code under one name (identical code has one cache entry, the first compiler's: then it is the same kernel
    # whichever file launched it)
    for folder, name, text in ((library, "somelib_cascade", KERNEL.replace("* 2", "* 3")),
                               (solution, "crucible_own_kernel", KERNEL)):
        folder.mkdir(parents=True)
        (folder / f"{name}.py").write_text(text)
        _compile_into(cache, folder, name, monkeypatch)
    found = compiled_kernels(cache)
    assert found == {"merge_state_kernel": {str((library / "somelib_cascade.py").resolve()),
                                            str((solution / "crucible_own_kernel.py").resolve())}}
    assert kernels_outside(cache, solution) == ["merge_state_kernel"]  # one variant came from the library
    assert kernels_outside(cache, tmp_path) == []  # both files under this folder


def test_only_the_solution_s_own_kernels_compiled_means_nothing_from_elsewhere(tmp_path, monkeypatch):
    cache = tmp_path / ".triton"
    solution = tmp_path / "src" / "crucible_solution_def"
    solution.mkdir(parents=True)
    (solution / "crucible_only_own.py").write_text(KERNEL)
    _compile_into(cache, solution, "crucible_only_own", monkeypatch)
    assert kernels_outside(cache, solution) == []
    assert kernels_outside(tmp_path / "no-cache", solution) == []  # nothing compiled: nothing to say


def test_a_solution_s_kernel_calling_a_library_s_jit_helper_is_the_solution_s(tmp_path, monkeypatch):
    """Only the kernel's own definition counts ("#loc"); the helpers it inlines come after it ("#locN")."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    library, solution = tmp_path / "site-packages", tmp_path / "src" / "crucible_solution_helper"
    library.mkdir()
    solution.mkdir(parents=True)
    (library / "crucible_lib_helpers.py").write_text(
        "import triton\n\n\n@triton.jit\ndef twice(x):\n    return x * 2\n")
    (solution / "crucible_calls_helper.py").write_text(KERNEL.replace("import triton.language as tl\n",
                                                                      "import triton.language as tl\n"
                                                                      "from crucible_lib_helpers import twice\n")
                                                       .replace("* 2, mask", "* 0 + twice(offs), mask"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(library))
    monkeypatch.syspath_prepend(str(solution))
    try:
        module = importlib.import_module("crucible_calls_helper")
        src = ASTSource(module.merge_state_kernel, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                        constexprs={"BLOCK": 128})
        triton.compile(src, target=GPUTarget("cuda", 90, 32))
    finally:
        sys.modules.pop("crucible_calls_helper", None)
        sys.modules.pop("crucible_lib_helpers", None)
    source = next((tmp_path / "cache").glob("*/merge_state_kernel.source")).read_text()
    assert "crucible_lib_helpers.py" in source  # the helper's code is in the kernel...
    assert kernels_outside(tmp_path / "cache", solution) == []  # ...which is still the solution's


def _inductor_copy(kernel_name: str, body: str) -> str:
    """A module as torch.compile writes one for a user-defined Triton kernel: its imports, Inductor's decorators and the
    kernel's source copied (re-indented by `splice`, renamed `NAME_0` with `unique_user_kernel_names`)."""
    return ("import triton\nimport triton.language as tl\n\n\n"
            "class triton_heuristics:  # Inductor's, which needs a device\n"
            "    user_autotune = staticmethod(lambda **meta: (lambda fn: fn))\n\n\n"
            "@triton_heuristics.user_autotune(configs=[], inductor_meta={}, triton_meta={}, filename=__file__,"
            " custom_kernel=True)\n@triton.jit\n"
            + body.split("@triton.jit\n", 1)[1].replace("def merge_state_kernel(", f"def {kernel_name}(")
            .replace("        offs", "        # copied\n        offs"))


@pytest.mark.parametrize("kernel_name, body, own", [
    ("merge_state_kernel", KERNEL, True),  # torch.compile's copy of the solution's own kernel
    ("merge_state_kernel_0", KERNEL, True),  # ...under Inductor's unique name
    ("merge_state_kernel", KERNEL.replace("* 2", "* 3"), False),  # other code under the name of the solution's
    ("merge_state_kernel_0", KERNEL.replace("* 2", "* 3"), False),
])
def test_torch_compile_s_copy_of_the_solution_s_kernel_is_the_solution_s(tmp_path, monkeypatch, kernel_name, body,
                                                                        own):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    solution, inductor = tmp_path / "src" / "crucible_solution_tc", tmp_path / "torchinductor_worker" / "ab"
    solution.mkdir(parents=True)
    inductor.mkdir(parents=True)
    (solution / "crucible_tc_kernel.py").write_text(KERNEL)
    module_name = f"cab{abs(hash((kernel_name, body))) % 10**8}"
    (inductor / f"{module_name}.py").write_text(_inductor_copy(kernel_name, body))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(inductor))
    try:
        module = importlib.import_module(module_name)
        src = ASTSource(getattr(module, kernel_name), {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                        constexprs={"BLOCK": 128})
        triton.compile(src, target=GPUTarget("cuda", 90, 32))
    finally:
        sys.modules.pop(module_name, None)
    assert compiled_kernels(tmp_path / "cache") == {kernel_name: {str((inductor / f"{module_name}.py").resolve())}}
    assert kernels_outside(tmp_path / "cache", solution) == ([] if own else [kernel_name])


def test_a_cache_entry_without_a_location_or_unreadable_is_skipped(tmp_path):
    entry = tmp_path / "HASH"
    entry.mkdir()
    (entry / "k.source").write_text("module {\n}\n")  # no #loc line
    (entry / "j.source").write_bytes(b'#loc = loc("/lib/x\\"y.py":3:0)\n')  # MLIR escapes a quote in a path
    (entry / "gone.source").mkdir()  # not a readable file
    assert compiled_kernels(tmp_path) == {"j": {os.path.realpath('/lib/x"y.py')}}


def test_attribution_counts_a_library_kernel_under_a_name_of_the_solution_s_own_as_the_library_s(
        tmp_path, tiny_dataset_root):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session, SubmitOptions, WorkloadResult

    from support import triton_example

    example = triton_example()
    decoy = "\n\ndef merge_state_kernel(*args):  # a decoy: the library's kernel of that name does the merge\n" \
            "    pass\n"
    example["sources"][0]["content"] += decoy
    solution = Solution.model_validate(example)
    trial = {"median_ms": 0.02, "iterations": 50,
             "kernel_ns": {"_gqa_decode_kernel": 50 * 4e3, "merge_state_kernel": 50 * 16e3}}
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"), SubmitOptions()) as s:
        honest = WorkloadResult("w", "b1", "PASSED", timing=[trial])
        s._attribution(solution, honest)  # the worker saw both compiled from the solution's files
        borrowed = WorkloadResult("w", "b1", "PASSED", timing=[trial],
                                  triton_kernels_elsewhere=["merge_state_kernel"])
        s._attribution(solution, borrowed)
    assert honest.audits[0].passed, honest.audits
    [audit] = borrowed.audits
    assert not audit.passed and audit.detail.startswith("fallback"), audit.detail
    assert audit.share == pytest.approx(0.2) and "not its own whatever it names its functions: merge_state_kernel" \
        in audit.detail


def test_a_solution_without_a_python_package_has_no_kernels_from_elsewhere(tmp_path, monkeypatch):
    from harness.sandbox.triton_cache import kernels_from_elsewhere

    entry = tmp_path / ".triton" / "HASH"
    entry.mkdir(parents=True)
    (entry / "k.source").write_text('#loc = loc("/lib/k.py":3:0)\n')
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / ".triton"))
    assert kernels_from_elsewhere(tmp_path, None) == []  # a CUDA solution: nothing of it is Triton
    assert kernels_from_elsewhere(tmp_path, tmp_path / "src" / "crucible_solution_x") == ["k"]


@pytest.mark.parametrize("copy, own", [
    ("import triton\n\n@triton.jit\ndef _body(x):\n    pass\n\n@triton.jit\ndef k(x):\n    _body(x)\n", True),
    # round 10b: the kernel's code is the solution's, the helper it calls is not
    ("import triton\n\n@triton.jit\ndef _body(x):\n    x += 1\n\n@triton.jit\ndef k(x):\n    _body(x)\n", False),
    ("import triton\nfrom heavy import _body\n\n@triton.jit\ndef k(x):\n    _body(x)\n", False),
    ("import triton\n\n@triton.jit\ndef k_0(x):\n    _body(x)\n\n@triton.jit\ndef _body(x):\n    pass\n", True),
])
def test_a_copy_is_the_solution_s_only_with_every_function_it_defines_and_nothing_imported(tmp_path, copy, own):
    from harness.sandbox.triton_cache import _copy_of_own, _solution_functions

    solution = tmp_path / "sol"
    solution.mkdir()
    (solution / "main.py").write_text("import triton\n\n@triton.jit\ndef _body(x):\n    pass\n\n\n"
                                      "@triton.jit\ndef k(x):\n    _body(x)\n")
    (tmp_path / "copy.py").write_text(copy)
    name = "k_0" if "def k_0" in copy else "k"
    assert _copy_of_own(name, str(tmp_path / "copy.py"), _solution_functions(solution)) is own
