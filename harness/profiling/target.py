"""The process a profiler watches: build one solution, make one workload's inputs, call the candidate once.

    python -m harness.profiling.target --solution S.json --workload UUID --seed N --dataset DIR \
        [--warmup 1] [--range crucible_candidate] [--status-file F] [--backend ncu|nsight]

``harness.profiling`` runs it under ``ncu --nvtx --nvtx-include crucible_candidate/`` with the worker's
scrubbed environment, in a private folder. Only the call inside the NVTX push/pop range is profiled:

1. build the solution (as the worker does: ``harness.sandbox.build.build``);
2. generate the workload's inputs from (workload, seed) on the GPU, allocate outputs (DPS);
3. run ``setup`` (FlashInfer's ``plan``) outside the range, unless ``--setup-in-range``;
4. ``--warmup`` calls outside the range (JIT compilation, autotuning), then synchronise;
5. push the range, call once, synchronise, pop the range.

With ``--backend nsight``, ``nsight`` is imported before anything touches CUDA (nsight-python's rule) and
the same single call runs inside ``nsight.annotate``; the resulting dataframe is written as CSV to
``--out-dir/profile.csv``.

The status file (JSON) says whether the call happened and, if not, why (build error, exception); the
harness reads it to tell a candidate's failure from a profiler's. Exit codes: 0 ok, 2 the candidate
failed (build, inputs or call), 3 no GPU (without ``--allow-cpu``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional


def _write_status(path: Optional[str], data: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(data, default=str))


@contextlib.contextmanager
def nvtx_range(name: str):
    """A push/pop NVTX range in the default domain; a no-op (with a note) where NVTX is unavailable (CPU torch)."""
    import torch

    pushed = False
    try:
        torch.cuda.nvtx.range_push(name)
        pushed = True
    except Exception as err:  # CPU builds: "NVTX functions not installed"
        print(f"profile_target: NVTX unavailable ({err}); the range is not marked", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        if pushed:
            torch.cuda.nvtx.range_pop()


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="harness.profiling.target", description=__doc__.split("\n\n")[0])
    p.add_argument("--solution", required=True, help="Solution JSON file")
    p.add_argument("--workload", required=True, help="workload uuid (or uuid prefix, label, index)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset", required=True, help="trace-set folder")
    p.add_argument("--warmup", type=int, default=1, help="calls before the profiled one (JIT, autotuning)")
    p.add_argument("--range", default="crucible_candidate", help="NVTX push/pop range around the profiled call")
    p.add_argument("--status-file", help="write a JSON status here")
    p.add_argument("--backend", choices=["ncu", "nsight"], default="ncu")
    p.add_argument("--metrics", default="", help="nsight backend: comma-separated metric names")
    p.add_argument("--out-dir", help="nsight backend: where profile.csv and the report go")
    p.add_argument("--setup-in-range", action="store_true", help="also profile setup (e.g. FlashInfer plan)")
    p.add_argument("--allow-cpu", action="store_true", help="run without a GPU (tests; nothing is profiled)")
    return p.parse_args(argv)


def prepare(args: argparse.Namespace) -> tuple[Callable[[], Any], Callable[[], Any], Any, dict[str, Any]]:
    """Build the solution and its inputs: (setup_fn, call_fn, device, info). Heavy imports happen here."""
    import torch

    from ..sandbox.build import build
    from ..data.dataset import Dataset
    from ..data.inputs import allocate_outputs, generate_inputs
    from ..data.schema import Solution, load_model

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    dataset = Dataset(args.dataset)
    solution = load_model(Solution, args.solution)
    definition = dataset.definition(solution.definition)
    workloads = dataset.workloads_for(definition.name, [args.workload])
    if len(workloads) != 1:
        raise ValueError(f"{args.workload!r} selects {len(workloads)} workloads of {definition.name}; give a uuid")
    workload = workloads[0]
    workdir = Path.cwd() / "build"
    workdir.mkdir(exist_ok=True)
    built = build(solution, definition, workdir, have_gpu=device.type == "cuda")
    if built.fn is None:
        raise RuntimeError("the solution compiled but produced nothing callable on this host (compile-only)")
    inputs = generate_inputs(definition, workload, args.seed, device, dataset.root)
    call_args = list(inputs.values())
    if solution.spec.destination_passing_style:
        call_args += list(allocate_outputs(definition, workload, device).values())
    n_inputs = len(inputs)
    state: list[Any] = []

    def setup() -> None:
        state.clear()
        if built.setup is not None:
            state.append(built.setup(*call_args[:n_inputs]))

    def call() -> Any:
        return built.fn(*call_args, *state)

    info = {"solution": solution.name, "definition": definition.name, "workload": workload.uuid,
            "label": dataset.label(workload), "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    return setup, call, device, info


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def run_ncu_target(args: argparse.Namespace, setup: Callable[[], Any], call: Callable[[], Any], device: Any) -> float:
    if not args.setup_in_range:
        setup()
    for _ in range(args.warmup):
        if args.setup_in_range:
            setup()
        call()
    _sync(device)
    started = time.perf_counter()
    with nvtx_range(args.range):
        if args.setup_in_range:
            setup()
        call()
        _sync(device)
    return time.perf_counter() - started


def run_nsight_target(args: argparse.Namespace, nsight: Any, setup: Callable[[], Any], call: Callable[[], Any],
                      device: Any) -> float:
    """nsight-python 1.x: annotate the single call; nsight attaches ncu and collects ``--metrics``.

    Written against nsight-python's documented API (``nsight.analyze.kernel`` with ``metrics``, ``runs``,
    ``clock_control``, ``cache_control``, ``output_prefix``; ``nsight.annotate``; ``ProfileResults.
    to_dataframe()``). It has not run on hardware here (the H200 host's ncu 2025.3.1 is too old for 1.x).
    """
    out_dir = Path(args.out_dir or "nsight")
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = [m for m in args.metrics.split(",") if m]
    if not args.setup_in_range:
        setup()
    for _ in range(args.warmup):
        call()
    _sync(device)

    @nsight.analyze.kernel(metrics=metrics, runs=1, clock_control="none", cache_control="all",
                           output_prefix=str(out_dir / "nsight-"))
    def profiled() -> None:
        with nsight.annotate(args.range):
            if args.setup_in_range:
                setup()
            call()
            _sync(device)

    started = time.perf_counter()
    results = profiled()
    elapsed = time.perf_counter() - started
    frame = results.to_dataframe()
    frame.to_csv(out_dir / "profile.csv", index=False)
    return elapsed


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    nsight = None
    if args.backend == "nsight":
        try:
            import nsight  # before torch and CUDA: nsight-python loads ncu's injection library at import
        except Exception as err:
            _write_status(args.status_file, {"ok": False, "stage": "import", "error": f"import nsight: {err}"})
            print(f"profile_target: cannot import nsight: {err}", file=sys.stderr)
            return 3
    if args.allow_cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        _write_status(args.status_file, {"ok": False, "stage": "device", "error": "no GPU in this process"})
        print("profile_target: no CUDA device; nothing to profile", file=sys.stderr)
        return 3
    if os.environ.get("TRITON_INTERPRET") == "1":
        from ..sandbox import triton_interp

        triton_interp.apply()
    status: dict[str, Any] = {"ok": False, "stage": "build", "range": args.range, "backend": args.backend}
    try:
        setup, call, device, info = prepare(args)
        status.update(info, stage="call")
        if args.backend == "nsight":
            elapsed = run_nsight_target(args, nsight, setup, call, device)
        else:
            elapsed = run_ncu_target(args, setup, call, device)
        status.update(ok=True, stage="done", profiled_call_s=elapsed)
    except BaseException as err:  # candidate code may raise anything
        traceback.print_exc()
        status.update(ok=False, error=f"{type(err).__name__}: {err}"[:2000])
        _write_status(args.status_file, status)
        return 2
    _write_status(args.status_file, status)
    print(f"profile_target: profiled one call of {status.get('solution')} on {status.get('label')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
