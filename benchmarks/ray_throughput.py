"""Evaluation throughput of the Ray executor with 1, 2 and 4 CPU lanes (a local Ray instance of that many CPUs),
and of the local executor on one lane: Ray's own overhead. The same N solutions each time, into a fresh archive;
wall time includes starting the lanes (each lane's Session: imports, the reference's process), and
``steady_s`` counts from the first submission's start, when at least one lane is warm.

    python benchmarks/ray_throughput.py --out benchmarks/results/DATE_cpu_ray [--solutions 8] [--lanes 1,2,4]
        [-w uniform_b1_kv512] [--solution S.json] [--gpu]   # --gpu: GPU lanes, one GPU each (--lanes 1 on one H200)

Writes ray_throughput.json and ray_throughput.md. On a CPU host the lanes share its cores (the Triton interpreter
is CPU-bound), so scaling beyond the core count is not expected; on a GPU cluster each lane has its own GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOLUTION = REPO / "examples" / "triton_gqa_decode" / "solutions" / "gqa_paged_decode_h32_kv8_d128_ps1.json"


def copies(path: Path, n: int) -> list:
    """``n`` distinct submissions of one solution (names differ, so each is its own archived submission)."""
    from harness.data.schema import Solution, load_model

    base = load_model(Solution, path)
    return [base.model_copy(update={"name": f"{base.name}-{i}"}) for i in range(n)]


def run_local(solutions: list, workloads: list[str], baselines: bool = True) -> dict:
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.pipeline.parallel import submit_all

    archive = Path(tempfile.mkdtemp(prefix="crucible-bench-local-"))
    starts: list[float] = []
    started = time.perf_counter()
    results = submit_all(solutions, Dataset(None), archive,
                         SubmitOptions(workloads=workloads, spare_worker=True, baselines=baselines),
                         progress=lambda kind, data: starts.append(time.perf_counter()) if kind == "start" else None,
                         gpus=1)
    return summary("local (1 lane)", 1, results, started, starts[0] if starts else started)


def run_ray(solutions: list, workloads: list[str], lanes: int, gpu: bool, baselines: bool = True) -> dict:
    import ray

    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.pipeline.ray_executor import RaySettings, submit_on_ray

    archive = Archive(Path(tempfile.mkdtemp(prefix=f"crucible-bench-ray{lanes}-")))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private instance of this benchmark only
    # CPU lanes: no GPU offered even on a GPU host; GPU lanes: one per GPU, this many GPUs of the host
    ray.init(num_cpus=lanes, num_gpus=lanes if gpu else 0, log_to_driver=False, include_dashboard=False)
    first: list[float] = []
    try:
        started = time.perf_counter()
        results = submit_on_ray(solutions, Dataset(None), archive,
                                SubmitOptions(workloads=workloads, spare_worker=True, baselines=baselines),
                                RaySettings(cpu_lanes=lanes),
                                on_event=lambda kind, data: first.append(time.perf_counter())
                                if kind == "assigned" else None)
    finally:
        ray.shutdown()
    kind = "GPU" if gpu else "CPU"
    return summary(f"ray, {lanes} {kind} lane(s)", lanes, results, started, first[0] if first else started)


def summary(name: str, lanes: int, results: list, started: float, first_start: float) -> dict:
    ended = time.perf_counter()
    statuses = sorted({r.status for r in results})
    # The official figure per workload, the median over the submissions (each its own evaluation): where GPU
    # lanes and the local executor time the same solution, these must agree within the timer's noise.
    timed: dict[str, list[float]] = {}
    for r in results:
        for w in r.workloads:
            if w.latency_ms:
                timed.setdefault(w.label, []).append(w.latency_ms)
    latency = {label: round(statistics.median(v), 6) for label, v in timed.items()}
    return {"executor": name, "lanes": lanes, "submissions": len(results), "statuses": statuses,
            "latency_ms": latency,
            "wall_s": round(ended - started, 2), "start_s": round(first_start - started, 2),
            "steady_s": round(ended - first_start, 2),
            "per_minute": round(60 * len(results) / (ended - started), 2),
            "steady_per_minute": round(60 * len(results) / max(ended - first_start, 1e-9), 2)}


def host() -> dict:
    import torch

    try:
        import ray
        ray_version = ray.__version__
    except ImportError:
        ray_version = None
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "ray": ray_version, "platform": platform.platform(),
            "gpu": torch.cuda.is_available()}


def markdown(report: dict) -> str:
    h = report["host"]
    lines = [f"# Ray executor throughput ({report['date']})", "",
             f"Host: {h['cpus']} CPU cores ({h['machine']}), GPU: {h['gpu']}, torch {h['torch']}, ray {h['ray']}, "
             f"Python {h['python']}.", "",
             f"{report['solutions']} submissions of `{report['solution']}` on workloads {report['workloads']}.", "",
             "| executor | lanes | submissions | statuses | wall s | lane start s | steady s | per min "
             "| steady per min |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lines.append(f"| {r['executor']} | {r['lanes']} | {r['submissions']} | {', '.join(r['statuses'])} | "
                     f"{r['wall_s']} | {r['start_s']} | {r['steady_s']} | {r['per_minute']} | "
                     f"{r['steady_per_minute']} |")
    local = report["runs"][0].get("latency_ms") or {}
    if local:  # timed (a GPU host): the official numbers of each executor against the local one's
        lines += ["", "Official latency per workload (ms, median over the submissions) and its ratio to the local "
                  "executor's:", "", "| workload | " + " | ".join(r["executor"] for r in report["runs"]) + " |",
                  "|---|" + "---|" * len(report["runs"])]
        for label, ms in local.items():
            cells = [f"{ms:.4g}"] + [
                f"{r['latency_ms'][label]:.4g} ({r['latency_ms'][label] / ms:.3f}x)" if label in r.get("latency_ms", {})
                else "-" for r in report["runs"][1:]]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", report["note"], ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--solution", type=Path, default=DEFAULT_SOLUTION)
    parser.add_argument("--solutions", type=int, default=8)
    parser.add_argument("--lanes", default="1,2,4")
    parser.add_argument("-w", "--workloads", default="uniform_b1_kv512")
    parser.add_argument("--gpu", action="store_true", help="GPU lanes (one GPU each) instead of CPU lanes")
    parser.add_argument("--no-baselines", action="store_true", help="leave FlashInfer's baselines out")
    args = parser.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    solutions = copies(args.solution, args.solutions)
    runs = [run_local(solutions, workloads, not args.no_baselines)]
    for lanes in (int(x) for x in args.lanes.split(",")):
        runs.append(run_ray(solutions, workloads, lanes, args.gpu, not args.no_baselines))
        print(json.dumps(runs[-1]), flush=True)
    solution = args.solution.resolve()
    shown = solution.relative_to(REPO) if solution.is_relative_to(REPO) else solution
    report = {"date": dt.date.today().isoformat(), "host": host(), "solution": str(shown),
              "solutions": args.solutions, "workloads": workloads, "runs": runs,
              "note": ("GPU lanes, one GPU each: the local executor's row against the 1-lane Ray row is Ray's "
                       "overhead, and the latency table shows both executors give the same official numbers."
                       if args.gpu else
                       f"Scaling is bounded by this host's {os.cpu_count()} CPU cores: every lane runs the Triton "
                       "interpreter on them, so lanes beyond the core count only share them. The local executor's "
                       "row against the 1-lane Ray row is Ray's overhead. GPU lanes (one H200 each) are not "
                       "measured here.")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ray_throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "ray_throughput.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
