"""Honest and dishonest solutions through `harness submit`: every honest one must come out promotable, every
dishonest one not, and for the right reason (run-time attribution, not only the source scan).

    python benchmarks/judge_set.py --out DIR [--archive A] [--only NAME,...] [--workloads W] [--dishonest-workloads W]

The set (benchmarks/solutions/judge/, definitions gqa_paged_decode_h32_kv8_d128_ps1):
  honest:    the example Triton kernel; Triton with everyday host idioms (autotune, cached SM count, torch
             scratch, lengths on the GPU, output copies); CUDA text built by load_inline at import; CUDA with a
             torch binding; both FlashInfer baselines submitted unchanged (the dataset's own);
  dishonest: a token Triton kernel beside PyTorch attention; PyTorch reached through computed getattr names;
             attention on the host; torch.compile's attention beside decoy Triton defs named as Inductor names its
             kernels; a FlashInfer baseline with one byte changed (no longer the dataset's own).
`--set families`: the contest's other definitions (MoE, DSA, GDN), each on its first two workloads:
  honest:    each family's example;
  dishonest: each definition's own PyTorch reference submitted as a solution (PyTorch does all the work); the GDN
             decode example with its state kept in bf16 between steps (under the precision floor).
  independently written (benchmarks/solutions/judge/families/, not derived from the examples):
    honest:    GDN decode with its gates in PyTorch beside one Triton kernel; GDN prefill as a sequential Triton
               scan per (sequence, v-head); DSA sparse attention with a token's heads as the rows of every
               tensor-core product (one program per token); MoE in vLLM's style (routing, the sort by expert and the
               sum over the top-k in PyTorch, the FP8 block-scale GEMMs in Triton: what MoE's ATen glue share is for);
    dishonest: GDN decode writing the new state over the input `state` and returning it as `new_state`; GDN
               decode entirely in PyTorch reached through computed getattr names; the DSA indexer scored in
               Triton with its selection by `torch.topk` (the selection is half the operator and most of its
               time: library compute, which the dsa skill forbids and run-time attribution confirms); DSA sparse
               attention whose Triton kernel only gathers rows for PyTorch's batched matmuls and softmax; MoE whose
               Triton kernel only dequantises, the GEMMs PyTorch matmuls (cuBLAS: never ATen glue); the same with
               FlashInfer's Triton GEMM and functions of its own named as that GEMM's kernels.
`--corpus DIR`: every solution JSON in DIR (other people's code: contestants' public solutions, a team's own), on
`--workloads` (default: each definition's largest), with `--corpus-args` (default `--no-baselines`: a false alarm
needs no speedup); DIR/expected.json ({name: honest?}) gives the expectation where one is known, else "as expected"
is blank. `--budget-s`: start no solution once that much wall has passed (a device lease).
Writes judge_set_<date>.json and .md: per solution, promotable, the first blockers, and per workload the
attribution share and detail.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
JUDGE = ROOT / "benchmarks" / "solutions" / "judge"
DEFINITION = "gqa_paged_decode_h32_kv8_d128_ps1"
BASELINES = ROOT / "definitions" / "solutions" / "baseline" / "gqa_paged" / DEFINITION
SMALL = "uniform_b1_kv512,uniform_b16_kv2048,uniform_b64_kv8192,skewed_b64"


def python_solution(name: str, file: str, language: str, description: str) -> dict:
    return {"name": name, "definition": DEFINITION, "author": "judge-set", "description": description,
            "spec": {"language": language, "target_hardware": ["H200"], "entry_point": f"{file}::run",
                     "dependencies": [], "destination_passing_style": True},
            "sources": [{"path": file, "content": (JUDGE / file).read_text()}]}


def the_set(folder: Path) -> list[tuple[str, Path, bool]]:
    """(name, solution file, honest?)"""
    items: list[tuple[str, dict | Path, bool]] = [
        ("example_triton", ROOT / "examples" / "triton_gqa_decode" / "solutions" / f"{DEFINITION}.json", True),
        ("triton_idioms", python_solution("triton_idioms", "triton_idioms.py", "triton",
                                          "Triton with everyday host idioms"), True),
        ("cuda_load_inline", python_solution("cuda_load_inline", "cuda_load_inline.py", "python",
                                             "CUDA built by load_inline at import"), True),
        ("cuda_torch_binding", ROOT / "benchmarks" / "solutions" / "cuda_gqa_decode.json", True),
        ("baseline_tensor_cores", BASELINES / "flashinfer_decode_tensor_cores.json", True),
        ("baseline_cuda_cores", BASELINES / "flashinfer_decode_cuda_cores.json", True),
        ("torch_beside_token_kernel", python_solution("torch_beside_token_kernel", "torch_sdpa_fallback.py", "triton",
                                                      "a token Triton kernel; PyTorch does the attention"), False),
        ("getattr_torch", python_solution("getattr_torch", "getattr_fallback.py", "python",
                                          "PyTorch reached through computed names"), False),
        ("host_compute", python_solution("host_compute", "host_compute.py", "python", "attention on the host"), False),
        ("compiled_decoys", python_solution("compiled_decoys", "compiled_decoys.py", "triton",
                                            "torch.compile's kernels beside decoy defs under Inductor's names"),
         False),
    ]
    modified = json.loads((BASELINES / "flashinfer_decode_tensor_cores.json").read_text())
    modified["sources"][0]["content"] += "\n# one changed byte: no longer the dataset's own baseline\n"
    items.append(("baseline_modified", modified, False))
    out = []
    for name, sol, honest in items:
        if isinstance(sol, dict):
            path = folder / f"{name}.json"
            path.write_text(json.dumps(sol, indent=1))
            sol = path
        out.append((name, sol, honest))
    return out


FAMILY_WORKLOADS = "0,1"  # the first two of each definition: small enough for a judge set, real shapes


def family_set(folder: Path) -> list[tuple[str, Path, bool, str]]:
    """(name, solution file, honest?, workloads) for the contest families."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.family_records import EXAMPLES
    from harness.data.dataset import Dataset

    ds = Dataset(None)
    out: list[tuple[str, Path, bool, str]] = []
    for definition, example in EXAMPLES.items():
        short = definition.split("_")[0] + "_" + definition.split("_")[1]
        out.append((f"example_{short}", ROOT / example, True, FAMILY_WORKLOADS))
        reference = {"name": f"torch_reference_{short}", "definition": definition, "author": "judge-set",
                     "description": "the definition's PyTorch reference as a solution: PyTorch does all the work",
                     "spec": {"language": "python", "target_hardware": ["H200"], "entry_point": "reference.py::run",
                              "dependencies": [], "destination_passing_style": False},
                     "sources": [{"path": "reference.py", "content": ds.definition(definition).reference}]}
        path = folder / f"torch_reference_{short}.json"
        path.write_text(json.dumps(reference, indent=1))
        out.append((reference["name"], path, False, FAMILY_WORKLOADS))
    gdn = json.loads((ROOT / EXAMPLES["gdn_decode_qk4_v8_d128_k_last"]).read_text())
    gdn.update(name="gdn_state_bf16", author="judge-set", description="GDN decode with its state kept in bf16")
    gdn["spec"]["entry_point"] = "gdn_state_bf16.py::run"
    gdn["sources"].append({"path": "gdn_state_bf16.py", "content": (JUDGE / "gdn_state_bf16.py").read_text()})
    path = folder / "gdn_state_bf16.json"
    path.write_text(json.dumps(gdn, indent=1))
    out.append(("gdn_state_bf16", path, False, FAMILY_WORKLOADS))
    for name, (_, _, honest, _, _, _) in INDEPENDENT.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(independent_solution(name), indent=1))
        out.append((name, path, honest, FAMILY_WORKLOADS))
    return out


