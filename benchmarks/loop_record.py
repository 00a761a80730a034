"""The record of a `controller loop` run for #19's goals: what the loop promoted, judged again on every workload.

    python benchmarks/loop_record.py --loop LOOP.json --archive A --out DIR [--profile] [--dataset D]

LOOP.json is what `controller loop --json` printed (one report, or several for an alias). Per definition, DIR/<def>/
receives: the promoted solution (`promoted_solution.json`), its own `harness submit --json` on every workload
(`submit.json`), the run's trajectory (`controller trajectory`), with `--profile` its ncu digest per regime
(`controller profile`, `ncu_digest.json`) and of every workload that misses a goal of #19 (`ncu_misses.json`: those
under 1.0x FlashInfer first, slowest first, then the rest in table order, one `controller profile` each, so a caller's
time limit keeps the ones done), and `record.md`: the promoted kernel's figure per workload next to each FlashInfer
mode's (kernel figures: setup or plan() outside the timed call), the speedup over the faster mode, the % of the
roofline floor, the goals of #19 checked one by one, each workload that misses one with the goals it misses, by how
much, and its ncu limiter, and the loop's wall time on the GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.archive.database import Archive  # noqa: E402
from harness.archive.queries import latest_baseline_figures  # noqa: E402
from controller.evidence.kernel_digest import KernelDigest  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from template_sweep import parse_results  # noqa: E402

# #19's goals (kernel figure, against the faster FlashInfer mode per workload)
MIN_SPEEDUP = 1.0
MIN_SCORE = 1.15
BATCH1_MAX_US = 8.0
FLOOR_GOALS = {"mid-size": 0.80, "skewed": 0.80, "large": 0.95}


def goal_class(label: str) -> str:
    """batch 1, mid-size (batch 16), large (batch 64 and up) or skewed, from a gqa_decode workload's label."""
    if label.startswith(("skewed", "one_long")):
        return "skewed"
    found = re.search(r"_b(\d+)_", label)
    batch = int(found.group(1)) if found else 0
    return "batch 1" if batch == 1 else "mid-size" if batch < 64 else "large"


