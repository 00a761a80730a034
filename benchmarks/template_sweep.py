"""The skill's kernel templates against FlashInfer on every workload: where each design stands before a search.

    python benchmarks/template_sweep.py --out DIR [--definitions gqa_decode] [--configs FILE.json[,MORE.json]]
                                        [--archive A] [-- extra harness submit args]

Each configuration ({"template": NAME, PARAM: VALUE...}; missing parameters take the template's defaults, the
definition fixes its own) is rendered by the offline generator exactly as the loop would and judged by its own
`harness submit --json`, all into one archive (FlashInfer's baselines are timed by the first and reused by the rest;
the record is rewritten after each configuration, so a sweep cut short keeps what finished). The record
per configuration and workload: status, the kernel figure (setup outside the timed call, as FlashInfer's is
measured), the faster FlashInfer mode's kernel figure, the speedup over it and the % of the roofline floor; per
configuration: the score (mean speedup), the worst workload and how many reach 1.0x. Writes
template_sweep_<date>.json and .md in DIR.

A configuration may instead be a dispatching solution, {"template": "dispatch", "variants": {REGIME: {PARAM:
VALUE...}}}: the skill's round-1 dispatch (its starting point per regime) with those regimes' kernels changed, judged
on every workload as a promotion would judge it (benchmarks/configs/run21_candidates.json; run 20's are kept in
its record). `"definitions": [NAME...]` limits a configuration to those definitions, so one sweep times each
definition's own candidates.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.dispatch import DISPATCH, dispatch_origin  # noqa: E402
from controller.providers.offline import offline_generator, slug  # noqa: E402
from controller.skills.loading import load_skills  # noqa: E402
from harness.data.dataset import Dataset  # noqa: E402
from harness.data.schema import SchemaError  # noqa: E402

# Every template of the gqa-decode skill at its defaults: the designs side by side.
DEFAULT_CONFIGS = [
    {"template": "triton-per-kv-head"},
    {"template": "triton-split-kv"},
    {"template": "triton-split-kv-fused"},
    {"template": "cuda-mma-split-kv-fused"},
]


def read_configs(files: str) -> list[dict[str, Any]]:
    """The configurations of comma-separated JSON files (each a list), one file after the other."""
    return [c for f in files.split(",") if f.strip() for c in json.loads(Path(f.strip()).read_text())]


def definitions_for(names: str, dataset: Dataset) -> list[str]:
    """Names or aliases (definitions/aliases.yaml: gqa_decode is the four GQA paged decode definitions)."""
    return [d for name in names.split(",") if name for d in dataset.resolve(name)]


def render_all(configs: list[dict[str, Any]], definition: str, folder: Path) -> list[dict[str, Any]]:
    """One solution JSON per configuration, as the offline provider renders it; returns what was rendered."""
    generator = offline_generator(load_skills(ROOT / "skills"), definition)
    rendered = []
    for i, config in enumerate(configs):
        if not meant_for(config, definition):
            continue
        origin, why = origin_of(config, generator)
        if origin is None:
            print(f"{definition}: configuration {i} skipped, {why}", file=sys.stderr)
            continue
        same = [r["solution"] for r in rendered if (r["template"], r["params"]) == (origin["template"],
                                                                                   origin["params"])]
        if same:  # the same kernel timed twice would only cost device time
            print(f"{definition}: configuration {i} is {same[0]} again here; skipped", file=sys.stderr)
            continue
        solution_name = f"sweep{i}_{slug(origin)}"
        text = generator.render(origin, definition, solution_name, "benchmarks/template_sweep", "H200")
        (folder / f"{solution_name}.json").write_text(json.dumps(text))
        rendered.append({"solution": solution_name, **origin})
    return rendered


def meant_for(config: dict[str, Any], definition: str) -> bool:
    """A configuration with `definitions` (names or the dataset's aliases) is swept on those alone: one sweep can
    then time each definition's own candidate."""
    names = config.get("definitions")
    if names is None:
        return True
    dataset = Dataset(None)
    return any(definition in dataset.resolve(name) for name in names)


def origin_of(config: dict[str, Any], generator: Any) -> tuple[Optional[dict[str, Any]], str]:
    """(the origin the loop would render, why not). A kernel: {"template": NAME, PARAM: VALUE...}. A dispatching
    solution: {"template": "dispatch", "variants": {REGIME: {["template": NAME,] PARAM: VALUE...}}}, the skill's
    starting point per regime (its round-1 dispatch) with those regimes' kernels changed as given: the whole
    definition's figure of one regime's candidate, as a promotion would judge it."""
    name = config["template"]
    if name == DISPATCH:
        regimes = (generator.dispatch or {}).get("regimes") or []
        winners = {r: point for r in regimes if (point := generator.starting_point(r))}
        for regime, change in (config.get("variants") or {}).items():
            if regime not in winners:
                return None, f"no regime {regime!r} here (regimes: {', '.join(winners) or 'none'})"
            start = winners[regime]
            if change.get("template", start["template"]) != start["template"]:  # another design: its own defaults
                start = {"template": change["template"], "params": {}}
            variant, why = origin_of({"template": start["template"], **start["params"], **change}, generator)
            if variant is None:
                return None, f"{regime}: {why}"
            winners[regime] = variant
        if len(winners) < 2:
            return None, "the skill dispatches by no regimes for this definition"
        return dispatch_origin(winners, generator.dispatch.get("default") or next(iter(winners))), ""
    if name not in generator.templates:
        return None, f"no template {name!r} for it"
    values = {k: v for k, v in config.items() if k not in ("template", "why", "definitions")}
    if bad := generator.disallowed(name, values):  # complete() would time the default instead: say so, skip
        return None, f"not allowed here: {', '.join(bad)}"
    return {"template": name, "params": generator.complete(name, values)}, ""


def parse_results(stdout: str) -> list[dict[str, Any]]:
    """`harness submit --json` prints one JSON object per solution, one after the other."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(stdout) and stdout[i].isspace():
            i += 1
        if i >= len(stdout):
            return out
        obj, i = decoder.raw_decode(stdout, i)
        out.append(obj)


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Per workload: the figures #19 asks for; per configuration: the score against the faster FlashInfer mode."""
    rows = []
    for w in result.get("workloads", []):
        mine = w.get("kernel_latency_ms") or w.get("latency_ms")
        rows.append({"label": w["label"], "status": w["status"], "kernel_us": _us(mine),
                     "flashinfer_kernel_us": _us(w.get("flashinfer_kernel_ms")),
                     "speedup": w.get("speedup_vs_flashinfer_kernel"),
                     "floor_us": _us(w.get("floor_ms")), "fraction_of_floor": w.get("fraction_of_floor"),
                     "failed_audits": [a["name"] for a in w.get("audits", []) if not a["passed"]],
                     "message": (w.get("message") or "")[:200]})
    speedups = [r["speedup"] for r in rows if r["speedup"] and r["status"] == "PASSED"]
    return {"status": result.get("status"), "promotable": result.get("promotable"),
            "blockers": (result.get("promotion_blockers") or [])[:3], "workloads": rows,
            "score": statistics.fmean(speedups) if speedups else None,
            "worst": min(speedups) if speedups else None,
            "at_least_1x": sum(s >= 1.0 for s in speedups), "timed": len(speedups)}


def _us(ms: Optional[float]) -> Optional[float]:
    return None if ms is None else ms * 1e3


def sweep(definition: str, configs: list[dict[str, Any]], archive: Path, extra: list[str],
          on_entry: Any = None) -> list[dict[str, Any]]:
    """One `harness submit` per configuration, into one archive (FlashInfer's figures are timed by the first and
    reused by the rest), so that a sweep cut short keeps what finished."""
    out = []
    with tempfile.TemporaryDirectory(prefix="template-sweep-") as tmp:
        for config in render_all(configs, definition, Path(tmp)):
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "harness.cli", "submit",
                                   str(Path(tmp) / f"{config['solution']}.json"), "--archive", str(archive),
                                   "--json", *extra], capture_output=True, text=True, cwd=ROOT)
            entry = {"definition": definition, **config, "wall_s": round(time.perf_counter() - started, 1)}
            try:
                result = next(iter(parse_results(proc.stdout)), None)
            except ValueError:
                result = None
            if result is None:
                entry["error"] = f"no result (exit {proc.returncode}): {proc.stderr.strip()[-400:]}"
            else:
                entry.update(summarise(result))
            out.append(entry)
            print(json.dumps({k: v for k, v in entry.items() if k != "workloads"}), flush=True)
            if on_entry is not None:
                on_entry(entry)
    return out


