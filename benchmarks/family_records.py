"""The record the contest families ask for: each example on every workload of its definition, official timing,
the baseline and its figures (or the reference where no library baseline runs), % of the roofline floor, peak GPU
memory, attribution, and the promotion verdict.

    python benchmarks/family_records.py --out DIR [--definitions moe,dsa,gdn] [--archive A] [--budget-s 540]
                                        [--per-definition-s 240] [-- extra harness submit args]

Each example is submitted with `harness submit ... --json` into one archive, on the workloads the archive has no
evaluation of yet, so a second call on the same host (or with the archive carried to the next one) continues where
a cut-short one stopped. A submission cut by its time limit keeps its finished workloads in the archive; the record
is built from every archived evaluation of the example (the newest per workload), read with `harness show --json`.
Writes family_records_<date>.json and .md; `--from-archive` only rebuilds them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {  # definition -> example solution
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048":
        "examples/moe_fp8/solutions/moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048.json",
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64":
        "examples/dsa_sparse/solutions/dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64.json",
    "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64":
        "examples/dsa_sparse/solutions/dsa_topk_indexer_fp8_h64_d128_topk2048_ps64.json",
    "gdn_decode_qk4_v8_d128_k_last": "examples/gdn/solutions/gdn_decode_qk4_v8_d128_k_last.json",
    "gdn_prefill_qk4_v8_d128_k_last": "examples/gdn/solutions/gdn_prefill_qk4_v8_d128_k_last.json",
}
GIB = 1 << 30
READ_BACK_S = 20


def _audit(audits: list[dict[str, Any]], name: str) -> Optional[dict[str, Any]]:
    return next((a for a in audits if a.get("name") == name), None)


def workload_row(w: dict[str, Any]) -> dict[str, Any]:
    """One workload's line of the record, from a submission JSON's workload or an archived evaluation (whose
    figures sit in ``extra``): the names differ between the two, the record does not."""
    x = {**(w.get("extra") or {}), **w}
    audits = x.get("audits") or []
    attribution = _audit(audits, "attribution")
    memory = x.get("memory") or {}
    fi = [v for v in (x.get("flashinfer_official_ms"), x.get("flashinfer_kernel_ms")) if v]
    return {
        "workload": x.get("label") or x.get("workload_label"),
        "status": x.get("status"),
        "latency_ms": x.get("latency_ms"),
        "baseline_ms": min(fi) if fi else None,
        # GPU time per call (CUPTI activity durations) beside the span: far apart, the span is host work
        "busy_ms": x.get("gpu_busy_ms"),
        "baseline_busy_ms": x.get("flashinfer_busy_ms"),
        "speedup_vs_baseline": x.get("speedup_vs_flashinfer_kernel"),
        "reference_ms": x.get("reference_latency_ms"),
        "speedup_vs_reference": x.get("speedup_vs_reference") or x.get("speedup_factor"),
        "fraction_of_floor": x.get("fraction_of_floor"),
        "together_gib": round(memory["together_bytes"] / GIB, 2) if memory.get("together_bytes") else None,
        "within_memory_budget": memory.get("within_budget"),
        "own_share": attribution.get("share") if attribution else None,
        "failed_audits": sorted(a["name"] for a in audits if not a.get("passed", True)),
        "baseline_failures": x.get("baseline_failures") or [],
    }


def harness_seconds(submissions: Any) -> Optional[float]:
    """The submissions' own wall time (created to their last finished evaluation, as archived), summed: what the
    record cost on the GPU host, also when it is rebuilt elsewhere with --from-archive. A cut submission is
    closed later by the next harness on its archive, so its own finish time would overstate it."""
    total = 0.0
    for s in submissions:
        ends = [e["finished_at"] for e in s.get("evaluations") or [] if e.get("finished_at")]
        if not (s.get("created_at") and ends):
            return None
        last = max(map(dt.datetime.fromisoformat, ends))
        total += (last - dt.datetime.fromisoformat(s["created_at"])).total_seconds()
    return round(total, 1)


def workloads_clean(rows: list[dict[str, Any]], total_workloads: int) -> bool:
    """Every workload of the definition evaluated, PASSED, with no failed audit and (where attribution ran) at
    least 95% of GPU time in the example's own kernels: what promotion asks of each workload, read across
    submissions (a record continued after a time limit joins two; the harness judges each on its own)."""
    return len(rows) == total_workloads and all(
        r["status"] == "PASSED" and not r["failed_audits"] and (r["own_share"] is None or r["own_share"] >= 0.95)
        for r in rows)


def definition_record(definition: str, submissions: list[dict[str, Any]], total_workloads: int,
                      wall_s: float) -> dict:
    """A definition's record from its archived submissions (``harness show --json``, oldest first): the newest
    evaluation of each workload, and the verdicts of the submissions they came from."""
    newest: dict[str, dict[str, Any]] = {}
    used: dict[int, dict[str, Any]] = {}
    for sub in submissions:
        for e in sub.get("evaluations") or []:
            newest[e["workload_uuid"]] = {**e, "_submission": sub["id"]}
    for e in newest.values():
        used[e["_submission"]] = next(s for s in submissions if s["id"] == e["_submission"])
    rows = [workload_row(e) for e in newest.values()]
    verdicts = [(s.get("scores") or {}).get("promotable") for s in used.values()]
    return {"definition": definition, "submissions": sorted(used),
            "statuses": sorted({s.get("status") for s in used.values()}),
            # the harness's verdict per submission: one cut by a time limit is never promotable as a whole
            "promotable": all(v is True for v in verdicts) if verdicts else None,
            # across the submissions the record joins: every workload PASSED, no audit failed, own compute
            "clean": workloads_clean(rows, total_workloads),
            "workloads": total_workloads, "finished": len(rows),
            "passed": sum(r["status"] == "PASSED" for r in rows), "timed": sum(bool(r["latency_ms"]) for r in rows),
            "notices": sorted({n for s in used.values() for n in (s.get("message") or "").split("; ") if n}),
            "wall_s": round(wall_s, 1), "harness_s": harness_seconds(used.values()), "rows": rows}


def _fmt(v: Optional[float], spec: str, scale: float = 1.0, suffix: str = "") -> str:
    return "-" if v is None else f"{v * scale:{spec}}{suffix}"


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Contest families on {report['gpu']} ({report['date']})", "",
             "Each example through `harness submit` on every workload of its definition (official timing; "
             "baselines where one runs on this GPU, else the timed reference).", "",
             "`promotable` is the harness's verdict on every submission the record joins (one cut by a time limit is "
             "not promotable as a whole); `clean`: every workload PASSED, no audit failed, own compute >= 95%.", "",
             "| definition | finished | PASSED | promotable | clean | submissions | harness s | notices |",
             "|---|---|---|---|---|---|---|---|"]
    for d in report["definitions"]:
        lines.append(f"| {d['definition']} | {d['finished']}/{d['workloads']} | {d['passed']} | {d['promotable']} | "
                     f"{d.get('clean')} | "
                     f"{', '.join(map(str, d['submissions']))} ({', '.join(map(str, d['statuses']))}) | "
                     f"{d.get('harness_s')} | {'; '.join(n[:120] for n in d['notices']) or '-'} |")
    for d in report["definitions"]:
        lines += ["", f"## {d['definition']}", "",
                  "| workload | status | latency ms | GPU busy ms | baseline ms | baseline busy ms | vs baseline | "
                  "reference ms | vs reference | % of floor | GiB together | own share | failed audits |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in d["rows"]:
            lines.append(
                f"| {r['workload']} | {r['status']} | {_fmt(r['latency_ms'], '.4g')} | "
                f"{_fmt(r.get('busy_ms'), '.4g')} | {_fmt(r['baseline_ms'], '.4g')} | "
                f"{_fmt(r.get('baseline_busy_ms'), '.4g')} | "
                f"{_fmt(r['speedup_vs_baseline'], '.2f', suffix='x')} | {_fmt(r['reference_ms'], '.4g')} | "
                f"{_fmt(r['speedup_vs_reference'], '.1f', suffix='x')} | {_fmt(r['fraction_of_floor'], '.1f', 100)} | "
                f"{_fmt(r['together_gib'], '.2f')} | {_fmt(r['own_share'], '.0%')} | "
                f"{', '.join(r['failed_audits']) or '-'} |")
    return "\n".join(lines) + "\n"


def _harness(*args: str, timeout: float) -> tuple[int, str, str]:
    try:
        p = subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True,
                           timeout=max(timeout, 1))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:  # what it finished is in the archive; its output is not needed
        return 124, "", ""


def archived_submissions(archive: Path, definition: str) -> list[dict[str, Any]]:
    """Every archived submission of ``definition`` (oldest first), whole (``harness show --json``)."""
    rc, out, _ = _harness("list", "--archive", str(archive), "--definition", definition, "--limit", "1000",
                          "--json", timeout=60)
    if rc != 0:
        return []
    ids = sorted(row["id"] for row in json.loads(out or "[]"))  # `harness list --json`: one array
    shown = []
    for i in ids:
        rc, out, _ = _harness("show", str(i), "--archive", str(archive), "--json", timeout=60)
        if rc == 0 and out.strip():
            shown.append(json.loads(out))
    return shown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--definitions", default="moe,dsa,gdn", help="names or aliases, comma-separated")
    parser.add_argument("--archive", type=Path, default=Path("/tmp/crucible-family-records"))
    parser.add_argument("--budget-s", type=float, default=540, help="for all definitions together")
    parser.add_argument("--per-definition-s", type=float, default=300)
    parser.add_argument("--from-archive", action="store_true", help="rebuild the record from the archive only")
    parser.add_argument("extra", nargs="*", help="more `harness submit` arguments (after --)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from harness.data.dataset import Dataset

    ds = Dataset(None)
    wanted = [name for item in args.definitions.split(",") if item for name in ds.resolve(item)]
    args.archive.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + args.budget_s
    definitions, gpu = [], "CPU"
    for name in wanted:
        if name not in EXAMPLES:
            print(f"{name}: no example solution here, left out", file=sys.stderr)
            continue
        started = time.monotonic()
        done = {e["workload_uuid"] for sub in archived_submissions(args.archive, name)
                for e in sub.get("evaluations") or []}
        remaining = [w.uuid for w in ds.workloads_for(name) if w.uuid not in done]
        # the record is read back from the archive afterwards (`harness show` per submission, a few seconds each)
        left = min(args.per_definition_s, end - time.monotonic() - READ_BACK_S)
        if not args.from_archive and remaining and left > 5:
            rc, _, err = _harness("submit", EXAMPLES[name], "--archive", str(args.archive), "--json",
                                  "-w", ",".join(remaining), *args.extra, timeout=left)
            if rc not in (0, 124):
                print(f"{name}: harness submit exited {rc}: {err.strip().splitlines()[-1:] or ''}", file=sys.stderr)
        submissions = archived_submissions(args.archive, name)
        if not submissions:
            continue
        gpu = (submissions[-1].get("environment") or {}).get("device_name") or gpu
        definitions.append(definition_record(name, submissions, len(ds.workloads_for(name)),
                                             time.monotonic() - started))
        print(f"{name}: {definitions[-1]['finished']}/{definitions[-1]['workloads']} workloads, "
              f"{definitions[-1]['passed']} PASSED", flush=True)
        write_report(args.out, gpu, definitions)  # after each definition: a caller's hard limit loses only the rest
    write_report(args.out, gpu, definitions)
    return 0


def write_report(out: Path, gpu: str, definitions: list[dict[str, Any]]) -> None:
    report = {"date": dt.date.today().isoformat(), "gpu": gpu, "definitions": definitions}
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"family_records_{report['date']}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(report))


if __name__ == "__main__":
    raise SystemExit(main())