def rows_of(result: dict[str, Any], baselines: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """One row per workload: the promoted kernel's figure, each FlashInfer mode's, speedup and floor."""
    modes = sorted({b["solution_name"] for b in baselines})
    by = {(b["solution_name"], b["workload_uuid"]): b for b in baselines}
    rows = []
    for w in result.get("workloads", []):
        mine = w.get("kernel_latency_ms") or w.get("latency_ms")
        fi = {m: (by.get((m, w["workload"])) or {}).get("kernel_ms") for m in modes}
        known = [v for v in fi.values() if v]
        best = min(known) if known else None
        rows.append({"label": w["label"], "status": w["status"], "class": goal_class(w["label"]),
                     "ms": mine, "flashinfer_ms": fi, "speedup": best / mine if best and mine else None,
                     "floor_ms": w.get("floor_ms"), "fraction_of_floor": w.get("fraction_of_floor"),
                     "failed_audits": [a["name"] for a in w.get("audits", []) if not a["passed"]]})
    return modes, rows


def misses(rows: list[dict[str, Any]]) -> list[str]:
    """The workloads under 1.0x the faster FlashInfer mode (those with a figure), slowest first."""
    behind = [r for r in rows if r["speedup"] is not None and r["speedup"] < MIN_SPEEDUP]
    return [r["label"] for r in sorted(behind, key=lambda r: r["speedup"])]


def goal_misses(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each workload that misses a goal of #19 (those with a figure), with the goals it misses and by how much: those
    under 1.0x FlashInfer first, slowest first (what a record profiles first), then the rest in table order."""
    found: dict[str, list[str]] = {label: [] for label in misses(rows)}
    for r in rows:
        said = []
        if r["speedup"] is not None and r["speedup"] < MIN_SPEEDUP:
            said.append(f">= {MIN_SPEEDUP:g}x FlashInfer: {r['speedup']:.3f}x")
        if r["class"] == "batch 1" and r["ms"] is not None and r["ms"] * 1e3 > BATCH1_MAX_US:
            said.append(f"<= {BATCH1_MAX_US:g} us: {r['ms'] * 1e3:.1f} us (+{r['ms'] * 1e3 - BATCH1_MAX_US:.1f} us)")
        goal, frac = FLOOR_GOALS.get(r["class"]), r["fraction_of_floor"]
        if goal is not None and frac is not None and frac < goal:
            said.append(f">= {goal:.0%} of floor: {frac:.1%} ({(goal - frac) * 100:.1f} points short)")
        if said:
            found.setdefault(r["label"], []).extend(said)
    return found


def limiters(digest: dict[str, Any]) -> dict[str, str]:
    """Per profiled workload (`controller profile --json`), its kernels' ncu digest in one line, as the evidence
    writes it (controller/evidence/kernel_digest.py: time, SOL, occupancy and what limits it, registers, waves,
    stalls, classification and limiter); or why it was not profiled."""
    return {label: line for _, label, line in _profile_lines(digest)}


def regime_digests(digest: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(regime, workload, ncu digest in one line) for each regime's profiled workload (`controller profile`)."""
    return _profile_lines(digest)


def _profile_lines(digest: dict[str, Any]) -> list[tuple[str, str, str]]:
    found = []
    for prof in digest.get("profiles", []):
        label = prof.get("workload_label") or prof.get("label") or prof.get("workload")
        if prof.get("status") != "ok":
            found.append((prof.get("regime") or "", label,
                          f"not profiled: {prof.get('reason') or prof.get('status')}"))
            continue
        lines = [KernelDigest.from_json(d).line().removeprefix("- ") for d in prof.get("digests", [])]
        found.append((prof.get("regime") or "", label, " / ".join(lines) or "no kernel profiled"))
    return found


def _check(name: str, group: list[dict[str, Any]], value: Any, failing: Any) -> tuple[str, bool, str]:
    """A goal over ``group``: met when every row has its figure (``value``) and none is ``failing``."""
    if not group:
        return name, False, "no such workload"
    untimed = [r["label"] for r in group if value(r) is None]
    if untimed:
        return name, False, "no figure: " + ", ".join(untimed)
    missed = [f"{r['label']} {failing(r)}" for r in group if failing(r)]
    return name, not missed, "missed: " + ", ".join(missed) if missed else "all met"


def goals(rows: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """(goal, met, the figures) for each of #19's goals; a workload without a figure never meets one."""
    out = [_check(f">= {MIN_SPEEDUP:g}x FlashInfer on every workload", rows, lambda r: r["speedup"],
                  lambda r: f"{r['speedup']:.3f}x" if r["speedup"] < MIN_SPEEDUP else None)]
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    score = statistics.fmean(speedups) if speedups and len(speedups) == len(rows) else None
    out.append((f"score >= {MIN_SCORE:g}x", score is not None and score >= MIN_SCORE,
                "n/a (not every workload timed)" if score is None else f"{score:.3f}x"))
    out.append(_check(f"batch 1 <= {BATCH1_MAX_US:g} us", [r for r in rows if r["class"] == "batch 1"],
                      lambda r: r["ms"], lambda r: f"{r['ms'] * 1e3:.1f} us" if r["ms"] * 1e3 > BATCH1_MAX_US
                      else None))
    for cls, floor in FLOOR_GOALS.items():
        out.append(_check(f"{cls} >= {floor:.0%} of the floor", [r for r in rows if r["class"] == cls],
                          lambda r: r["fraction_of_floor"],
                          lambda r, f=floor: f"{r['fraction_of_floor']:.1%}" if r["fraction_of_floor"] < f else None))
    return out


def _us(ms: Optional[float]) -> str:
    return "n/a" if ms is None else f"{ms * 1e3:.3g}"


def markdown(report: dict[str, Any], result: Optional[dict[str, Any]], modes: list[str],
             rows: list[dict[str, Any]], miss_limiters: Optional[dict[str, str]] = None,
             per_regime: Optional[list[tuple[str, str, str]]] = None) -> str:
    inc = report["incumbent"]
    lines = [f"# {report['definition']}: the loop's promoted solution", "",
             f"Run `{report['run_id']}` ({report['provider']}, {report['status']}), loop wall "
             f"{report['totals']['wall_s']:.0f} s on the GPU, {report['totals']['evaluated']} of "
             f"{report['totals']['candidates']} candidates evaluated. Incumbent: `{inc['name']}` "
             f"({'promoted' if inc['promoted'] else 'not promoted'}).", ""]
    if result is None:
        return "\n".join(lines + ["No promoted solution to judge again.", ""])
    lines += [f"`harness submit --json` (`submit.json`): status {result['status']}, promotable "
              f"{result['promotable']}. Kernel figures (setup outside the timed call, as FlashInfer's `plan()` "
              "is).", "",
              "| workload | class | status | µs | " + " | ".join(f"{m} µs" for m in modes)
              + " | speedup vs faster | floor µs | % of floor | failed audits |",
              "|---|---|---|---:|" + "---:|" * len(modes) + "---:|---:|---:|---|"]
    for r in rows:
        fi = " | ".join(_us(r["flashinfer_ms"][m]) for m in modes)
        speed = "n/a" if r["speedup"] is None else f"{r['speedup']:.3f}x"
        frac = "n/a" if r["fraction_of_floor"] is None else f"{r['fraction_of_floor']:.1%}"
        lines.append(f"| {r['label']} | {r['class']} | {r['status']} | {_us(r['ms'])} | {fi} | {speed} | "
                     f"{_us(r['floor_ms'])} | {frac} | {', '.join(r['failed_audits'])} |")
    lines += ["", "| goal | met | figures |", "|---|---|---|"]
    lines += [f"| {g} | {'yes' if ok else 'no'} | {why} |" for g, ok, why in goals(rows)]
    if miss_limiters is not None:  # profiled: each workload that misses a goal, with what ncu says holds it
        by_label = {r["label"]: r for r in rows}
        regime_lines = {label: line for _, label, line in per_regime or []}
        lines += ["", "Each workload that misses a goal of #19, by how much, with its ncu limiter (`ncu_misses.json`, "
                  "or the regime's digest below where it is that regime's workload):", "",
                  "| workload | class | goals missed | speedup | % of floor | ncu |", "|---|---|---|---:|---:|---|"]
        for label, said in goal_misses(rows).items():
            r = by_label[label]
            speed = "n/a" if r["speedup"] is None else f"{r['speedup']:.3f}x"
            frac = "n/a" if r["fraction_of_floor"] is None else f"{r['fraction_of_floor']:.1%}"
            ncu = miss_limiters.get(label) or regime_lines.get(label) or "not profiled"
            lines.append(f"| {label} | {r['class']} | {'; '.join(said)} | {speed} | {frac} | {ncu} |")
    if per_regime:  # profiled: one workload per regime, as `controller profile` picks it
        lines += ["", "ncu digest per regime (`ncu_digest.json`):", "", "| regime | workload | ncu |", "|---|---|---|"]
        lines += [f"| {regime} | {label} | {line} |" for regime, label, line in per_regime]
    return "\n".join(lines + [""])


def _run(args: list[str], out: Path) -> int:
    """``python -m ARGS``: its output into ``out``, its progress and errors into ``out`` with ``.log``."""
    with out.open("w") as handle, out.with_suffix(".log").open("a") as log:
        return subprocess.run([sys.executable, "-m", *args], stdout=handle, stderr=log, cwd=ROOT).returncode


def _json_or_empty(path: Path) -> dict[str, Any]:
    """A command's JSON output, or {} where it printed none (ncu missing: the exit code and its log say why)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def record(report: dict[str, Any], archive: Path, out: Path, profile: bool, extra: list[str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    _run(["controller", "trajectory", report["run_id"], "--archive", str(archive), "--out", str(out / "trajectory")],
         out / "trajectory.txt")
    exported = report["incumbent"].get("exported")
    result, modes, rows, miss_limiters, per_regime = None, [], [], None, None
    if report["incumbent"]["promoted"] and exported and Path(exported).is_file():
        solution = out / "promoted_solution.json"
        shutil.copyfile(exported, solution)
        proc = subprocess.run([sys.executable, "-m", "harness", "submit", str(solution), "--archive", str(archive),
                               "--json", *extra], capture_output=True, text=True, cwd=ROOT)
        (out / "submit.json").write_text(proc.stdout)
        result = next(iter(parse_results(proc.stdout)), None) if proc.stdout.strip() else None
        if result is not None:
            modes, rows = rows_of(result, latest_baseline_figures(Archive.open_existing(archive).db,
                                                                  report["definition"]))
            # written now and again after ncu: a profile cut by the caller's time limit keeps the table and goals
            (out / "record.md").write_text(markdown(report, result, modes, rows))
            if profile:
                _run(["controller", "profile", str(result["submission_id"]), "--archive", str(archive), "--json"],
                     out / "ncu_digest.json")
                per_regime = regime_digests(_json_or_empty(out / "ncu_digest.json"))
                # #19: every workload that misses a goal with its limiter, one profile each (a cut keeps those done)
                done = {label for _, label, _ in per_regime}
                miss_limiters, profiles = {}, []
                for label in [m for m in goal_misses(rows) if m not in done]:
                    single = out / "ncu_miss.json"
                    _run(["controller", "profile", str(result["submission_id"]), "--archive", str(archive),
                          "--json", "-w", label], single)
                    profiles += _json_or_empty(single).get("profiles", [])
                    single.unlink(missing_ok=True)
                    (out / "ncu_misses.json").write_text(json.dumps({"profiles": profiles}, indent=1))
                    miss_limiters = limiters({"profiles": profiles})
                    (out / "record.md").write_text(markdown(report, result, modes, rows, miss_limiters, per_regime))
        else:
            (out / "submit.log").write_text(proc.stderr[-4000:])
    (out / "record.md").write_text(markdown(report, result, modes, rows, miss_limiters, per_regime))
    return {"definition": report["definition"], "goals": [list(g) for g in goals(rows)] if rows else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", required=True, type=Path, help="what `controller loop --json` printed")
    parser.add_argument("--archive", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--profile", action="store_true",
                        help="also the ncu digest per regime and of every workload missing a goal of #19 (GPU time)")
    args, extra = parser.parse_known_args()
    reports = parse_results(args.loop.read_text())
    reports = [r for item in reports for r in (item if isinstance(item, list) else [item])]
    if not reports:
        print(f"error: no loop report in {args.loop}", file=sys.stderr)
        return 2
    for report in reports:
        print(json.dumps(record(report, args.archive, args.out / report["definition"], args.profile, extra)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
