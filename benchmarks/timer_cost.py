"""What the official timer costs on a callable, and where it stops if it stops.

    python benchmarks/timer_cost.py --out DIR [--cases CASE,...] [--limit-s 45]

A case is ``CALLABLE@WORKLOAD/VARIANT`` on ``gqa_paged_decode_h32_kv8_d128_ps1``:
  CALLABLE  ``reference`` (the definition's Python reference) or a file of benchmarks/solutions/judge/ (its ``run``,
            destination-passing style);
  VARIANT   ``count``: one call plain and one under CUPTI tracing with a counting consumer (records per kind and
            per API per call, wall per call); ``count_quiet``: the same with the query APIs left out as the timer
            does; ``ours``: ``harness.measure.timing.time_trial`` (10 warm-up, 50 timed calls); ``ours_big``: the same
            with
            64 MiB CUPTI buffers; ``ours_full``: with every API call traced, as the official timer traces;
            ``flashinfer``: ``flashinfer.testing.bench_gpu_time_with_cupti`` with the same counts (the official
            timer itself).
Every case runs in a fresh process under a wall limit; one that passes it has its Python stacks (faulthandler, every
thread) and, where gdb is installed, its native stacks written to DIR/stacks_<case>.txt before it is killed.
Writes timer_cost.json and timer_cost.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = ("torch_sdpa_fallback.py@skewed_b64/count,torch_sdpa_fallback.py@skewed_b64/count_quiet,"
                 "torch_sdpa_fallback.py@skewed_b64/ours,torch_sdpa_fallback.py@skewed_b64/ours_big,"
                 "reference@skewed_b64/count_quiet,reference@skewed_b64/ours,reference@uniform_b16_kv2048/ours,"
                 "reference@uniform_b16_kv2048/ours_full")

CHILD = r'''
import faulthandler, json, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
sys.path.insert(0, {root!r})
import torch
from harness.data.dataset import Dataset
from harness.data.inputs import allocate_outputs, generate_inputs
from harness.measure import cupti_trace

callable_name, workload_name, variant = {callable!r}, {workload!r}, {variant!r}
ds = Dataset()
definition = ds.definition("gqa_paged_decode_h32_kv8_d128_ps1")
[workload] = ds.workloads_for(definition.name, [workload_name])
device = torch.device("cuda")
args = list(generate_inputs(definition, workload, 1, device, ds.root).values())
if callable_name == "reference":
    ns = {{"__name__": "reference"}}
    exec(compile(definition.reference, "<reference>", "exec"), ns)
    fn = ns["run"]
else:
    import importlib.util
    spec = importlib.util.spec_from_file_location("judged", {judge!r} + "/" + callable_name)
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    fn = module.run
    args += list(allocate_outputs(definition, workload, device).values())
fn(*args); torch.cuda.synchronize()
out = {{}}

def wall(n=3):
    times = []
    for _ in range(n):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(*args); torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times)

if variant in ("count", "count_quiet"):
    out["wall_ms_plain"] = wall()
    api, _ = cupti_trace._load_cupti()
    counts, apis, consumed = {{}}, {{}}, [0.0]
    names = {{("RUNTIME", int(m)): m.name for m in api.runtime_api_trace_cbid}}
    names.update({{("DRIVER", int(m)): m.name for m in api.driver_api_trace_cbid}})
    def requested():
        return 8 << 20, 0
    def completed(records):
        t0 = time.perf_counter()
        for r in records:
            k = api.ActivityKind(int(r.kind)).name
            counts[k] = counts.get(k, 0) + 1
            if k in ("RUNTIME", "DRIVER"):
                n = names.get((k, int(r.cbid)), str(int(r.cbid)))
                apis[n] = apis.get(n, 0) + 1
        consumed[0] += time.perf_counter() - t0
    api.activity_register_callbacks(requested, completed)
    kinds = api.ActivityKind
    enabled = (kinds.RUNTIME, kinds.DRIVER, kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET)
    for k in enabled:
        api.activity_enable(k)
    if variant == "count_quiet":
        collector = cupti_trace._CuptiCollector(api)
        out["quieted"] = collector._quiet_queries()
    out["wall_ms_traced"] = wall()
    t0 = time.perf_counter(); api.activity_flush_all(0); out["flush_s"] = time.perf_counter() - t0
    for k in enabled:
        api.activity_disable(k)
    api.finalize()
    out["records_per_call"] = {{k: v / 4 for k, v in counts.items()}}  # the first traced call plus three
    out["consumer_s"] = consumed[0]
    out["apis_per_call"] = {{n: c / 4 for n, c in sorted(apis.items(), key=lambda x: -x[1])[:25]}}
elif variant in ("ours", "ours_big", "ours_full"):
    from harness.measure.timing import time_trial
    if variant == "ours_big":
        cupti_trace._CUPTI_BUFFER_BYTES = 64 << 20
    if variant == "ours_full":  # every API call traced, as the official timer does
        cupti_trace.QUIET_QUERIES = False
    t0 = time.perf_counter()
    trial = time_trial(fn, args, warmup=10, iterations=50, device=device)
    out.update(wall_s=time.perf_counter() - t0, median_ms=trial.median_ms, kernels=len(trial.kernel_names))
elif variant == "flashinfer":
    from flashinfer.testing import bench_gpu_time_with_cupti
    t0 = time.perf_counter()
    times = bench_gpu_time_with_cupti(fn, dry_run_iters=10, repeat_iters=50, input_args=tuple(args), cold_l2_cache=True)
    out.update(wall_s=time.perf_counter() - t0, median_ms=sorted(times)[len(times) // 2])
print("RESULT " + json.dumps(out), flush=True)
'''


def native_stacks(pid: int) -> str:
    if not shutil.which("gdb"):
        return "(gdb not installed)"
    proc = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 25"], capture_output=True,
                          text=True, timeout=60)
    return proc.stdout[-60000:] + proc.stderr[-4000:]


def run_case(case: str, limit_s: float, out: Path) -> dict:
    target, variant = case.rsplit("/", 1)
    callable_name, workload = target.split("@")
    code = CHILD.format(root=str(ROOT), judge=str(ROOT / "benchmarks" / "solutions" / "judge"),
                        callable=callable_name, workload=workload, variant=variant)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        native = native_stacks(proc.pid)
        proc.kill()
        stdout, stderr = proc.communicate()
        safe = case.replace("/", "_").replace("@", "_")
        (out / f"stacks_{safe}.txt").write_text(f"{case}: past {limit_s:.0f} s\n\n== python ==\n{stderr[-60000:]}\n"
                                                  f"\n== native ==\n{native}\n")
        return {"case": case, "finished": False, "elapsed_s": round(time.perf_counter() - started, 1)}
    result = next((json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")), None)
    row = {"case": case, "finished": result is not None, "elapsed_s": round(time.perf_counter() - started, 1)}
    if result is None:
        row["error"] = stderr[-2000:]
    else:
        row.update(result)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--limit-s", type=float, default=45.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in args.cases.split(","):
        row = run_case(case, args.limit_s, out)
        print(json.dumps(row), flush=True)
        rows.append(row)
    env = {"python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d"),
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
    (out / "timer_cost.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    lines = ["| case | finished | elapsed s | detail |", "|---|---|---|---|"]
    for row in rows:
        detail = {k: v for k, v in row.items() if k not in ("case", "finished", "elapsed_s")}
        lines.append(f"| {row['case']} | {row['finished']} | {row['elapsed_s']} | {json.dumps(detail)[:400]} |")
    (out / "timer_cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
