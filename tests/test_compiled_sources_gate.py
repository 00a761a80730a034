"""The static gate's C++ rules on the sources a build actually compiled (harness/sandbox/compiled_sources.py reads
them back in the worker after the import, harness/audits/compiled_gate.py judges them in the harness).

A load_inline source decoded at run time through a helper's parameter folds to nothing the gate can read; what torch
wrote into the worker's build folder (main.cpp, the sources build.ninja names, load(sources=[path]) of a file written
at import) is judged instead, with the rule's own name, while torch's generated binding and honest extensions pass.
The builds use g++ (a C++ extension needs no nvcc or GPU); without it they are skipped."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.audits.compiled_gate import compiled_findings, without_generated_binding
from harness.audits.static_gate import load_policy, scan_sources
from harness.data.schema import Solution

from support import ROOT, TORCH_CANDIDATE, solution_dict

CORPUS = Path(__file__).resolve().parent / "gate_corpus" / "honest"
needs_compiler = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("ninja") is None,
                                    reason="needs g++ and ninja to build a torch C++ extension")

# A module of Python's own C API: compiles in a second or two (torch/extension.h takes minutes on two cores).
FAST_MODULE = r'''#include <Python.h>
#include <cstdlib>
int crucible_probe(int x) { return x + 1; }
BODY
PyModuleDef crucible_module = {PyModuleDef_HEAD_INIT, "NAME", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit_NAME(void) { return PyModule_Create(&crucible_module); }
'''

# The hole: the source reaches load_inline through a helper's parameter, decoded from base64 at run time.
DECODED = r'''
import base64

from torch.utils.cpp_extension import load_inline

SOURCE = "B64"


def build(src):
    return load_inline(name="NAME", cpp_sources=base64.b64decode(src).decode(), FUNCTIONS
                       no_implicit_headers=NO_HEADERS)


EXTENSION = build(SOURCE)
'''

HONEST_TORCH = r'''#include <torch/extension.h>
torch::Tensor scaled(torch::Tensor x, double s) {
  auto y = torch::empty_like(x);
  auto* out = y.data_ptr<float>();
  const auto* in = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] * static_cast<float>(s);
  return y;
}
'''


def _decoded_solution(name: str, cpp: str, functions: str = "", no_headers: bool = True) -> dict:
    import base64

    module = (DECODED.replace("B64", base64.b64encode(cpp.encode()).decode()).replace("NAME", name)
              .replace("FUNCTIONS", functions).replace("NO_HEADERS", str(no_headers)))
    return solution_dict(module + TORCH_CANDIDATE, name=name)


def _fast(name: str, body: str) -> str:
    return FAST_MODULE.replace("NAME", name).replace("BODY", body)


def _submit(tiny_dataset_root, tmp_path, solution: dict):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions

    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "archive"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=600)) as session:
        return session.submit(Solution.model_validate(solution))


@needs_compiler
def test_a_decoded_source_that_calls_a_forbidden_function_is_caught_after_the_build(tiny_dataset_root, tmp_path):
    """`system` in a source decoded through a helper's parameter: the build refuses it with the C++ rule's name
    (concurrency), at the line of main.cpp that torch compiled, and the submission cannot be promoted."""
    cpp = _fast("crucible_decoded_bad", 'int crucible_run() { return std::system("true"); }')
    result = _submit(tiny_dataset_root, tmp_path, _decoded_solution("crucible_decoded_bad", cpp))
    assert [w.status for w in result.workloads] == ["COMPILE_ERROR"], result.workloads[0].message
    message = result.workloads[0].message
    assert "static gate on the sources the build compiled: concurrency" in message, message
    assert "main.cpp" in message and "`system`" in message
    compiled = [f for f in result.static_findings if f["path"].endswith("/crucible_decoded_bad/main.cpp")]
    assert [(f["rule"], f["severity"], f["line"]) for f in compiled] == [("concurrency", "error", 4)], compiled
    assert any(r.startswith("static gate:") for r in result.promotion_blockers), result.promotion_blockers


@needs_compiler
def test_a_decoded_source_built_at_the_first_call_is_caught_after_the_workload(tiny_dataset_root, tmp_path):
    """The same source built lazily, in the first call rather than at import: read back after the workload, the
    workload fails with the rule's name."""
    cpp = _fast("crucible_lazy_bad", 'int crucible_run() { return std::system("true"); }')
    solution = _decoded_solution("crucible_lazy_bad", cpp)
    module = solution["sources"][0]["content"].replace("EXTENSION = build(SOURCE)\n", "")
    module = module.replace("    batch, heads, dim = q.shape\n", "    build(SOURCE)\n    batch, heads, dim = q.shape\n")
    solution["sources"][0]["content"] = module
    result = _submit(tiny_dataset_root, tmp_path, solution)
    assert [w.status for w in result.workloads] == ["COMPILE_ERROR"], result.workloads[0].message
    assert "static gate on the sources the build compiled: concurrency" in result.workloads[0].message
    assert any(f["path"].endswith("/crucible_lazy_bad/main.cpp") for f in result.static_findings)


