"""Build FlashInfer's CUTLASS fused-MoE module (the MoE family's Hopper stand-in baseline) before a session.

    python scripts/prebuild_flashinfer_moe.py [--cache DIR] [--jobs N] [--budget-s S]

The module is one JIT build of 247 compile units, 219 of them generated CUTLASS kernels (every dtype pair and tile
FlashInfer instantiates, not only the FP8 block-scale path the baseline calls): about 68 minutes of a 16-core host
(H200 host, 2026-12-02: 37 units in 555 s, 263 s each on average), far longer than a workload's time limit, so a
baseline worker that starts it cold runs out of time and the MoE records have no baseline. Built here once per host
into the folder the harness's baseline workers use (``CRUCIBLE_FLASHINFER_CACHE``, else ``--cache``), the workers
load it.
The build is ninja's: a build cut by ``--budget-s`` (or the caller's limit) keeps its finished objects, and the
next run on the same host continues from there. Prints the elapsed time and whether the module loaded.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BUILD = ("from flashinfer.fused_moe.core import get_cutlass_fused_moe_module\n"
         "get_cutlass_fused_moe_module('90')\n")
# How far a build got: the objects in its build folder against its sources (ninja keeps them for the next run on
# this host). Counted in the folder, not by the spec's get_object_paths(): in FlashInfer 0.6.18 that names objects
# without the folder prefix its ninja file gives them, so it read "0 built" with 37 on disk (H200, 2026-12-02).
PROGRESS = ("from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module\n"
            "spec = gen_cutlass_fused_moe_sm90_module(False)\n"
            "print(sum(1 for _ in spec.build_dir.glob('*.o')), len(spec.sources))\n")


def progress(env: dict[str, str]) -> str:
    """'N of M objects built', or why that is not known."""
    try:
        out = subprocess.run([sys.executable, "-c", PROGRESS], env=env, capture_output=True, text=True, timeout=120)
        done, total = out.stdout.split()[-2:]
        return f"{done} of {total} objects built"
    except (subprocess.SubprocessError, ValueError) as err:
        return f"objects built: unknown ({err})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None,
                        help="FlashInfer workspace (default: $CRUCIBLE_FLASHINFER_CACHE)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: $MAX_JOBS, else CPUs)")
    parser.add_argument("--budget-s", type=float, default=3600)
    args = parser.parse_args()
    cache = args.cache or (Path(os.environ["CRUCIBLE_FLASHINFER_CACHE"]) if os.environ.get("CRUCIBLE_FLASHINFER_CACHE")
                           else None)
    if cache is None:
        print("error: no cache folder: pass --cache or set CRUCIBLE_FLASHINFER_CACHE (the baselines' workers read it)",
              file=sys.stderr)
        return 2
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FLASHINFER_WORKSPACE_BASE": str(cache.resolve()),
           "MAX_JOBS": str(args.jobs or os.environ.get("MAX_JOBS") or os.cpu_count() or 1)}
    started = time.monotonic()
    build = subprocess.Popen([sys.executable, "-c", BUILD], env=env, start_new_session=True)
    try:
        rc = build.wait(timeout=args.budget_s)
        status = "built and loaded" if rc == 0 else f"failed (exit {rc})"
    except subprocess.TimeoutExpired:  # ninja and its nvcc jobs too, not only the Python that started them
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()
        status = "cut by the budget: run again on this host to continue"
    print(f"fused_moe_90: {status} in {time.monotonic() - started:.0f} s ({env['MAX_JOBS']} jobs, cache {cache}; "
          f"{progress(env)})")
    return 0 if status == "built and loaded" else 1


if __name__ == "__main__":
    sys.exit(main())
