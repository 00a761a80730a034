"""The worker process: the only place candidate code is imported and called.

Started by ``harness.sandbox.runner`` as ``python -m harness.sandbox.worker --role R --rfd N --wfd M`` with a scrubbed
environment in a private folder. Requests arrive as JSON, each validated into its model (``harness.sandbox.messages``;
one that is not valid is answered ``ok: False``); replies are JSON plus safetensors (``harness.sandbox.protocol``).
Two roles:
- ``candidate``: builds one solution, runs it on inputs it generates itself from (workload, seed),
  checks that it left its inputs alone, and times it. It never receives reference outputs.
- ``reference``: runs the definition's reference (trusted code) and returns its outputs to the harness,
  which compares them with the candidate's in its own process.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import functools
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from . import channel_guard, process_log, protocol
from .build import Built, BuildError, build
from .compiled_sources import collect as collect_compiled
from .extension_cache import as_bytes, as_tensor, extension_folders, pack, unpack
from .integrity import Integrity, preload
from .triton_cache import kernels_from_elsewhere, triton_cache_dir
from .messages import (BuildRequest, CeilingsRequest, CompiledRequest, HelloRequest, JudgeRequest, OracleRequest,
                       ReferenceRequest, RecheckRequest, Request, RequestError, RunRequest, SassRequest, TimeRequest,
                       UNAVAILABLE, failure, parse_request)
from .worker_calls import (as_output_dict, checked_call, interpreted_launches, own_kernels, recheck_calls,
                           require_plain)
from .worker_environment import environment, nvml_index
from ..measure.device_measure import (l2_flush, memory_mark, memory_release, sync,
                             wall_call)
from ..data.inputs import allocate_outputs, content_digest, fingerprint, generate_inputs
from ..measure.oracle import run_in_float64
from ..data.schema import Definition, EvaluationStatus, Solution, Workload


def _device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _context_broken(device: torch.device) -> bool:
    """After an exception: is this process's CUDA context still usable?"""
    if device.type != "cuda":
        return False
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device=device).add_(1).item()
        return False
    except Exception:
        return True


def _aliasing(inputs: dict[str, Any], outputs: dict[str, Any]) -> list[str]:
    """Outputs that share memory with an input or with another output."""
    seen: dict[int, str] = {}
    for name, t in inputs.items():
        if isinstance(t, torch.Tensor) and t.numel():
            seen[t.untyped_storage().data_ptr()] = f"input {name}"
    problems = []
    for name, t in outputs.items():
        if not isinstance(t, torch.Tensor) or not t.numel():
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            problems.append(f"output {name} shares memory with {seen[ptr]}")
        seen[ptr] = f"output {name}"
    return problems


_CLONE_LIMIT_BYTES = 256 << 20  # inputs above this are checked for mutation by content digest, not a clone