@needs_compiler
def test_the_same_solution_with_an_honest_decoded_source_passes(tiny_dataset_root, tmp_path):
    """The same helper with an honest source, torch's own header and `functions=` (torch writes
    `#include <torch/extension.h>` and a PYBIND11_MODULE block of `torch::wrap_pybind_function` into main.cpp):
    nothing of it is a finding of the compiled gate, and the workload passes."""
    solution = _decoded_solution("crucible_decoded_honest", HONEST_TORCH, functions='functions=["scaled"],',
                                 no_headers=False)
    result = _submit(tiny_dataset_root, tmp_path, solution)
    assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message
    # the Python gate's own findings (kernel.py: the computed source is dynamic_code there) and none of the build's
    assert {f["path"] for f in result.static_findings} == {"kernel.py"}, result.static_findings


# A source written at import time (not shipped) and built from its path; the folder is tempfile's (TMPDIR: the
# worker's own folder), the build torch's default one.
WRITTEN = r'''
import pathlib
import tempfile

from torch.utils.cpp_extension import load

_folder = pathlib.Path(tempfile.mkdtemp())
(_folder / "written.h").write_text(HEADER)
(_folder / "written.cpp").write_text(SOURCE)
EXTENSION = load(name="crucible_written", sources=[str(_folder / "written.cpp")], extra_cflags=FLAGS)
'''


def _import_and_collect(tmp_path: Path, module: str) -> dict:
    """What a worker reads back after importing ``module`` (its folder, TMPDIR and torch's build folder as the
    harness sets them), from a process of its own."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "probe_module.py").write_text(module)
    script = ("import json, sys; from pathlib import Path; sys.path.insert(0, 'src'); import probe_module\n"
              "from harness.sandbox.compiled_sources import collect\n"
              "from harness.sandbox.extension_cache import extension_folders\n"
              "print(json.dumps(collect(Path.cwd(), extension_folders(Path.cwd()))))\n")
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "PYTHONPATH": str(ROOT), "HOME": str(work), "TMPDIR": str(work),
           "TORCH_EXTENSIONS_DIR": str(work / ".torch_extensions"), "MAX_JOBS": "2"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_compiler
def test_a_source_written_at_import_and_loaded_by_path_is_judged(tmp_path, policy):
    """load(sources=[path]) of a file the import wrote: build.ninja names it, so it is read and judged, with the
    header it includes from its folder and the -D macros of the build's flags."""
    source = _fast("crucible_written", '#include "written.h"\nint crucible_run() { return CALL("true"); }')
    module = (WRITTEN.replace("HEADER", repr('#include <cstdio>\ninline FILE* crucible_log() '
                                             '{ return fopen("log.txt", "w"); }\n'))
              .replace("SOURCE", repr(source)).replace("FLAGS", repr(["-DCALL=std::system"])))
    collected = _import_and_collect(tmp_path, module)
    paths = sorted(Path(f["path"]).name for f in collected["files"])
    assert paths == ["written.cpp", "written.h"], collected["files"]
    assert collected["unread"] == []
    findings = compiled_findings(collected["files"], collected["unread"], {"probe_module.py": module}, policy)
    rules = sorted({(Path(f.path).name, f.rule) for f in findings if f.severity == "error"})
    assert rules == [("written.cpp", "concurrency"), ("written.h", "file_cache")], findings



