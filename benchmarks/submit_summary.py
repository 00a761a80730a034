"""One screen of a `harness submit --json` output: status, promotability, failed audits, and per workload the
kernel figure next to FlashInfer's faster mode (kernel figures, plan() outside the timed call) and the floor.

    python benchmarks/submit_summary.py SUBMIT.json [...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _us(ms):
    return f"{ms * 1000:8.1f}" if isinstance(ms, (int, float)) else "       -"


def summary(report: dict) -> str:
    lines = [f"{report.get('solution')} on {report.get('definition')}: {report.get('status')}, "
             f"promotable {report.get('promotable')} {report.get('promotion_blockers') or ''} "
             f"wall {report.get('wall_s')} s"]
    failed = [f"{a.get('name')}: {a.get('detail')}" for a in report.get("audits") or [] if not a.get("passed", True)]
    speedups = []
    for w in report.get("workloads") or []:
        failed += [f"{w.get('label')} {a.get('name')}: {a.get('detail')}" for a in w.get("audits") or []
                   if not a.get("passed", True)]
        speedup = w.get("speedup_vs_flashinfer_kernel")
        if isinstance(speedup, (int, float)):
            speedups.append(speedup)
        floor = w.get("fraction_of_floor")
        lines.append(f"  {w.get('label', '?'):28s} {w.get('status', '?'):14s} us {_us(w.get('kernel_latency_ms'))}"
                     f"  flashinfer {_us(w.get('flashinfer_kernel_ms'))}"
                     f"  x{speedup if speedup is None else round(speedup, 3)!s:6s}"
                     f"  floor {'-' if floor is None else f'{floor:.0%}'}"
                     + ("" if w.get("status") == "PASSED" else f"  {(w.get('message') or '')[:160]}"))
    if speedups:
        lines.append(f"  mean x{statistics.mean(speedups):.3f}, >= 1.0x on {sum(s >= 1 for s in speedups)}/"
                     f"{len(speedups)}, min x{min(speedups):.3f}")
    lines += [f"  FAILED AUDIT {f}" for f in failed] or ["  every audit passed"]
    return "\n".join(lines)


def main(paths: list[str]) -> int:
    for path in paths:
        try:
            print(summary(json.loads(Path(path).read_text())))
        except (OSError, ValueError) as err:
            print(f"{path}: no report ({err})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
