"""Judging at full scale: GPU memory of every process of an evaluation, and cold/warm wall time.

    python benchmarks/judge_scale.py --out DIR [--definitions a,b] [--solution-dir D] [--warm 1]
                                     [--archive A] [--carried ARCHIVE] [-- extra harness submit args]

For each definition: the example solution (or SOLUTION_DIR/<definition>.json) is submitted through `harness
submit` on all its workloads into a fresh archive (cold: nothing cached; FlashInfer JIT into a fresh folder
unless FLASHINFER_WORKSPACE_BASE is kept), then WARM more times into the same archive. While each submission
runs, `nvidia-smi --query-compute-apps` is sampled every 0.2 s: the device's total used by our processes, and
the largest any one process held. Per workload, the harness's own record (`memory` in the JSON: peak bytes
per process: reference, candidate, baselines) is compared with the goal: the processes of one evaluation
together under 3x the workload's input+output bytes plus 2 GiB. Writes judge_scale_<date>.json and .md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMELINE_ENV = "CRUCIBLE_TIMELINE"  # harness.pipeline.phases: the CLI's marks on stderr
SOLUTIONS = ROOT / "examples" / "triton_gqa_decode" / "solutions"
GIB = 1 << 30


class MemorySampler:
    """nvidia-smi's per-process used memory, polled in a thread: the peak sum and the peak of one process."""

    def __init__(self, period_s: float = 0.2):
        self.period_s = period_s
        self.peak_total_mib = 0
        self.peak_process_mib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout
                used = [int(line.split(",")[1]) for line in out.splitlines() if "," in line]
            except (OSError, subprocess.SubprocessError, ValueError):
                used = []
            if used:
                self.samples += 1
                self.peak_total_mib = max(self.peak_total_mib, sum(used))
                self.peak_process_mib = max(self.peak_process_mib, max(used))
            self._stop.wait(self.period_s)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def submit(solution: Path, archive: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "harness", "submit", str(solution), "--archive", str(archive), "--json", *extra]
    started = time.perf_counter()
    with MemorySampler() as mem:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, TIMELINE_ENV: "1"})
    wall = time.perf_counter() - started
    # the CLI's own marks (harness.pipeline.phases.timeline): seconds since its process started
    timeline = {parts[2]: float(parts[1]) for parts in (line.split() for line in proc.stderr.splitlines())
                if len(parts) == 3 and parts[0] == "timeline"}
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        return {"error": f"submit failed ({proc.returncode}): {proc.stderr[-3000:]}", "cli_wall_s": wall}
    workloads = []
    for w in result.get("workloads", []):
        memory = w.get("memory") or {}
        together = memory.get("together_bytes")
        budget = memory.get("budget_bytes")
        workloads.append({"label": w["label"], "status": w["status"], "latency_ms": w.get("latency_ms"),
                          # `harness submit --json` names them flashinfer_*_ms
                          "fi_kernel_ms": w.get("flashinfer_kernel_ms"),
                          "fi_official_ms": w.get("flashinfer_official_ms"), "phases_s": w.get("phases_s"),
                          "memory": memory,
                          "within_budget": None if together is None or budget is None else together <= budget,
                          "fallback": w.get("fallback"), "attribution": next(
                              (a["detail"] for a in w.get("audits", []) if a["name"] == "attribution"), None),
                          "failed_audits": [f"{a['name']}: {a['detail'][:160]}" for a in w.get("audits", [])
                                            if not a["passed"]]})
    phases = result.get("phases_s") or {}
    outside = wall - (result.get("wall_s") or 0.0) - phases.get("session_start", 0.0)
    return {"cli_wall_s": wall, "harness_wall_s": result.get("wall_s"), "status": result.get("status"),
            # the CLI's own start (imports), its archive work and the workers' teardown (CUDA contexts)
            "outside_harness_s": round(outside, 3), "timeline_s": timeline,
            "promotable": not result.get("promotion_blockers"), "blockers": result.get("promotion_blockers", [])[:5],
            "scores": result.get("scores"), "scores_partial": result.get("scores_partial"),
            "notices": result.get("notices"), "phases_s": result.get("phases_s"),
            "worker_steps_s": result.get("worker_steps_s"),
            "nvidia_smi_peak_total_gib": mem.peak_total_mib / 1024, "nvidia_smi_peak_process_gib":
                mem.peak_process_mib / 1024, "workloads": workloads}