INCLUDED = r'''
import pathlib
import tempfile

from torch.utils.cpp_extension import load

_folder = pathlib.Path(tempfile.mkdtemp())
(_folder / "inc").mkdir()
(_folder / "inc" / "helpers.h").write_text(HEADER)
(_folder / "written.cpp").write_text(SOURCE)
EXTENSION = load(name="crucible_included", sources=[str(_folder / "written.cpp")], extra_include_paths=[INCLUDE])
'''


@needs_compiler
@pytest.mark.parametrize("where", ["worker", "scratch"])
def test_a_header_found_through_an_include_folder_is_judged_where_the_candidate_wrote_it(tmp_path, policy, where):
    """`#include <helpers.h>` with the header written at run time into a folder the build's -I names (the worker's
    own, or /tmp outside it): read and judged like the source."""
    header = '#include <cstdlib>\ninline int crucible_helper() { return std::system("true"); }\n'
    source = _fast("crucible_included", "#include <helpers.h>\nint crucible_run() { return crucible_helper(); }")
    module = INCLUDED.replace("HEADER", repr(header)).replace("SOURCE", repr(source))
    if where == "scratch":  # a folder of /tmp's own, not the worker's TMPDIR
        module = module.replace("tempfile.mkdtemp()", "tempfile.mkdtemp(dir='/tmp')")
    collected = _import_and_collect(tmp_path, module.replace("INCLUDE", "str(_folder / 'inc')"))
    names = sorted(Path(f["path"]).name for f in collected["files"])
    assert names == ["helpers.h", "written.cpp"], collected["files"]
    findings = compiled_findings(collected["files"], collected["unread"], {"probe_module.py": module}, policy)
    rules = sorted({(Path(f.path).name, f.rule) for f in findings if f.severity == "error"})
    assert rules == [("helpers.h", "concurrency")], findings


@needs_compiler
def test_a_librarys_include_folder_is_not_the_candidates_text(tmp_path, policy):
    """torch's own include folder named by -I (as a CUTLASS or CUDA folder would be) and a header of it included in
    angle brackets: nothing of the library is read, and the honest source has no finding."""
    import torch.utils.cpp_extension as cpp

    include = cpp.include_paths()[0]
    source = _fast("crucible_included", "#include <c10/macros/Macros.h>\nint crucible_run() { return 0; }")
    module = (INCLUDED.replace("HEADER", "''").replace("SOURCE", repr(source)).replace("INCLUDE", repr(include)))
    collected = _import_and_collect(tmp_path, module)
    assert sorted(Path(f["path"]).name for f in collected["files"]) == ["written.cpp"], collected["files"]
    findings = compiled_findings(collected["files"], collected["unread"], {"probe_module.py": module}, policy)
    assert [f for f in findings if f.severity == "error"] == []



