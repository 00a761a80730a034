"""Name tables of the Python scanner (the supported build path, the torch names that are never compute; the banned
names and their rules are python_banned's) and small AST helpers."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

# Assigning into these namespaces is timer tampering; assigning into any other imported module is a monkeypatch.
_TIMER_NAMESPACES = (
    "torch.cuda", "time", "cupti", "triton.testing", "flashinfer", "flashinfer_bench", "harness", "controller",
    "torch.profiler", "torch.autograd.profiler", "torch.utils.benchmark", "timeit",
)
# A setattr with a computed attribute name on these may hit a timer namespace below them.
_TIMER_ANCESTORS = frozenset({"torch", "triton", "torch.autograd", "torch.utils"})

# Roots whose uses count as compute unless allow-listed (torch) or at all (libraries with fused kernels).
_COMPUTE_ROOTS = frozenset({"torch", "flashinfer", "flash_attn", "xformers", "vllm", "sgl_kernel", "deep_gemm",
                            "apex", "transformer_engine", "liger_kernel"})

# Tensor methods that do compute; called on a local value outside a @triton.jit body they are flagged
# (a Python list/set/dict has none of these, so false positives are rare).
_TENSOR_COMPUTE_METHODS = frozenset({
    "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "dot", "softmax", "log_softmax", "exp",
    "exp2", "sum", "mean", "amax", "amin", "logsumexp", "norm", "sqrt", "rsqrt", "tanh", "sigmoid", "relu",
    "topk", "cumsum", "argsort", "argmax", "argmin", "masked_fill", "masked_fill_", "index_select", "index_add",
    "index_add_", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "mul", "mul_", "div",
    "div_", "einsum", "outer", "kron", "tensordot", "prod", "var", "std", "__matmul__", "__rmatmul__", "__imatmul__",
    # in-place and private spellings of the same, and other reductions and products (red team round 4: attention
    # written with `S.baddbmm_` and `P.nansum` raised nothing). Host glue that shares a name with a Python method
    # (`.sort()`, `.max()`, `.index()`) stays out: attribution on a GPU judges every kernel whatever called it.
    "baddbmm_", "addmm_", "addbmm_", "addmv_", "addr", "addr_", "inner", "vdot", "nansum", "nanmean",
    "logcumsumexp", "cumsum_", "cumprod", "cumprod_", "cummax", "cummin", "kthvalue", "trace", "std_mean",
    "var_mean", "addcmul", "addcmul_", "addcdiv", "addcdiv_", "_softmax", "_log_softmax", "exp_", "exp2_", "sqrt_",
    "rsqrt_", "tanh_", "sigmoid_", "relu_", "expm1", "expm1_", "logaddexp", "logaddexp2", "dist", "cross", "lerp",
    "lerp_", "renorm", "matrix_power", "median", "nanmedian", "quantile", "nanquantile", "histc", "index_put",
    "index_put_", "index_reduce", "index_reduce_", "scatter_reduce_", "logit", "softplus", "gelu", "silu", "mish",
})

# numpy's (and scipy's) float math and linear algebra: the data computed on the host (red team round 7: GQA decode in
# np.einsum/np.exp/np.log on the inputs copied out). numpy's planning helpers (cumsum, diff, argsort, repeat, ceil,
# log2, maximum, prod of lengths and shapes) stay out, and so do reductions without an axis (`np.max(lengths)`);
# `.numpy()`/`.tolist()` too: honest planners copy their index tensors out that way.
_NUMPY_COMPUTE = frozenset({
    "numpy.einsum", "numpy.matmul", "numpy.dot", "numpy.vdot", "numpy.tensordot", "numpy.inner", "numpy.outer",
    "numpy.kron", "numpy.matvec", "numpy.vecmat", "numpy.vecdot", "numpy.linalg", "numpy.exp", "numpy.exp2",
    "numpy.expm1", "numpy.log", "numpy.log1p", "numpy.logaddexp", "numpy.logaddexp2", "numpy.tanh", "numpy.sinh",
    "numpy.cosh", "numpy.reciprocal", "numpy.convolve", "numpy.correlate", "numpy.fft", "scipy.special.softmax",
    "scipy.special.log_softmax", "scipy.special.logsumexp", "scipy.special.expit", "scipy.linalg",
})
# numpy reductions: compute on an array where taken along an axis (`np.sum(p, axis=1, keepdims=True)`)
_NUMPY_REDUCTIONS = frozenset({"numpy.sum", "numpy.max", "numpy.min", "numpy.amax", "numpy.amin", "numpy.mean",
                               "numpy.nansum", "numpy.nanmax", "numpy.nanmin", "numpy.nanmean", "numpy.average",
                               "numpy.std", "numpy.var", "numpy.median"})

_FRAME_ATTRS = frozenset({
    "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next", "gi_frame",
    "cr_frame", "ag_frame", "findCaller", "__globals__", "__code__", "__builtins__", "__closure__", "__subclasses__",
})

# The `@` operator by name: judged like `@` itself (torch_compute outside a Triton kernel), also when handed over
# (`functools.reduce(operator.matmul, ...)`).
_MATMUL_OPERATORS = frozenset({"operator.matmul", "operator.__matmul__", "operator.imatmul", "operator.__imatmul__"})
# Attribute lookups by name (`operator.methodcaller("matmul")`, `operator.attrgetter("f_back")`): the name is
# judged like an attribute; a computed one is dynamic code.
_NAMED_LOOKUPS = frozenset({"operator.methodcaller", "operator.attrgetter"})

_IDENTITY_METHODS = frozenset({"data_ptr", "_cdata", "__hash__", "storage_offset", "unsafe_ptr"})
_CACHE_ACCESS_METHODS = frozenset({"get", "setdefault", "pop", "__getitem__", "__setitem__", "__contains__"})

# (str.replace / DataFrame.rename are too common to treat .replace()/.rename() as file operations.)
_FILE_WRITE_METHODS = frozenset({"write_text", "write_bytes", "touch", "mkdir", "unlink", "symlink_to",
                                 "hardlink_to", "tofile", "exists", "is_file", "is_dir",
                                 "_write_file"})  # a storage written to a file
_FILE_READ_METHODS = frozenset({"read_text", "read_bytes"})

_OPEN_FUNCTIONS = frozenset({"builtins.open", "io.open", "codecs.open", "os.fdopen", "pathlib.Path.open", "io.FileIO",
                             "_io.FileIO"})
# A file mode: `x.open("w")` on a value the gate cannot type (a Path in a local) is judged by its mode.
_FILE_MODE_RE = re.compile(r"[rwxabtU+]{1,4}")

# Listing the solution's own source folder (`glob.glob(os.path.join(_HERE, "csrc", "*.cu"))` for load()) reads
# what the solution ships; any other pattern is a file-system probe. tempfile gives load() a private
# build_directory (embedded.py); any other use is a file_cache finding where it is used, so importing either
# module by name is no finding (a star import still is: it would hide which names are used).
_GLOB_FUNCTIONS = frozenset({"glob.glob", "glob.iglob"})
_TEMP_BUILD_DIRECTORIES = frozenset({"tempfile.mkdtemp", "tempfile.TemporaryDirectory"})
# Which version of a package is installed, or whether one is (`importlib.metadata.version("triton")`,
# `importlib.util.find_spec("flashinfer")`), asked by a literal top-level name: the installation's metadata, none of
# the package's code run (python_calls judges the call); any other use of importlib stays dynamic code.
_PACKAGE_QUERIES = frozenset({"importlib.metadata.version", "importlib.metadata.metadata", "importlib.util.find_spec"})
_PACKAGE_NOT_FOUND = "importlib.metadata.PackageNotFoundError"
# The solution's own package data read through the standard library (`importlib.resources.files(__package__)`,
# `pkgutil.get_data(__package__, "tuning.json")`): allowed with the module's own package as the anchor, read like a
# file next to the module (a file_read warning unless it is one of the solution's sources); any other use of
# importlib.resources or pkgutil stays dynamic code.
_PACKAGE_DATA_READS = frozenset({
    "importlib.resources.files", "importlib.resources.read_text", "importlib.resources.read_binary",
    "importlib.resources.open_text", "importlib.resources.open_binary", "importlib.resources.is_resource",
    "importlib.resources.path", "pkgutil.get_data"})
# ctypes too: the starter kit's CUDA binding template imports it and never uses it; every use is native_ffi.
# cuda-python's driver module likewise: CuTe DSL kernels (FlashInfer's GDN ones, vendored) take their stream as
# `cuda.CUstream(torch.cuda.current_stream().cuda_stream)`, a typed handle of the current stream; any other use of
# the driver API is native_ffi.
_CUDA_STREAM_HANDLES = frozenset({"cuda.bindings.driver.CUstream", "cuda.cuda.CUstream"})
# inspect's signatures: FLA's input_guard names each argument after the decorated function's parameters, and its utils
# ask `inspect.signature(triton.autotune)` which keywords this Triton takes. A signature holds a callable's parameter
# names, defaults and annotations: no frame, no module namespace. The rest of inspect (frames, stacks, getmembers,
# getattr_static, getsource) stays harness_internals, and evaluating annotations (`eval_str=`) is dynamic code.
_SIGNATURE_NAMES = frozenset({"inspect.signature", "inspect.Signature", "inspect.Parameter", "inspect.BoundArguments"})
# The host's CPU architecture (FLA's IS_ARM): the same for every call of an evaluation, so it tells a test from a
# timed call no more than a constant does. The rest of platform (node, uname, system details) stays env_probe.
_HOST_ARCH = frozenset({"platform.machine"})
_IMPORTED_BY_USE = (frozenset({"glob", "tempfile", "ctypes", "importlib.metadata", "importlib.util",
                               "importlib.resources", "pkgutil",
                               _PACKAGE_NOT_FOUND, "cuda.bindings.driver", "cuda.cuda", "inspect", "platform"})
                    | _CUDA_STREAM_HANDLES | _SIGNATURE_NAMES | _HOST_ARCH
                    | _GLOB_FUNCTIONS | _TEMP_BUILD_DIRECTORIES | _PACKAGE_QUERIES | _PACKAGE_DATA_READS)

# Modules that other modules re-export as attributes (`torch.sys`, `os.sys`, `np.os`, `torch.os`): an attribute of
# an imported module with one of these names is that module, so `torch.sys.modules` is `sys.modules`. Real
# submodules that share a name are not (`torch.signal` is PyTorch's signal processing).
_REEXPORTED_MODULES = frozenset({
    "sys", "os", "builtins", "importlib", "ctypes", "threading", "_thread", "gc", "atexit", "signal", "inspect",
    "subprocess", "multiprocessing", "weakref", "tempfile", "shutil", "pickle", "socket", "platform", "runpy",
    "marshal", "io", "glob", "time", "operator",
})
# (and `sys.platform`, the name of the OS, a string: not the platform module)
_REAL_SUBMODULES = frozenset({"torch.signal", "scipy.signal", "scipy.io", "torch.multiprocessing", "sys.platform"})
# The C modules behind standard ones, judged as the module they implement: `posix.write`, `posix.fork`,
# `posix.environ` are `os.write`, `os.fork`, `os.environ`; `_operator.matmul` is `operator.matmul`.
_IMPLEMENTATION_MODULES = {
    "posix": "os", "nt": "os", "_io": "io", "_posixsubprocess": "subprocess", "_operator": "operator",
    "_imp": "importlib", "_frozen_importlib": "importlib", "_frozen_importlib_external": "importlib",
    "_datetime": "datetime", "_multiprocessing": "multiprocessing", "_posixshmem": "multiprocessing",
    "_asyncio": "asyncio", "_weakref": "weakref", "_signal": "signal", "_socket": "socket", "_pickle": "pickle",
    "_lsprof": "cProfile", "_tracemalloc": "tracemalloc", "_warnings": "warnings", "_atexit": "atexit",
}
_MEMO_DECORATORS = frozenset({"functools.lru_cache", "functools.cache", "functools.cached_property"})
_TRITON_DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics", "triton.language.jit"})
_TENSOR_BASES = frozenset({"torch.Tensor", "torch.nn.Parameter", "torch._C.TensorBase", "torch._C._TensorBase",
                           "torch.nn.Buffer", "torch.nn.parameter.Parameter", "torch.nn.parameter.Buffer",
                           "torch.nn.UninitializedParameter", "torch.nn.UninitializedBuffer",
                           "torch.nn.parameter.UninitializedParameter", "torch.nn.parameter.UninitializedBuffer",
                           "torch.masked.MaskedTensor"})
_BROAD_EXCEPTIONS = frozenset({"Exception", "BaseException"})

# Builtins that are resolved to "builtins.<name>" unless the module rebinds them.
_WATCHED_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "open",
                               "setattr", "getattr", "delattr", "id", "hash", "object", "type", "print",
                               "breakpoint", "str"})

_INTERNAL_STRINGS = frozenset({"__builtins__", "__globals__", "__code__", "__import__", "__subclasses__",
                               "f_back", "f_locals", "f_globals", "tb_frame", "_getframe",
                               "__self__"})  # `getattr(len, "__self__")` is the builtins module


# --------------------------------------------------------------------------------------------------
# The supported native build path: torch.utils.cpp_extension's JIT builders. The harness runs them in the
# candidate's sandboxed build with a private build folder and archives what they build; the C++/CUDA source
# strings given to load_inline, the files given to load and the flags given to either are scanned instead.
# The rest of torch.utils.cpp_extension (e.g. _import_module_from_library) stays native_ffi.
_CPP_EXTENSION = "torch.utils.cpp_extension"
# TVM-FFI's builder (the contest's default binding for CUDA) the same way: tvm_ffi.cpp.build/load from the solution's
# .cu files, build_inline/load_inline from strings; tvm_ffi.load_module only of what tvm_ffi.cpp.build returned.
_TVM_BUILD_FUNCTIONS = frozenset({"tvm_ffi.cpp.build", "tvm_ffi.cpp.load", "tvm_ffi.cpp.build_inline",
                                  "tvm_ffi.cpp.load_inline"})
_BUILD_FUNCTIONS = frozenset({f"{_CPP_EXTENSION}.load", f"{_CPP_EXTENSION}.load_inline"}) | _TVM_BUILD_FUNCTIONS
_SUPPORTED_BUILD_NAMES = _BUILD_FUNCTIONS | {_CPP_EXTENSION, f"{_CPP_EXTENSION}.CUDA_HOME",
                                             f"{_CPP_EXTENSION}.include_paths"}

# --------------------------------------------------------------------------------------------------
# torch names that are never compute, whatever the policy's torch_calls allow-list says: constants (dtypes,
# memory formats, layouts), type and metadata helpers, device queries, allocation and views. A reference that
# is not called (`memory_format=torch.contiguous_format`, `dtype=torch.bfloat16`, `torch.Tensor` in an
# annotation) is only ever a finding when it hands a non-constant torch callable to other code.
_TORCH_DTYPE_RE = re.compile(
    r"torch\.(?:u?int(?:1|2|3|4|5|6|7|8|16|32|64)|float(?:16|32|64)|bfloat16|half|float|double|long|int|short|"
    r"bool|c(?:half|float|double)|complex(?:32|64|128)|float8_\w+|float4_\w+|bits\w+|q(?:u?int\w+))")
# torch's own precision and autotuning switches, set as attributes: what torch.set_float32_matmul_precision("high")
# sets by a call, for the candidate's own process only (the reference runs in a worker of its own).
_TORCH_SETTINGS = frozenset({
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction", "torch.backends.cuda.matmul.fp32_precision",
    "torch.backends.cudnn.allow_tf32", "torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic",
    "torch.backends.cudnn.conv.fp32_precision", "torch.backends.cudnn.rnn.fp32_precision",
    "torch.backends.fp32_precision",
})
_TORCH_NEVER_COMPUTE = frozenset({
    # memory formats, layouts, numeric constants
    "torch.contiguous_format", "torch.channels_last", "torch.channels_last_3d", "torch.preserve_format",
    "torch.strided", "torch.sparse_coo", "torch.sparse_csr", "torch.sparse_csc", "torch.sparse_bsr",
    "torch.sparse_bsc", "torch.jagged", "torch.inf", "torch.nan", "torch.pi", "torch.e", "torch.newaxis",
    # types and metadata
    "torch.Tensor", "torch.Size", "torch.dtype", "torch.device", "torch.layout", "torch.memory_format",
    "torch.Generator", "torch.SymInt", "torch.SymFloat", "torch.SymBool", "torch.finfo", "torch.iinfo",
    "torch.is_tensor", "torch.is_floating_point", "torch.is_complex", "torch.numel", "torch.get_default_dtype",
    "torch.get_default_device", "torch.typename", "torch.types", "torch.__version__", "torch.version",
    # dtype and shape arithmetic, no kernel (round 5: an assert on them was unconfirmed compute)
    "torch.promote_types", "torch.result_type", "torch.can_cast", "torch.broadcast_shapes", "torch.is_same_size",
    "torch.is_storage", "torch.is_inference_mode_enabled",
    "torch._assert", "torch.compiler.is_compiling", "torch.compiler.is_dynamo_compiling",
    "torch._dynamo.is_compiling", "torch.jit.is_scripting", "torch.jit.is_tracing",
    # keeping a function out of torch.compile's graphs (FLA's launchers): a decorator, no kernel; what it wraps is
    # judged as itself (`torch.compiler.disable(torch.matmul)` still names torch.matmul)
    "torch.compiler", "torch.compiler.disable", "torch._dynamo.disable",
    # autocast regions and the autograd decorators that set them (FLA's utils define autocast_custom_fwd at import):
    # they change the dtype torch's own ops run in, and launch nothing themselves
    "torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.is_autocast_enabled",
    "torch.amp.custom_fwd", "torch.amp.custom_bwd", "torch.cuda.amp.custom_fwd", "torch.cuda.amp.custom_bwd",
    # seeding, profiler annotations, allocator housekeeping, matmul precision: no kernel of their own
    "torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.seed",
    "torch.cuda.empty_cache", "torch.set_float32_matmul_precision", "torch.get_float32_matmul_precision",
    "torch.use_deterministic_algorithms", "torch.are_deterministic_algorithms_enabled",
    "torch.profiler.record_function", "torch.autograd.profiler.record_function",
    # autograd switches
    "torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled", "torch.is_grad_enabled",
    "torch.is_inference_mode_enabled",
    # device queries
    "torch.cuda", "torch.cuda.is_available", "torch.cuda.current_device", "torch.cuda.device_count",
    "torch.cuda.get_device_properties", "torch.cuda.get_device_capability", "torch.cuda.get_device_name",
    "torch.cuda.get_arch_list", "torch.cuda.is_bf16_supported", "torch.cuda.mem_get_info",
    "torch.cuda.is_current_stream_capturing",
    "torch.cuda.device", "torch.cuda.device_of", "torch.cuda.set_device", "torch.cuda.is_initialized",
    "torch.backends", "torch.version.cuda", "torch.version.hip",
    "torch.backends.cuda.is_built", "torch.backends.cudnn.is_available", "torch.backends.cudnn.version",
    "torch.backends.mps.is_available",
    # torch.accelerator's device queries and selection, as torch.cuda's (its stream and synchronize: the policy's
    # torch_calls, as torch.cuda's; set_stream and Graph: stream_event_graph)
    "torch.accelerator", "torch.accelerator.is_available", "torch.accelerator.device_count",
    "torch.accelerator.current_accelerator", "torch.accelerator.current_device_index",
    "torch.accelerator.current_device_idx", "torch.accelerator.device_index", "torch.accelerator.set_device_index",
    "torch.accelerator.set_device_idx", "torch.accelerator.get_device_capability", "torch.accelerator.get_memory_info",
    "torch.accelerator.memory_allocated", "torch.accelerator.max_memory_allocated", "torch.accelerator.memory_reserved",
    "torch.accelerator.max_memory_reserved", "torch.accelerator.memory_stats", "torch.accelerator.empty_cache",
    "torch.accelerator.reset_peak_memory_stats", "torch.accelerator.reset_accumulated_memory_stats",
    # which attention backend torch's own sdpa may use, and whether it may: switches of the candidate's process (the
    # reference runs in a worker of its own), no kernel; the sdpa call itself stays compute
    "torch.backends.cuda.enable_flash_sdp", "torch.backends.cuda.enable_mem_efficient_sdp",
    "torch.backends.cuda.enable_math_sdp", "torch.backends.cuda.enable_cudnn_sdp",
    "torch.backends.cuda.flash_sdp_enabled", "torch.backends.cuda.mem_efficient_sdp_enabled",
    "torch.backends.cuda.math_sdp_enabled", "torch.backends.cuda.cudnn_sdp_enabled",
    "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp",
    "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed",
    "torch.backends.cuda.is_flash_attention_available", "torch.backends.cuda.can_use_flash_attention",
    "torch.backends.cuda.can_use_efficient_attention", "torch.backends.cuda.can_use_cudnn_attention",
    "torch.backends.cuda.sdp_kernel", "torch.nn.attention.sdpa_kernel", "torch.nn.attention.SDPBackend",
    "torch.backends.cuda.preferred_linalg_library", "torch.backends.cuda.preferred_blas_library",
    "torch.backends.cudnn.flags",
    # allocator statistics (a workspace sized by what is free): queries, no kernel
    "torch.cuda.memory_allocated", "torch.cuda.max_memory_allocated", "torch.cuda.memory_reserved",
    "torch.cuda.max_memory_reserved", "torch.cuda.memory_stats", "torch.cuda.reset_peak_memory_stats",
    # DLPack: the same memory seen through another framework's handle (TVM-FFI, CuTe DSL), no copy, no kernel
    "torch.from_dlpack", "torch.utils.dlpack.from_dlpack", "torch.utils.dlpack.to_dlpack",
    # allocation (a fill counts as allocation: split-K accumulators need zeros)
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like",
    # views and shape helpers
    "torch.reshape", "torch.permute", "torch.transpose", "torch.squeeze", "torch.unsqueeze", "torch.flatten",
    "torch.unflatten", "torch.narrow", "torch.split", "torch.chunk", "torch.unbind", "torch.broadcast_to",
    "torch.as_strided", "torch.view_as_real", "torch.view_as_complex", "torch.movedim", "torch.swapaxes",
    "torch.t", "torch.select",
})
# prefixes of the same (torch.cuda.get_device_*, torch.backends.cudnn.version, ...)
_TORCH_NEVER_COMPUTE_PREFIXES = ("torch.cuda.get_device_", "torch.version.", "torch.types.", "torch.__version__.",
                                 "torch.cuda.nvtx.", "torch.accelerator.memory.")


def _is_torch_constant_or_helper(resolved: str) -> bool:
    return (resolved in _TORCH_NEVER_COMPUTE or resolved.startswith(_TORCH_NEVER_COMPUTE_PREFIXES)
            or _TORCH_DTYPE_RE.fullmatch(resolved) is not None)


# Scalar-valued tensor metadata: a memoised function called only with these (and numbers) does not key a
# cache by tensor identity.
_SCALAR_ATTRS = frozenset({"shape", "dtype", "device", "index", "ndim", "is_cuda", "itemsize", "type", "layout",
                           "multi_processor_count", "major", "minor"})
_SCALAR_METHODS = frozenset({"size", "stride", "dim", "numel", "element_size", "get_device", "item", "nelement",
                             "is_contiguous", "bit_length"})
_SCALAR_FUNCTIONS = frozenset({"builtins.int", "builtins.float", "builtins.bool", "builtins.str", "builtins.len",
                               "builtins.min", "builtins.max", "builtins.abs", "builtins.round", "builtins.tuple",
                               "triton.cdiv", "triton.next_power_of_2", "torch.cuda.current_device"})
_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "bytes", "None", "torch.dtype", "torch.device",
                                 "torch.Size", "tuple", "Tuple", "typing.Tuple", "Optional", "typing.Optional",
                                 "Literal", "typing.Literal", "Union", "typing.Union"})


# --------------------------------------------------------------------------------------------------
# AST helpers


def _chain_parts(node: ast.AST) -> list[str] | None:
    """['torch', 'cuda', 'Event'] for `torch.cuda.Event`; None if the chain does not start at a Name.

    `getattr(x, "name")` with a literal name counts as `x.name`, so `getattr(torch, "cuda").Event` is
    torch.cuda.Event.
    """
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and _str_const(node.args[1]) is not None):
            parts.append(node.args[1].value)
            node = node.args[0]
        else:
            break
    if isinstance(node, ast.Name):
        parts.append(node.id)
        parts.reverse()
        return parts
    return None


def _str_const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _iter_statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Every statement, nested ones included, without descending into expressions (much cheaper than
    ast.walk; imports, assignments, definitions and global declarations are all statements)."""
    stack = list(body)
    while stack:
        stmt = stack.pop()
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(stmt, field, None)
            if nested:
                stack.extend(nested)
        for handler in getattr(stmt, "handlers", ()):
            stack.extend(handler.body)
        for case in getattr(stmt, "cases", ()):
            stack.extend(case.body)


def _names_in(node: ast.AST) -> Iterable[str]:
    return (n.id for n in ast.walk(node) if isinstance(n, ast.Name))


def _message_literals(expr: ast.AST) -> Iterable[ast.Constant]:
    """The string literals that word a message: the literal itself, the text parts of an f-string, both sides of
    `+`/`%` and the tuple after `%`, the template of `"...".format(...)`. Never a literal inside another call or
    a formatted value (`f"{probe('X')}"`): what those compute is not prose."""
    if _str_const(expr) is not None:
        yield expr
    elif isinstance(expr, ast.JoinedStr):
        yield from (v for v in expr.values if _str_const(v) is not None)
    elif isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Mod)):
        yield from _message_literals(expr.left)
        yield from _message_literals(expr.right)
    elif isinstance(expr, ast.Tuple):
        for element in expr.elts:
            yield from _message_literals(element)
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
        yield from _message_literals(expr.func.value)