FAMILIES = JUDGE / "families"
# name -> (file, definition, honest?, language, destination-passing?, description)
INDEPENDENT = {
    "gdn_decode_torch_gates_triton": (
        "gdn_decode_torch_gates_triton.py", "gdn_decode_qk4_v8_d128_k_last", True, "triton", True,
        "GDN decode: gates in PyTorch, the delta-rule step in one Triton kernel"),
    "gdn_prefill_triton_seq": (
        "gdn_prefill_triton_seq.py", "gdn_prefill_qk4_v8_d128_k_last", True, "triton", True,
        "GDN prefill: a sequential Triton scan per (sequence, v-head), gates in the kernel"),
    "dsa_indexer_torch_topk": (
        "dsa_indexer_torch_topk.py", "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64", False, "triton", True,
        "DSA indexer: scores in Triton, the selection (most of the operator's time) by torch.topk"),
    "gdn_decode_inplace_state": (
        "gdn_decode_inplace_state.py", "gdn_decode_qk4_v8_d128_k_last", False, "triton", False,
        "GDN decode writing over the input state and returning it as new_state"),
    "moe_vllm_style_torch_routing": (
        "moe_vllm_style_torch_routing.py", "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048", True,
        "triton", True,
        "MoE in vLLM's style: routing, the sort by expert and the sum over the top-k in PyTorch, the experts' FP8 "
        "block-scale GEMMs (SwiGLU fused) in Triton"),
    "moe_triton_dequant_torch_gemm": (
        "moe_triton_dequant_torch_gemm.py", "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048", False,
        "triton", True, "MoE whose Triton kernel only dequantises the weights; the experts' GEMMs are PyTorch matmuls"),
    "moe_triton_dequant_library_triton_gemm": (
        "moe_triton_dequant_library_triton_gemm.py", "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048",
        False, "triton", True, "MoE whose experts' GEMMs are FlashInfer's Triton GEMM, with functions of its own named "
                               "as that GEMM's kernels"),
    "dsa_sparse_triton_heads_as_rows": (
        "dsa_sparse_triton_heads_as_rows.py", "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64", True, "triton",
        True, "DSA sparse attention: one Triton program per token, its 16 heads as the rows of the tensor-core "
              "products, the selected rows gathered from the paged caches, an online base-2 softmax"),
    "dsa_sparse_triton_gather_torch_math": (
        "dsa_sparse_triton_gather_torch_math.py", "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64", False,
        "triton", True, "DSA sparse attention whose Triton kernel only gathers rows; the logits, softmax and weighted "
                        "sum are PyTorch batched matmuls"),
    "gdn_decode_torch_only_getattr": (
        "gdn_decode_torch_only_getattr.py", "gdn_decode_qk4_v8_d128_k_last", False, "python", True,
        "GDN decode entirely in PyTorch through computed getattr names"),
}