@pytest.mark.parametrize("library_on_pythonpath", [False, True])
def test_a_scratch_folder_that_holds_installed_packages_is_a_librarys(tmp_path, monkeypatch, library_on_pythonpath):
    """An -I folder under /tmp is read as the candidate's, unless it lies where this interpreter finds packages
    (a virtual environment or packages unpacked under /tmp and put on PYTHONPATH): CI's clone lives there too."""
    from harness.sandbox.compiled_sources import collect

    work, site = tmp_path / "work", tmp_path / "site"
    (work / "build").mkdir(parents=True)
    (site / "lib" / "include").mkdir(parents=True)
    (site / "lib" / "include" / "lib.h").write_text("inline int lib_call() { return std::system(\"x\"); }\n")
    (work / "k.cpp").write_text("#include <lib.h>\nint f() { return lib_call(); }\n")
    (work / "build" / "build.ninja").write_text(f"cflags = -I{site / 'lib' / 'include'}\n"
                                                f"build k.o: compile {work / 'k.cpp'}\n")
    monkeypatch.setenv("PYTHONPATH", str(site) if library_on_pythonpath else "")
    names = sorted(Path(f["path"]).name for f in collect(work, {})["files"])
    assert names == (["k.cpp"] if library_on_pythonpath else ["k.cpp", "lib.h"])

def test_include_folders_of_a_build_ninja(tmp_path):
    from harness.sandbox.compiled_sources import include_folders

    ninja = tmp_path / "build.ninja"
    ninja.write_text("cflags = -DX -I/w/inc -I rel -isystem /usr/include/torch -I'/w/my dir'\n"
                     "cuda_cflags = -I/w/inc -I/w/cuda_inc\nbuild a.o: compile /w/a.cpp\n")
    assert include_folders(ninja) == [Path("/w/inc"), tmp_path / "rel", Path("/w/my dir"), Path("/w/cuda_inc")]

@needs_compiler
def test_a_source_removed_after_its_build_is_unreadable_dynamic_code(tmp_path, policy):
    """Compile a decoded file, then delete it: what was compiled cannot be cleared unread."""
    module = WRITTEN.replace("HEADER", "''").replace("SOURCE", repr(_fast("crucible_written", ""))).replace(
        "FLAGS", "[]") + "(_folder / 'written.cpp').unlink()\n"
    collected = _import_and_collect(tmp_path, module)
    assert len(collected["unread"]) == 1 and "written.cpp" in collected["unread"][0]
    findings = compiled_findings(collected["files"], collected["unread"], {}, policy)
    assert [(f.rule, f.severity) for f in findings] == [("dynamic_code", "error")], findings


@needs_compiler
def test_a_source_rewritten_after_its_build_is_not_taken_for_what_was_compiled(tmp_path, policy):
    """Compile a decoded file that calls `system`, then write an honest text over it: the text read back is newer
    than its object, so it is not what was compiled."""
    bad = _fast("crucible_written", 'int crucible_run() { return std::system("true"); }')
    module = (WRITTEN.replace("HEADER", "''").replace("SOURCE", repr(bad)).replace("FLAGS", "[]")
              + f"(_folder / 'written.cpp').write_text({_fast('crucible_written', '')!r})\n")
    collected = _import_and_collect(tmp_path, module)
    assert [w for w in collected["unread"] if "changed after it was compiled" in w], collected["unread"]
    findings = compiled_findings(collected["files"], collected["unread"], {}, policy)
    assert [(f.rule, f.severity) for f in findings] == [("dynamic_code", "error")], findings


def test_torchs_generated_binding_is_left_out_and_nothing_else():
    """Only the block load_inline writes (each line as torch writes it) is blanked, lines kept; a line of the
    candidate's after it keeps the whole text judged."""
    text = ('#include <torch/extension.h>\nint f(int x) { return x; }\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n'
            'm.def("f", torch::wrap_pybind_function(f), "f");\nm.def("g", g, "doc of g");\n}')
    assert without_generated_binding(text) == "#include <torch/extension.h>\nint f(int x) { return x; }\n\n\n\n"
    tampered = text.replace('"f");\n', '"f");\nsystem("x");\n')
    assert without_generated_binding(tampered) == tampered
    renamed = text.replace("wrap_pybind_function(f)", "wrap_pybind_function(h)")
    assert without_generated_binding(renamed) == renamed


