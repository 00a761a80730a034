"""What the audits cost: wall time of `harness submit` on one definition at audit levels off / fast / full.

Caches (reference latencies, FlashInfer baselines, ceilings) are warmed first, then the levels run
interleaved, twice, in one archive; the median wall time per level and the overhead over `off` are
reported. Goal: `fast` adds at most 30%.

    python benchmarks/audit_cost.py --out benchmarks/results [--workloads w1,w2] [--definition D]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LEVELS = ("off", "fast", "full")


def submit(solution: Path, archive: Path, level: str, workloads: list[str]) -> dict:
    cmd = [sys.executable, "-m", "harness.cli", "submit", str(solution), "--archive", str(archive), "--json",
           "--audit-level", level] + [a for w in workloads for a in ("-w", w)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"harness submit failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definition", default="gqa_paged_decode_h32_kv8_d128_ps1")
    parser.add_argument("--workloads", default="", help="comma-separated; default: all (CPU: those it can run)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    solution = REPO / "examples" / "triton_gqa_decode" / "solutions" / f"{args.definition}.json"
    workloads = [w for w in args.workloads.split(",") if w]
    archive = Path(tempfile.mkdtemp(prefix="crucible-audit-cost-"))
    warm = submit(solution, archive, "off", workloads)  # warm every cache
    print(f"warm-up: wall {warm['wall_s']:.1f} s", flush=True)
    walls: dict[str, list[float]] = {lvl: [] for lvl in LEVELS}
    phases: dict[str, dict] = {}
    for r in range(args.rounds):
        for level in (LEVELS if r % 2 == 0 else LEVELS[::-1]):
            result = submit(solution, archive, level, workloads)
            walls[level].append(result["wall_s"])
            print(f"round {r} {level}: wall {result['wall_s']:.1f} s, phases {result['phases_s']}", flush=True)
            phases[level] = result["phases_s"]
    median = {lvl: statistics.median(v) for lvl, v in walls.items()}
    overhead = {lvl: median[lvl] / median["off"] - 1 for lvl in ("fast", "full")}
    gpu = result["workloads"][0]["latency_ms"] is not None
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
              "gpu": gpu, "definition": args.definition, "workloads": [w["label"] for w in result["workloads"]],
              "wall_s": walls, "median_wall_s": median, "overhead_vs_off": overhead, "phases_s_last": phases,
              "goal_fast_overhead_max": 0.30, "fast_meets_goal": overhead["fast"] <= 0.30}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"audit_cost_{dt.date.today().isoformat()}_{'gpu' if gpu else 'cpu'}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("median_wall_s", "overhead_vs_off", "fast_meets_goal", "workloads")},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
