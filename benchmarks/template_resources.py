"""Registers, spills, shared memory and occupancy of the gqa-decode skill's Triton kernels on an H200, without one.

    python benchmarks/template_resources.py --out DIR [--definitions gqa_decode] [--configs FILE.json] [--arch 90]
                                            [--batches 64x2048,64x8192] [--workloads all|LABEL,...] [--sms 132]

Each configuration ({"template": NAME, PARAM: VALUE...}, as `template_sweep.py` takes them; default: every Triton
template at its defaults and the skill's starting points) is rendered as the loop renders it, its `plan`/`run` is
called on a small batch of host tensors with every kernel replaced by a recorder
(`harness.profiling.static_resources`), and each recorded launch is compiled for `sm_<arch>` here, as the GPU's
JIT would compile it. The figures are what ncu calls `launch__registers_per_thread`, the spill traffic's stack,
`launch__shared_mem_per_block` and the theoretical occupancy with its limiter: the register-occupancy limiter of
the skill can be read before any GPU time is spent. With --batches (BATCHxTOKENS, uniform requests) or --workloads
(the definition's own, by label, their request lengths read from the page tables), a template with a planned split
(`_plan`) also plans each batch as it would on a GPU of --sms SMs holding the compiled kernel's blocks per SM: the
chunk size, programs and waves a timing will run (read, not reasoned: run 18's record reasoned them and was wrong).
Writes template_resources_<date>.json and .md in DIR.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.util
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.providers.offline import offline_generator, slug  # noqa: E402
from controller.skills import machine_blocks  # noqa: E402
from controller.skills.loading import load_skills  # noqa: E402
from harness.data.dataset import Dataset  # noqa: E402
from harness.profiling.static_resources import compile_launch, record_launches  # noqa: E402
from template_sweep import read_configs  # noqa: E402  (benchmarks/, beside this file)


def default_configs(generator: Any) -> list[dict[str, Any]]:
    """Every Triton template at its defaults, then the skill's starting points."""
    configs = [{"template": name} for name, t in generator.templates.items() if t.language == "triton"]
    for regime, point in sorted(generator.starting_points.items()):
        configs.append({**point, "why": f"starting point: {regime}"})
    return configs


