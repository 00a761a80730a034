"""What a worker does around a candidate's calls: outputs by name, poisoned output buffers, its thread count,
and the fresh-input recheck's calls (kept apart from ``worker.py``'s request handling)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Optional

import torch

from . import library_ops, triton_tuning
from .build import Built
from .messages import RecheckRequest, RecheckStep
from ..data.inputs import allocate_outputs, fingerprint, generate_inputs
from ..data.schema import Definition
from ..measure.device_measure import l2_flush, raise_clocks, sync

_REQUIRED_OUTPUTS: dict[tuple[str, str, tuple[str, ...]], int] = {}


def required_count(definition: Definition) -> int:
    """How many leading outputs a value-returning solution must return: asked of the family once per definition,
    then a dictionary lookup (this runs inside wall-timed calls)."""
    key = (definition.op_type, definition.name, tuple(definition.outputs))
    if key not in _REQUIRED_OUTPUTS:
        from ..families import family_for

        _REQUIRED_OUTPUTS[key] = len(family_for(definition.op_type).required_outputs(definition))
    return _REQUIRED_OUTPUTS[key]


def as_output_dict(definition: Definition, returned: Any) -> dict[str, Any]:
    """What a value-returning call gave, by output name. A family may let trailing outputs be left out (the
    sparse attention's lse: the official evaluator takes ``output`` alone or ``(output, lse)``)."""
    names = list(definition.outputs)
    least = required_count(definition)
    if isinstance(returned, torch.Tensor) and least <= 1:
        return {names[0]: returned}
    if isinstance(returned, (tuple, list)) and least <= len(returned) <= len(names):
        return dict(zip(names, returned))
    wanted = f"{len(names)}" if least == len(names) else f"{least} to {len(names)}"
    raise TypeError(f"a value-returning solution must return {wanted} tensor(s) "
                    f"({', '.join(names)}), got {type(returned).__name__}"
                    + (f" of length {len(returned)}" if isinstance(returned, (tuple, list)) else ""))


_TENSOR_ATTRIBUTES = frozenset(dir(torch.Tensor))


def shadowed_methods(t: torch.Tensor) -> list[str]:
    """The ``torch.Tensor`` attributes a tensor's own ``__dict__`` shadows (``q.numel = f``): a plain tensor whose
    method the harness calls would run the candidate's code there (``__dict__`` is the type's data descriptor: no
    instance entry stands in for it)."""
    own = getattr(t, "__dict__", None)
    if own is None:
        return []
    if type(own) is not dict:  # a dict subclass hides its keys from iteration, not from attribute lookup (round 10b)
        return ["__dict__"]
    return sorted(k for k in dict.keys(own) if k in _TENSOR_ATTRIBUTES)


def require_plain(tensors: dict[str, Any], what: str) -> None:
    """Every tensor of ``tensors`` exactly a ``torch.Tensor`` with its type's methods. A subclass (made by any
    spelling, or a class put on the worker's own output with ``__class__ =``), or a method set on the tensor itself
    (red team round 10: ``q.numel = f``, run by the counter's report; ``output.detach``, by the recheck's copy),
    runs the candidate's code when the harness reads it: its work deferred past the timed call or the count into
    the reading, or a comparison that lies."""
    odd = {k: type(v).__name__ for k, v in tensors.items()
           if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor}
    if odd:
        raise TypeError(f"{what} must be plain torch.Tensor, got a subclass: "
                        + ", ".join(f"{k} is {n}" for k, n in list(odd.items())[:4]))
    shadowed = {k: shadowed_methods(v) for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    shadowed = {k: v for k, v in shadowed.items() if v}
    if shadowed:
        raise TypeError(f"{what} must keep torch.Tensor's own methods, got some set on the tensor: "
                        + ", ".join(f"{k}.{', '.join(v[:3])}" for k, v in list(shadowed.items())[:4]))


def interpreted_launches(language: str) -> int | None:
    """Kernels the Triton interpreter has run in this process, for a Triton solution on the CPU; None elsewhere (on a
    GPU the CUPTI records name every kernel, and attribution wants at least one of the candidate's own)."""
    from . import triton_interp

    if language != "triton" or not triton_interp.interpreting_worker():
        return None
    return triton_interp.LAUNCHES[0] if triton_interp._PATCHED else None


def own_kernels(language: str, before: int | None, outputs: dict[str, Any]) -> int | None:
    """Kernels of its own a checked call of a Triton solution launched on the CPU (the interpreter's count since
    ``before``); None where not counted (a GPU, another language) or where outputs have no element (nothing to
    compute). Zero is the `own_kernel` audit's failure: a solution computing in numpy (torch.from_numpy on the way
    back: no torch compute the static gate knows, no kernel) PASSED promotable, where a GPU's attribution would have
    found no own kernel. An audit, not an error: a solution whose work PyTorch does is judged as on a GPU."""
    if before is None or not any(isinstance(v, torch.Tensor) and v.numel() for v in outputs.values()):
        return None
    after = interpreted_launches(language)
    return None if after is None else after - before


def checked_call(built: Built, spec: Any, definition: Definition, workload: Any, args: dict[str, Any],
                 device: torch.device) -> tuple[dict[str, Any], str, Optional[dict[str, Any]]]:
    """The run request's call of the candidate (its setup, then its entry point) on ``args``: its outputs by name, a
    note, and on a CPU the ATen compute it dispatched (``library_ops``: the CPU's attribution; the mode is popped
    before any of the worker's own steps, and before its integrity check, which fails a dispatch mode left over)."""
    library = library_ops.counter(spec.language.value, device, args)
    with library_ops.counting(library):
        state = (built.setup(*args.values()),) if built.setup is not None else ()
    if spec.destination_passing_style:
        outputs = allocate_outputs(definition, workload, device)
        with library_ops.counting(library):
            returned = built.fn(*args.values(), *outputs.values(), *state)
        note = "" if returned is None else "the DPS entry point returned a value; it was ignored"
    else:
        with library_ops.counting(library):
            returned = built.fn(*args.values(), *state)
        outputs, note = as_output_dict(definition, returned), ""
    require_plain(outputs, "outputs")  # before anything reads them, the count's report included
    require_plain(args, "inputs")
    return outputs, note, library.report(args) if library is not None else None


def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def poisoned(t: torch.Tensor) -> torch.Tensor:
    """NaN where a float can hold it, an unlikely sentinel elsewhere: nothing a skipped call could pass with."""
    return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)


def last_reuse(steps: list[RecheckStep]) -> dict[int, int]:
    """Recheck steps whose buffers a later step reuses -> the index of their last reuse (after it, they go)."""
    last: dict[int, int] = {}
    for j, step in enumerate(steps):
        if step.kind != "fresh":
            last[step.buffers_of] = j
    return last


def recheck_calls(built: Built, destination_passing_style: bool, definition: Definition, req: RecheckRequest,
                  device: torch.device, language: str = "") -> tuple[dict, dict]:
    """The fresh-input recheck (harness.audits.verdicts.plan_recheck): outputs of every step go back to be judged.

    On a GPU every step's call is followed by a repeat of the same call on the same buffers, both timed
    the same way (L2 flushed, synchronised wall clock): the repeat is what the official timer sees on
    its reused inputs, so a repeat much cheaper than the fresh call is the mark of replay or skip-if-
    written. The GPU is kept busy first, and a call on new content in reused buffers comes right after a call
    on the content they held, so neither timed call meets idle clocks or a cold host path. On a CPU, each step's
    library compute is counted as the run request's is (``library_ops``; the CPU's attribution takes every call).
    """
    workload = req.workload
    root = Path(req.dataset_root)
    threads_before = thread_count()
    # Only the buffers a later step reuses are kept: at full scale one input set is gigabytes.
    steps = req.steps
    reused = last_reuse(steps)
    buffers: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    out_tensors: dict[str, torch.Tensor] = {}
    wall_ms, repeat_ms, fingerprints, tunings = [], [], [], []
    library: list[dict[str, Any]] = []  # per step, on a CPU (harness.sandbox.library_ops)
    flush = l2_flush(device)
    raise_clocks(device, flush)
    folder = built.package  # the solution's own modules: where its autotuners are (triton_tuning)

    def setup() -> tuple[Any, ...]:
        # setup (a plan) stays outside the wall time, as in the kernel figure: once per content, as the timer does
        return (built.setup(*inputs.values()),) if built.setup is not None else ()

    def call(state: tuple[Any, ...]) -> dict[str, Any]:
        if destination_passing_style:
            built.fn(*inputs.values(), *outputs.values(), *state)
            return outputs
        return as_output_dict(definition, built.fn(*inputs.values(), *state))

    def timed_call(state: tuple[Any, ...], ops: Optional[library_ops.Counter] = None) -> tuple[float, dict]:
        """One call on a cold L2, timed by the host between two synchronisations."""
        flush()
        sync(device)
        started = time.perf_counter()
        with library_ops.counting(ops):
            result = call(state)
        sync(device)
        return (time.perf_counter() - started) * 1e3, result

    for i, step in enumerate(steps):
        fresh = generate_inputs(definition, workload, step.seed, device, root)
        fingerprints.append(fingerprint(fresh))
        if step.kind == "fresh":
            inputs = fresh
            outputs = {n: poisoned(t) for n, t in allocate_outputs(definition, workload, device).items()}
        else:  # the same tensors as an earlier call, refilled in place with other data
            inputs, outputs = buffers[step.buffers_of]
            if reused[step.buffers_of] == i:  # its last use
                del buffers[step.buffers_of]
            if device.type == "cuda":
                # A call on content it has already seen, just before the new content goes in: the timed call
                # then follows a call of the candidate, as its repeat does, not the harness's seconds of input
                # generation and hashing (after which the H200's first small call ran 2-2.5x its repeat on
                # honest code: idle clocks, a cold host path). It cannot prime a cache for content not yet there.
                call(setup())
            for name, value in fresh.items():
                if isinstance(value, torch.Tensor):
                    inputs[name].copy_(value)
                else:
                    inputs[name] = value
            del fresh

        ops = library_ops.counter(language, device, inputs)
        with library_ops.counting(ops):
            state = setup()
        tuned_before = triton_tuning.tuned_keys(triton_tuning.autotuners(folder)) if device.type == "cuda" else {}
        ms, outputs = timed_call(state, ops)
        if device.type == "cuda":  # a diagnosis for the replay audit (triton_tuning), outside the timed call
            tunings.append(triton_tuning.tunings_since(tuned_before, folder))
        if ops is not None:
            library.append(ops.report(inputs))
        require_plain(outputs, f"outputs of recheck step {i}")
        require_plain(inputs, f"inputs of recheck step {i}")
        wall_ms.append(ms)
        for name, t in outputs.items():
            # A copy now: a later "reuse" step writes into these very buffers.
            out_tensors[f"{i}/{name}"] = t.detach().to("cpu", copy=True)
        if device.type == "cuda":
            repeat_ms.append(timed_call(state)[0])
        if step.kind == "fresh" and i in reused:
            buffers[i] = (inputs, outputs)
        # this step's tensors go now, not when the next ones exist
        fresh = inputs = outputs = state = None
    return ({"ok": True, "wall_ms": wall_ms, "repeat_wall_ms": repeat_ms, "tunings": tunings,
             "input_fingerprints": fingerprints,
             "threads_before": threads_before, "threads_after": thread_count(), "library_compute": library},
            out_tensors)
