"""Wall time of evaluating one solution on every workload of a definition: Crucible's session (one build,
one reference worker, cached reference latencies) against one fresh process per workload (the official
isolated runner's model). Prints the breakdown and checks that both give the same official latencies.

    python benchmarks/eval_throughput.py --out benchmarks/results [--definition D] [--solution S.json]
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

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DEFINITION = "gqa_paged_decode_h32_kv8_d128_ps1"


def harness_submit(solution: Path, archive: Path, workloads: list[str] | None = None,
                   gpu: str | None = None) -> tuple[dict, float]:
    archive.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "harness.cli", "submit", str(solution), "--archive", str(archive), "--json",
           "--no-baselines"]
    for w in workloads or []:
        cmd += ["-w", w]
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    wall = time.perf_counter() - started
    try:
        return json.loads(proc.stdout), wall
    except json.JSONDecodeError:
        raise SystemExit(f"harness submit failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definition", default=DEFAULT_DEFINITION)
    parser.add_argument("--solution", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--two-gpus", action="store_true",
                        help="run the per-workload processes on GPU 1 while the sessions run on GPU 0 (same wall "
                             "times, half the waiting)")
    parser.add_argument("--workloads", default="",
                        help="comma-separated labels or uuids (default: every workload of the definition)")
    parser.add_argument("--isolated", default="",
                        help="the workloads of the one-process-per-workload runs, labels or uuids (default: the "
                             "same as the sessions'); the speedups then compare the sessions with the isolated "
                             "runs scaled to the sessions' workload count")
    args = parser.parse_args()
    solution = args.solution or REPO / "examples" / "triton_gqa_decode" / "solutions" / f"{args.definition}.json"

    import json as _json
    from concurrent.futures import ThreadPoolExecutor

    work = Path(tempfile.mkdtemp(prefix="crucible-throughput-"))
    labels = [_json.loads(line)["workload"]["uuid"] for line in
              (REPO / "definitions" / "workloads" / "gqa_paged" / f"{args.definition}.jsonl").read_text().splitlines()]
    names = json.loads((REPO / "definitions" / "workloads" / "gqa_paged" / "labels.json").read_text())

    def pick(option: str, text: str) -> list[str]:
        wanted = text.split(",")
        found = [u for u in labels if u in wanted or names.get(u) in wanted]
        if len(found) != len(wanted):
            raise SystemExit(f"{option}: not all of {wanted} are workloads of {args.definition}")
        return found

    chosen = pick("--workloads", args.workloads) if args.workloads else None
    labels = chosen or labels
    isolated_uuids = pick("--isolated", args.isolated) if args.isolated else labels
    session_gpu, isolated_gpu = ("0", "1") if args.two_gpus else (None, None)

    def sessions():
        # Crucible, cold (empty archive: reference latencies measured) then warm (cached in the archive).
        return harness_submit(solution, work / "session", chosen, gpu=session_gpu), \
            harness_submit(solution, work / "session", chosen, gpu=session_gpu)

    def isolated_runs():
        # One fresh process, and a fresh archive (no cache), per workload.
        return [harness_submit(solution, work / f"isolated{i}", [uuid], gpu=isolated_gpu)
                for i, uuid in enumerate(isolated_uuids)]

    if args.two_gpus:
        with ThreadPoolExecutor(2) as pool:
            fut_s, fut_i = pool.submit(sessions), pool.submit(isolated_runs)
            ((cold, cold_wall), (warm, warm_wall)), runs = fut_s.result(), fut_i.result()
    else:
        (cold, cold_wall), (warm, warm_wall) = sessions()
        runs = isolated_runs()
    isolated = {r["workloads"][0]["label"]: r["workloads"][0] for r, _ in runs}
    isolated_walls = [w for _, w in runs]
    # one process per workload for every workload of the sessions: the measured mean per workload times their count
    isolated_wall = statistics.fmean(isolated_walls) * len(cold["workloads"])
    labels = [w["label"] for w in cold["workloads"]]

    rows = []
    for c, w in zip(cold["workloads"], warm["workloads"]):
        iso = isolated.get(c["label"], {"latency_ms": None})
        ratio = (c["latency_ms"] / iso["latency_ms"]) if c["latency_ms"] and iso["latency_ms"] else None
        rows.append({"workload": c["label"], "status": c["status"], "session_ms": c["latency_ms"],
                     "warm_session_ms": w["latency_ms"], "isolated_ms": iso["latency_ms"],
                     "session_over_isolated": ratio})
    ratios = [r["session_over_isolated"] for r in rows if r["session_over_isolated"]]
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "definition": args.definition,
        "solution": solution.name, "workloads": len(labels),
        "wall_s": {"session_cold": round(cold_wall, 1), "session_warm": round(warm_wall, 1),
                   "isolated_per_workload": round(isolated_wall, 1)},
        "speedup": {"cold": round(isolated_wall / cold_wall, 2), "warm": round(isolated_wall / warm_wall, 2)},
        "phases_s": {"session_cold": cold["phases_s"], "session_warm": warm["phases_s"]},
        "worker_steps_s": {"session_cold": cold.get("worker_steps_s"), "session_warm": warm.get("worker_steps_s")},
        "isolated_mean_wall_per_workload_s": round(statistics.fmean(isolated_walls), 1),
        "latency_ratio_median": statistics.median(ratios) if ratios else None,
        "latency_ratio_range": [min(ratios), max(ratios)] if ratios else None,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"eval_throughput_{dt.date.today().isoformat()}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Evaluation throughput: {args.definition}, {len(labels)} workloads", "",
             f"- date {report['date']}; solution {solution.name}",
             f"- wall: session cold {cold_wall:.1f} s, warm {warm_wall:.1f} s; one process per workload "
             f"{isolated_wall:.1f} s (mean {report['isolated_mean_wall_per_workload_s']} s each, measured on "
             f"{len(runs)} of the {len(labels)} workloads)",
             f"- speedup: cold {report['speedup']['cold']}x, warm {report['speedup']['warm']}x",
             f"- phases cold: {cold['phases_s']}", f"- phases warm: {warm['phases_s']}",
             "- inside the workers, warm (largest first): "
             f"{dict(list((warm.get('worker_steps_s') or {}).items())[:10])}",
             f"- official latency, session / isolated: median {report['latency_ratio_median']}, "
             f"range {report['latency_ratio_range']}", "",
             "| workload | status | session ms | warm ms | isolated ms | ratio |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['status']} | {r['session_ms']} | {r['warm_session_ms']} | "
                     f"{r['isolated_ms']} | {r['session_over_isolated'] and round(r['session_over_isolated'], 4)} |")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
