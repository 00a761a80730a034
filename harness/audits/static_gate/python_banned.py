"""The Python scanner's banned names: canonical dotted names (after alias resolution) and the rule each one breaks
(``_PY_BANNED``; the longest prefix wins), one table per rule."""

from __future__ import annotations

_CONCURRENCY_NAMES = (
    "threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "pty", "signal", "atexit",
    "sched", "weakref.finalize", "torch.multiprocessing", "_interpreters", "_xxsubinterpreters",
    "os.fork", "os.forkpty", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp", "os.kill", "os.killpg",
    "os.spawnl", "os.spawnle", "os.spawnlp", "os.spawnlpe", "os.spawnv", "os.spawnve", "os.spawnvp", "os.spawnvpe",
    "os.execl", "os.execle", "os.execlp", "os.execlpe", "os.execv", "os.execve", "os.execvp", "os.execvpe",
    "os.register_at_fork",
    # processes started by library helpers: a shell pager, a browser, distutils' spawn, torch's worker pools
    "pydoc.pipepager", "pydoc.tempfilepager", "pydoc.pager", "webbrowser", "distutils.spawn", "setuptools._distutils",
    "torch.utils.collect_env", "torch.utils.data.DataLoader", "torch.utils.data.dataloader",
    "torch._inductor.compile_worker", "torch.jit.fork", "torch.jit._fork", "torch._C.fork",
    "torch.futures", "triton.runtime.build",
    # PyTorch's and Triton's modules that run a command line they are given (red team round 9:
    # `torch._inductor.cpp_builder.run_compile_cmd("sh -c '...'", ".")` ran a shell script, its output read back from
    # the error): a process outside every count, and outside the timer's trace
    "torch._inductor.cpp_builder", "torch._inductor.codecache", "torch._inductor.async_compile",
    "torch._inductor.autotune_process", "torch._inductor.compiler_bisector", "torch._inductor.wrapper_benchmark",
    "torch._inductor.cpu_vec_isa", "torch._inductor.rocm_multiarch_utils", "torch._dynamo.debug_utils",
    "torch._dynamo.repro", "torch._dynamo.test_minifier_common", "torch._strobelight", "torch.utils._strobelight",
    "torch._vendor", "torch.backends.xeon", "torch.cuda._memory_viz", "torch.distributed.elastic",
    "torch.testing._internal", "torch.utils._get_clean_triton", "torch.utils.benchmark.utils.valgrind_wrapper",
    "triton._filecheck", "triton.tools.build_extern", "triton.tools.disasm",
    # ...and the standard library's (round 9c: `uuid._get_command_stdout` started `python -c ...`)
    "uuid._get_command_stdout", "uuid._popen", "imaplib.IMAP4_stream", "pipes", "ensurepip", "venv",
    "_osx_support", "test.support", "idlelib", "ctypes.util", "mailcap",
)
_HARNESS_NAMES = (
    "gc", "inspect", "__builtin__", "__main__", "harness", "controller", "crucible", "flashinfer_bench",
    "sys.modules", "sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace",
    "sys.setprofile", "sys.gettrace", "sys.getprofile", "sys.addaudithook", "sys.monitoring", "sys.meta_path",
    "sys.path_hooks", "sys.path_importer_cache", "sys.path", "sys.exc_info", "sys.exception", "sys.last_traceback",
    "traceback.walk_stack", "traceback.extract_stack", "traceback.walk_tb", "types.FrameType",
    "builtins.globals", "builtins.locals", "builtins.vars", "builtins.breakpoint",
    # the caller's stack by other means: its file and function names tell the official timer's calls
    # (harness/measure/timing.py) from the checked ones
    "traceback.format_stack", "traceback.print_stack", "logging.currentframe", "logging.captureWarnings",
    "tracemalloc", "cProfile", "profile", "trace", "pdb", "bdb", "faulthandler", "contextlib.redirect_stderr",
    "contextlib.redirect_stdout",  # what Triton's interpreter prints (tl.device_print) taken back (round 12, a01)
    "torch.utils._traceback", "torch._C._profiler", "torch.fx.traceback", "torch.cuda.memory._record_memory_history",
)
# Profilers of the candidate's own: a second Kineto/CUPTI session in the process the official timer traces.
# (record_function only names a range: no finding)
_PROFILER_NAMES = ("torch.profiler.profile", "torch.profiler.profiler", "torch.profiler._KinetoProfile",
                   "torch.autograd.profiler.profile", "torch.autograd.profiler_legacy", "torch.cuda.profiler",
                   "torch._C._autograd._enable_profiler", "torch.autograd._enable_profiler")
