"""Build a Solution into a callable: python | triton | cuda | cpp. Runs inside the worker only.

Every failure is a ``BuildError`` carrying the compiler's (or importer's) output, which becomes a
COMPILE_ERROR with that log. On a machine without a GPU, CUDA sources are compiled by nvcc to a
cubin for the target architecture, so compile errors are still caught, but nothing is run; headers only a GPU
host has are stood in for or make the file "not checkable here" (cuda_check), never a COMPILE_ERROR.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..data.schema import Definition, Language, SchemaError, Solution
from . import cpu_cuda, cuda_check, tvm_ffi_build
from .extension_cache import EXTENSION_FOLDERS

DEFAULT_CUDA_ARCH = os.environ.get("CRUCIBLE_CUDA_ARCH", "sm_90a")
CUDA_SUFFIXES = {".cu"}
CPP_SUFFIXES = {".cpp", ".cc", ".cxx", ".c"}


class BuildError(Exception):
    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


@dataclass
class Built:
    fn: Optional[Callable[..., Any]]
    setup: Optional[Callable[..., Any]] = None
    log: str = ""
    compile_only: bool = False  # CUDA sources checked by nvcc on a host without a GPU
    artifacts: dict[str, str] = field(default_factory=dict)  # kind -> path (cubin, .so)
    note: str = ""  # why a build could not go further here (compile_only)
    package: Optional[Path] = None  # a Python solution's folder, imported as a package (package_folder)


def expected_params(definition: Definition, dps: bool, has_setup: bool = False) -> list[str]:
    return list(definition.inputs) + (list(definition.outputs) if dps else []) + (["setup_state"] if has_setup else [])


def signature_problem(fn: Callable[..., Any], definition: Definition, dps: bool,
                      has_setup: bool = False) -> Optional[str]:
    """Why ``fn`` cannot be called as the definition says, or None. Extra defaulted parameters are fine."""
    names = expected_params(definition, dps, has_setup)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # compiled callables may not expose a signature; the first call will tell
    try:
        sig.bind(*[object()] * len(names))
    except TypeError as err:
        style = "destination-passing style" if dps else "value-returning style"
        return (f"{style} callable must take {len(names)} positional parameters ({', '.join(names)}), "
                f"but its signature is {sig}: {err}")
    return None


def python_entry_problem(solution: Solution) -> Optional[str]:
    """Why a cuda/cpp solution's entry point cannot be what it builds, or None: those languages compile the .cu/.cpp
    sources into a module (a main.py beside them is never imported, and without them there is nothing to build), so a
    Python entry point that compiles CUDA itself (torch's load()/load_inline()) was meant as language python."""
    spec = solution.spec
    if spec.language not in (Language.cuda, Language.cpp) or not spec.entry_file.endswith(".py"):
        return None
    return (f"entry point {spec.entry_file} is Python: language {spec.language.value} builds .cu/.cpp sources "
            f"natively; a Python entry point that compiles CUDA with load()/load_inline() is language python "
            f"(or triton)")


def require_native_entry(solution: Solution) -> Solution:
    """``solution``, or a SchemaError saying ``python_entry_problem`` (``harness pack``: refused before it is
    written)."""
    problem = python_entry_problem(solution)
    if problem:
        raise SchemaError(problem)
    return solution


def static_signature_problem(solution: Solution, definition: Definition) -> Optional[str]:
    """The same check from the source text alone, before any process is started (python/triton only; a cuda/cpp
    solution's Python entry point is refused here too)."""
    if solution.spec.language not in (Language.python, Language.triton):
        return python_entry_problem(solution)
    source = next(s.content for s in solution.sources if s.path == solution.spec.entry_file)
    try:
        tree = ast.parse(source.removeprefix("\ufeff"))
    except SyntaxError as err:
        return f"{solution.spec.entry_file}:{err.lineno}: syntax error: {err.msg}"
    symbol = solution.spec.entry_symbol
    if any(symbol in _names_bound(n) for n in _conditional_statements(tree.body)):
        return None  # bound under an if/try at module level: which branch wins is the worker's to see
    bindings = [n for n in tree.body if symbol in _names_bound(n)]
    if not bindings:
        return f"{solution.spec.entry_file} defines no top-level `{symbol}`"
    fn = bindings[-1]  # Python keeps the last binding
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None  # bound some other way (a class, an assignment, an import): the worker checks it
    a = fn.args
    positional = a.posonlyargs + a.args
    required = len(positional) - len(a.defaults)
    has_setup = solution.spec.setup is not None
    n = len(expected_params(definition, solution.spec.destination_passing_style, has_setup))
    if (a.vararg is None and len(positional) < n) or required > n:
        names = expected_params(definition, solution.spec.destination_passing_style, has_setup)
        style = "destination-passing style" if solution.spec.destination_passing_style else "value-returning style"
        return (f"{solution.spec.entry_point}: {style} callable must take {n} positional parameters "
                f"({', '.join(names)}), but it takes {len(positional)} ({', '.join(x.arg for x in positional)})")
    missing_kwonly = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    if missing_kwonly:
        return f"{solution.spec.entry_point}: keyword-only parameters without defaults: {missing_kwonly}"
    return None


def _conditional_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements nested in module-level if/try/with blocks (they still bind module names)."""
    out: list[ast.stmt] = []
    for node in body:
        blocks = []
        if isinstance(node, (ast.If, ast.While, ast.For)):
            blocks = [node.body, node.orelse]
        elif isinstance(node, ast.Try):
            blocks = [node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]]
        elif isinstance(node, ast.With):
            blocks = [node.body]
        for block in blocks:
            out.extend(block)
            out.extend(_conditional_statements(block))
    return out


def _names_bound(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def never_imported_files(solution: Solution) -> set[str]:
    """The Python files of a Python solution that no import from its entry point or setup file reaches; every Python
    file of a CUDA or C++ one (its build compiles the .cu/.cpp sources and imports nothing: a starter kit's
    `binding.py` left beside them never runs)."""
    from ..audits.static_gate import included_files
    from ..audits.static_gate.python_reach import never_imported

    entries = [solution.spec.entry_file] + ([solution.spec.setup.split("::")[0]] if solution.spec.setup else [])
    if not solution.spec.entry_file.endswith(".py"):  # but what an #include compiles, whatever its suffix
        included = included_files({s.path: s.content for s in solution.sources})
        return {s.path for s in solution.sources if s.path.endswith(".py") and s.path not in included}
    return never_imported({s.path: s.content for s in solution.sources}, entries)


def write_sources(solution: Solution, dest: Path, omit: frozenset[str] = frozenset()) -> Path:
    """The solution's files under ``dest``; ``omit``: paths left unwritten."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    for src in solution.sources:
        if src.path in omit:
            continue
        target = (dest / src.path).resolve()
        if root not in target.parents:
            raise BuildError(f"source path {src.path!r} escapes the solution folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(src.content)
    return dest


@contextlib.contextmanager
def captured_fds(log_path: Path):
    """Send this process's fd 1 and 2 to a file for the duration (compilers write there, not to sys.stdout)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def package_folder(solution: Solution, workdir: Path) -> Path:
    """Where a Python solution's files are written: the package the harness imports them as."""
    return workdir / "src" / f"crucible_solution_{solution.content_hash[:12]}"


def _import_python(solution: Solution, workdir: Path, have_gpu: bool = True) -> Built:
    folder = package_folder(solution, workdir)
    src_root, package = folder.parent, folder.name
    # Python files no import of the solution reaches (its tests, its benchmarks: their findings blocked nothing,
    # harness.audits.static_gate.python_reach) are not written at all: whatever loader could name one finds nothing
    pkg_dir = write_sources(solution, src_root / package, frozenset(never_imported_files(solution)))
    for d in [pkg_dir, *[p for p in pkg_dir.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch(exist_ok=True)
    if str(src_root) not in sys.path:
        sys.path.insert(0, str(src_root))
    module_name = package + "." + solution.spec.entry_file.removesuffix(".py").replace("/", ".")
    # torch.utils.cpp_extension.load_inline / load at import time is a build: into the worker's private
    # TORCH_EXTENSIONS_DIR (tvm_ffi.cpp's load_inline / build_inline / load / build: its TVM_FFI_CACHE_DIR), its
    # compiler output in the build log, its failure a COMPILE_ERROR with that log.
    log_path = workdir / "build.log"
    cpu_cuda.ASKED_FOR_A_GPU.clear()
    try:
        with captured_fds(log_path):
            module = importlib.import_module(module_name)
    except BaseException as err:  # SyntaxError, ImportError, SystemExit from module level...
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        tb = traceback.format_exc()
        builder = None if "ShellInBuild" in tb else extension_builder(tb)  # refused, on any host (process_log)
        if not have_gpu and builder:  # a CUDA extension needs the GPU host's toolchain
            return Built(fn=None, compile_only=True, log=(log + "\n" + tb).strip(), note=gpu_only_extension(builder))
        limit = None if have_gpu else (_missing_gpu_package(err) or _gpu_asked_for_at_import(tb)
                                       or _stopped_without_a_gpu(err, pkg_dir))
        if limit:  # what this host has not got (torch's and Triton's own errors), not the candidate's mistake
            return Built(fn=None, compile_only=True, log=(log + "\n" + tb).strip(), note=limit)
        what = ("building a torch extension" if "Error building extension" in str(err)
                else f"importing {solution.spec.entry_file}")
        raise BuildError(f"{what} failed: {type(err).__name__}: {str(err)[-4000:]}{_own_module_hint(err, solution)}",
                         (log + "\n" + tb).strip()) from None
    fn = getattr(module, solution.spec.entry_symbol, None)
    if fn is None:
        raise BuildError(f"{solution.spec.entry_file} has no symbol {solution.spec.entry_symbol!r}")
    if not callable(fn):
        raise BuildError(f"{solution.spec.entry_point} is a {type(fn).__name__}, not callable")
    setup = None
    if solution.spec.setup:
        setup_file, setup_symbol = solution.spec.setup.split("::")
        setup_module = importlib.import_module(package + "." + setup_file.removesuffix(".py").replace("/", "."))
        setup = getattr(setup_module, setup_symbol, None)
        if not callable(setup):
            raise BuildError(f"setup {solution.spec.setup} is missing or not callable")
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    return Built(fn=fn, setup=setup, log=log, artifacts=extension_binaries(), package=pkg_dir)


def _own_module_hint(err: BaseException, solution: Solution) -> str:
    """A module of the solution's own imported by its top-level name (``from gqa import ...`` beside main.py): the
    solution is a package, as flashinfer-bench's builder imports it (``<package>.main``), so only a relative import
    finds it there too."""
    top = str(getattr(err, "name", None) or "").split(".")[0] if isinstance(err, ModuleNotFoundError) else ""
    if top and any(src.path.split("/")[0] in (top, f"{top}.py") for src in solution.sources):
        return (f" (`{top}` is one of the solution's own modules: the solution is imported as a package, as "
                f"flashinfer-bench imports it, so import it relatively: `from .{top} import ...`)")
    return ""


def gpu_only_extension(builder: str, when: str = "") -> str:
    """Why a workload of a solution whose CUDA extension could not be built on a host without a GPU is skipped."""
    return f"a {builder} CUDA extension (load_inline/load){when}: built and run on a GPU host only"


def extension_builder(tb: str) -> Optional[str]:
    """The extension builder a failed import's traceback went through (torch's cpp_extension, tvm_ffi.cpp), or None."""
    tb = tb.replace("\\", "/")
    if "cpp_extension" in tb:
        return "torch"
    if "tvm_ffi/cpp/" in tb:
        return "TVM-FFI"
    return None


# Packages of the contest's GPU environment (its image: FlashInfer, CuTe DSL, cuda-python, TVM-FFI, DeepGEMM...)
# that a host without a GPU may not have: import name -> the package that provides it.
GPU_PACKAGES = {"cutlass": "nvidia-cutlass-dsl", "cuda": "cuda-python", "tvm_ffi": "apache-tvm-ffi",
                "tvm": "apache-tvm-ffi", "flashinfer": "flashinfer-python", "deep_gemm": "deep-gemm",
                "helion": "helion", "cupti": "cupti-python", "sgl_kernel": "sgl-kernel"}


def _missing_gpu_package(err: BaseException) -> Optional[str]:
    """Why an import failed on a host without a GPU: a package of the GPU environment this host lacks (its
    `import cutlass` for a CuTe DSL kernel), or None (a module of the candidate's own that it did not ship, a
    typo: its COMPILE_ERROR)."""
    name = getattr(err, "name", None) if isinstance(err, ModuleNotFoundError) else None
    package = GPU_PACKAGES.get((name or "").split(".")[0])
    if package is None:
        return None
    return f"imports {name}, which {package} provides on a GPU host and this host lacks: run on a GPU host only"


def _gpu_asked_for_at_import(tb: str) -> Optional[str]:
    """Why an import failed on a host without a GPU for want of one, or None: Triton's own error for
    `triton.runtime.driver.active` (the tutorials' device and SM queries) or torch's for a CUDA device
    (`torch.empty(..., device="cuda")` at module level), raised by them, not a message of the candidate's."""
    tb = tb.replace("\\", "/")
    if "active drivers" in tb and "triton/runtime/driver.py" in tb:
        return "asks Triton for its GPU driver at import (this host has none): run on a GPU host only"
    if "Torch not compiled with CUDA enabled" in tb and "torch/cuda/__init__.py" in tb:
        return "uses a CUDA device at import (the CPU build of torch has none): run on a GPU host only"
    return None


def _stopped_without_a_gpu(err: BaseException, pkg_dir: Path) -> Optional[str]:
    """An import whose own code asked ``torch.cuda.is_available()``, was told False (a host without a GPU) and
    raised: the solution's guard (`if not torch.cuda.is_available(): raise RuntimeError("needs a GPU")`), which a GPU
    host passes. A syntax or import error is the candidate's whatever it asked; torch's own questions do not count."""
    own = str(pkg_dir.resolve())
    asked = any(os.path.realpath(f).startswith(own + os.sep) for f in cpu_cuda.ASKED_FOR_A_GPU)
    if not asked or isinstance(err, (SyntaxError, ImportError)):
        return None
    return (f"asked torch.cuda.is_available() at import, was told False (this host has no GPU) and stopped "
            f"({type(err).__name__}: {str(err)[:160]}): run on a GPU host only")


def extension_binaries() -> dict[str, str]:
    """The shared objects the candidate's extension builders made in this worker's private folders: torch's
    cpp_extension in TORCH_EXTENSIONS_DIR (``so:NAME/...``), TVM-FFI's tvm_ffi.cpp in TVM_FFI_CACHE_DIR
    (``so:tvm-ffi/NAME_HASH/...``); a folder the environment does not name is not looked at."""
    found = {}
    for label, variable, _ in EXTENSION_FOLDERS:
        folder = os.environ.get(variable)
        if not folder or not Path(folder).is_dir():
            continue
        prefix = "" if label == "torch" else f"{label}/"
        found.update({f"so:{prefix}{p.relative_to(folder).as_posix()}": str(p)
                      for p in sorted(Path(folder).rglob("*.so"))})
    return found


def _sources_by_kind(pkg_dir: Path, solution: Solution) -> tuple[list[str], list[str]]:
    cuda = [str(pkg_dir / s.path) for s in solution.sources if Path(s.path).suffix in CUDA_SUFFIXES]
    cpp = [str(pkg_dir / s.path) for s in solution.sources if Path(s.path).suffix in CPP_SUFFIXES]
    return cuda, cpp


def _nvcc_cubins(cuda_files: list[str], pkg_dir: Path, out_dir: Path, arch: str, solution: Solution) -> Built:
    """Each .cu to a cubin; what this host cannot check is said so, never blamed on the candidate (cuda_check)."""
    nvcc = shutil.which("nvcc") or (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
    if not Path(nvcc).exists():
        raise BuildError("CUDA sources need nvcc to be checked, and nvcc was not found (set CUDA_HOME)")
    torch_binding = (solution.spec.binding or "tvm-ffi") == "torch"
    flags = [cuda_check.cxx_standard(torch_binding), "-O3", f"-I{pkg_dir}"]
    try:  # -isystem, as torch's extension builder includes them
        from torch.utils.cpp_extension import include_paths
        import sysconfig

        for p in [*include_paths(), sysconfig.get_paths()["include"]]:
            flags += ["-isystem", p]
    except Exception:
        pass
    if torch_binding:
        flags += cuda_check.torch_extension_flags(f"crucible_{solution.content_hash[:12]}")
    else:  # tvm-ffi (the default binding): its headers where the package is installed, else said unchecked
        flags += cuda_check.tvm_ffi_include_flags()
    out_dir.mkdir(parents=True, exist_ok=True)
    log, artifacts, unchecked = [], {}, []
    used = set(cuda_check.absent_headers(str(nvcc), [f"-arch={arch}", *flags], out_dir))
    said = ""
    if used:  # a folder of this build's own, after the real include folders: only headers found nowhere else
        stand_ins = out_dir / "stand-ins"
        for header in used:
            cuda_check.write_stand_in(stand_ins, header)
        flags += ["-isystem", str(stand_ins)]
        said = f"(stand-ins for headers this host lacks: {', '.join(sorted(used))})\n"
    for f in cuda_files:
        rel = Path(f).relative_to(pkg_dir)
        cubin = out_dir / ("__".join(rel.with_suffix("").parts) + f".{arch}.cubin")
        cmd = [str(nvcc), "-cubin", f"-arch={arch}", *flags, "-o", str(cubin), f]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        output = proc.stdout + proc.stderr
        log.append("$ " + " ".join(cmd[:4] + ["..."] + cmd[-3:]) + "\n" + said + output)
        if proc.returncode == 0:
            artifacts[f"cubin:{rel.as_posix()}"] = str(cubin)
            continue
        why = _not_checkable_here(output, used, pkg_dir)
        why = why and why.replace(f" (through {rel.as_posix()})", "")  # the file itself: said already
        if why is None:
            raise BuildError(f"nvcc failed on {Path(f).name} (exit {proc.returncode})", "\n".join(log))
        unchecked.append(f"{rel.as_posix()} {why}")
        log.append(f"({rel.as_posix()}: not checkable on this host: {why})")
    note = ""
    if unchecked:
        done = f"compiled with nvcc for {arch}: {', '.join(sorted(artifacts))}; " if artifacts else ""
        note = done + "not checkable on this host: " + "; ".join(unchecked)  # the GPU host builds and runs it
    return Built(fn=None, log="\n".join(log), compile_only=True, artifacts=artifacts, note=note)


def _not_checkable_here(output: str, used: set[str], root: Optional[Path] = None) -> Optional[str]:
    """Why a failed compile says nothing about the candidate's code, or None when it is the candidate's error.
    ``root``: the solution's folder, to name a header of its own that did the including."""
    external = [(h, cuda_check.provider(h)) for h in cuda_check.missing_headers(output)]
    external = [(h, who) for h, who in external if who]
    if external:
        header, who = external[0]
        where = cuda_check.including_file(output, header)
        if where and root is not None and Path(where).is_absolute() and Path(where).is_relative_to(root):
            where = Path(where).relative_to(root).as_posix()
        through = f" (through {where})" if where and not Path(where).is_absolute() else ""
        return f"includes <{header}>{through}, which {who} provides and this host lacks"
    library = cuda_check.partial_stand_in_failure(used, output)
    if library:
        return f"uses {library}, whose headers this host lacks"
    return None


def _build_native(solution: Solution, workdir: Path, have_gpu: bool) -> Built:
    problem = python_entry_problem(solution)
    if problem:  # said before any compile: nvcc would build the .cu files and the entry point would never be found
        raise BuildError(problem)
    # a .py file no #include names is not written: an include the gate did not see fails to compile
    pkg_dir = write_sources(solution, workdir / "src" / "native", frozenset(never_imported_files(solution)))
    build_dir = workdir / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    cuda_files, cpp_files = _sources_by_kind(pkg_dir, solution)
    if not cuda_files and not cpp_files:
        raise BuildError(f"a {solution.spec.language.value} solution needs .cu/.cpp sources; none were given")
    if cuda_files and not have_gpu:
        return _nvcc_cubins(cuda_files, pkg_dir, build_dir, DEFAULT_CUDA_ARCH, solution)
    name = f"crucible_{solution.content_hash[:12]}"
    log_path = workdir / "build.log"
    binding = solution.spec.binding or "tvm-ffi"
    try:
        with captured_fds(log_path):
            if binding == "torch":
                from torch.utils.cpp_extension import load

                module = load(name=name, sources=cpp_files + cuda_files, build_directory=str(build_dir),
                              extra_cflags=["-O3"], extra_cuda_cflags=["-O3"], verbose=True)
            else:  # as flashinfer-bench main's TVMFFIBuilder: its include path, links and symbol check
                try:
                    import tvm_ffi.cpp  # noqa: F401
                except ImportError:
                    raise BuildError("binding 'tvm-ffi' needs the apache-tvm-ffi package (pip install crucible[gpu]) "
                                     "or use binding 'torch'") from None
                module, _ = tvm_ffi_build.build_and_load(name, cpp_files, cuda_files, pkg_dir, build_dir,
                                                         solution.spec.target_hardware)
    except BuildError:
        raise
    except tvm_ffi_build.UnresolvedSymbols as err:
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        raise BuildError(str(err), log) from None
    except BaseException as err:
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        raise BuildError(f"building the {binding} extension failed: {type(err).__name__}: {err}",
                         log + "\n" + traceback.format_exc()) from None
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    fn = getattr(module, solution.spec.entry_symbol, None)
    if fn is None:
        raise BuildError(f"the built module exports no {solution.spec.entry_symbol!r}", log)
    so = next(iter(sorted(build_dir.glob("*.so"))), None)
    return Built(fn=fn, log=log, artifacts={"so": str(so)} if so else {})


def build(solution: Solution, definition: Definition, workdir: Path, have_gpu: bool) -> Built:
    if solution.definition != definition.name:
        raise BuildError(f"solution is for {solution.definition!r}, not {definition.name!r}")
    lang = solution.spec.language
    if lang in (Language.python, Language.triton):
        built = _import_python(solution, workdir, have_gpu)
    elif lang in (Language.cuda, Language.cpp):
        built = _build_native(solution, workdir, have_gpu)
    else:
        raise BuildError(f"language {lang.value!r} is not supported by this harness yet")
    if built.fn is not None:
        problem = signature_problem(built.fn, definition, solution.spec.destination_passing_style,
                                    solution.spec.setup is not None)
        if not problem and built.setup is not None:
            problem = signature_problem(built.setup, definition, False)
            problem = problem and f"setup: {problem}"
        if problem:
            raise BuildError(problem, built.log)
    return built


def make_workdir(prefix: str = "crucible-build-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
