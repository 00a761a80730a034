"""C/C++/CUDA scanner of the static gate: token rules on a copy of the text in which comments and string
literals are blanked (line and column positions are kept); the string literals are checked separately."""

from __future__ import annotations

import bisect
import posixpath
import re
from typing import TYPE_CHECKING

from .cpp_env import names_passed_to_parameter
from .cpp_aten import aten_hits
from .cpp_macros import EXPANSION_BUDGET, digraphs, expansions, object_macros
from .common import (
    _ENV_MARKER_RE,
    _QUOTES_AND_SPACE,
    _REVEALING_ENV_NAME_RE,
    _TEMP_PATH_RE,
    _WHY,
    _Hit,
    _is_word_char,
)

if TYPE_CHECKING:
    from .policy import _CompiledPolicy

_CPP_LEXEME_RE = re.compile(
    r"(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))"
    r"|(?P<string>R\"(?P<delim>[^()\\\s\"]{0,16})\(.*?\)(?P=delim)\"|(?:u8|u|U|L)?\"(?:\\.|[^\"\\\n])*\"?)"
    r"|(?P<char>'(?:\\.|[^'\\\n])+')",
    re.DOTALL,
)
_NOT_NEWLINE_RE = re.compile(r"[^\n]")
# A backslash at the end of a line joins it to the next (translation phase 2, before comments and literals are
# known): `/* ... *\` + newline + `/ system(...)` ends the comment for the compiler, `sys\` + newline + `tem(` is
# one name, `#inc\` + newline + `lude` a directive. GCC allows blanks between the backslash and the newline.
_SPLICE_END_RE = re.compile(r"\\[ \t\r]*$")
# A digit separator (`1'000`) inside a number: not the start of a character literal, which would blank the code
# up to the next quote.
_PP_NUMBER_RE = re.compile(r"(?<![\w.])\.?\d(?:[eEpP][+-]|'(?=\w)|[\w.])*")


def _splice(source: str) -> str:
    """``source`` as the compiler reads it after phase 2; every line that lost its end to a join is put back as an
    empty line after the joined one, so later lines keep their numbers."""
    if "\\" not in source:
        return source
    out: list[str] = []
    joined, pending = "", 0
    for line in source.split("\n"):
        end = _SPLICE_END_RE.search(line)
        if end is not None:
            joined += line[:end.start()]
            pending += 1
            continue
        out.append(joined + line)
        out.extend([""] * pending)
        joined, pending = "", 0
    if pending:
        out.append(joined)
        out.extend([""] * (pending - 1))
    return "\n".join(out)


def _without_digit_separators(source: str) -> str:
    if "'" not in source:
        return source
    return _PP_NUMBER_RE.sub(lambda m: m.group(0).replace("'", "_"), source)


def _strip_cpp(source: str) -> tuple[str, str, list[tuple[int, str]]]:
    """Return (code, code_with_strings, strings).

    `code` has comments and the insides of string/char literals blanked; `code_with_strings` has only the
    comments blanked. Both keep every offset, so line/column positions match the original source.
    `strings` holds (offset, content) of each string literal.
    """
    code_parts: list[str] = []
    with_strings: list[str] = []
    strings: list[tuple[int, str]] = []
    pos = 0
    for m in _CPP_LEXEME_RE.finditer(source):
        start, end = m.span()
        code_parts.append(source[pos:start])
        with_strings.append(source[pos:start])
        text = m.group(0)
        if m.group("comment") is not None:
            blank = _NOT_NEWLINE_RE.sub(" ", text)
            code_parts.append(blank)
            with_strings.append(blank)
        else:
            quote = text.index('"') if m.group("string") is not None else 0
            inner = text[quote + 1:-1] if len(text) - quote >= 2 else ""
            code_parts.append(text[:quote + 1] + _NOT_NEWLINE_RE.sub(" ", text[quote + 1:-1]) + text[-1:]
                              if len(text) - quote >= 2 else text)
            with_strings.append(text)
            if m.group("string") is not None:
                strings.append((start, inner))
        pos = end
    code_parts.append(source[pos:])
    with_strings.append(source[pos:])
    return "".join(code_parts), "".join(with_strings), strings