def small_batch(data: dict[str, Any]):
    """Two requests (40 and 3 tokens) on host tensors with the definition's heads, head size and page size."""
    import torch

    heads, kv_heads, dim, page = data["num_qo_heads"], data["num_kv_heads"], data["head_dim"], data["page_size"]
    lengths = [40, 3]
    pages = [-(-n // page) for n in lengths]
    indptr = torch.tensor([0, pages[0], sum(pages)], dtype=torch.int32)
    indices = torch.arange(sum(pages), dtype=torch.int32)
    cache = torch.zeros(sum(pages) + 1, page, kv_heads, dim, dtype=torch.bfloat16)
    q = torch.zeros(len(lengths), heads, dim, dtype=torch.bfloat16)
    last = torch.tensor([n - (p - 1) * page for n, p in zip(lengths, pages)], dtype=torch.int32)
    inputs = [q, cache, cache, indptr, indices] + ([last] if page > 1 else []) + [0.088]
    outputs = [torch.zeros(len(lengths), heads, dim, dtype=torch.bfloat16), torch.zeros(len(lengths), heads)]
    return inputs, outputs


def _load(source: str, folder: str) -> Any:
    path = Path(folder) / "kernel.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("template_resources_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Batch = tuple[str, list[int]]  # (name, tokens of each request)


def uniform(batch: int, tokens: int) -> Batch:
    return f"{batch}x{tokens}", [tokens] * batch


def workload_batches(definition: str, labels: str) -> list[Batch]:
    """The definition's workloads named in ``labels`` ("all", or labels comma-separated), each with its requests'
    lengths as the page tables give them (the operator family reads them; a workload without them is left out)."""
    from harness.families import family_for

    dataset = Dataset()
    d = dataset.definition(definition)
    family = family_for(d.op_type)
    wanted = None if labels == "all" else {x.strip() for x in labels.split(",") if x.strip()}
    out = []
    for w in dataset.workloads[definition]:
        label = dataset.label(w)
        if wanted is None or label in wanted:
            lengths = family.request_lengths(d, w, dataset.root)
            if lengths is not None:
                out.append((label, lengths))
    return out


def plans_of(source: str, data: dict[str, Any], blocks_per_sm: int, batches: list[Batch],
             sms: int) -> list[dict[str, Any]]:
    """Each batch (name, request lengths) as the rendered module's `_plan` cuts it on ``sms`` SMs holding
    ``blocks_per_sm`` of the kernel (what `WAVE_SLOTS_PER_SM` -1 reads from the compiled kernel on the GPU); host
    tensors of the shapes only (the caches are one page, expanded: no memory). [] for a template without a plan."""
    import torch

    with tempfile.TemporaryDirectory(prefix="template-plans-") as folder:
        module = _load(source, folder)
        if not hasattr(module, "_plan"):
            return []
        module._sm_count = lambda device: sms
        module._compiled_occupancy = lambda call, device: (blocks_per_sm, "compiled for the host's --arch")
        heads, kv_heads, dim, page = data["num_qo_heads"], data["num_kv_heads"], data["head_dim"], data["page_size"]
        out = []
        for name, lengths in batches:
            pages = [-(-n // page) for n in lengths]
            q = torch.zeros(len(lengths), heads, dim, dtype=torch.bfloat16)
            cache = torch.zeros(1, page, kv_heads, dim, dtype=torch.bfloat16).expand(max(sum(pages), 1), -1, -1, -1)
            indptr = torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32)
            indices = torch.zeros(sum(pages), dtype=torch.int32)
            last = [torch.tensor([n - (c - 1) * page if c else 0 for n, c in zip(lengths, pages)],
                                 dtype=torch.int32)] if page > 1 else []
            state = module._plan(q, cache, cache, indptr, indices, *(last or [None]), 0.088)
            programs = state["works"] * kv_heads
            out.append({"batch": name, "chunk_tokens": state["chunk_tokens"], "programs": programs,
                        "waves": round(programs / (blocks_per_sm * sms), 2),
                        "slots_per_sm": state.get("wave_slots", {}).get("per_sm")})
        return out


def resources_of(source: str, setup: bool, data: dict[str, Any], arch: int) -> list[dict[str, Any]]:
    """Each kernel launch of one rendered kernel module, compiled for ``arch``."""
    with tempfile.TemporaryDirectory(prefix="template-resources-") as folder:
        module = _load(source, folder)
        inputs, outputs = small_batch(data)

        def call() -> None:
            state = module.plan(*inputs) if setup else None
            module.run(*inputs, *outputs, *([state] if setup else []))

        launches = record_launches(module, call)
        return [dataclasses.asdict(compile_launch(launch, arch)) for launch in launches]


def measure(definition: str, configs: list[dict[str, Any]], arch: int, batches: Optional[list[Batch]] = None,
            sms: int = 132, workloads: str = "") -> list[dict[str, Any]]:
    generator = offline_generator(load_skills(ROOT / "skills"), definition)
    batches = [*(batches or []), *(workload_batches(definition, workloads) if workloads else [])]
    (block,) = [b for b in machine_blocks(generator.skill) if "templates" in b]
    data = block["definitions"][definition]
    out = []
    for config in configs or default_configs(generator):
        name = config["template"]
        template = generator.templates.get(name)
        if template is None or template.language != "triton":
            continue
        values = {k: v for k, v in config.items() if k not in ("template", "why")}
        if bad := generator.disallowed(name, values):  # complete() would measure the default instead: say so, skip
            print(f"{definition}: skipped, not allowed here: {', '.join(bad)}", file=sys.stderr)
            continue
        params = generator.complete(name, values)
        origin = {"template": name, "params": params}
        solution = generator.render(origin, definition, slug(origin), "benchmarks/template_resources", "H200")
        entry = {"definition": definition, "template": name, "params": params, "why": config.get("why", "")}
        try:
            entry["kernels"] = resources_of(solution["sources"][0]["content"], bool(template.setup), data, arch)
            if batches and entry["kernels"]:
                entry["plans"] = plans_of(solution["sources"][0]["content"], data,
                                          entry["kernels"][0]["occupancy"]["blocks_per_sm"], batches, sms)
        except Exception as err:  # a configuration that does not compile is a finding, not the end of the run
            entry["error"] = f"{type(err).__name__}: {str(err)[:400]}"
        out.append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k != "kernels"} | {
            "registers": [k["registers"] for k in entry.get("kernels", [])]}), flush=True)
    return out