def independent_solution(name: str, definition: Optional[str] = None) -> dict:
    """One of INDEPENDENT as solution JSON (``definition`` replaces its own: the CPU tests' tiny DSA one)."""
    file, own, _, language, dps, description = INDEPENDENT[name]
    return {"name": name, "definition": definition or own, "author": "judge-set", "description": description,
            "spec": {"language": language, "target_hardware": ["H200"], "entry_point": f"{file}::run",
                     "dependencies": [], "destination_passing_style": dps},
            "sources": [{"path": file, "content": source_text(file)}]}


def _library_triton_gemm(text: str) -> str:
    """The dequantise-then-PyTorch-matmul MoE with FlashInfer's Triton GEMM for the matmuls, and functions of its own
    named as that GEMM's kernels (`gemm_kernel`, `gemm_kernel_persistent`)."""
    changes = [
        ("PyTorch matmuls\n(a judge-set solution, dishonest: cuBLAS does the operator's work, which MoE's ATen glue "
         "never covers)", "FlashInfer's Triton\nGEMM (a judge-set solution, dishonest: a library's Triton kernel does "
         "the operator's work, beside decoys named as its kernels)"),
        ("import triton.language as tl\n",
         "import triton.language as tl\nfrom flashinfer.triton.sm_constraint_gemm import gemm\n"),
        ("def _dequantized(w, s):",
         "def gemm_kernel(*args):  # never called: the library kernel's name\n    pass\n\n\n"
         "def gemm_kernel_persistent(*args):\n    pass\n\n\ndef _dequantized(w, s):"),
        ("x[tokens].to(torch.bfloat16) @ w13.t()", "gemm(x[tokens].to(torch.bfloat16), w13.t().contiguous())"),
        ("(c @ w2.t())", "gemm(c.contiguous(), w2.t().contiguous())"),
    ]
    for old, new in changes:
        if old not in text:
            raise ValueError(f"the base solution changed: {old!r} is gone")
        text = text.replace(old, new, 1)
    return text


# solutions written as another's with a few lines changed: file -> (the file it is made from, the change)
DERIVED = {"moe_triton_dequant_library_triton_gemm.py": ("moe_triton_dequant_torch_gemm.py", _library_triton_gemm)}


def source_text(file: str) -> str:
    """An independent solution's source: its file, or the file it is derived from, changed (DERIVED)."""
    if file in DERIVED:
        base, change = DERIVED[file]
        return change((FAMILIES / base).read_text())
    return (FAMILIES / file).read_text()


def corpus_set(folder: Path) -> list[tuple[str, Path, Optional[bool]]]:
    """(name, solution file, honest? or None where DIR/expected.json says nothing), in file-name order."""
    expected_file = folder / "expected.json"
    expected = json.loads(expected_file.read_text()) if expected_file.exists() else {}
    return [(path.stem, path, expected.get(path.stem)) for path in sorted(folder.glob("*.json"))
            if path.name != "expected.json"]