# Patterns deliberately start with a literal (no \b or look-behind in front): Python's regex engine then
# skips ahead to candidate positions quickly. The word boundary is checked afterwards (_starts_token).
# Kind "call": a libc-style function that must not be a method (`x.system(`, `p->fork(` are not flagged).
_WORD, _CALL = "word", "call"


def _cpp_token_rules() -> list[tuple[str, re.Pattern[str], str, str]]:
    # (rule id, pattern on comment/string-blanked code, boundary kind, what the match is)
    return [
        ("stream_event_graph", re.compile(
            r"(?:cudaStreamCreate\w*|cuStreamCreate\w*|cudaEventCreate\w*|cuEventCreate\w*|cudaGraph\w*|cuGraph\w*|"
            r"cudaStreamBeginCapture\w*|cudaStreamEndCapture|cuStreamBeginCapture\w*|cuStreamEndCapture|"
            r"cudaEventDisableTiming|cudaStreamPerThread|cudaStreamNonBlocking|CU_STREAM_NON_BLOCKING|"
            r"getStreamFromPool|getStreamFromExternal|CUDAEvent)\b"), _WORD, "CUDA stream/event/graph API"),
        ("concurrency", re.compile(r"std::(?:thread|jthread|async)\b|omp_\w+\s*\(|#[ \t]*pragma[ \t]+omp\b"),
         _WORD, "host concurrency API"),
        # torch's own thread pools (at::launch runs on the inter-op pool, c10::ThreadPool is one of its own), host
        # functions and callbacks the CUDA driver runs on its thread, timers and handlers that run later, exit hooks
        ("concurrency", re.compile(
            r"(?:at::(?:launch|intraop_launch\w*|internal::launch_no_thread_state)|c10::(?:Task)?ThreadPool|"
            r"cudaLaunchHostFunc|cuLaunchHostFunc|cudaStreamAddCallback|cuStreamAddCallback)\b"), _WORD,
         "work run later by another thread"),
        ("concurrency", re.compile(
            r"(?:timer_create|setitimer|alarm|sigaction|atexit|at_quick_exit|on_exit)\s*\(|signal\s*\(\s*SIG"), _CALL,
         "timer, signal handler or exit hook"),
        ("concurrency", re.compile(
            r"(?:pthread_create|fork|vfork|posix_spawnp?|popen|system|execv|execve|execvp|execvpe|execl|execle|"
            r"execlp)\s*\("), _CALL, "process/thread API"),
        # the same functions taken without a call (a pointer, an argument, `using ::system`), to be called elsewhere
        ("concurrency", re.compile(
            r"(?:system|fork|vfork|popen|posix_spawnp?|pthread_create|execv|execve|execvp|execvpe|execl|execle|"
            r"execlp)\b(?!\s*\()"), _CALL, "process/thread API taken as a value"),
        ("harness_internals", re.compile(
            r"(?:syscall|ptrace|prctl|unshare|setns|keyctl|add_key|request_key)\b(?!\s*\()"), _CALL,
         "system call or process-control API taken as a value"),
        ("env_probe", re.compile(
            r"(?:getenv|secure_getenv|setenv|putenv|unsetenv|gethostname|getpid|getppid|uname|getlogin)\s*\("),
         _CALL, "environment probe"),
        # raw descriptors (the worker's reply channel is one, in the candidate's process), raw system calls and
        # process control: what the Python rules refuse as os.writev / os.dup2 / os.kill, done from native code
        ("harness_internals", re.compile(
            r"(?:write|pwrite|pwrite64|writev|pwritev2?|read|pread|pread64|readv|preadv2?|dup[23]?|close|"
            r"close_range|sendfile|sendfile64|splice|tee|vmsplice|pipe2?|syscall|kill|tgkill|tkill|ptrace|prctl|"
            r"clone3?|unshare|setns|keyctl|add_key|request_key)\s*\("), _CALL,
         "raw descriptor, system call or process-control API"),
        ("env_probe", re.compile(r"_{0,2}environ\b"), _WORD, "environment probe"),  # `extern char** __environ`
        ("file_cache", re.compile(r"(?:basic_)?(?:ofstream|fstream|filebuf)\b|filesystem\b"), _WORD,
         "file-system API"),
        ("file_cache", re.compile(r"(?:openat2?|open64|fdopen|fopen64|creat64|mkstemps?|renameat2?|linkat|symlinkat)"
                                  r"\s*\("), _CALL, "file-system write"),
        ("file_cache", re.compile(
            r"(?:freopen|mkstemp|mkdtemp|tmpfile|tmpnam|shm_open|mmap|creat|mkdir|unlink|rename|fwrite)\s*\("),
         _CALL, "file-system write"),
        ("file_read", re.compile(r"(?:basic_)?ifstream\b"), _WORD, "file read"),
        # host clocks: a candidate has no need to time itself, and the reading tells warmup from timed calls
        ("clock_read", re.compile(r"(?:clock_gettime|gettimeofday|timespec_get|__rdtsc|__rdtscp|"
                                  r"QueryPerformanceCounter)\s*\(|(?:steady_clock|system_clock|high_resolution_clock)\b"),
         _WORD,
         "host clock"),
        # the interpreter through its C API: modules, frames, thread state (pybind11's `py::` wrappers are judged by
        # their names above)
        ("harness_internals", re.compile(r"Py(?:Sys|ThreadState|Frame|InterpreterState|Object_(?:Get|Set|Del)Attr|"
                                         r"Traceback)_?\w*\s*\("),
         _CALL, "the Python interpreter's C API"),
        ("file_read", re.compile(r"fread\s*\("), _CALL, "file read"),
        ("native_ffi", re.compile(
            r"(?:dlopen|dlsym|dlmopen|dlvsym|LoadLibrary\w*|GetProcAddress|cudaGetDriverEntryPoint\w*|"
            r"cuGetProcAddress\w*)\b"), _WORD, "dynamic symbol loading"),
        ("dynamic_code", re.compile(
            r"(?:nvrtc\w+|cuModuleLoad\w*|cuLinkCreate\w*|cuLinkAdd\w*|cuLibraryLoad\w*|cudaLibraryLoad\w*|"
            r"PyRun_\w+|PyImport_\w+|PyEval_\w+|Py_CompileString\w*)\b|"
            r"py(?:bind11)?::(?:exec|eval|eval_file|module_?::import)\b"), _WORD, "run-time code loading"),
        ("device_state_tamper", re.compile(
            r"(?:cudaDeviceSetLimit|cuCtxSetLimit|cudaCtxResetPersistingL2Cache|cuCtxResetPersistingL2Cache|"
            r"cudaStreamSetAttribute|cuStreamSetAttribute|cudaLimitPersistingL2CacheSize|accessPolicyWindow|"
            r"cudaAccessProperty\w*|cudaDeviceReset|cudaSetDeviceFlags|cudaProfilerStart|cudaProfilerStop|"
            r"cuProfilerStart|cuProfilerStop)\b"), _WORD, "device-state API"),
        ("timer_tampering", re.compile(r"cupti\w*|CUpti_\w+"), _WORD, "CUPTI API"),
        # kernels registered for PyTorch's own operators (or for every operator: the `_` namespace's fallbacks)
        # replace PyTorch's for the whole process, the worker's torch.equal and L2 flush included; an extension's
        # own namespace (TORCH_LIBRARY(mylib, m)) is its own
        ("monkeypatch", re.compile(
            rf"TORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(\s*(?:{'|'.join(_TORCH_NAMESPACES)})\s*,|"
            r"\bDispatcher::(?:singleton|realSingleton)\b|\bc10::Dispatcher\b|\btorch::Library\b|"
            r"\bc10::impl::OperatorEntry\b"),
         _WORD, "registration into PyTorch's dispatcher for its own operators"),
        ("library_fallback", re.compile(
            r"(?:cublas\w*|cudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|getCurrentCUDABlasHandle|"
            r"getCurrentCUDABlasLtHandle)\b|(?:cutlass|flashinfer)::"), _WORD, "library API"),
    ]