# Raw file descriptors: the worker's channel to the harness is a pair of them, in the candidate's process. A reply
# written into it (os.writev as well as os.write), a request read from it, or either redirected or closed (os.dup2,
# os.close) is the harness's state reached around its code; a kernel never needs a descriptor.
_DESCRIPTOR_NAMES = (
    "os.dup", "os.dup2", "os.close", "os.closerange", "os.read", "os.readv", "os.pread", "os.preadv", "os.writev",
    "os.pwrite", "os.pwritev", "os.sendfile", "os.splice", "os.copy_file_range", "os.pipe", "os.pipe2", "os.fdopen",
    "os.set_inheritable", "os.set_blocking", "os.lseek", "os.ftruncate", "os.fstat", "os.fsync", "os.fdatasync",
    "os.openpty", "os.login_tty", "os.eventfd", "os.eventfd_read", "os.eventfd_write", "select", "selectors",
)
_ENV_NAMES = (
    "os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv", "os.unsetenv", "os.uname", "os.getlogin",
    "os.getpid", "os.getppid", "os.getuid", "os.ctermid", "sys.argv", "sys.orig_argv",
    "platform", "socket", "getpass", "pwd", "grp", "resource", "psutil", "uuid.getnode", "pytest", "_pytest",
    # Triton's own readers and writers of the environment (red team round 11: `triton.knobs.setenv` removed
    # TRITON_INTERPRET between calls, by a name built at run time; it could set CXX or GCC_EXEC_PREFIX for a build)
    "triton.knobs.setenv", "triton.knobs.getenv", "triton.knobs.getenv_bool", "triton.knobs.propagate_env",
    "triton.knobs.toenv", "triton.knobs.env_base", "triton.knobs.env_bool", "triton.knobs.env_int",
    "triton.knobs.env_str", "triton.knobs.env_opt_str", "triton.knobs.env_opt_bool", "triton.knobs.env_class",
    "triton.knobs.env_str_callable_default", "triton.knobs.env_nvidia_tool", "triton.knobs.Env",
)
_FILE_NAMES = (
    "pickle", "_pickle", "cPickle", "shelve", "dbm", "joblib", "dill", "cloudpickle", "sqlite3", "tempfile",
    "shutil", "glob", "fcntl", "mmap", "diskcache", "h5py", "lmdb",
    "os.open", "os.write", "os.makedirs", "os.mkdir", "os.remove", "os.unlink", "os.rename", "os.replace",
    "os.rmdir", "os.removedirs", "os.listdir", "os.scandir", "os.walk", "os.stat", "os.lstat", "os.access",
    "os.chmod", "os.symlink", "os.link", "os.truncate", "os.mkfifo", "os.memfd_create", "os.utime",
    "os.path.exists", "os.path.lexists", "os.path.isfile", "os.path.isdir", "os.path.islink",
    "os.path.getmtime", "os.path.getctime", "os.path.getatime", "os.path.getsize",
    "torch.save", "torch.load", "torch.from_file", "torch.UntypedStorage.from_file",
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.load", "numpy.memmap", "numpy.fromfile",
    "numpy.savetxt", "numpy.loadtxt", "numpy.genfromtxt",
    # writers that open their file themselves (red team round 12: each passed with no finding)
    "logging.FileHandler", "logging.handlers", "gzip", "bz2", "lzma", "fileinput", "tarfile", "zipfile",
)
_DYNAMIC_NAMES = (
    "builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__", "importlib", "imp", "runpy",
    "zipimport", "pkgutil", "marshal", "code", "codeop", "types.CodeType", "types.FunctionType",
    # what evaluates annotations and forward references (eval of their text, nested ones in aliases included):
    # string annotations are judged where they are written (python_annotations), a ForwardRef made by hand is not
    "typing.get_type_hints", "typing.ForwardRef", "typing._eval_type", "typing.evaluate_forward_ref", "annotationlib",
    # what imports a module named by a string (red team round 5: `pydoc.locate("torch." + name)`, logging's
    # dictConfig `"()"` factories, a test loader by name) or runs code held in text (doctest)
    "pydoc", "logging.config", "unittest", "doctest", "xmlrpc", "pickletools", "copyreg",
    # `.pth` files' import lines run by site.addsitedir, modules imported from a torch.package, and
    # string.Formatter().get_field, which walks an attribute chain written in text (`"0.__globals__[sys]"`)
    "site", "torch.package", "string.Formatter",
    # PyTorch code compiled ahead of time into a shared object and run by AOTInductor's runner (red team round 8:
    # attention written in PyTorch, packaged at import, PASSED as the solution's own): PyTorch's generated kernels,
    # loaded at run time, in C++ no operator count on a CPU sees
    "torch._inductor.aoti_compile_and_package", "torch._inductor.aoti_load_package", "torch._inductor.aot_compile",
    "torch._inductor.package", "torch._export.aot_compile", "torch._export.aot_load", "torch._C._aoti",
    # ...and compiled by Inductor directly, past Dynamo (red team round 9c: `torch._inductor.compile(fx_graph, ...)`
    # at import ran attention in generated C++ that no dispatch mode saw; torch.compile itself runs eagerly while the
    # CPU counts: library_ops)
    "torch._inductor.compile", "torch._inductor.compile_fx", "torch._inductor.standalone_compile",
    "torch._inductor.CompiledArtifact", "torch._inductor.graph", "torch._inductor.output_code",
    "torch._dynamo.aot_compile", "torch._functorch.aot_autograd", "functorch.compile",
    # library helpers that import a module named by a string, or run source text (red team round 12:
    # `torch._utils._import_dotted_name("sys._getframe")` gave back every banned name, the nonce of the worker's loop
    # and a way round the count's modes). Found by a scan of torch, Triton and numpy for functions that pass an
    # argument to importlib, __import__, exec or eval.
    "torch._utils._import_dotted_name", "torch._utils.try_import", "torch._ops.import_module",
    "torch._ops._Ops.import_module", "torch.ops.import_module", "torch.fx.graph_module._forward_from_src",
    "torch.fx.graph_module._exec_with_source", "torch.fx.graph_module._method_from_src",
    "torch.fx.graph_module.reduce_graph_module", "torch.fx.graph_module.reduce_package_graph_module",
    "torch.fx.graph_module._loader", "torch.fx.experimental.rewriter", "torch.fx._graph_pickler",
    "torch.fx.operator_schemas._torchscript_type_to_python_type",
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.evaluate_guards_expression",
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.evaluate_symexpr",
    "torch.fx.experimental.symbolic_shapes.ShapeEnv.deserialize_symexpr",
    "torch._functorch._aot_autograd.subclass_codegen", "torch._guards.Source.get_value",
    "torch._guards.ChainedSource.get_value", "torch.utils._pytree.treespec_loads",
    "torch.utils._pytree._defaultdict_deserialize", "torch.utils._pytree.enum_object_hook",
    "torch.utils._config_module.ConfigModule._get_alias_module_and_name",
    "torch.nn.utils._deprecation_utils.lazy_deprecated_import", "torch.nn.attention._fa3._fa3_import_module",
    "torch.nn.attention._fa4._fa4_import_module", "torch._native.get_user_ordering_fn", "torch._vendor.quack",
    "torch.export.custom_ops._call_custom_autograd_function_in_pre_dispatch", "torch.export._unlift",
    "torch.jit.frontend.build_ignore_context_manager", "torch.jit.unsupported_tensor_ops",
    "torch.jit.annotations._eval_no_call", "torch.package",
    "triton.runtime.build._load_module_from_path", "triton.tools.compile",
    "triton.runtime.jit.create_function_from_signature",
    "triton.runtime.interpreter.FunctionRewriter", "triton.profiler.proton.execute_as_main",
    "triton.backends._discover_backends",
    "numpy.core._ufunc_reconstruct", "numpy._core._ufunc_reconstruct", "numpy.lib._utils_impl._makenamedict",
    "numpy.f2py", "numpy.distutils",
)
_FFI_NAMES = (
    "ctypes", "_ctypes", "cffi", "torch.utils.cpp_extension", "torch.ops.load_library",
    "torch.classes.load_library", "pycuda", "cupy", "cuda.bindings", "cuda.cuda", "cuda.cudart", "cuda.nvrtc",
    "cuda.core", "numba", "tvm_ffi.load_module",
    # memory by its address (red team round 9c: a storage made from `data_ptr()`, then `set_` onto an int16 tensor:
    # the inputs' values in integers no operator made)
    "torch._C._construct_storage_from_data_pointer", "torch.UntypedStorage._new_with_weak_ptr",
    "torch.UntypedStorage._new_shared_filename_cpu", "torch.UntypedStorage._new_shared_fd_cpu",
    "torch.UntypedStorage._release_ipc_counter_cuda", "torch.UntypedStorage._new_using_fd_cpu",
)
_STREAM_NAMES = (
    "torch.cuda.Stream", "torch.cuda.ExternalStream", "torch.cuda.Event", "torch.cuda.graph", "torch.cuda.graphs",
    "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables", "torch.cuda.graph_pool_handle", "torch.cuda.stream",
    "torch.cuda.set_stream", "torch.cuda.StreamContext", "torch.cuda.streams", "torch.Stream", "torch.Event",
    "triton.testing.do_bench_cudagraph", "torch.accelerator.set_stream", "torch.accelerator.Graph",
    "torch.accelerator.graphs",
)
_MONKEYPATCH_NAMES = (
    "unittest.mock", "mock", "torch.library.Library", "torch.library.impl", "torch.library.register_kernel",
    "torch.overrides", "torch.utils._python_dispatch", "torch._C._set_torch_function_mode",
    "torch._C._push_on_torch_function_stack", "torch._C._push_on_torch_dispatch_stack", "torch._C._set_dispatch_mode",
    # the dispatcher itself: kernels for PyTorch's operators, fallbacks for every operator, which keys run
    "torch._C._dispatch_library", "torch._C._DispatchModule", "torch._C._dispatch_pystub",
    "torch._C._dispatch_set_report_error_callback", "torch._C._dispatch_tls_set_dispatch_key_excluded",
    "torch._C._dispatch_tls_set_dispatch_key_included", "torch._C._EnablePythonDispatcher",
    "torch._C._ExcludeDispatchKeyGuard", "torch._C._IncludeDispatchKeyGuard", "torch._C._ForceDispatchKeyGuard",
    "torch._C._unset_dispatch_mode", "torch._C._pop_torch_dispatch_stack", "torch._C._pop_torch_function_stack",
    # what steps past the modes the worker holds around a checked call (the CPU's attribution counts library ops
    # through a TorchDispatchMode and values leaving PyTorch through a TorchFunctionMode)
    "torch._C._DisableTorchDispatch", "torch._C._DisableTorchFunction", "torch._C._DisableTorchFunctionSubclass",
    # ...under their other names (red team round 12: `torch._C._SetExcludeDispatchKeyGuard(DispatchKey.Python, True)`
    # hid a matmul from the count, `torch._C.DisableTorchFunction()` a `.numpy()`; both passed with no finding)
    "torch._C.DisableTorchFunction", "torch._C.DisableTorchFunctionSubclass", "torch._C.ExcludeDispatchKeyGuard",
    "torch._C._SetExcludeDispatchKeyGuard", "torch._C._PreserveDispatchKeyGuard", "torch._C.DispatchKey",
    "torch._C._DisablePythonDispatcher", "torch._C._DisableFuncTorch", "torch._C._get_dispatch_mode",
    "torch._C._get_dispatch_stack_at", "torch._C._len_torch_dispatch_stack", "torch._C._len_torch_function_stack",
    "torch._C._get_function_stack_at", "torch._C._is_torch_function_mode_enabled",
    "torch._C._is_torch_function_enabled", "torch._C._is_torch_function_all_disabled",
    "torch._C._dispatch_tls_is_dispatch_key_excluded", "torch._C._dispatch_tls_is_dispatch_key_included",
    "torch._C._dispatch_tls_local_exclude_set", "torch._C._dispatch_tls_local_include_set",
    # dispatch key sets: what `OpOverload.redispatch(keys, ...)` takes to run an operator past the Python key
    "torch._C.DispatchKeySet", "torch._C._dispatch_keyset_full", "torch._C._dispatch_keyset_full_after",
    "torch._C._dispatch_keys",
)
# An operator run with chosen dispatch keys (`torch.ops.aten.bmm.default.redispatch(keys, ...)`, its handle's
# `redispatch_boxed`): past the worker's dispatch mode, whatever the object is called (red team round 8)
REDISPATCH_ATTRS = frozenset({"redispatch", "redispatch_boxed"})
_SUBCLASS_NAMES = (
    "torch.Tensor._make_subclass", "torch.Tensor.as_subclass", "torch._C._disabled_torch_function_impl",
    "torch.Tensor.__torch_function__", "torch.Tensor.__torch_dispatch__", "types.new_class",
)
_CLOCK_NAMES = (
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.process_time_ns", "time.thread_time", "time.thread_time_ns",
    "time.clock_gettime", "time.clock_gettime_ns", "datetime.datetime.now", "datetime.datetime.utcnow",
    "datetime.datetime.today", "timeit", "triton.testing.do_bench", "torch.utils.benchmark",
)

