"""Building a Solution: the signature checks (from source and on callables), writing sources, importing
Python, and nvcc's compile-only check of CUDA sources on a host without a GPU."""

from __future__ import annotations

import functools
import shutil

import pytest

from harness.sandbox.build import (BuildError, Built, build, expected_params, signature_problem,
                                   static_signature_problem, write_sources)
from harness.data.schema import Definition, Solution, SourceFile, load_model

from support import DEFINITIONS, KV8_PS1, TORCH_CANDIDATE, solution_dict

DPS_PARAMS = "q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse"
VALUE_PARAMS = "q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale"


@pytest.fixture(scope="module")
def definition() -> Definition:
    return load_model(Definition, DEFINITIONS / "definitions" / "gqa_paged" / f"{KV8_PS1}.json")


def solution(source: str, **kw) -> Solution:
    return Solution.model_validate(solution_dict(source, **kw))


def test_expected_params(definition):
    assert ", ".join(expected_params(definition, True)) == DPS_PARAMS
    assert ", ".join(expected_params(definition, False)) == VALUE_PARAMS


# -- static check from the source text ----------------------------------------------------------------

STATIC = [
    # (id, source, dps, None or words in the problem)
    ("dps_8", f"def run({DPS_PARAMS}):\n    pass\n", True, None),
    ("dps_7", "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output):\n    pass\n", True,
     f"kernel.py::run: destination-passing style callable must take 8 positional parameters ({DPS_PARAMS}), "
     "but it takes 7 (q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output)"),
    ("dps_9_required", f"def run({DPS_PARAMS}, block):\n    pass\n", True, "must take 8 positional parameters"),
    ("extra_defaulted", f"def run({DPS_PARAMS}, block=64, warps=4):\n    pass\n", True, None),
    ("varargs_only", "def run(*args):\n    pass\n", True, None),
    ("some_then_varargs", "def run(q, k_cache, *rest, **kw):\n    pass\n", True, None),
    ("posonly", "def run(q, k_cache, v_cache, /, kv_indptr, kv_indices, sm_scale, output, lse):\n    pass\n",
     True, None),
    ("other_names", "def run(a, b, c, d, e, f, g, h):\n    pass\n", True, None),
    ("async", f"async def run({DPS_PARAMS}):\n    pass\n", True, None),
    ("kwonly_without_default", f"def run({DPS_PARAMS}, *, block):\n    pass\n", True,
     "kernel.py::run: keyword-only parameters without defaults: ['block']"),
    ("kwonly_with_default", f"def run({DPS_PARAMS}, *, block=1):\n    pass\n", True, None),
    ("missing_symbol", "def kernel(*args):\n    pass\n", True, "kernel.py defines no top-level `run`"),
    ("nested_only", "class K:\n    def run(self, *a):\n        pass\n", True, "kernel.py defines no top-level `run`"),
    ("bound_by_assignment", "def _impl(*a):\n    pass\n\nrun = _impl\n", True, None),
    ("syntax_error", "import torch\n\ndef run(q,\n    pass\n", True, "kernel.py:3: syntax error"),
    ("value_style_6", f"def run({VALUE_PARAMS}):\n    return 1\n", False, None),
    ("value_style_given_8", f"def run({DPS_PARAMS}):\n    return 1\n", False,
     f"value-returning style callable must take 6 positional parameters ({VALUE_PARAMS}), but it takes 8"),
    ("value_style_5", "def run(q, k_cache, v_cache, kv_indptr, kv_indices):\n    return 1\n", False,
     "must take 6 positional parameters"),
]


@pytest.mark.parametrize("source, dps, problem", [c[1:] for c in STATIC], ids=[c[0] for c in STATIC])
def test_static_signature_problem(definition, source, dps, problem):
    got = static_signature_problem(solution(source, dps=dps), definition)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got


def test_static_check_reads_the_entry_file_not_the_others(definition):
    s = solution(f"def run({DPS_PARAMS}):\n    pass\n", extra_sources={"helper.py": "def run(x):\n    pass\n"})
    assert static_signature_problem(s, definition) is None
    s = solution("def run(x):\n    pass\n", extra_sources={"helper.py": f"def run({DPS_PARAMS}):\n    pass\n"})
    assert "takes 1 (x)" in static_signature_problem(s, definition)