# PyTorch's own operator namespaces (and `_`, every operator's fallbacks): an extension registering into one replaces
# PyTorch's kernels for the whole process
_TORCH_NAMESPACES = ("_", "aten", "prims", "rngprims", "c10d", "_c10d_functional", "quantized", "_quantized", "sparse",
                     "profiler", "mkldnn", "onednn", "inductor", "higher_order", "cuda", "torchvision")
_TORCH_LIBRARY_RE = re.compile(r"\bTORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(\s*(\w+)\s*,")


def _starts_token(code: str, start: int, kind: str) -> bool:
    """True if the match at `start` begins a token: not inside an identifier, and for _CALL not a method."""
    if start == 0:
        return True
    before = code[start - 1]
    if _is_word_char(before):
        return False
    return kind != _CALL or before not in ".>"


_CPP_TOKEN_RULES = _cpp_token_rules()
# What follows a driver entry-point lookup that asks for a TMA tensor-map encoder by its literal name.
_ENCODERS = (r"\"(?:cuTensorMapEncodeTiled|cuTensorMapEncodeIm2col|cuTensorMapEncodeIm2colWide|"
             r"cuTensorMapReplaceAddress)\"")
_TENSOR_MAP_ENTRY_RE = re.compile(r"\s*\(\s*" + _ENCODERS + r"\s*,")
# The same encoder through the loader: `dlsym(handle, "cuTensorMapEncodeTiled")` of the driver the process has
# loaded already (`dlopen("libcuda.so.1", RTLD_NOW)`): any other library or symbol stays a finding.
_LOADER_CALL_RE = re.compile(r"\bdl(?:open|sym|mopen|vsym|info|addr|error|close|iterate_phdr)\w*\b")
_TENSOR_MAP_LOADER_RE = {"dlsym": re.compile(r"\s*\(\s*[A-Za-z_][\w.>-]*\s*,\s*" + _ENCODERS + r"\s*\)"),
                         "dlopen": re.compile(r"\s*\(\s*\"libcuda\.so(?:\.1)?\"\s*,")}