# Weak-reference containers hold their keys (WeakKeyDictionary, WeakSet) or values by object identity: a tensor
# in one is an output cache keyed by identity whatever the key expression looks like.
_WEAK_CACHE_NAMES = ("weakref.WeakKeyDictionary", "weakref.WeakValueDictionary", "weakref.WeakSet")

# canonical name -> rule id. Longest prefix wins, so "os.environ.get" -> "os.environ" -> env_probe.
_PY_BANNED: dict[str, str] = {}
for _rule_id, _names in (
    ("concurrency", _CONCURRENCY_NAMES), ("harness_internals", _HARNESS_NAMES + _DESCRIPTOR_NAMES),
    ("timer_tampering", _PROFILER_NAMES),
    ("env_probe", _ENV_NAMES),
    ("file_cache", _FILE_NAMES), ("dynamic_code", _DYNAMIC_NAMES), ("native_ffi", _FFI_NAMES),
    ("stream_event_graph", _STREAM_NAMES), ("monkeypatch", _MONKEYPATCH_NAMES), ("tensor_subclass", _SUBCLASS_NAMES),
    ("clock_read", _CLOCK_NAMES), ("output_cache", _WEAK_CACHE_NAMES),
):
    for _name in _names:
        _PY_BANNED[_name] = _rule_id