def test_static_check_skips_native_languages(definition):
    s = solution("this is not python", entry="kernel.cu::run", language="cuda")
    assert static_signature_problem(s, definition) is None


PYTHON_ENTRY = ("entry point main.py is Python: language cuda builds .cu/.cpp sources natively; a Python entry point "
                "that compiles CUDA with load()/load_inline() is language python (or triton)")


def test_a_native_language_with_a_python_entry_point_is_refused_at_once(definition, tmp_path):
    """Red team round 7 (c01, c02c): language cuda with main.py::run was "needs .cu/.cpp sources; none were given",
    or, with .cu files beside it, a native build that never imported main.py."""
    alone = solution(f"def run({DPS_PARAMS}):\n    pass\n", entry="main.py::run", language="cuda")
    beside = solution(f"def run({DPS_PARAMS}):\n    pass\n", entry="main.py::run", language="cuda",
                      extra_sources={"csrc/k.cu": "__global__ void k() {}\n"})
    for s in (alone, beside):
        assert static_signature_problem(s, definition) == PYTHON_ENTRY
        with pytest.raises(BuildError) as err:
            build(s, definition, tmp_path / s.content_hash[:8], have_gpu=False)
        assert str(err.value) == PYTHON_ENTRY
    cpp = solution("def run(*a):\n    pass\n", entry="main.py::run", language="cpp")
    assert "language cpp builds .cu/.cpp sources natively" in static_signature_problem(cpp, definition)


def test_static_check_uses_the_last_definition(definition):
    source = ("def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):\n    pass\n\n\n"
              f"def run({DPS_PARAMS}):\n    pass\n")
    assert static_signature_problem(solution(source), definition) is None


# -- the same check on callables ------------------------------------------------------------------------