# `("NAME")`: the one argument of a call, a plain string literal naming an environment variable.
_CPP_LITERAL_ARGUMENT_RE = re.compile(r"\s*\"([A-Za-z_][A-Za-z0-9_]*)\"\s*\)")
_CPP_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*([<\"])([^>\"\n]+)[>\"]", re.MULTILINE)
_CPP_INCLUDE_RULES = (
    ("library_fallback", re.compile(r"cublas|cudnn|cutlass|cute/|flashinfer|cusparse|cufft|cusolver")),
    ("dynamic_code", re.compile(r"nvrtc")),
    ("native_ffi", re.compile(r"dlfcn")),
    ("timer_tampering", re.compile(r"cupti")),
)
# A definition (not a call) of a CUDA runtime/driver/CUPTI/NVTX function interposes on the real symbol.
# Only families of real API names are matched, so a helper such as `cudaCheck(...)` is not mistaken for one.
_CPP_RUNTIME_SYMBOL_RE = re.compile(
    r"(cuda(?:Malloc|Free|Memcpy|Memset|Mem|Event|Stream|Device|Launch|GetLastError|PeekAtLastError|GetDevice|"
    r"SetDevice|Graph|Func|Ctx|Occupancy|Host|Pointer|GetDriverEntryPoint|Profiler|RuntimeGetVersion|"
    r"DriverGetVersion|Ipc|Import|External|ThreadSynchronize)\w*|"
    r"cu(?:Init|Ctx|Mem|Launch|Stream|Event|Module|Graph|Device|Func|Library|Kernel|Profiler|Driver|"
    r"GetProcAddress)\w*|cupti[A-Z]\w*|nvtx[A-Z]\w*)\s*\(")
_CPP_NOT_A_TYPE = frozenset({"return", "else", "do", "case", "if", "while", "for", "switch", "throw", "new",
                             "delete", "sizeof", "co_return", "co_await"})
_CPP_STATIC_RE = re.compile(r"static\b")
_CPP_DEVICE_GLOBAL_RE = re.compile(r"__(?:device|managed)__\b")
_CPP_DECL_END_RE = re.compile(r"[;={\[(]")
_CPP_NOT_STATE = frozenset({"const", "constexpr", "consteval", "inline", "__forceinline__", "__inline__",
                            "__global__", "__constant__", "struct", "class", "union", "enum", "__shared__",
                            "typedef", "using", "operator"})
_CPP_FOPEN_RE = re.compile(r"(?:fopen|open)\s*\(")


def _matching_paren(code: str, open_at: int) -> int:
    """Offset of the ')' matching the '(' at open_at (strings already blanked), or -1."""
    depth = 0
    for i in range(open_at, min(len(code), open_at + 4000)):
        c = code[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        elif c in ";{}" and depth <= 1:
            return -1
    return -1


def _split_top_level_args(text: str) -> list[str]:
    args, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i])
            start = i + 1
    args.append(text[start:])
    return [a.strip() for a in args]