def markdown(entries: list[dict[str, Any]], arch: int) -> str:
    lines = [f"# Static resources of the gqa-decode Triton kernels for sm_{arch} ({dt.date.today().isoformat()})", "",
             "Compiled on the host by Triton's NVIDIA backend (`benchmarks/template_resources.py`); occupancy from the "
             "SM's limits (65,536 registers, 64 warps, 228 KB shared memory, 32 blocks).", "",
             "| definition | template | parameters | kernel | registers | spill stack B | shared KB | blocks/SM | "
             "limiter | occupancy % | shared buffers (stages x tile) |",
             "|---|---|---|---|---:|---:|---:|---:|---|---:|---|"]
    for e in entries:
        params = " ".join(f"{k}={v}" for k, v in e["params"].items())
        if "error" in e:
            lines.append(f"| {e['definition']} | {e['template']} | {params} | - | error: {e['error'][:80]} ||||||")
            continue
        for k in e["kernels"]:
            occ = k["occupancy"]
            lines.append(f"| {e['definition']} | {e['template']} | {params} | `{k['kernel']}` | {k['registers']} | "
                         f"{k['spill_stack_bytes']} | {k['shared_bytes'] / 1024:.1f} | {occ['blocks_per_sm']} | "
                         f"{occ['limiter']} | {occ['theoretical_pct']} | {', '.join(k.get('shared_buffers', []))} |")
    plans = [(e, p) for e in entries for p in e.get("plans", [])]
    if plans:
        lines += ["", "Plans (`--batches`, `--workloads`) at the compiled kernel's blocks per SM:", "",
                  "| definition | parameters | batch | slots/SM | chunk tokens | programs | waves |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for e, p in plans:
            params = " ".join(f"{k}={v}" for k, v in e["params"].items())
            lines.append(f"| {e['definition']} | {params} | {p['batch']} | {p['slots_per_sm'] or '-'} | "
                         f"{p['chunk_tokens']} | {p['programs']} | {p['waves']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--definitions", default="gqa_decode")
    parser.add_argument("--configs", default="", help="JSON files, each a list of configurations; several: "
                        "comma-separated, one after the other")
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--batches", default="", help="BATCHxTOKENS,... to plan (fused split-KV templates)")
    parser.add_argument("--workloads", default="", help="the definitions' workloads to plan: all, or labels")
    parser.add_argument("--sms", type=int, default=132, help="SMs of the GPU the plans are for (H200: 132)")
    args = parser.parse_args()
    try:
        sizes = [tuple(int(x) for x in b.split("x")) for b in args.batches.split(",") if b]
    except ValueError:
        sizes = [()]
    if not all(len(b) == 2 and min(b) > 0 for b in sizes):
        parser.error(f"--batches: BATCHxTOKENS,... with positive integers, got {args.batches!r}")
    batches = [uniform(*b) for b in sizes]
    configs = read_configs(args.configs)
    dataset = Dataset()
    definitions = [d for name in args.definitions.split(",") if name for d in dataset.resolve(name)]
    entries = [e for d in definitions for e in measure(d, configs, args.arch, batches, args.sms, args.workloads)]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"template_resources_{dt.date.today().isoformat()}"
    stem.with_suffix(".json").write_text(json.dumps(entries, indent=1))
    stem.with_suffix(".md").write_text(markdown(entries, args.arch))
    print(f"wrote {stem}.json and .md")


if __name__ == "__main__":
    main()