def test_build_ninja_names_its_sources_objects_and_macros(tmp_path):
    """torch's and tvm_ffi's build.ninja: compile rules of every name, escaped paths, -D macros of every flags line."""
    from harness.sandbox.compiled_sources import read_ninja

    ninja = tmp_path / "build.ninja"
    ninja.write_text("cflags = -DTORCH_EXTENSION_NAME=k -DA -D B=2 -isystem /x\n"
                     "cuda_post_cflags = '-DCALL=std::system' -O3\n"
                     "build main.o: compile /w/k/main.cpp\n"
                     "build cuda_0.o: compile_cuda /w/my$ dir/c$:d.cu | /w/dep.h\n"
                     "build k.so: link main.o cuda_0.o\n")
    sources, defines = read_ninja(ninja)
    assert sources == [(tmp_path / "/w/k/main.cpp", tmp_path / "main.o"),
                       (tmp_path / "/w/my dir/c:d.cu", tmp_path / "cuda_0.o")]
    assert defines == {"TORCH_EXTENSION_NAME": "k", "A": "1", "B": "2", "CALL": "std::system"}


def test_tvm_ffis_generated_exports_pass(policy):
    """main.cpp as tvm_ffi.cpp.load_inline writes it (its headers, the source, an export macro per function and its
    docstring) holds no finding of its own."""
    main = ("#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/dtype.h>\n#include <tvm/ffi/error.h>\n"
            "#include <tvm/ffi/extra/c_env_api.h>\n#include <tvm/ffi/function.h>\n\n"
            "void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {}\n"
            "TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, add_one);\n"
            'TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC(add_one, "adds one");\n')
    assert compiled_findings([{"path": "/w/.tvm_ffi/k_0123/main.cpp", "text": main}], [], {}, policy) == []


def test_what_the_gate_already_found_or_the_solution_ships_is_not_reported_twice(policy):
    """A literal load_inline source is judged at its line by the gate; its compiled main.cpp repeats nothing, and a
    shipped .cu that load() compiled is the gate's too."""
    module = ('from torch.utils.cpp_extension import load_inline\n'
              'm = load_inline(name="k", cpp_sources="int f() { return system(\\"x\\"); }", functions=["f"])\n')
    earlier = [f.model_dump() for f in scan_sources({"main.py": module}, "python", policy)]
    assert [f["rule"] for f in earlier] == ["concurrency"]
    main = ('#include <torch/extension.h>\nint f() { return system("x"); }\n'
            'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def("f", torch::wrap_pybind_function(f), "f");\n}')
    assert compiled_findings([{"path": "/w/k/main.cpp", "text": main}], [], {"main.py": module}, policy,
                             earlier) == []
    shipped = "int g() { return system(\"y\"); }\n"
    assert compiled_findings([{"path": "/w/src/k.cu", "text": shipped}], [], {"k.cu": shipped}, policy) == []
    # a shipped file is judged again where the build's macros change it: `CALL` is `system` only in the flags
    hidden = "int g() { return CALL(\"y\"); }\n"
    found = compiled_findings([{"path": "/w/src/k.cu", "text": hidden, "defines": {"CALL": "system"}}], [],
                              {"k.cu": hidden}, policy)
    assert {(f.rule, f.line) for f in found} == {("concurrency", 1)}, found