def _dps(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    pass


def _seven(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output):
    pass


def _defaulted(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse, block=64):
    pass


def _kwonly(*args, block):
    pass


class _Callable:
    def __call__(self, q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
        pass


@pytest.mark.parametrize("fn, dps, words", [
    (_dps, True, None),
    (_seven, True, f"destination-passing style callable must take 8 positional parameters ({DPS_PARAMS})"),
    (_defaulted, True, None),
    (lambda *a: None, True, None),
    (lambda *a, **k: None, False, None),
    (_kwonly, True, "missing a required argument: 'block'"),
    (_Callable(), True, None),
    (functools.partial(_seven, 1), True, "must take 8"),  # partial leaves 6 positional parameters
    (functools.partial(_defaulted, block=1), True, None),
    (_dps, False, "value-returning style callable must take 6 positional parameters"),
    (max, True, None),  # no inspectable signature: the first call will tell
])
def test_signature_problem_on_callables(definition, fn, dps, words):
    got = signature_problem(fn, definition, dps)
    if words is None:
        assert got is None
    else:
        assert got is not None and words in got


# -- writing sources ------------------------------------------------------------------------------------


def test_write_sources_writes_nested_files(tmp_path):
    s = solution("X = 1\n", extra_sources={"pkg/sub/util.py": "Y = 2\n"})
    dest = write_sources(s, tmp_path / "out")
    assert (dest / "kernel.py").read_text() == "X = 1\n"
    assert (dest / "pkg" / "sub" / "util.py").read_text() == "Y = 2\n"


@pytest.mark.parametrize("path", ["../evil.py", "/tmp/evil.py", "a/../../evil.py", "."])
def test_write_sources_rejects_escaping_paths(tmp_path, path):
    # the schema rejects these already; write_sources must hold even for an unvalidated model
    s = Solution.model_construct(**{**solution("X = 1\n").__dict__,
                                    "sources": [SourceFile.model_construct(path=path, content="bad")]})
    with pytest.raises(BuildError, match="escapes the solution folder"):
        write_sources(s, tmp_path / "out")
    assert not (tmp_path / "evil.py").exists()


def test_write_sources_rejects_a_symlink_out_of_the_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "link").symlink_to(outside, target_is_directory=True)
    s = solution("X = 1\n", extra_sources={"link/evil.py": "bad"})
    with pytest.raises(BuildError, match="'link/evil.py' escapes"):
        write_sources(s, dest)
    assert not (outside / "evil.py").exists()


# -- building Python ------------------------------------------------------------------------------------


def test_build_python_returns_the_callable(definition, tmp_path):
    source = TORCH_CANDIDATE + "\n\nMARK = 'build-python-returns'\n"
    built = build(solution(source, extra_sources={"helpers/consts.py": "SCALE = 3\n"}), definition, tmp_path,
                  have_gpu=False)
    assert isinstance(built, Built) and callable(built.fn) and not built.compile_only
    assert built.fn.__name__ == "run"
    assert built.fn.__module__.endswith(".kernel")
    assert signature_problem(built.fn, definition, True) is None


def test_build_python_can_import_its_own_modules(definition, tmp_path):
    source = f"from .helpers.consts import SCALE\n\ndef run({DPS_PARAMS}):\n    return SCALE\n"
    built = build(solution(source, extra_sources={"helpers/consts.py": "SCALE = 17\n"}), definition, tmp_path,
                  have_gpu=False)
    assert built.fn(*range(8)) == 17


def test_a_file_no_import_reaches_is_never_written(definition, tmp_path):
    """Its findings blocked nothing (harness/audits/static_gate/python_reach.py), so it must not be there for any
    loader to find: the build's folder holds the kernel and what it imports, not the packed tests."""
    source = f"from .helpers.consts import SCALE\n\ndef run({DPS_PARAMS}):\n    return SCALE\n"
    built = build(solution(source, extra_sources={"helpers/consts.py": "SCALE = 17\n",
                                                  "tests/test_kernel.py": "import pytest\n"}),
                  definition, tmp_path, have_gpu=False)
    assert built.fn(*range(8)) == 17
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py")}
    assert any(p.endswith("helpers/consts.py") for p in written), written
    assert not any("test_kernel" in p for p in written), written


@pytest.mark.parametrize("source, error, log_words", [
    ("import crucible_no_such_module_xyz\n", "ModuleNotFoundError", "No module named 'crucible_no_such_module_xyz'"),
    ("def run(:\n    pass\n", "SyntaxError", "SyntaxError"),
    ("raise SystemExit(3)\n", "SystemExit", "SystemExit"),
    ("x = 1 / 0\n", "ZeroDivisionError", "division by zero"),
])
def test_import_errors_are_build_errors_with_a_traceback(definition, tmp_path, source, error, log_words):
    with pytest.raises(BuildError) as err:
        build(solution(source), definition, tmp_path, have_gpu=False)
    assert f"importing kernel.py failed: {error}" in str(err.value)
    assert err.value.log.startswith("Traceback (most recent call last)")
    assert log_words in err.value.log


@pytest.mark.parametrize("importer, hinted", [("from helpers.consts import SCALE", True),
                                              ("import helpers", True),
                                              ("import crucible_no_such_module_xyz as helpers", False)])
def test_an_own_module_imported_by_its_top_level_name_is_explained(definition, tmp_path, importer, hinted):
    """The solution is a package, as flashinfer-bench's builder imports it: its own modules are found by relative
    imports only, and the error says so (round 11: a package layout with `from gqa import ...`)."""
    source = f"{importer}\n\ndef run({DPS_PARAMS}):\n    return 0\n"
    with pytest.raises(BuildError) as err:
        build(solution(source, extra_sources={"helpers/consts.py": "SCALE = 17\n"}), definition, tmp_path,
              have_gpu=False)
    assert "ModuleNotFoundError" in str(err.value)
    assert ("import it relatively: `from .helpers import ...`" in str(err.value)) is hinted, str(err.value)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU host has Triton's driver")
def test_asking_for_a_gpu_at_import_is_not_checkable_without_one(definition, tmp_path):
    """Triton's tutorials start with `DEVICE = triton.runtime.driver.active.get_active_torch_device()`, and a module
    may allocate its workspace on "cuda": a host without a GPU has neither (its limit, not the candidate's error)."""
    pytest.importorskip("triton")
    source = "import triton\nDEVICE = triton.runtime.driver.active.get_active_torch_device()\n" + TORCH_CANDIDATE
    built = build(solution(source), definition, tmp_path / "a", have_gpu=False)
    assert built.compile_only and built.fn is None and "Triton for its GPU driver" in built.note
    source = "import torch\n_WORKSPACE = torch.empty(1 << 10, device='cuda')\n" + TORCH_CANDIDATE
    built = build(solution(source), definition, tmp_path / "c", have_gpu=False)
    assert built.compile_only and "CUDA device at import" in built.note


def test_a_package_of_the_gpu_environment_this_host_lacks_is_not_the_candidates_error(definition, tmp_path):
    """A CuTe DSL kernel imports cutlass (nvidia-cutlass-dsl), which the contest's GPU image has; a module the
    candidate did not ship is still its COMPILE_ERROR."""
    import importlib.util

    if importlib.util.find_spec("cutlass") is not None:
        pytest.skip("this host has nvidia-cutlass-dsl")
    source = "import cutlass\nimport cutlass.cute as cute\n" + TORCH_CANDIDATE
    built = build(solution(source), definition, tmp_path / "a", have_gpu=False)
    assert built.compile_only and built.fn is None and "nvidia-cutlass-dsl" in built.note
    with pytest.raises(BuildError):
        build(solution(source), definition, tmp_path / "b", have_gpu=True)
    with pytest.raises(BuildError):
        build(solution("from .helpers import x\n" + TORCH_CANDIDATE), definition, tmp_path / "c", have_gpu=False)
    with pytest.raises(BuildError):  # the same words raised by the candidate's own code stay its error
        build(solution("raise RuntimeError('0 active drivers')\n"), definition, tmp_path / "b", have_gpu=False)


@pytest.mark.parametrize("source, words", [
    ("import torch\n\ndef kernel(*a):\n    pass\n", "kernel.py has no symbol 'run'"),
    ("run = 42\n", "kernel.py::run is a int, not callable"),
    ("def run(q, k_cache):\n    pass\n", "destination-passing style callable must take 8 positional parameters"),
])
def test_build_checks_the_entry_symbol(definition, tmp_path, source, words):
    with pytest.raises(BuildError) as err:
        build(solution(source), definition, tmp_path, have_gpu=False)
    assert words in str(err.value)


def test_build_refuses_another_definition(definition, tmp_path):
    with pytest.raises(BuildError, match="solution is for 'other_def', not"):
        build(solution("def run(*a):\n    pass\n", definition="other_def"), definition, tmp_path, have_gpu=False)


def test_build_refuses_unsupported_languages(definition, tmp_path):
    with pytest.raises(BuildError, match="language 'tilelang' is not supported"):
        build(solution("x", language="tilelang"), definition, tmp_path, have_gpu=False)


def test_native_solution_without_native_sources(definition, tmp_path):
    with pytest.raises(BuildError, match="needs .cu/.cpp sources; none were given"):
        build(solution("int x;\n", entry="kernel.cuh::run", language="cuda"), definition, tmp_path, have_gpu=False)


# -- CUDA, compile-only ---------------------------------------------------------------------------------

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

GOOD_KERNEL = """
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""


@needs_nvcc
def test_nvcc_compile_error_is_a_build_error_with_its_log(definition, tmp_path):
    bad = GOOD_KERNEL.replace("x[i] *= a;", "x[i] *= a")
    with pytest.raises(BuildError) as err:
        build(solution(bad, entry="kernel.cu::run", language="cuda"), definition, tmp_path, have_gpu=False)
    assert "nvcc failed on kernel.cu" in str(err.value)
    assert 'error: expected a ";"' in err.value.log
    assert "kernel.cu" in err.value.log


@needs_nvcc
def test_nvcc_compiles_a_valid_kernel_to_a_cubin(definition, tmp_path):
    built = build(solution(GOOD_KERNEL, entry="kernel.cu::run", language="cuda"), definition, tmp_path,
                  have_gpu=False)
    assert built.compile_only and built.fn is None
    assert list(built.artifacts) == ["cubin:kernel.cu"]
    cubin = built.artifacts["cubin:kernel.cu"]
    with open(cubin, "rb") as f:
        assert f.read(4) == b"\x7fELF"
    assert built.log.startswith("$ ") and "-cubin" in built.log


@needs_nvcc
def test_nvcc_keeps_one_cubin_per_source(definition, tmp_path):
    s = solution(GOOD_KERNEL, entry="a/kernel.cu::run", language="cuda",
                 extra_sources={"b/kernel.cu": GOOD_KERNEL.replace("scale", "scale2")})
    built = build(s, definition, tmp_path, have_gpu=False)
    assert len(built.artifacts) == 2
    assert len({open(p, "rb").read() for p in built.artifacts.values()}) == 2