class _CppScanner:
    def __init__(self, source: str, policy: _CompiledPolicy, path: str | None = None,
                 defined: frozenset[str] = frozenset(), elsewhere: str = ""):
        self.policy = policy
        self.defined = defined  # functions of ATen's names the solution's other files define (cpp_aten)
        self.elsewhere = elsewhere  # the text of the solution's other files (their macros, their calls)
        self.path = path.replace("\\", "/") if path is not None else None  # in the solution; None: a Python string
        source = _without_digit_separators(_splice(digraphs(source)))
        self.code, self.with_strings, self.strings = _strip_cpp(source)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.hits: list[_Hit] = []

    def _position(self, offset: int) -> tuple[int, int]:
        line_index = bisect.bisect_right(self.line_starts, offset) - 1
        return line_index + 1, offset - self.line_starts[line_index] + 1

    def _hit(self, rule: str, offset: int, token: str, what: str) -> None:
        if self.policy.cpp_tokens(token):
            return
        line, col = self._position(offset)
        self.hits.append(_Hit(rule, line, col, f"{what}: {_WHY[rule]}"))

    def scan(self) -> list[_Hit]:
        code = self.code
        # a header's name is no use of a function (`#include <sys/syscall.h>`): the include rules judge headers
        includes = {self._position(m.start())[0] for m in _CPP_INCLUDE_RE.finditer(code)}  # not a string's text
        for rule, pattern, boundary, kind in _CPP_TOKEN_RULES:
            for m in pattern.finditer(code):
                if self._position(m.start())[0] in includes:
                    continue
                if _starts_token(code, m.start(), boundary) and not self._tensor_map_encoder(rule, m.group(0), m.end()):
                    token = m.group(0).rstrip("( \t")
                    name = self._debug_flag_read(rule, token, m.end())
                    if name is not None:
                        self._hit("env_read", m.start(), token, f"reads environment variable `{name}`")
                    else:
                        self._hit(rule, m.start(), token, f"uses `{token}` ({kind})")
        for offset, macro, text in expansions(code, _split_top_level_args, _matching_paren, self.elsewhere):
            if text is None:  # past the expansion budget: what the rest expands to is not read
                self._hit("dynamic_code", offset, macro, f"`{macro}` and the macros it uses expand past what the gate "
                                                         f"reads ({EXPANSION_BUDGET:,} characters)")
                continue
            for rule, pattern, boundary, kind in _CPP_TOKEN_RULES:
                for m in pattern.finditer(text):
                    if _starts_token(text, m.start(), boundary) and rule != "env_read":
                        token = m.group(0).rstrip("( \t")
                        self._hit(rule, offset, token, f"`{macro}` expands to `{token}` ({kind})")
        self._scan_library_namespaces()
        self._scan_includes()
        self._scan_open_calls()
        self._scan_aten()
        self._scan_runtime_symbol_definitions()
        self._scan_persistent_state()
        self._scan_strings()
        return self.hits

    def _scan_library_namespaces(self) -> None:
        """`#define NS aten` then `TORCH_LIBRARY_IMPL(NS, CUDA, m)`: the namespace as the preprocessor gives it (the
        token rules see `NS`, and its expansion `aten` alone)."""
        objects = object_macros(self.code)
        for m in _TORCH_LIBRARY_RE.finditer(self.code):
            name, seen = m.group(1), set()
            while name in objects and name not in seen:
                seen.add(name)
                name = objects[name].strip()
            if name != m.group(1) and name in _TORCH_NAMESPACES:
                self._hit("monkeypatch", m.start(), m.group(0), f"`{m.group(0).strip()}` registers into PyTorch's "
                          f"`{name}` namespace (registration into PyTorch's dispatcher for its own operators)")

    def _tensor_map_encoder(self, rule: str, token: str, end: int) -> bool:
        """A driver entry point asked for by the literal name of a TMA tensor-map encoder
        (`cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", ...)`: the CUDA guide's and CUTLASS's way to build a TMA
        descriptor without linking libcuda; or `dlsym(libcuda, "cuTensorMapEncodeTiled")`). Those functions only
        fill a descriptor on the host; any other or a computed name stays a finding."""
        if rule != "native_ffi":
            return False
        if token.strip() in _TENSOR_MAP_LOADER_RE:  # dlopen/dlsym: only where every loader call is for the encoder
            return self._loader_only_for_encoders()
        return _TENSOR_MAP_ENTRY_RE.match(self.with_strings, end) is not None

    def _loader_only_for_encoders(self) -> bool:
        """The loader used for the TMA encoder alone: every loader call is `dlopen("libcuda.so.1", ...)`,
        `dlsym(handle, "cuTensorMapEncode...")`, `dlerror()` or `dlclose(...)`, and a dlsym is one of them."""
        uses = list(_LOADER_CALL_RE.finditer(self.code))
        return any(m.group(0) == "dlsym" for m in uses) and all(
            m.group(0) in ("dlerror", "dlclose") or (m.group(0) in _TENSOR_MAP_LOADER_RE and _TENSOR_MAP_LOADER_RE[
                m.group(0)].match(self.with_strings, m.end()) is not None) for m in uses)

    def _debug_flag_read(self, rule: str, token: str, end: int) -> str | None:
        """The variable's name where `getenv("NAME")` reads one by its literal name that does not reveal the harness
        (a debug flag, as `os.environ.get("NAME")` is in Python: env_read); None for anything else."""
        if rule != "env_probe" or token not in ("getenv", "secure_getenv"):
            return None
        m = _CPP_LITERAL_ARGUMENT_RE.match(self.with_strings, end)
        names = [m.group(1)] if m is not None else names_passed_to_parameter(
            self.code, self.with_strings, end, _split_top_level_args, _matching_paren, self.elsewhere)  # a helper's
        if not names or any(_REVEALING_ENV_NAME_RE.search(n) for n in names):
            return None
        return "`, `".join(dict.fromkeys(names))

    def _scan_includes(self) -> None:
        for m in _CPP_INCLUDE_RE.finditer(self.with_strings):
            header = m.group(2).strip()
            for rule, pattern in _CPP_INCLUDE_RULES:
                if pattern.search(header) and not (header == "dlfcn.h" and self._loader_only_for_encoders()):
                    self._hit(rule, m.start(2), header, f"includes `{header}`")
            if m.group(1) == '"' and not self._inside_the_solution(header):
                self._hit("harness_internals", m.start(2), header,
                          f"includes `{header}` from outside the solution's own sources")

    def _inside_the_solution(self, header: str) -> bool:
        """A quoted include that stays in the solution's folder: no absolute path, and `..` only where it resolves
        from this file's folder to another of the solution's (`#include "../common/utils.cuh"` in csrc/kernels/);
        text held in a Python string is compiled in a build folder, so `..` there always leaves."""
        if header.startswith("/"):
            return False
        if ".." not in header.split("/"):
            return True
        if self.path is None:
            return False
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(self.path), header))
        return resolved != ".." and not resolved.startswith("../")

    def _scan_open_calls(self) -> None:
        for m in _CPP_FOPEN_RE.finditer(self.code):
            if not _starts_token(self.code, m.start(), _CALL):
                continue
            open_at = m.end() - 1
            close_at = _matching_paren(self.code, open_at)
            name = m.group(0).rstrip("( \t")
            if close_at < 0:
                continue
            args = _split_top_level_args(self.with_strings[open_at + 1:close_at])
            if name.endswith("fopen"):
                mode_text = args[1] if len(args) > 1 else ""
                mode = re.fullmatch(r'"([^"]*)"', mode_text)
                if mode is None:
                    self._hit("file_cache", m.start(), name, f"`{name}` with a mode that is not a literal "
                                                             f"(cannot prove it only reads)")
                elif any(c in mode.group(1) for c in "wa+"):
                    self._hit("file_cache", m.start(), name,
                              f"`{name}` opens a file for writing (mode \"{mode.group(1)}\")")
                else:
                    self._hit("file_read", m.start(), name, f"`{name}` opens a file for reading")
            elif re.search(r"\bO_(?:WRONLY|RDWR|CREAT|APPEND|TRUNC)\b", self.with_strings[open_at:close_at]):
                self._hit("file_cache", m.start(), name, f"`{name}` opens a file for writing")
            elif len(args) >= 2:  # open(path, flags): POSIX open, read-only
                self._hit("file_read", m.start(), name, f"`{name}` opens a file")

    def _scan_aten(self) -> None:
        for offset, token, what in aten_hits(self.code, self.policy, self.defined):
            self._hit("torch_compute", offset, token, what)

    def _scan_runtime_symbol_definitions(self) -> None:
        code = self.code
        for m in _CPP_RUNTIME_SYMBOL_RE.finditer(code):
            if not _starts_token(code, m.start(), _WORD):
                continue
            close_at = _matching_paren(code, m.end() - 1)
            if close_at < 0:
                continue
            after = code[close_at + 1:close_at + 200].lstrip()
            if not after.startswith("{"):
                continue
            before = code[max(0, m.start() - 80):m.start()].rstrip(" \t\n*&")
            previous = re.search(r"(\w+)$", before)
            if previous is None or previous.group(1) in _CPP_NOT_A_TYPE:
                continue
            self._hit("timer_tampering", m.start(), m.group(1),
                      f"defines function `{m.group(1)}`, which shadows the CUDA/CUPTI/NVTX symbol of that name")

    def _scan_persistent_state(self) -> None:
        code = self.code
        for pattern, kind in ((_CPP_STATIC_RE, "static"), (_CPP_DEVICE_GLOBAL_RE, "device global")):
            for m in pattern.finditer(code):
                if not _starts_token(code, m.start(), _WORD):
                    continue
                segment = code[m.end():m.end() + 400]
                end = _CPP_DECL_END_RE.search(segment)
                if end is None or end.group(0) == "(":
                    continue  # a function (or something we cannot read as a variable)
                declaration = segment[:end.start()]
                words = re.findall(r"\w+", declaration)
                if not words or _CPP_NOT_STATE.intersection(words):
                    continue
                if kind == "device global" and "static" in code[max(0, m.start() - 12):m.start()]:
                    continue  # `static __device__ x;` is reported once, by the static pattern
                variable = words[-1]
                self._hit("static_buffer", m.start(), variable,
                          f"declares {kind} variable `{variable}` ({' '.join(words)})")

    def _scan_strings(self) -> None:
        include_lines = {self._position(m.start())[0] for m in _CPP_INCLUDE_RE.finditer(self.with_strings)}
        for offset, content in self.strings:
            if not content or self._position(offset)[0] in include_lines:
                continue
            marker = _ENV_MARKER_RE.search(content)
            if marker:
                token = marker.group(0).strip(_QUOTES_AND_SPACE)
                self._hit("native_ffi" if token == "LD_PRELOAD" else "env_probe", offset, token,
                          f"string literal mentions `{token}`")
            if _TEMP_PATH_RE.search(content):
                self._hit("file_cache", offset, content,
                          f"string literal names a shared temp/cache path ({content[:60]!r})")


def scan_cpp(source: str, policy: _CompiledPolicy, path: str | None = None,
             defined: frozenset[str] = frozenset(), elsewhere: str = "") -> list[_Hit]:
    """Hits of one C/C++/CUDA text, by position; token and include patterns overlap, so one hit per rule and
    line is kept. ``defined``: functions the solution's other sources define (``cpp_aten.defined_functions``);
    ``elsewhere``: the text of its other files."""
    seen: set[tuple[str, int]] = set()
    hits = []
    for hit in sorted(_CppScanner(source, policy, path, defined, elsewhere).scan(), key=lambda h: (h.line, h.col)):
        if (hit.rule, hit.line) not in seen:
            seen.add((hit.rule, hit.line))
            hits.append(hit)
    return hits