def _cpp_strings(text: str) -> list[str]:
    """The C++ held in a Python file's string literals (what load_inline would write)."""
    markers = ("__global__", "#include", "torch::Tensor", "PYBIND11_MODULE")
    return [n.value for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and any(m in n.value for m in markers)]


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.iterdir() if p.name.startswith("cuda_")))
def test_honest_corpus_cpp_passes_the_compiled_gate(name):
    """Every honest C++ corpus solution, as its build would have written it (its .cu/.cpp files not shipped, its
    load_inline strings as main.cpp with torch's header and binding and as cuda.cu with torch's three headers):
    no error beyond what the gate says of the solution itself."""
    policy = load_policy(ROOT / "definitions" / "audit_policy.yaml")
    folder = CORPUS / name
    shipped = {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}
    earlier = [f.model_dump() for f in scan_sources(shipped, "python", policy)]
    torch_defines = {"TORCH_EXTENSION_NAME": name, "TORCH_API_INCLUDE_EXTENSION_H": "1",
                     "PYBIND11_COMPILER_TYPE": '"_gcc"', "__CUDA_NO_HALF_OPERATORS__": "1"}  # torch's own flags
    files = [{"path": f"/w/{path}", "text": text, "defines": torch_defines} for path, text in shipped.items()
             if not path.endswith(".py")]
    for i, text in enumerate(s for path, t in shipped.items() if path.endswith(".py") for s in _cpp_strings(t)):
        files.append({"path": f"/w/{i}/main.cpp", "text": "#include <torch/extension.h>\n" + text
                      + '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def("run", torch::wrap_pybind_function(run)'
                        ', "run");\n}', "defines": torch_defines})
        files.append({"path": f"/w/{i}/cuda.cu",
                      "text": "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + text})
    assert files, f"{name} holds no C++"
    errors = [f for f in compiled_findings(files, [], {}, policy, earlier) if f.severity == "error"]
    assert not errors, errors


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda_load_inline", "cuda_load_sources", "cuda_load_glob"])
def test_honest_cuda_extensions_pass_the_compiled_gate_on_a_gpu(tmp_path, name):
    """On a GPU host, honest corpus extensions really built by torch (nvcc's cuda.cu, load_inline's main.cpp and
    binding, load() of the solution's own files): the compiled gate adds no finding and the workload passes."""
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions

    folder = CORPUS / name
    sources = {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}
    solution = solution_dict(sources.pop("main.py"), name=f"corpus_{name}", entry="main.py::run",
                             extra_sources=sources)
    with Session(Dataset(), Archive(tmp_path / "archive"),
                 SubmitOptions(workloads=["uniform_b1_kv512"], timing=False, baselines=False)) as session:
        result = session.submit(Solution.model_validate(solution))
    assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message
    assert not [f for f in result.static_findings if f["path"].startswith("/")], result.static_findings


@pytest.mark.parametrize("definition", ["gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps64"])
def test_the_skills_cuda_template_as_torch_writes_it_has_no_finding(tmp_path, definition):
    """The gqa-decode skill's CUDA template, imported for real: torch's load_inline writes its main.cpp (header and
    generated binding) and cuda.cu (torch's three headers) before it builds, so a CPU host, where the build then
    stops, reads back exactly what a GPU host compiles. The compiled gate finds nothing in them."""
    import os

    from controller.providers.offline import offline_generator
    from controller.skills import load_skills
    from harness.sandbox.compiled_sources import collect

    generator = offline_generator(load_skills(ROOT / "skills"), definition)
    origin = {"template": "cuda-mma-split-kv-fused", "params": generator.complete("cuda-mma-split-kv-fused", {})}
    solution = generator.render(origin, definition, "cuda_probe", "tests", "H200")  # the solution as a dict
    (tmp_path / "sol").mkdir()
    for f in solution["sources"]:
        (tmp_path / "sol" / f["path"]).write_text(f["content"])
    module = solution["spec"]["entry_point"].split("::")[0].removesuffix(".py")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "TMPDIR": str(tmp_path), "MAX_JOBS": "1"}
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'sol')!r}); "
                    f"import {module}"], env=env, capture_output=True, timeout=600, cwd=tmp_path)
    read = collect(tmp_path, {"TORCH_EXTENSIONS_DIR": tmp_path / "ext"})
    names = sorted(Path(f["path"]).name for f in read["files"])
    if "cuda.cu" not in names:
        pytest.skip(f"torch wrote no CUDA sources here ({names})")
    assert "main.cpp" in names and not read["unread"], read
    policy = load_policy(ROOT / "definitions" / "audit_policy.yaml")
    shipped = {f["path"]: f["content"] for f in solution["sources"]}
    earlier = [f.model_dump() for f in scan_sources(shipped, "python", policy)]
    assert compiled_findings(read["files"], read["unread"], shipped, policy, earlier) == []