def markdown(entries: list[dict[str, Any]]) -> str:
    lines = [f"# Template sweep ({dt.date.today().isoformat()})", "",
             "Kernel figures (setup outside the timed call) on the official timer, against the faster of "
             "FlashInfer's two modes per workload (its kernel figure, `plan()` outside the timed call).", ""]
    for e in entries:
        head = f"## {e['definition']}: {e['template']} {json.dumps(e['params'], sort_keys=True)}"
        if "error" in e:
            lines += [head, "", e["error"], ""]
            continue
        score = "n/a" if e["score"] is None else f"{e['score']:.3f}x"
        worst = "n/a" if e["worst"] is None else f"{e['worst']:.3f}x"
        lines += [head, "", f"status {e['status']}, promotable {e['promotable']}; score {score}, worst {worst}, "
                            f"{e['at_least_1x']}/{e['timed']} workloads at >= 1.0x", "",
                  "| workload | status | µs | FlashInfer µs | speedup | floor µs | % of floor | failed audits |",
                  "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in e["workloads"]:
            lines.append(f"| {r['label']} | {r['status']} | {_fmt(r['kernel_us'])} | {_fmt(r['flashinfer_kernel_us'])} "
                         f"| {_fmt(r['speedup'], 'x')} | {_fmt(r['floor_us'])} | "
                         f"{_fmt(None if r['fraction_of_floor'] is None else 100 * r['fraction_of_floor'], '%')} | "
                         f"{', '.join(r['failed_audits']) or r['message'][:80]} |")
        lines.append("")
    return "\n".join(lines)


def _fmt(value: Optional[float], unit: str = "") -> str:
    return "" if value is None else f"{value:.3g}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--definitions", default="gqa_decode")
    parser.add_argument("--configs", default="", help="JSON files, each a list of configurations; several: "
                        "comma-separated, one after the other")
    parser.add_argument("--archive", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="more `harness submit` arguments (after --)")
    args = parser.parse_args()
    configs = read_configs(args.configs) or DEFAULT_CONFIGS
    archive = args.archive or Path(tempfile.mkdtemp(prefix="template-sweep-archive-"))
    archive.mkdir(parents=True, exist_ok=True)
    dataset = Dataset(None)  # the project's dataset, as `harness submit` opens it
    entries: list[dict[str, Any]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"template_sweep_{dt.date.today().isoformat()}"

    def write(entry: dict[str, Any]) -> None:  # after every configuration: a sweep cut short keeps its record
        entries.append(entry)
        stem.with_suffix(".json").write_text(json.dumps(entries, indent=2, default=str))
        stem.with_suffix(".md").write_text(markdown(entries))

    try:
        definitions = definitions_for(args.definitions, dataset)
    except SchemaError as err:
        parser.error(str(err))  # one line, exit 2
    for definition in definitions:
        sweep(definition, configs, archive, args.extra, on_entry=write)
    print(markdown(entries))


if __name__ == "__main__":
    main()