class Worker:
    def __init__(self, role: str):
        self.role = role
        self.device = _device()
        self.built: Optional[Built] = None
        self.solution: Optional[Solution] = None
        self.definition: Optional[Definition] = None
        self._references: dict[str, Callable[..., Any]] = {}
        self._request_tensors: dict[str, torch.Tensor] = {}  # what the current request brought (judge)
        self.workdir = Path.cwd()
        self._spent: dict[str, float] = {}  # the current request's steps, seconds (the reply's spent_s)
        self._compiled_seen: dict[str, Any] = {}  # the compiled sources already reported (compiled_sources.collect)
        # the worker's own code, fingerprinted before any candidate code runs (harness.sandbox.integrity)
        self.integrity = Integrity()

    def _add(self, step: str, seconds: float) -> None:
        self._spent[step] = self._spent.get(step, 0.0) + seconds

    @contextlib.contextmanager
    def _step(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._add(name, time.perf_counter() - started)

    # -- requests ---------------------------------------------------------------------------------

    def hello(self, req: HelloRequest) -> tuple[dict, dict]:
        return {"ok": True, "role": self.role, "environment": environment()}, {}

    def build(self, req: BuildRequest) -> tuple[dict, dict]:
        self.solution, self.definition = req.solution, req.definition
        started = time.perf_counter()
        extensions = extension_folders(self.workdir)  # torch's and TVM-FFI's, each private to this worker
        seed, reused = self._request_tensors.get("extension_seed"), ""
        if seed is not None:  # what an earlier worker of this solution built (harness.sandbox.extension_cache)
            try:
                written = unpack(as_bytes(seed), extensions)
                reused = f"{written} files of an earlier build"
            except Exception as err:  # a damaged copy: build from scratch, and hand the new build back
                written, reused = 0, f"not reused ({type(err).__name__}: {err})"
            if not written:  # nothing put back (no file for these folders): this build is kept instead
                seed, reused = None, reused if reused.startswith("not reused") else "not reused (no files)"
        try:
            self.built = build(self.solution, self.definition, self.workdir, have_gpu=self.device.type == "cuda")
        except BuildError as err:
            return failure(str(err), EvaluationStatus.COMPILE_ERROR.value, log=err.log), {}
        tensors = {}
        if seed is None and not self.built.compile_only:  # before any workload ran: the build and nothing else
            data, _ = pack(extensions)
            if data is not None:
                tensors["extension_build"] = as_tensor(data)
        # what the import compiled, as text, for the harness's static gate (harness.audits.compiled_gate)
        compiled = collect_compiled(self.workdir, extensions, self._compiled_seen)
        return {"ok": True, "compile_only": self.built.compile_only, "note": self.built.note,
                "log": self.built.log, "extensions": reused,
                "compiled_sources": compiled["files"], "compiled_unread": compiled["unread"],
                "artifacts": self.built.artifacts, "build_s": time.perf_counter() - started}, tensors

    def compiled(self, req: CompiledRequest) -> tuple[dict, dict]:
        """What the calls compiled since the last report (a load_inline at the first call), as text for the gate."""
        found = collect_compiled(self.workdir, extension_folders(self.workdir), self._compiled_seen)
        return {"ok": True, "compiled_sources": found["files"], "compiled_unread": found["unread"]}, {}

    def _workload_inputs(self, req: Any, seed: Optional[int] = None) -> tuple[Definition, Workload, dict[str, Any]]:
        """The inputs of a request on a workload: its seed's (or ``seed``'s), for its definition (else the build's)."""
        definition = getattr(req, "definition", None) or self.definition
        with self._step("inputs"):
            inputs = generate_inputs(definition, req.workload, req.seed if seed is None else seed, self.device,
                                     Path(req.dataset_root))
        return definition, req.workload, inputs

    def _fingerprint(self, inputs: dict[str, Any]) -> str:
        with self._step("fingerprint"):
            return fingerprint(inputs)

    def run(self, req: RunRequest) -> tuple[dict, dict]:
        """One call of the candidate on fresh inputs; outputs go back for the harness to judge."""
        assert self.built is not None and self.built.fn is not None, "build first"
        definition, workload, inputs = self._workload_inputs(req)
        input_fp = self._fingerprint(inputs)
        # The candidate gets clones of small inputs, the originals staying here to prove the call left them
        # alone; a large input (a KV cache of gigabytes) is handed over itself and proven unchanged by its
        # content digest before and after: a clone would double the process's memory at full scale.
        with self._step("digest"):
            digests = {k: content_digest(v) for k, v in inputs.items()
                       if isinstance(v, torch.Tensor) and v.numel() * v.element_size() > _CLONE_LIMIT_BYTES}
            args = {k: v.clone() if isinstance(v, torch.Tensor) and k not in digests else v for k, v in inputs.items()}
        launched = interpreted_launches(self.solution.spec.language.value)
        started = time.perf_counter()
        outputs, note, library = checked_call(self.built, self.solution.spec, definition, workload, args, self.device)
        sync(self.device)
        elapsed = time.perf_counter() - started
        self._add("call", elapsed)
        # outputs and inputs are plain tensors here (checked_call's require_plain, before its count's report)
        own = own_kernels(self.solution.spec.language.value, launched, outputs)
        with self._step("digest"):
            mutated = [k for k, v in inputs.items() if isinstance(v, torch.Tensor)
                       and (content_digest(v) != digests[k] if k in digests else not torch.equal(v, args[k]))]
        aliased = _aliasing(args, outputs)
        bad = {k: type(v).__name__ for k, v in outputs.items() if not isinstance(v, torch.Tensor)}
        if bad:
            raise TypeError(f"outputs must be tensors, got {bad}")
        return ({"ok": True, "input_fingerprint": input_fp, "mutated_inputs": mutated, "aliased_outputs": aliased,
                 "elapsed_s": elapsed, "note": note, "own_kernels": own, "library_compute": library},
                {k: v for k, v in outputs.items()})

    def recheck(self, req: RecheckRequest) -> tuple[dict, dict]:
        """The fresh-input recheck (harness.audits.verdicts.plan_recheck): ``worker_calls.recheck_calls``."""
        assert self.built is not None and self.built.fn is not None, "build first"
        header, tensors = recheck_calls(self.built, self.solution.spec.destination_passing_style, self.definition,
                                        req, self.device, self.solution.spec.language.value)
        if header.get("ok"):
            header["candidate_threads"] = self.integrity.new_threads()
            header["candidate_processes"] = self.integrity.new_processes() + process_log.started()
        return header, tensors

    def oracle(self, req: OracleRequest) -> tuple[dict, dict]:
        """The reference evaluated in float64 throughout: the yardstick of the precision audit."""
        assert self.role == "reference", "only the reference worker runs references"
        definition, workload, inputs = self._workload_inputs(req)
        with self._step("call"):
            outputs = as_output_dict(definition, run_in_float64(definition, inputs))
        return {"ok": True, "input_fingerprint": self._fingerprint(inputs)}, {k: v for k, v in outputs.items()}

    def judge(self, req: JudgeRequest) -> tuple[dict, dict]:
        """The family's check with the call's inputs (``compare_needs_inputs``): the candidate's outputs and the
        reference's arrive with the request; the inputs are drawn here again from the seed."""
        assert self.role == "reference", "only the reference worker judges"
        from ..families import family_for

        definition, workload, inputs = self._workload_inputs(req)
        got = {k[len("got/"):]: v.to(self.device) for k, v in self._request_tensors.items() if k.startswith("got/")}
        want = {n: self._request_tensors[f"want/{n}"].to(self.device) for n in definition.outputs}
        with self._step("compare"):
            result = family_for(definition.op_type).compare(definition, got, want, req.tolerance, inputs=inputs)
        return {"ok": True, "check": result.to_json()}, {}

    def _reference_fn(self, definition: Definition) -> Callable[..., Any]:
        key = definition.content_hash
        if key not in self._references:
            namespace: dict[str, Any] = {"__name__": f"reference_{definition.name}"}
            exec(compile(definition.reference, f"<reference {definition.name}>", "exec"), namespace)
            self._references[key] = namespace["run"]
        return self._references[key]

    def reference(self, req: ReferenceRequest) -> tuple[dict, dict]:
        assert self.role == "reference", "only the reference worker runs references"
        definition, workload, inputs = self._workload_inputs(req)
        started = time.perf_counter()
        with torch.no_grad():
            outputs = as_output_dict(definition, self._reference_fn(definition)(*inputs.values()))
        sync(self.device)
        elapsed = time.perf_counter() - started
        self._add("call", elapsed)
        return ({"ok": True, "input_fingerprint": self._fingerprint(inputs), "elapsed_s": elapsed},
                {k: v for k, v in outputs.items()})

    def time(self, req: TimeRequest) -> tuple[dict, dict]:
        """The official timer over ``seeds`` (one trial each, fresh inputs per trial).

        A solution with a ``setup`` gets two figures: the official one, where setup runs inside every
        timed call (what the contest's harness would time), and the kernel one, with setup done once
        per trial outside the timed region (what a serving engine pays per step).
        """
        from ..measure.gpu_state import gpu_state
        from ..measure.timing import time_trial

        if self.device.type != "cuda":
            return failure("no GPU: timing unavailable", UNAVAILABLE), {}
        index = nvml_index()
        with self._step("gpu_state"):
            state_before = gpu_state(index)
        official, kernel = [], []
        for trial_index, seed in enumerate(req.seeds):
            definition, workload, inputs = self._workload_inputs(req, seed)
            args = list(inputs.values())
            if self.role == "reference":
                fn, setup, dps = self._reference_fn(definition), None, False
            else:
                fn, setup, dps = self.built.fn, self.built.setup, self.solution.spec.destination_passing_style
            if dps:
                args += list(allocate_outputs(definition, workload, self.device).values())
            n_inputs = len(inputs)

            def timed(fn=fn, setup=setup, n_inputs=n_inputs):
                if setup is None:
                    return fn
                return lambda *a: fn(*a, setup(*a[:n_inputs]))

            kw = dict(warmup=req.warmup, iterations=req.iterations, device=self.device, backend=req.backend)
            official.append(self._timer_steps(time_trial(timed(), args, **kw)))
            kernel_args = args
            if setup is not None:
                kernel_args = [*args, setup(*args[:n_inputs])]
                kernel.append(self._timer_steps(time_trial(fn, kernel_args, **kw)))
            clock_trial = (kernel or official)[-1]
            if kernel:  # the kernel figure's calls are the audited ones
                official[-1]["traced_wall_ms"] = None
            if req.clock_truth_calls and trial_index == len(req.seeds) - 1:
                # Synchronised wall time per call next to the CUPTI span of the same callable (the kernel
                # figure where there is a setup): host work the timer cannot see shows up here. One trial is
                # enough (host work of the candidate's own is in every call) and its span is the one compared:
                # the other trials drew other inputs, and some definitions' work depends on them (MoE routing).
                # Cold L2 before each call, as the timer had: a warm L2 made honest kernels whose data fits
                # in it (K/V of b1_kv8192 is 34 MB; the H200's L2 50 MB) run below their CUPTI span.
                # Plain here; under CUPTI tracing, as the span was taken, the timed calls' own walls
                # (TrialTiming.traced_wall_ms; harness.audits.verdicts.clock_truth_verdict).
                with self._step("clock_truth"):
                    flush = l2_flush(self.device)
                    call = functools.partial(fn, *kernel_args)
                    clock_trial["wall_ms"] = [wall_call(self.device, flush, call)[0]
                                              for _ in range(req.clock_truth_calls)]
                    del flush
            else:  # only the audited trial's walls travel
                clock_trial["traced_wall_ms"] = None
            require_plain({f"argument {i}": a for i, a in enumerate(args)}, "the timed calls' tensors")
            del kernel_args
            del inputs, args
        with self._step("gpu_state"):
            state_after = gpu_state(index)
        with self._step("triton_cache"):  # a library's kernels (sandbox.triton_cache); none for the reference
            elsewhere = kernels_from_elsewhere(self.workdir, self.built.package) if self.role == "candidate" else []
        return {"ok": True, "trials": official, "kernel_trials": kernel or None, "gpu_state_before": state_before,
                "gpu_state_after": state_after, "triton_kernels_elsewhere": elsewhere}, {}

    def _timer_steps(self, trial: Any) -> dict:
        """A trial as the reply carries it; its host steps (TrialTiming.host_s) counted as the request's."""
        for step, seconds in (getattr(trial, "host_s", None) or {}).items():
            self._add(f"timer.{step}", seconds)
        return trial.model_dump() if hasattr(trial, "model_dump") else dict(trial.__dict__)

    def sass(self, req: SassRequest) -> tuple[dict, dict]:
        """Per-kernel opcode histograms of what this worker built (harness.audits.sass); runs no candidate code."""
        assert self.built is not None, "build first"
        return _sass_reply(self.built, self.solution, self.device, self.workdir, req.timeout_s)

    def ceilings(self, req: CeilingsRequest) -> tuple[dict, dict]:
        """Copy / read bandwidth and bf16 matmul rate of this GPU (the roofline's ceilings)."""
        from ..measure.roofline import measure_ceilings

        return {"ok": True, "ceilings": measure_ceilings(self.device).model_dump(mode="json")}, {}

    # -- loop -------------------------------------------------------------------------------------

    def serve(self, rfd: int, wfd: int) -> None:
        """Answer requests until ``exit`` or the harness closes the channel (harness.sandbox.messages)."""
        channel = channel_guard.Identity(wfd)
        while True:
            try:
                header, self._request_tensors = protocol.read_message(rfd)
            except protocol.PeerClosed:
                return
            # echoed in the reply, never handed to a handler: the harness takes no frame without it (runner.request)
            nonce = {"nonce": n} if (n := header.pop("nonce", None)) is not None else {}
            try:
                req: Request = parse_request(header)
            except RequestError as err:  # the harness's mistake: said, not a crash
                protocol.write_message(wfd, {**failure(str(err)), **nonce})
                continue
            if req.op in ("exit", "sync"):  # sync: the harness's check that the last reply was this loop's (runner)
                protocol.write_message(wfd, {"ok": True, **nonce})
                if req.op == "exit":
                    return
                continue
            header, tensors = self.answer(getattr(self, req.op), req)  # a method per op of messages.OPS
            if self.role == "candidate" and not self.integrity.tampered and self.integrity.check(kernels=False):
                # changed while this reply was made (after answer()'s check): nothing of it is sent
                header, tensors = _tampered_reply(self.integrity.tampered), {}
            channel.require_intact()
            try:
                protocol.write_message(wfd, {**header, **nonce}, tensors)
            except Exception as err:  # e.g. outputs that cannot be serialised
                protocol.write_message(wfd, {**failure(f"could not send the reply: {type(err).__name__}: {err}"),
                                             **nonce})

    def answer(self, handler: Callable[[Any], tuple[dict, dict]], req: Request) -> tuple[dict, dict]:
        """A handler's reply, or what it raised (candidate code may raise anything, SystemExit included)."""
        memory_mark(self.device)
        self._spent, started = {}, time.perf_counter()
        try:
            header, tensors = handler(req)
        except BaseException as err:
            tb = traceback.format_exc()
            print(tb, file=sys.stderr, flush=True)
            header, tensors = failure(f"{type(err).__name__}: {err}", traceback=tb,
                                      context_broken=_context_broken(self.device)), {}
        with self._step("integrity"):
            tampered = self.integrity.check() if self.role == "candidate" else []
        if tampered:  # nothing this worker measures can be believed any more: this reply and every later one
            header, tensors = _tampered_reply(self.integrity.tampered), {}
        with self._step("release"):  # the reply's tensors to the host, the allocator's cache given back
            memory = memory_release(self.device, tensors)
        if memory:
            header["memory"] = memory
        other = time.perf_counter() - started - sum(self._spent.values())
        header["spent_s"] = {k: round(v, 5) for k, v in {**self._spent, "other": max(other, 0.0)}.items()}
        return header, tensors


def _sass_reply(built: Built, solution: Solution, device: torch.device, workdir: Path,
                timeout_s: float) -> tuple[dict, dict]:
    """The binaries: the build's cubins (CUDA compiled without a GPU) or extension .so, and the cubins Triton
    wrote into this worker's private cache while the candidate ran (so: after the workloads)."""
    from ..audits.sass import disassemble, find_disassembler
    from .build import extension_binaries

    # what the build made, and what load_inline compiled later, on the first call
    paths = {**built.artifacts, **extension_binaries()}.values()
    files = [Path(p) for p in dict.fromkeys(paths) if Path(p).is_file()]
    cache = triton_cache_dir(workdir).resolve()
    if workdir.resolve() in cache.parents:  # a shared cache would hold other solutions' kernels
        files += sorted(cache.rglob("*.cubin"))
    if not files:
        why = ("Triton compiles its kernels for a GPU when they first run; none ran on this host"
               if solution.spec.language.value == "triton" and device.type != "cuda"
               else "the build produced no GPU binary")
        return failure(why, UNAVAILABLE), {}
    tool = find_disassembler()
    if tool is None:
        return failure("no cuobjdump or nvdisasm (PATH, $CUDA_HOME/bin, Triton's bin)", UNAVAILABLE), {}
    kernels, notes = disassemble(files, tool, timeout_s=timeout_s)
    return {"ok": True, "kernels": [k.to_json() for k in kernels], "notes": notes, "tool": tool[1],
            "files": [f.name for f in files]}, {}


def _tampered_reply(tampered: list[str]) -> dict:
    return failure(f"harness integrity: candidate code replaced the worker's own code or left a torch mode over it "
                   f"({', '.join(tampered[:4])}"
                   f"{', ...' if len(tampered) > 4 else ''})", EvaluationStatus.RUNTIME_ERROR.value)


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this worker when the harness dies, even by kill -9: a candidate stuck in a hang (or a spare
    worker) must not outlive it, holding a GPU. The worker runs in its own session, so signals sent to
    the harness's process group never reach it; Linux's parent-death signal does."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the pipe's end-of-file still stops an idle worker
    if os.getppid() != parent_pid:  # the harness died before the signal was armed
        os._exit(1)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="harness.sandbox.worker")
    parser.add_argument("--role", choices=["candidate", "reference"], required=True)
    parser.add_argument("--rfd", type=int, required=True)
    parser.add_argument("--wfd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=None, help="die with this process (the harness)")
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        _die_with_parent(args.parent_pid)
    process_log.install()  # before any candidate code: the processes it starts, each seen as it starts
    faulthandler.enable()  # a segfault prints the Python stack into the log
    if os.environ.get("CRUCIBLE_DUMP_STACKS_AFTER_S"):  # a slow request shows where it is, in the log
        from .. import stack_dumps

        stack_dumps.start(float(os.environ["CRUCIBLE_DUMP_STACKS_AFTER_S"]))
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:
        pass
    if os.environ.get("TRITON_INTERPRET") == "1":
        from . import triton_interp

        triton_interp.apply()
        from . import mode_guard

        mode_guard.apply()  # what steps past the CPU's count, seen when the candidate calls it
    if args.role == "candidate" and not torch.cuda.is_available():
        from . import cpu_cuda

        cpu_cuda.apply(torch)  # torch.cuda.synchronize() and the device's properties answered, not raised
    preload(torch.cuda.is_available())  # before the fingerprint: everything the worker will call, imported
    # the channel out of the candidate's reach before any of its code runs (harness.sandbox.channel_guard)
    rfd, wfd = channel_guard.move_high(args.rfd, args.wfd)
    why = channel_guard.guard((rfd, wfd))
    if why:
        print(f"crucible-worker: the channel to the harness is not guarded by the kernel ({why})", file=sys.stderr,
              flush=True)
    Worker(args.role).serve(rfd, wfd)
    # Done: leave without Python's finalisation (torch's, Triton's and the candidate's exit handlers: tenths of a
    # second the harness would wait for on every worker it stops); nothing of this process is kept.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