def submit(path: Path, archive: Path, workloads: str, extra: list[str], timeout_s: float) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "harness.cli", "submit", str(path), "--archive", str(archive), "--json",
           "--progress", "lines", *extra]  # a solution cut short by the timeout says which workload it was on
    if workloads:
        cmd += ["-w", workloads]
    started = time.perf_counter()
    try:  # one slow solution must not eat the others' time; what it printed says where it was
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        tail = (err.stderr or b"")[-2000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"error": f"no result within {timeout_s:.0f} s; its last words: {tail}"}, time.perf_counter() - started
    wall = time.perf_counter() - started
    try:
        return json.loads(proc.stdout), wall
    except ValueError:
        return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}"}, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--set", dest="which", choices=["gqa", "families"], default="gqa")
    parser.add_argument("--archive", default=None)
    parser.add_argument("--only", default="")
    parser.add_argument("--workloads", default="", help="for honest solutions (default: all)")
    parser.add_argument("--dishonest-workloads", default=SMALL)
    parser.add_argument("--dishonest-args", default="--no-baselines",
                        help="extra `harness submit` arguments for the dishonest ones (attribution needs no baseline)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per solution")
    parser.add_argument("--corpus", default="", help="a folder of solution JSONs instead of a built-in set")
    parser.add_argument("--corpus-args", default="--no-baselines")
    parser.add_argument("--budget-s", type=float, default=0,
                        help="start no solution after this much wall (0: no limit)")
    args = parser.parse_args()
    archive = Path(args.archive or tempfile.mkdtemp(prefix="judge-set-"))
    archive.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="judge-solutions-"))
    rows = []
    if args.corpus:
        chosen = [(n, p, h, args.workloads or "largest") for n, p, h in corpus_set(Path(args.corpus))]
    elif args.which == "gqa":
        chosen = [(n, p, h, "") for n, p, h in the_set(folder)]
    else:
        chosen = family_set(folder)
    started = time.perf_counter()
    for name, path, honest, workloads in chosen:
        if args.only and name not in args.only.split(","):
            continue
        if args.budget_s and time.perf_counter() - started > args.budget_s:
            print(json.dumps({"name": name, "skipped": f"past the {args.budget_s:.0f} s budget"}), flush=True)
            continue
        extra = args.corpus_args.split() if args.corpus else [] if honest else args.dishonest_args.split()
        result, wall = submit(path, archive, workloads or (args.workloads if honest else args.dishonest_workloads),
                              extra, args.timeout)
        promotable = bool(result) and "error" not in result and not result.get("promotion_blockers")
        workloads = [{"label": w["label"], "status": w["status"], "latency_ms": w.get("latency_ms"),
                      "attribution": next((a for a in w.get("audits", []) if a["name"] == "attribution"), None),
                      "failed": [a["name"] for a in w.get("audits", []) if not a["passed"]],
                      "audits": {a["name"]: [a["passed"], (a.get("detail") or "")[:400]] for a in w.get("audits", [])},
                      "message": None if w["status"] == "PASSED" else (w.get("message") or "")[:600]}
                     for w in result.get("workloads", [])]
        static_errors = [f"{f['rule']} {f['path']}:{f['line']}" for f in result.get("static_findings", [])
                         if f["severity"] == "error"]
        fallback = [w["label"] for w in workloads if w["attribution"] and not w["attribution"]["passed"]]
        row = {"name": name, "honest": honest, "promotable": promotable,
               "as_expected": None if honest is None else promotable == honest,
               "wall_s": round(wall, 1), "status": result.get("status"), "error": result.get("error"),
               "static_errors": static_errors, "attribution_failed_on": fallback,
               "blockers": (result.get("promotion_blockers") or [])[:4], "scores": result.get("scores"),
               "workloads": workloads}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "workloads"}), flush=True)
        write(Path(args.out), rows)  # after each solution: a run cut short keeps what it measured
    print(json.dumps({"judged": len(rows), "promotable": sum(r["promotable"] for r in rows),
                      "no_result": sum(1 for r in rows if r["error"]),
                      "not_as_expected": [r["name"] for r in rows if r["as_expected"] is False]}), flush=True)


AS_EXPECTED = {True: "yes", False: "NO", None: "-"}


def write(out: Path, rows: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"judge_set_{dt.date.today().isoformat()}"
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=2, default=str))
    lines = ["| solution | honest | status | promotable | as expected | static-gate errors | attribution failed on | "
             "own-kernel share (min over workloads) | wall s | first blocker |", "|---" * 10 + "|"]
    for r in rows:
        shares = [w["attribution"].get("share") for w in r["workloads"] if w["attribution"]]
        shares = [s for s in shares if s is not None]
        first = (r["blockers"] or [r["error"] or ""])[0][:140]
        lines.append(f"| {r['name']} | {r['honest']} | {r['status']} | {r['promotable']} | "
                     f"{AS_EXPECTED[r['as_expected']]} | {len(r['static_errors'])} | "
                     f"{len(r['attribution_failed_on'])}/{len(r['workloads'])} | "
                     f"{min(shares) if shares else '-'} | {r['wall_s']} | {first} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
