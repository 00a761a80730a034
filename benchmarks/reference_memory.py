"""Memory of the trusted side: the definition's reference and the fp64 oracle, per workload, on any device.

    python benchmarks/reference_memory.py --out DIR [--definition D] [--workloads a,b] [--device cpu|cuda]
                                          [--reference-from GIT_REV]

Each (workload, mode) runs in a fresh process: the inputs are generated, then the reference (or the oracle:
the reference under harness.sandbox.worker's float64 import hook, small inputs widened) runs once, and the peak is
read: on CUDA ``max_memory_reserved``, on CPU the peak resident set (ru_maxrss) above what the process held
with its inputs. ``--reference-from REV`` takes the definition's reference from that git revision instead
(to compare a change). The goal the harness holds evaluations to: 3x the workload's input+output bytes
plus 2 GiB for all processes together (harness.measure.memory).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30

CHILD = r'''
import json, resource, sys
import torch
sys.path.insert(0, {root!r})
from harness.data.dataset import Dataset
from harness.data.inputs import generate_inputs
from harness.measure.memory import io_bytes
from harness.sandbox import worker as W

ds = Dataset()
definition = ds.definition({definition!r})
if {reference!r}:
    definition = definition.model_copy(update={{"reference": {reference!r}}})
[workload] = ds.workloads_for(definition.name, [{workload!r}])
device = torch.device({device!r})
inputs = generate_inputs(definition, workload, 1, device, ds.root)
if device.type == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
else:
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if {mode!r} == "oracle":
    wide = {{k: v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point()
             and v.numel() * 8 <= W._ORACLE_WIDEN_BYTES else v for k, v in inputs.items()}}
    ns = {{"__name__": "oracle", "__builtins__": {{**__builtins__.__dict__, "__import__": W._float64_import}}}}
else:
    wide, ns = inputs, {{"__name__": "reference"}}
exec(compile(definition.reference, "<reference>", "exec"), ns)
with torch.no_grad():
    out = ns["run"](*wide.values())
if device.type == "cuda":
    torch.cuda.synchronize(); peak = torch.cuda.max_memory_reserved()
else:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"io_bytes": io_bytes(definition, workload), "inputs_held": base, "peak": peak,
                  "above_inputs": peak - base}}))
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--definition", default="gqa_paged_decode_h32_kv8_d128_ps1")
    parser.add_argument("--workloads", default="skewed_b64,one_long_32k_31x256,uniform_b64_kv2048,uniform_b64_kv8192")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reference-from", default="")
    args = parser.parse_args()
    reference = ""
    if args.reference_from:
        path = f"definitions/definitions/gqa_paged/{args.definition}.json"
        reference = json.loads(subprocess.run(["git", "show", f"{args.reference_from}:{path}"], capture_output=True,
                                              text=True, cwd=ROOT, check=True).stdout)["reference"]
    rows = []
    for workload in args.workloads.split(","):
        for mode in ("reference", "oracle"):
            code = CHILD.format(root=str(ROOT), definition=args.definition, workload=workload, device=args.device,
                                mode=mode, reference=reference)
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
            if proc.returncode:
                rows.append({"workload": workload, "mode": mode, "error": proc.stderr[-800:]})
            else:
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                budget = 3 * r["io_bytes"] + 2 * GIB
                rows.append({"workload": workload, "mode": mode, **r, "budget": budget,
                             "peak_within_budget": r["inputs_held"] + r["above_inputs"] <= budget})
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "from_" + args.reference_from if args.reference_from else "current"
    stem = out / f"reference_memory_{args.device}_{tag}_{dt.date.today().isoformat()}"
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=2))
    lines = ["| workload | mode | in+out GiB | above inputs GiB | budget GiB | within |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['mode']} | error | | | |")
            continue
        lines.append(f"| {r['workload']} | {r['mode']} | {r['io_bytes'] / GIB:.2f} | {r['above_inputs'] / GIB:.2f} | "
                     f"{r['budget'] / GIB:.1f} | {r['peak_within_budget']} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
