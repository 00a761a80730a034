"""What the sandbox costs: worker start-up and a whole submission, with and without it.

    python benchmarks/sandbox_overhead.py --out DIR [--solution S.json] [--starts 5] [--repeats 2]

1. Worker start: a candidate worker launched, its hello answered (imports done), stopped; median of N, each
   way (the full sandbox, and --no-sandbox: no namespaces, rlimits kept).
2. A submission of SOLUTION on all its definition's workloads through `harness submit`: one warm-up
   (references, FlashInfer baselines and ceilings land in the archive's caches), then REPEATS of each way,
   alternating, so the two see the same caches and clocks. Wall time of the CLI process and the harness's own
   `wall_s`. Writes sandbox_overhead_<date>.json and .md to DIR.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.sandbox.runner import WorkerOptions, WorkerProcess  # noqa: E402
from harness.sandbox.isolation import load_sandbox_policy, probe  # noqa: E402

DEFAULT_SOLUTION = ROOT / "examples" / "triton_gqa_decode" / "solutions" / "gqa_paged_decode_h32_kv8_d128_ps1.json"


def worker_start_s(sandbox: bool, n: int, cpu_only: bool) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        w = WorkerProcess(WorkerOptions(role="candidate", cpu_only=cpu_only, sandbox=sandbox,
                                        policy=load_sandbox_policy(), dataset_root=str(ROOT / "definitions")))
        w.start()
        times.append(time.perf_counter() - started)
        w.stop()
    return times


def submit(solution: Path, archive: Path, sandbox: bool, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "harness.cli", "submit", str(solution), "--archive", str(archive), "--json", *extra]
    if not sandbox:
        cmd.append("--no-sandbox")
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"submit failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {"sandbox": result.get("sandbox"), "cli_wall_s": wall, "harness_wall_s": result.get("wall_s"),
            "status": result.get("status"), "workloads": len(result.get("workloads", [])),
            "passed": sum(w["status"] == "PASSED" for w in result.get("workloads", [])),
            "latency_ms": {w["label"]: w["latency_ms"] for w in result.get("workloads", [])},
            "phases_s": result.get("phases_s")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--solution", default=str(DEFAULT_SOLUTION))
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--archive", default=None)
    parser.add_argument("submit_args", nargs="*", help="extra `harness submit` arguments (after --)")
    args = parser.parse_args()
    import torch

    cpu_only = not torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    report: dict = {"date": dt.date.today().isoformat(), "probe": probe(), "solution": args.solution}
    report["worker_start_s"] = {"sandbox": worker_start_s(True, args.starts, cpu_only),
                                "no_sandbox": worker_start_s(False, args.starts, cpu_only)}
    archive = Path(args.archive or tempfile.mkdtemp(prefix="sandbox-overhead-"))
    archive.mkdir(parents=True, exist_ok=True)
    report["warmup"] = submit(Path(args.solution), archive, True, args.submit_args)
    runs = []
    for _ in range(args.repeats):
        for sandbox in (True, False):
            runs.append(submit(Path(args.solution), archive, sandbox, args.submit_args))
            print(json.dumps(runs[-1]), flush=True)
    report["runs"] = runs
    med = {k: statistics.median(v) for k, v in report["worker_start_s"].items()}
    walls = {label: statistics.median(r["cli_wall_s"] for r in runs if (r["sandbox"] == "full") == full)
             for label, full in (("sandbox", True), ("no_sandbox", False))}
    report["summary"] = {"worker_start_median_s": med, "submission_wall_median_s": walls,
                         "submission_overhead": walls["sandbox"] / walls["no_sandbox"] - 1}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"sandbox_overhead_{report['date']}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    lines = [f"# Sandbox overhead ({report['date']})", "", f"probe: {report['probe']}", "",
             "| what | full sandbox | no sandbox | overhead |", "|---|---|---|---|",
             f"| worker start (median of {args.starts}) | {med['sandbox']:.3f} s | {med['no_sandbox']:.3f} s | "
             f"{med['sandbox'] - med['no_sandbox']:+.3f} s |",
             f"| submission, {runs[0]['workloads']} workloads (median of {args.repeats}) | {walls['sandbox']:.1f} s | "
             f"{walls['no_sandbox']:.1f} s | {100 * report['summary']['submission_overhead']:+.1f}% |"]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
