"""Pack the example folders and the FlashInfer baselines (GQA decode, GDN) into solution JSON files (run after editing
their sources).

    python scripts/pack_examples.py          # rewrite the JSON files
    python scripts/pack_examples.py --check  # exit 1 if any JSON is out of date
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BASELINE_SRC = ROOT / "definitions" / "baselines_src" / "flashinfer_gqa_decode.py"
BASELINE_OUT = ROOT / "definitions" / "solutions" / "baseline" / "gqa_paged"
GDN_SRC = ROOT / "definitions" / "baselines_src"
GDN_OUT = ROOT / "definitions" / "solutions" / "baseline" / "gdn"
# (definition, output file, source, entry point, name, target hardware, description). Decode is the contest's
# own baseline kind; prefill's is Blackwell-only, so its Hopper stand-in says so in its name and description.
GDN_BASELINES = [
    ("gdn_decode_qk4_v8_d128_k_last", "flashinfer_gdn_decode_pretranspose.json", "flashinfer_gdn_decode.py",
     "run", "flashinfer_gdn_decode_pretranspose", ["H200", "B200"],
     "FlashInfer gated_delta_rule_decode_pretranspose (use_qk_l2norm=False), value-returning: the contest's "
     "baseline kind (flashinfer_wrapper_9b7f1e); SM90+, state updated in place and returned."),
    ("gdn_decode_qk4_v8_d128_k_last", "flashinfer_gdn_decode_pretranspose_preallocated.json",
     "flashinfer_gdn_decode.py", "run_preallocated", "flashinfer_gdn_decode_pretranspose_preallocated",
     ["H200", "B200"],
     "FlashInfer gated_delta_rule_decode_pretranspose (use_qk_l2norm=False) with its output allocated by "
     "torch.empty and passed in: the same kernel without the API's zero-fill of its own output, whose kernel "
     "and the host work after it would otherwise fall inside the timed span. Not the contest's wrapper, which "
     "lets the API allocate; reports take the faster of the two per workload."),
    ("gdn_prefill_qk4_v8_d128_k_last", "flashinfer_chunk_gdn_sm90_hopper_standin.json",
     "flashinfer_gdn_prefill_sm90.py", "run", "flashinfer_chunk_gdn_sm90_hopper_standin", ["H200"],
     "Hopper stand-in, NOT the contest's baseline: FlashInfer chunk_gated_delta_rule (SM90 path), gates "
     "computed in PyTorch as linear alpha and beta. The contest's baseline flashinfer_wrapper_123ca6 (a "
     "CuTe-DSL tcgen05 chunked GDN kernel) runs on Blackwell only."),
]

# (folder, output file, definition, entry point, name, author)
PS1 = ["gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps1"]
PS64 = ["gqa_paged_decode_h32_kv8_d128_ps64", "gqa_paged_decode_h32_kv4_d128_ps64"]
PLAN = (
    [("triton_gqa_decode", f"solutions/{d}.json", d, "kernel.py::run", "triton_gqa_decode", "crucible-examples")
     for d in PS1]
    + [("triton_gqa_decode", f"solutions/{d}.json", d, "kernel.py::run_paged", "triton_gqa_decode",
        "crucible-examples") for d in PS64]
    + [(bad, "solution.json", PS1[0], "kernel.py::run", f"example_{bad}", "crucible-examples")
       for bad in ("compile_error", "wrong_numerics", "hang", "illegal_address")]
)


# wrong_numerics is the honest kernel with one classic slip (the softmax scale dropped), derived here so
# that the two can never drift apart.
HONEST_KERNEL = EXAMPLES / "triton_gqa_decode" / "kernel.py"
SLIPS = {"wrong_numerics": [
    ('"""GQA paged decode in Triton: one program per (request, kv head), the whole query group together.',
     '"""Numerically wrong on purpose: the softmax scale is ignored (a classic slip); everything else is right.'),
    ("float(sm_scale) * math.log2(math.e)", "math.log2(math.e)"),
]}


def example_sources(folder: str) -> list[dict]:
    if folder in SLIPS:
        text = HONEST_KERNEL.read_text()
        for old, new in SLIPS[folder]:
            assert old in text, f"{HONEST_KERNEL} no longer contains {old!r}"
            text = text.replace(old, new)
        return [{"path": "kernel.py", "content": text}]
    return [{"path": p.name, "content": p.read_text()} for p in sorted((EXAMPLES / folder).glob("*.py"))]


def pack(folder: str, definition: str, entry: str, name: str, author: str) -> str:
    sources = example_sources(folder)
    data = {"name": name, "definition": definition, "author": author,
            "spec": {"language": "triton", "target_hardware": ["H200", "B200"], "entry_point": entry,
                     "dependencies": [], "destination_passing_style": True, "binding": None},
            "sources": sources, "description": sources[0]["content"].split('"""')[1].strip()}
    return json.dumps(data, indent=2) + "\n"


def pack_baseline(definition: str, variant: str) -> str:
    paged = definition.endswith("_ps64")
    # Solution names are unique across a trace set.
    data = {"name": f"flashinfer_decode_{variant}_{definition.removeprefix('gqa_paged_decode_')}",
            "definition": definition, "author": "baseline",
            "spec": {"language": "python", "target_hardware": ["H200", "B200"],
                     "entry_point": "flashinfer_gqa_decode.py::" + ("run_paged" if paged else "run"),
                     "dependencies": ["flashinfer"], "destination_passing_style": True, "binding": None,
                     "setup": "flashinfer_gqa_decode.py::plan_" + ("paged_" if paged else "") + variant},
            "sources": [{"path": BASELINE_SRC.name, "content": BASELINE_SRC.read_text()}],
            "description": f"FlashInfer BatchDecodeWithPagedKVCacheWrapper ({variant.replace('_', ' ')}), "
                           "planned in setup."}
    return json.dumps(data, indent=2) + "\n"


def pack_gdn_baseline(definition: str, source: str, entry: str, name: str, hardware: list[str],
                      description: str) -> str:
    data = {"name": name, "definition": definition, "author": "baseline",
            "spec": {"language": "python", "target_hardware": hardware, "entry_point": f"{source}::{entry}",
                     "dependencies": ["flashinfer"], "destination_passing_style": False, "binding": None},
            "sources": [{"path": source, "content": (GDN_SRC / source).read_text()}],
            "description": description}
    return json.dumps(data, indent=2) + "\n"


def all_outputs() -> list[tuple[Path, str]]:
    out = [(EXAMPLES / folder / name, pack(folder, definition, entry, sol_name, author))
           for folder, name, definition, entry, sol_name, author in PLAN]
    for definition in PS1 + PS64:
        for variant in ("tensor_cores", "cuda_cores"):
            out.append((BASELINE_OUT / definition / f"flashinfer_decode_{variant}.json",
                        pack_baseline(definition, variant)))
    for definition, name, source, entry, sol_name, hardware, description in GDN_BASELINES:
        out.append((GDN_OUT / definition / name,
                    pack_gdn_baseline(definition, source, entry, sol_name, hardware, description)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for path, text in all_outputs():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run scripts/pack_examples.py):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