def host_speed() -> dict:
    """What makes two hosts' walls comparable: the CPU, a fresh ``import torch`` (the harness and every worker pay
    it) and a pure-Python loop. H200 hosts of one pool differed 1.4x on every host-side step (run 7)."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), None) if Path("/proc/cpuinfo").exists() else None
    imports = []
    for _ in range(2):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=False, capture_output=True)
        imports.append(time.perf_counter() - started)
    started = time.perf_counter()
    sum(i * i for i in range(10_000_000))
    return {"cpu": model, "cpus": os.cpu_count(), "torch_import_s": round(min(imports), 3),
            "python_loop_s": round(time.perf_counter() - started, 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--definitions", default=",".join(p.stem for p in sorted(SOLUTIONS.glob("*.json"))))
    parser.add_argument("--solution-dir", default=str(SOLUTIONS))
    parser.add_argument("--warm", type=int, default=1)
    parser.add_argument("--archive", default=None)
    parser.add_argument("--carried", default=None,
                        help="an archive folder made on another host (same GPU model and toolchain): each definition "
                             "is submitted into a copy of it instead of --archive (kind 'carried', then 'warm': "
                             "cached figures after a spot check, FlashInfer's modules loaded from its cache)")
    parser.add_argument("submit_args", nargs="*")
    args = parser.parse_args()
    report: dict = {"date": dt.date.today().isoformat(), "host": host_speed(), "runs": []}
    archive = Path(args.archive or tempfile.mkdtemp(prefix="judge-scale-"))
    archive.mkdir(parents=True, exist_ok=True)  # a new archive where --archive names a folder not yet made
    for name in [d for d in args.definitions.split(",") if d]:
        solution = Path(args.solution_dir) / f"{name}.json"
        target, first = archive, "cold"
        if args.carried:  # this host's first submission goes into a copy of the carried archive, the warm ones too
            target, first = Path(tempfile.mkdtemp(prefix="judge-scale-carried-")) / "archive", "carried"
            shutil.copytree(args.carried, target)
        for i in range(1 + args.warm):
            run = {"definition": name, "kind": first if i == 0 else "warm",
                   **submit(solution, target, args.submit_args)}
            report["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "workloads"}), flush=True)
    write_report(report, Path(args.out))


def write_report(report: dict, out: Path) -> None:
    """judge_scale_<date>.json and .md in ``out`` (the Markdown also printed)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"judge_scale_{report['date']}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    host = report.get("host") or {}
    lines = [f"# Judging at full scale ({report['date']}, {os.environ.get('GPU_NAME', 'GPU')})", "",
             f"Host: {host.get('cpu')} x {host.get('cpus')}; `import torch` {host.get('torch_import_s')} s, "
             f"a 10M-step Python loop {host.get('python_loop_s')} s (walls compare across hosts only with these).", "",
             "| definition | run | wall s | outside the harness s | status | promotable | peak total GiB | "
             "peak process GiB | workloads within memory goal | phases (s) |", "|---" * 10 + "|"]
    for r in report["runs"]:
        within = [w["within_budget"] for w in r.get("workloads", []) if w["within_budget"] is not None]
        top = sorted((r.get("phases_s") or {}).items(), key=lambda kv: -kv[1])[:4]
        lines.append(f"| {r['definition']} | {r['kind']} | {r['cli_wall_s']:.1f} | "
                     f"{r.get('outside_harness_s', 0):.1f} | {r.get('status')} | "
                     f"{r.get('promotable')} | {r.get('nvidia_smi_peak_total_gib', 0):.1f} | "
                     f"{r.get('nvidia_smi_peak_process_gib', 0):.1f} | {sum(within)}/{len(within)} | "
                     + ", ".join(f"{k} {v:.0f}" for k, v in top) + " |")
    lines += ["", "Inside the workers (the eight largest steps, seconds: role.request.step)", ""]
    for r in report["runs"]:
        steps = list((r.get("worker_steps_s") or {}).items())[:8]
        lines.append(f"- {r['definition']} ({r['kind']}): " + (", ".join(f"{k} {v:.1f}" for k, v in steps) or "-"))
    lines += ["", "The CLI's timeline (seconds since its process started: `CRUCIBLE_TIMELINE=1`)", ""]
    for r in report["runs"]:
        marks = r.get("timeline_s") or {}
        lines.append(f"- {r['definition']} ({r['kind']}): "
                     + (", ".join(f"{k} {v:.2f}" for k, v in marks.items()) or "-") + f"; exit {r['cli_wall_s']:.2f}")
    lines += ["", "Per workload: label, status, together/budget GiB, attribution, seconds (the three largest phases)",
              ""]
    for r in report["runs"]:
        lines.append(f"## {r['definition']} ({r['kind']})")
        for w in r.get("workloads", []):
            m = w["memory"]
            t, b = m.get("together_bytes"), m.get("budget_bytes")
            mem = f"{t / GIB:.1f}/{b / GIB:.1f}" if t is not None and b is not None else "n/a"
            phases = w.get("phases_s") or {}
            top = ", ".join(f"{k} {v:.1f}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])[:3])
            lines.append(f"- {w['label']}: {w['status']}, memory {mem} GiB, {w['attribution']}"
                         + (f", {sum(phases.values()):.1f} s ({top})" if phases else "")
                         + (f", FAILED {w['failed_audits']}" if w["failed_audits"] else ""))
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
