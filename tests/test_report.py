"""`harness report`: the data layer over a realistic archive, the charts (matplotlib and the built-in
renderer), and the HTML folder it writes.

The archive is built here through the Archive API with the numbers an H200 run printed
(benchmarks/results/2026-11-29_h200x2_run2/gpu_check.log): latencies, speedups vs the reference and
FlashInfer, % of floor, a throttled workload, an illegal-address candidate, plus a controller-like run
(candidates over four rounds with build logs, SASS summaries, profile digests and transcripts).
``build_h200_archive`` is shared with test_diff, test_browse and test_report_browser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import harness.archive as archive_mod
from harness.archive import Archive
from harness.evaluate import WorkloadResult, definition_scores
from harness.schema import Solution, parse_model
from harness.views import m005_review_views

from support import DEFINITIONS, EXAMPLES, KV8_PS1

KV4_PS1 = "gqa_paged_decode_h32_kv4_d128_ps1"
GPU_UUID = "GPU-e16519d8-252b-8eca-8871-a14709fcdd6e"
READ_BW = 4.26e12  # B/s, what the floors of the H200 run imply
BF16_RATE = 6.9e14  # FLOP/s

# submission 1 of the log: label -> (latency ms, vs ref, vs FI official, vs FI kernel, max abs err, throttled)
H200_TRITON = {
    "uniform_b1_kv512": (0.02062, 53.3, 9.09, 0.558, 0.00195, False),
    "uniform_b1_kv2048": (0.07581, 16.2, 2.34, 0.168, 0.000488, True),
    "uniform_b1_kv8192": (0.2999, 5.17, 0.931, 0.0694, 0.000244, False),
    "uniform_b16_kv512": (0.02567, 45.6, 7.12, 0.805, 0.00195, False),
    "uniform_b16_kv2048": (0.0822, 18.1, 3.52, 0.621, 0.000977, False),
    "uniform_b16_kv8192": (0.2978, 13.1, 1.32, 0.481, 0.000488, False),
    "uniform_b64_kv512": (0.04437, 36.7, 6.17, 1.18, 0.00195, False),
    "uniform_b64_kv2048": (0.1401, 28.7, 2.61, 1.03, 0.000977, False),
    "uniform_b64_kv8192": (0.522, 27.2, 1.99, 0.988, 0.000488, False),
    "uniform_b256_kv512": (0.1507, 26.9, 3.41, 1.08, 0.00195, False),
    "uniform_b256_kv2048": (0.5582, 25.4, 2.01, 0.955, 0.00195, False),
    "uniform_b256_kv8192": (2.195, 25.0, 1.42, 0.92, 0.000488, False),
    "skewed_b64": (0.5843, 45.9, 1.03, 0.513, 0.00391, False),
    "one_long_32k_31x256": (1.169, 22.6, 0.202, 0.0593, 0.00391, False),
}
# submission 4 of the log (kv4, page size 1)
H200_KV4 = {"uniform_b64_kv2048": (0.09681, 25.4, 3.63, 0.818, 0.000977, False),
            "skewed_b64": (0.5479, 27.0, 0.828, 0.424, 0.00781, False)}

# The controller's candidates: latency = the Triton example's x factor (split-k pays off where a
# (request, kv head) grid leaves the GPU idle: small batches, skewed and one long request).
SPLIT_K = {"uniform_b1_kv512": 0.62, "uniform_b1_kv2048": 0.21, "uniform_b1_kv8192": 0.092, "uniform_b16_kv512": 0.81,
           "uniform_b16_kv2048": 0.52, "uniform_b16_kv8192": 0.45, "uniform_b64_kv512": 0.93, "uniform_b64_kv2048": 0.97,
           "uniform_b64_kv8192": 0.985, "uniform_b256_kv512": 0.96, "uniform_b256_kv2048": 0.99,
           "uniform_b256_kv8192": 0.995, "skewed_b64": 0.42, "one_long_32k_31x256": 0.105}
ROUNDS = [  # (round, candidate name, source change, per-workload factor, status override)
    (1, "ctl_r1_stages3", ("num_stages=2", "num_stages=3"), lambda l: 0.99, None),
    (2, "ctl_r2_block128", ("BLOCK_N=64", "BLOCK_N=128"), lambda l: 1.04 if "_b1_" in l else 0.96, None),
    (2, "ctl_r2_warps8_bad", ("num_warps=4", "num_warps=8, maxnreg=32"), None, "COMPILE_ERROR"),
    (3, "ctl_r3_splitk", ("BLOCK_N=64", "BLOCK_N=64, SPLIT_K=8"), lambda l: SPLIT_K[l], None),
    (4, "ctl_r4_exp2_fastmath", ("tl.exp2(s - m_new[:, None])", "tl.math.exp2(s)"), lambda l: 0.9 * SPLIT_K[l],
     "INCORRECT_NUMERICAL"),
]
SPEND = {1: 0.42, 2: 0.87, 3: 0.61, 4: 0.38}
RUN = "ctl-2026-11-29"

SASS = """SASS summary (cuobjdump -sass, sm_90a) for _gqa_decode_kernel
registers/thread: 96   spills: 0 B   shared: 34816 B
LDG.E.128        48    (16-byte global loads)
HMMA.16816.F32.BF16  64
MUFU.EX2         32
BAR.SYNC          6
"""
PROFILE = """ncu digest: uniform_b64_kv2048 (split-k 8)
dram__throughput.avg.pct_of_peak_sustained_elapsed   88.4 %
sm__warps_active.avg.pct_of_peak_sustained_active    61.2 %
smsp__average_warps_issue_stalled_lg_throttle        0.41
limiter: memory-bandwidth
"""
TRANSCRIPT = """[system] You write Triton kernels for gqa_paged_decode_h32_kv8_d128_ps1 on an H200.
[user] Round 3. Best so far: ctl_r2_block128, 9% of floor on uniform_b1_kv8192 (one program per kv head: 8 CTAs).
[assistant] The grid is (batch, kv_heads): at batch 1 only 8 CTAs run on 132 SMs. Split the KV sequence into
8 chunks (split-k) and merge the partial softmax states with their log-sum-exp in a second pass.
"""


def _solution(path: Path, name: str | None = None, change: tuple[str, str] | None = None) -> dict:
    data = json.loads(path.read_text())
    if name:
        data["name"] = name
        data["author"] = "crucible-controller"
    if change:
        src = data["sources"][0]["content"]
        assert change[0] in src, change
        data["sources"][0]["content"] = src.replace(change[0], change[1], 1)
    return data


def _labels(definition: str) -> list[tuple[str, str]]:
    labels = json.loads((DEFINITIONS / "workloads" / "gqa_paged" / "labels.json").read_text())
    lines = (DEFINITIONS / "workloads" / "gqa_paged" / f"{definition}.jsonl").read_text().splitlines()
    return [(u, labels[u]) for u in (json.loads(l)["workload"]["uuid"] for l in lines if l.strip())]


def _costs(definition: str) -> dict[str, float]:
    from harness.dataset import Dataset
    from harness.review import dataset_costs

    return {u: b for u, (b, _) in dataset_costs(Dataset(DEFINITIONS), definition).items()}


def _submit(archive: Archive, env: str, sol: dict, definition: str, results: dict[str, dict],
            options: dict | None = None, scores: dict | None = None) -> int:
    """Archive one submission the way Session._record does: evaluations with extra, samples, scores.

    A result's "audits" replaces the clean audits of a PASSED workload; ``options`` and ``scores`` are added to the
    submission's options (the static gate's findings, the audit level) and scores (promotable, its blockers)."""
    h = parse_model(Solution, sol, sol["name"]).content_hash
    archive.put_solution(sol, h)
    sub = archive.start_submission(h, sol["name"], definition, sol["author"],
                                   {"workloads": list(results), "timeout_s": 300, "gpu": True, **(options or {})}, env)
    wrs = []
    for uuid, r in results.items():
        wr = WorkloadResult(uuid, r["label"], r["status"], message=r.get("message", ""), log=r.get("log", ""))
        if r["status"] == "PASSED":
            lat = r["latency_ms"]
            wr.latency_ms = wr.kernel_latency_ms = lat
            wr.reference_latency_ms, wr.fi_official_ms, wr.fi_kernel_ms = r["ref_ms"], r["fi_official_ms"], r["fi_kernel_ms"]
            wr.speedup_factor = r["ref_ms"] / lat
            wr.speedup_vs_fi_official, wr.speedup_vs_fi_kernel = r["fi_official_ms"] / lat, r["fi_kernel_ms"] / lat
            wr.floor_ms = r["floor_ms"]
            wr.fraction_of_floor = r["floor_ms"] / lat
            wr.throttled, wr.aligned, wr.max_absolute_error = r.get("throttled", False), True, r["max_abs"]
            wr.max_relative_error, wr.matched_ratio = 0.0078, 1.0
            wr.timing_note = "GPU throttled: sw_power_cap" if wr.throttled else ""
            wr.audits = [{"name": "input_mutation", "passed": True, "detail": "inputs unchanged"},
                         {"name": "output_aliasing", "passed": True, "detail": "outputs are fresh memory"},
                         {"name": "roofline_plausibility", "passed": True,
                          "detail": f"floor {wr.floor_ms:.6g} ms (memory bound); latency {lat:.6g} ms = "
                                    f"{wr.fraction_of_floor:.1%} of roofline"}]
            wr.audits = r.get("audits", wr.audits)
            wr.timing = [{"backend": "cupti", "aligned": True, "median_ms": lat * f, "samples_ms": [lat * f] * 5}
                         for f in (0.998, 1.0, 1.002)]
        elif r["status"] == "INCORRECT_NUMERICAL":
            wr.max_absolute_error, wr.max_relative_error, wr.matched_ratio = 0.0625, 3.1, 0.93
            wr.audits = [{"name": "input_mutation", "passed": True, "detail": "inputs unchanged"},
                         {"name": "output_aliasing", "passed": False, "detail": "trial 0: output aliases q"}]
        log_blob = archive.put_blob(wr.log, "log") if wr.log else None
        extra = {"audits": wr.audits, "kernel_latency_ms": wr.kernel_latency_ms, "flashinfer_official_ms": wr.fi_official_ms,
                 "flashinfer_kernel_ms": wr.fi_kernel_ms, "speedup_vs_flashinfer_official": wr.speedup_vs_fi_official,
                 "speedup_vs_flashinfer_kernel": wr.speedup_vs_fi_kernel, "floor_ms": wr.floor_ms,
                 "fraction_of_floor": wr.fraction_of_floor, "throttled": wr.throttled, "gpu_state": {}}
        timing = [{"role": "candidate", "trial": i, "backend": t["backend"], "aligned": 1, "median_ms": t["median_ms"],
                   "samples": t["samples_ms"]} for i, t in enumerate(wr.timing)]
        archive.add_evaluation({
            "submission_id": sub, "definition": definition, "workload_uuid": uuid, "workload_label": r["label"],
            "status": wr.status, "max_absolute_error": wr.max_absolute_error, "max_relative_error": wr.max_relative_error,
            "matched_ratio": wr.matched_ratio, "latency_ms": wr.latency_ms, "reference_latency_ms": wr.reference_latency_ms,
            "speedup_factor": wr.speedup_factor, "aligned": None if wr.aligned is None else int(wr.aligned),
            "timing_note": wr.timing_note, "message": wr.message, "log_blob": log_blob, "trace": None, "extra": extra,
            "environment_id": env, "started_at": None, "finished_at": archive_mod.now()}, timing)
        wrs.append(wr)
    status = next((w.status for w in wrs if w.status != "PASSED"), "PASSED")
    archive.finish_submission(sub, status, "", {**definition_scores(wrs), **(scores or {})})
    return sub


def _passed(label: str, lat: float, base: tuple, floor_ms: float) -> dict:
    base_lat, vs_ref, vs_fio, vs_fik, max_abs, throttled = base
    return {"label": label, "status": "PASSED", "latency_ms": lat, "ref_ms": base_lat * vs_ref,
            "fi_official_ms": base_lat * vs_fio, "fi_kernel_ms": base_lat * vs_fik, "floor_ms": floor_ms,
            "max_abs": max_abs, "throttled": throttled}


def ensure_review_migration(monkeypatch) -> None:
    """What the lead wires: m005_review_views appended to the archive's migrations."""
    if m005_review_views not in archive_mod.MIGRATIONS:
        monkeypatch.setattr(archive_mod, "MIGRATIONS", [*archive_mod.MIGRATIONS, m005_review_views])


def without_review_migration(monkeypatch) -> None:
    """An archive as it was before m005_review_views (whether or not it is registered yet)."""
    monkeypatch.setattr(archive_mod, "MIGRATIONS", [m for m in archive_mod.MIGRATIONS if m is not m005_review_views])


def _round_plan(rnd: int) -> tuple[str, str]:
    return {1: ("all", "software pipelining: one more stage hides the K/V load latency"),
            2: ("large-batch", "bigger KV tiles halve the loop trips; more registers per thread"),
            3: ("small-batch", "split the KV sequence (split-k): a (request, kv head) grid leaves 124 of 132 SMs idle "
                               "at batch 1"),
            4: ("small-batch", "fast-math exp2 without the running max")}[rnd]


def build_h200_archive(folder: Path, controller: bool = True) -> dict:
    """A small archive like an H200 run leaves: returns {"archive", "ids", "rounds"}.

    ``controller``: the candidates come from a controller run recorded through controller.store (runs,
    rounds, requests, responses, candidates, decisions), with ncu profile digests (harness.profiling) and
    build logs and SASS summaries as artifacts (needs the m005 migration: ``ensure_review_migration``).
    Without it they are plain submissions, and ``rounds`` is the trajectory as a generic list.
    """
    archive = Archive(folder)
    (archive.folder / "ceilings.json").write_text(json.dumps({f"NVIDIA H200|{GPU_UUID}": {
        "gpu_name": "NVIDIA H200", "copy_bytes_per_s": 3.95e12, "read_bytes_per_s": READ_BW,
        "bf16_flops_per_s": BF16_RATE, "measured_at": "2026-11-29T23:26:41+00:00",
        "method": "CUDA events, median of 20 after 3 warm-up calls"}}, indent=2))
    env = archive.put_environment({"host": "h200-node-1", "hardware": "NVIDIA H200", "device_name": "NVIDIA H200",
                                   "uuid": GPU_UUID, "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0",
                                   "driver": "580.159.04", "cuda_available": True})
    ids: dict[str, int] = {}
    kv8 = _labels(KV8_PS1)
    costs = _costs(KV8_PS1)
    floor = {u: costs[u] / READ_BW * 1e3 for u, _ in kv8}
    triton_kv8 = EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json"

    incumbent = _solution(triton_kv8)
    ids["triton"] = _submit(archive, env, incumbent, KV8_PS1,
                            {u: _passed(l, H200_TRITON[l][0], H200_TRITON[l], floor[u]) for u, l in kv8})
    crash_log = ("[candidate] compiled _scribble for sm_90a\n"
                 "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
                 "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    ids["illegal"] = _submit(archive, env, _solution(EXAMPLES / "illegal_address" / "solution.json"), KV8_PS1,
                             {u: {"label": l, "status": "RUNTIME_ERROR", "log": crash_log,
                                  "message": "trial 0: AcceleratorError: CUDA error: an illegal memory access was "
                                             "encountered (the CUDA context is broken; the next workload gets a "
                                             "fresh process)"}
                              for u, l in kv8 if l in ("uniform_b1_kv512", "uniform_b16_kv512")})
    kv4 = [(u, l) for u, l in _labels(KV4_PS1) if l in H200_KV4]
    costs4 = _costs(KV4_PS1)
    ids["triton_kv4"] = _submit(archive, env, _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV4_PS1}.json"),
                                KV4_PS1, {u: _passed(l, H200_KV4[l][0], H200_KV4[l], costs4[u] / READ_BW * 1e3)
                                          for u, l in kv4})

    store = None
    if controller:
        from harness.generation_request import GenerationRequest, GenerationResponse, Incumbent, Proposal, Rejection
        from controller.store import Store

        store = Store(archive)
        store.create_run(RUN, KV8_PS1, "anthropic", {"model": "claude-sonnet-4-5", "max_rounds": 4})
        inc_id = store.add_incumbent(RUN, Proposal(solution=incumbent, origin={"template": "triton_gqa_decode"}))
        store.set_candidate(inc_id, "PASSED", submission_id=ids["triton"])
        known = {parse_model(Solution, incumbent, "x").content_hash: inc_id}
        inc_name, inc_mean = incumbent["name"], sum(v[0] for v in H200_TRITON.values()) / len(H200_TRITON)
        incumbent_name0 = inc_name

    rounds = []
    for rnd in sorted({r[0] for r in ROUNDS}):
        made = [r for r in ROUNDS if r[0] == rnd]
        sols = {name: _solution(triton_kv8, name, change) for _, name, change, _, _ in made}
        cand_ids: dict[str, int] = {}
        if store is not None:
            regime, hypothesis = _round_plan(rnd)
            store.start_round(RUN, rnd, "explore", {"regime": regime, "hypothesis": hypothesis})
            request = GenerationRequest(run_id=RUN, round=rnd, key=f"r{rnd}/explore", definition=KV8_PS1,
                                        regime=regime, hypothesis=hypothesis,
                                        incumbent=Incumbent(name=inc_name, solution=incumbent, status="PASSED",
                                                            mean_latency_ms=inc_mean))
            req_id = store.add_request(request)
            rejected = [Rejection(name=f"ctl_r{rnd}_cuda_graphs", reason="edits files outside kernel.py: setup.py",
                                  files=["setup.py"])] if rnd == 2 else []
            reply = TRANSCRIPT.replace("Round 3", f"Round {rnd}") + "\n".join(
                f"[proposal] {n}: {hypothesis}" for n in sols)
            store.add_response(request, req_id, GenerationResponse(
                provider="anthropic", model="claude-sonnet-4-5",
                proposals=[Proposal(solution=s, origin={"round": rnd}, notes=hypothesis) for s in sols.values()],
                rejected=rejected, raw_text=reply, tokens_in=18_400 + 900 * rnd, tokens_out=3_100 + 400 * len(sols),
                cost_usd=SPEND[rnd], wall_s=41.0 + 7 * rnd), depth=1, parent_id=inc_id, known_hashes=known)
            cand_ids = {c["solution_name"]: c["id"] for c in store.candidates(RUN, rnd) if c["status"] == "PENDING"}
        round_best: tuple = (None, "")  # (mean latency over workloads, candidate) of the round's best
        for _, name, change, factor, status in made:
            sol = sols[name]
            if status == "COMPILE_ERROR":
                log = ("triton.compiler.errors.CompilationError: at 44:8:\n"
                       "    _gqa_decode_kernel[(batch, num_kv_heads)](...)\n"
                       "ptxas error: Entry function '_gqa_decode_kernel' uses too much register data: maxnreg=32 is "
                       "below the 96 registers the kernel needs\n")
                results = {u: {"label": l, "status": "COMPILE_ERROR", "log": log,
                               "message": "build: ptxas too many resources requested for launch"} for u, l in kv8}
            else:
                results = {}
                for u, l in kv8:
                    lat = H200_TRITON[l][0] * factor(l)
                    bad = status == "INCORRECT_NUMERICAL" and l.startswith("uniform_b1_")
                    results[u] = ({"label": l, "status": "INCORRECT_NUMERICAL",
                                   "message": "trial 0: 7.0% of elements outside atol=0.01, rtol=0.01 "
                                              "(max abs err 0.0625)"} if bad
                                  else _passed(l, lat, H200_TRITON[l], floor[u]))
            sub = _submit(archive, env, sol, KV8_PS1, results)
            ids[name] = sub
            passed = [r["latency_ms"] for r in results.values() if r["status"] == "PASSED"]
            mean = sum(passed) / len(passed) if passed and status is None else None
            if mean is not None and (round_best[0] is None or mean < round_best[0]):
                round_best = (mean, name)
            if store is not None:
                from harness.views import add_artifact

                cid = cand_ids[name]
                store.set_candidate(cid, status or "PASSED", submission_id=sub)
                promote = mean is not None and mean < inc_mean * 0.98
                store.add_decision(RUN, rnd, cid, inc_id, "PROMOTED" if promote else "REJECTED",
                                   "promoted" if promote else ("every workload PASSED" if status else "mean latency"),
                                   [f"mean {mean:.4g} ms vs {inc_mean:.4g} ms" if mean else f"status {status}"], {})
                if promote:
                    inc_id, inc_name, inc_mean, incumbent = cid, name, mean, sol
                if status != "COMPILE_ERROR":
                    add_artifact(archive, sub, "build_log", f"[build] {name}: triton 3.6.0, sm_90a, 0 spills\n")
                    add_artifact(archive, sub, "sass", SASS)
                    _profile(archive, sub, sol, kv8)
        if store is not None:
            # as the loop writes it (controller/trajectory.py standing): the incumbent after the round
            latencies = {l: H200_TRITON[l][0] for _, l in kv8}
            if inc_name != incumbent_name0:
                factor = next(r[3] for r in ROUNDS if r[1] == inc_name)
                latencies = {l: H200_TRITON[l][0] * factor(l) for _, l in kv8}
            small = [v for l, v in latencies.items() if l.startswith(("uniform_b1_", "uniform_b16_"))]
            large = [v for l, v in latencies.items() if not l.startswith(("uniform_b1_", "uniform_b16_"))]
            standing = {"name": inc_name, "latency_ms": inc_mean, "speedup_vs_fi": 0.7, "fraction_of_floor": 0.5,
                        "regimes": {"small-batch": {"latency_ms": sum(small) / len(small)},
                                    "large-batch": {"latency_ms": sum(large) / len(large)}}}
            store.finish_round(RUN, rnd, {"best": round_best[1], "best_mean_latency_ms": round_best[0],
                                          "incumbent": standing}, 60.0 + rnd)
        rounds.append({"definition": KV8_PS1, "run": RUN, "round": rnd, "best_latency_ms": round_best[0],
                       "spend_usd": SPEND[rnd], "candidates": len(made), "best_solution": round_best[1],
                       "metric": "mean over 14 workloads"})
    return {"archive": archive, "ids": ids, "rounds": rounds, "env": env}


CHEAT_SCORE = 8420.0  # vs the reference: what a call-counting candidate scores when the timer only sees replays
STATIC_ERRORS = [
    {"rule": "call_counting", "severity": "error", "path": "kernel.py", "line": 41,
     "message": "a module-level counter changes what the entry point does after N calls"},
    {"rule": "global_state", "severity": "error", "path": "kernel.py", "line": 12,
     "message": "module-level mutable state: _cache = {}"},
    {"rule": "long_line", "severity": "warning", "path": "kernel.py", "line": 3, "message": "style"},
]
# An attribution detail as the harness writes it: kernel names are long unbroken strings.
LONG_DETAIL = ("fallback: 0.3% of GPU time in the candidate's kernels; elsewhere: void_at::native::vectorized_elementwise"
               "_kernel<4,at::native::FillFunctor<c10::BFloat16>,std::array<char*,1ul>> 99.7%")


def add_flagged_submissions(archive: Archive, env: str) -> dict[str, int]:
    """Two submissions the harness would never promote, on the kv8 definition, scored above every honest one:
    ``cheat_call_counting`` (8420x vs the reference, fresh-input recheck and attribution failed on 13 of 14
    workloads, two static-gate errors) and ``cheat_static_only`` (80x, every runtime audit clean, the same two
    static-gate errors). Their scores carry promotable/promotion_blockers as Session.submit writes them."""
    from harness.audits import promotion_blockers

    kv8 = _labels(KV8_PS1)
    costs = _costs(KV8_PS1)
    base = _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json")
    ids = {}
    for name, score, cheat in (("cheat_call_counting", CHEAT_SCORE, True), ("cheat_static_only", 80.0, False)):
        sol = _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json", name,
                        ("BLOCK_N=64", f"BLOCK_N=64  # {name}"))
        assert sol["sources"] != base["sources"]
        results = {}
        for i, (u, l) in enumerate(kv8):
            ref_ms = H200_TRITON[l][0] * H200_TRITON[l][1]
            r = _passed(l, ref_ms / score, H200_TRITON[l], costs[u] / READ_BW * 1e3)
            if cheat and i:  # the first call is honest; the timer's repeats are replays
                r["audits"] = [{"name": "input_mutation", "passed": True, "detail": "inputs unchanged"},
                               {"name": "fresh_input_recheck", "passed": False,
                                "detail": "2 of 3 recheck calls wrong; first on fresh inputs with NaN-poisoned outputs: "
                                          "output 0 is NaN (signs of replay, skip-if-written or call counting)"},
                               {"name": "attribution", "passed": False, "detail": LONG_DETAIL}]
            results[u] = r
        audits_by_label = {r["label"]: r.get("audits", []) for r in results.values()}
        blockers = promotion_blockers([{"label": l, "status": "PASSED", "audits": audits_by_label[l]} for _, l in kv8],
                                      STATIC_ERRORS)
        ids[name] = _submit(archive, env, sol, KV8_PS1, results,
                            options={"audit_level": "fast", "static_gate": {"passed": False, "findings": STATIC_ERRORS}},
                            scores={"promotable": False, "promotion_blockers": blockers, "audits": []})
    return ids


def _profile(archive: Archive, sub: int, sol: dict, kv8: list[tuple[str, str]]) -> None:
    from harness.profiling import KernelProfile, ProfileSummary, record_profile

    uuid = next(u for u, l in kv8 if l == "uniform_b64_kv2048")
    k = KernelProfile(id=0, name="_gqa_decode_kernel", block_size="(128, 1, 1)", grid_size="(64, 8, 1)",
                      device="0", cc="9.0", metrics={
                          "gpu__time_duration.sum": (131_420.0, "ns"),
                          "dram__throughput.avg.pct_of_peak_sustained_elapsed": (88.4, "%"),
                          "sm__warps_active.avg.pct_of_peak_sustained_active": (61.2, "%"),
                          "launch__registers_per_thread": (96.0, "register/thread"),
                          "smsp__sass_inst_executed_op_local_ld.sum": (0.0, "inst")})
    summary = ProfileSummary(backend="ncu", status="ok", workload_uuid=uuid,
                             solution_hash=parse_model(Solution, sol, "x").content_hash, tool_version="2025.3.1",
                             arch="sm_90", kernels=[k], requested_metrics=list(k.metrics))
    record_profile(archive, summary, {"limiter": "memory-bandwidth"}, submission_id=sub)


@pytest.fixture
def h200(tmp_path, monkeypatch):
    ensure_review_migration(monkeypatch)
    return build_h200_archive(tmp_path / "archive")


# -- data -----------------------------------------------------------------------------------------------------


def test_gather_ranks_solutions_per_definition(h200):
    from harness.review import gather_report

    data = gather_report(h200["archive"])
    assert [s.name for s in data.sections] == [KV8_PS1, KV4_PS1]  # the busiest definition first
    kv8 = next(s for s in data.sections if s.name == KV8_PS1)
    names = [c.solution_name for c in kv8.leaderboard]
    assert names[0] == "ctl_r3_splitk"  # the split-k candidate leads on the official score
    assert set(names[-3:]) == {"example_illegal_address", "ctl_r2_warps8_bad", "ctl_r4_exp2_fastmath"}
    assert all(c.status != "PASSED" for c in kv8.leaderboard[-3:])
    triton = next(c for c in kv8.leaderboard if c.solution_name == "triton_gqa_decode")
    # the log's scores: vs reference 27.8x; vs FlashInfer official 3.08x; kernel 0.673x
    assert triton.score("vs_reference") == pytest.approx(27.8, abs=0.05)
    assert triton.score("vs_flashinfer_official") == pytest.approx(3.08, abs=0.01)
    assert triton.score("vs_flashinfer_kernel") == pytest.approx(0.673, abs=0.002)
    b64 = next(w for w in triton.workloads if w.label == "uniform_b64_kv8192")
    assert b64.fraction_of_floor == pytest.approx(0.97, abs=0.01)  # 97% of floor in the log
    assert next(w for w in triton.workloads if w.label == "uniform_b1_kv2048").throttled is True
    assert triton.failed_audits == [] and triton.audited
    bad = next(c for c in kv8.leaderboard if c.solution_name == "ctl_r4_exp2_fastmath")
    assert bad.score("vs_reference") == 0.0
    assert {n for _, n in bad.failed_audits} == {"output_aliasing"}
    # the controller's artifacts, and the failed build's log as its build log
    best = kv8.best
    assert set(best.artifacts) == {"build_log", "sass", "profile", "transcript"}
    failed_build = next(c for c in kv8.leaderboard if c.solution_name == "ctl_r2_warps8_bad")
    assert failed_build.artifacts["build_log"].title == "build log (failed build)"
    assert set(failed_build.artifacts) == {"build_log", "transcript"}
    assert "SPLIT_K=8" in best.sources[0]["content"]
    # the controller's trajectory, from its own tables
    assert list(kv8.runs) == [RUN]
    rounds = {r.round: r for r in kv8.runs[RUN]}
    assert sorted(rounds) == [0, 1, 2, 3, 4]  # round 0: the incumbent
    assert rounds[0].best_solution == "triton_gqa_decode" and rounds[0].note == "incumbent"
    assert rounds[2].candidates == 3 and rounds[2].passed == 1  # + a compile error and a rejected proposal
    assert rounds[3].best_solution == "ctl_r3_splitk" and rounds[3].promoted == 1
    assert rounds[3].best_latency_ms < rounds[2].best_latency_ms < rounds[0].best_latency_ms
    assert rounds[4].best_latency_ms is None and rounds[4].passed == 0  # round 4 produced nothing that passed
    assert rounds[4].cumulative_spend_usd == pytest.approx(sum(SPEND.values()))
    assert rounds[3].metric == "mean over 14 workloads"
    # where the incumbent stood after each round (the loop's round summaries)
    assert [rounds[n].incumbent for n in (1, 2, 3, 4)] == ["triton_gqa_decode", "ctl_r2_block128", "ctl_r3_splitk",
                                                           "ctl_r3_splitk"]
    assert rounds[3].incumbent_latency_ms == pytest.approx(rounds[3].best_latency_ms)
    assert set(rounds[3].incumbent_regimes) == {"small-batch", "large-batch"}
    assert rounds[3].incumbent_regimes["small-batch"] < rounds[2].incumbent_regimes["small-batch"]
    assert rounds[0].incumbent == ""  # no archived summary for round 0 here: nothing invented


def test_artifacts_come_from_the_profiles_and_controller_tables(h200):
    from harness.review import gather_report

    kv8 = next(s for s in gather_report(h200["archive"]).sections if s.name == KV8_PS1)
    best = kv8.best
    profile = best.artifacts["profile"].text
    assert "uniform_b64_kv2048" in profile and "dram__throughput.avg.pct_of_peak_sustained_elapsed" in profile
    assert "88.4 %" in profile and "memory-bandwidth" in profile
    transcript = best.artifacts["transcript"].text
    assert transcript.startswith("# Candidate ctl_r3_splitk: run ctl-2026-11-29, round 3, request r3/explore")
    assert "## Request" in transcript and "split the KV sequence (split-k)" in transcript  # the rendered prompt
    assert "## Response: anthropic claude-sonnet-4-5" in transcript and "[proposal] ctl_r3_splitk" in transcript
    assert best.artifacts["sass"].blob and best.artifacts["build_log"].blob
    triton = next(c for c in kv8.leaderboard if c.solution_name == "triton_gqa_decode")
    assert triton.artifacts == {}  # the incumbent came from outside the controller: nothing recorded


def test_failed_build_log_is_the_build_log_without_artifacts(tmp_path):
    from harness.review import gather_report

    data = gather_report(build_h200_archive(tmp_path / "a", controller=False)["archive"])
    kv8 = next(s for s in data.sections if s.name == KV8_PS1)
    failed = next(c for c in kv8.leaderboard if c.solution_name == "ctl_r2_warps8_bad")
    assert list(failed.artifacts) == ["build_log"]
    assert failed.artifacts["build_log"].title == "build log (failed build)"
    assert all(not c.artifacts for c in kv8.leaderboard if c.status == "PASSED")
    assert kv8.runs == {}  # no rounds given, no controller run recorded


def test_roofline_uses_the_dataset_costs_and_the_measured_ceilings(h200):
    from harness.dataset import Dataset
    from harness.review import gather_report

    data = gather_report(h200["archive"], definition=KV8_PS1, dataset=Dataset(DEFINITIONS))
    r = data.sections[0].roofline
    assert r.memory_bytes_per_s == READ_BW and r.flops_per_s == BF16_RATE
    assert "ceilings.json" in r.ceilings_note and "dataset" in r.cost_note
    cand = {p.label: p for p in r.points if p.who == "candidate"}
    assert len(cand) == 14 and {p.who for p in r.points} == {"candidate", "FlashInfer"}
    p = cand["uniform_b64_kv8192"]
    assert p.intensity == pytest.approx(4.0, abs=0.02)  # decode attention: ~4 FLOP per byte
    assert p.bytes_per_s <= READ_BW  # nothing beats the ceiling
    assert p.bytes_per_s / READ_BW == pytest.approx(0.97 / 0.985, abs=0.02)


def test_roofline_without_a_dataset_falls_back_to_the_floor(h200):
    from harness.review import gather_report, roofline_charts

    r = gather_report(h200["archive"], definition=KV8_PS1).sections[0].roofline
    assert not r.has_flops and "implied by the floor" in r.cost_note
    keys = [c.key for c in roofline_charts(r, "x")]
    assert keys == ["bandwidth"]  # no flops: no classic roofline, but bandwidth against the ceiling
    (h200["archive"].folder / "ceilings.json").unlink()
    r = gather_report(h200["archive"], definition=KV8_PS1).sections[0].roofline
    assert r.points == [] and [c.key for c in roofline_charts(r, "x")] == ["fraction"]


def test_rounds_file_and_rounds_without_definition(tmp_path):
    from harness.review import gather_report, load_rounds_file

    h200 = build_h200_archive(tmp_path / "a", controller=False)
    path = tmp_path / "rounds.json"
    path.write_text(json.dumps({"rounds": [{k: v for k, v in r.items() if k != "definition"}
                                           for r in h200["rounds"]]}))
    rounds = load_rounds_file(path)
    one = gather_report(h200["archive"], definition=KV8_PS1, rounds=rounds)
    assert list(one.sections[0].runs) == [RUN]  # one definition: rounds go to it
    got = one.sections[0].runs[RUN]
    assert [r.round for r in got] == [1, 2, 3, 4] and got[2].best_solution == "ctl_r3_splitk"
    assert got[-1].cumulative_spend_usd == pytest.approx(sum(SPEND.values()))
    both = gather_report(h200["archive"], rounds=rounds)
    assert all(not s.runs for s in both.sections) and "without a definition" in both.notices[0]
    path.write_text('{"rounds": 3}')
    with pytest.raises(ValueError):
        load_rounds_file(path)


def test_given_rounds_replace_the_archived_run_of_the_same_name(h200):
    from harness.review import gather_report

    given = [{**r, "best_latency_ms": 1.0} for r in h200["rounds"]]
    kv8 = next(s for s in gather_report(h200["archive"], rounds=given).sections if s.name == KV8_PS1)
    assert [r.round for r in kv8.runs[RUN]] == [1, 2, 3, 4]
    assert {r.best_latency_ms for r in kv8.runs[RUN]} == {1.0}


# -- charts ----------------------------------------------------------------------------------------------------


def _charts(h200):
    from harness.dataset import Dataset
    from harness.review import gather_report, latency_chart, roofline_charts, trajectory_charts

    s = gather_report(h200["archive"], definition=KV8_PS1, dataset=Dataset(DEFINITIONS)).sections[0]
    return [latency_chart(s.best), *roofline_charts(s.roofline, s.best.solution_name),
            *trajectory_charts("ctl", s.runs[RUN])]


def test_builtin_renderer_labels_axes_and_units(h200):
    from harness.review import render_builtin

    charts = _charts(h200)
    assert [c.key for c in charts] == ["latency", "roofline", "bandwidth", "trajectory-latency-ctl",
                                       "trajectory-regimes-ctl", "trajectory-spend-ctl"]
    for c in charts:
        svg = render_builtin(c)
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        assert re.search(r"\((ms|GB/s|TFLOP/s|USD|FLOP/byte)", c.ylabel + c.xlabel), c.ylabel
        assert _text(c.xlabel) in svg and _text(c.ylabel) in svg
    lat = render_builtin(charts[0])
    assert lat.count("<rect") > 14 * 4  # four bars per workload: candidate, FI official, FI kernel, floor
    assert "uniform_b64_kv8192" in lat and "roofline floor" in lat
    roof = render_builtin(charts[1])
    assert "<polyline" in roof and roof.count("<circle") >= 28 and "GB/s" in roof and "TFLOP/s" in roof
    assert "memory ceiling" in render_builtin(charts[2])
    assert charts[5].y_from_zero  # spend never goes below $0: its axis starts there


@pytest.mark.parametrize("from_zero, first_tick", [(True, "0"), (False, "0.5")])
def test_a_chart_of_a_nonnegative_quantity_starts_its_axis_at_zero(from_zero, first_tick):
    from harness.review import Chart, Series, render_builtin

    chart = Chart("spend", "Provider spend", "round", "spend (USD)",
                  [Series("spend", [0, 1, 2], [0.5, 0.6, 0.7], style="line", color="#000")],
                  integer_x=True, y_from_zero=from_zero)
    assert re.findall(r">([0-9.]+)</text>", render_builtin(chart))[0] == first_tick


def _text(s: str) -> str:
    import html

    return html.escape(s, quote=True)


def test_matplotlib_renderer_draws_the_same_charts(h200):
    pytest.importorskip("matplotlib")
    from harness.review import render_matplotlib

    for c in _charts(h200):
        svg = render_matplotlib(c)
        assert svg.startswith("<svg") and 'class="plot"' in svg
        assert c.ylabel in svg.replace("&amp;", "&")  # svg.fonttype none keeps text as text


def test_log_axis_ticks_cover_the_data():
    from harness.review.svg import _Axis

    ax = _Axis([0.0206, 2.195], True, 400, 40)
    assert ax.lo == pytest.approx(0.01) and ax.hi == pytest.approx(10)
    labels = [l for _, l, major in ax.ticks() if major]
    assert labels == ["0.01", "0.1", "1", "10"]
    lin = _Axis([0.42, 2.28], False, 400, 40, include_zero=True)
    assert lin.lo == 0 and lin.hi >= 2.28


# -- HTML --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["builtin", "matplotlib"])
def test_write_report_folder(h200, tmp_path, backend):
    if backend == "matplotlib":
        pytest.importorskip("matplotlib")
    from harness.dataset import Dataset
    from harness.review import write_report

    out = tmp_path / "report"
    index = write_report(h200["archive"], out, backend=backend, dataset=Dataset(DEFINITIONS))
    page = index.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing fetched from the network
    assert page.count('<section class="definition"') == 2
    assert page.count('class="leaderboard"') == 2
    for key in ("latency", "roofline", "bandwidth", "trajectory-latency-ctl-2026-11-29",
                "trajectory-spend-ctl-2026-11-29"):
        assert f'data-chart="{key}"' in page, key
    assert "no controller runs" in page  # the kv4 definition has none
    assert "ctl_r3_splitk" in page and "example_illegal_address" in page
    # every local link resolves
    for href in set(re.findall(r'href="([^"#]+)', page)):
        assert (out / href).exists(), href
    best = h200["ids"]["ctl_r3_splitk"]
    cand = (out / f"candidates/sub-{best}.html").read_text()
    assert "SPLIT_K=8" in cand  # the source, inline
    for href in set(re.findall(r'href="([^"#]+)', cand)):
        assert (out / "candidates" / href).resolve().exists(), href
    assert (out / f"files/sub-{best}/sass.txt").read_text() == SASS
    assert (out / f"files/sub-{best}/transcript.txt").read_text().startswith("# Candidate ctl_r3_splitk")
    assert "dram__throughput" in (out / f"files/sub-{best}/profile.txt").read_text()
    illegal = (out / f"candidates/sub-{h200['ids']['illegal']}.html").read_text()
    assert "illegal memory access" in illegal and ">log</a>" in illegal


def test_report_command(h200, tmp_path):
    from harness.report_cli import report

    rounds = tmp_path / "rounds.json"
    rounds.write_text(json.dumps(h200["rounds"]))
    out = tmp_path / "out"
    result = CliRunner().invoke(report, ["--archive", str(h200["archive"].folder), "--out", str(out),
                                         "--definition", KV8_PS1, "--rounds", str(rounds), "--plots", "builtin"])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "1 definitions" in result.output
    page = (out / "index.html").read_text()
    assert page.count('<section class="definition"') == 1 and 'data-chart="roofline"' in page


def test_flashinfer_is_a_leaderboard_row_where_its_score_would_rank_it(h200, tmp_path):
    """FlashInfer over the leader's workloads, both timings, from the archived baseline figures."""
    from harness.review import baseline_rows, gather_report, write_report

    kv8 = next(s for s in gather_report(h200["archive"]).sections if s.name == KV8_PS1)
    rows = {b.name: b for b in kv8.baselines}
    assert set(rows) == {"FlashInfer (official)", "FlashInfer (kernel)"}
    timed = [w for w in kv8.best.workloads if w.status == "PASSED" and w.fi_kernel_ms]
    kernel = rows["FlashInfer (kernel)"]
    assert kernel.workloads == len(timed) and kernel.vs_fi_kernel == pytest.approx(1.0)
    assert kernel.vs_reference == pytest.approx(sum(w.reference_latency_ms / w.fi_kernel_ms for w in timed) / len(timed))
    assert kernel.fraction_of_floor == pytest.approx(sum(w.floor_ms / w.fi_kernel_ms for w in timed) / len(timed))
    assert rows["FlashInfer (official)"].vs_fi_official == pytest.approx(1.0)
    assert baseline_rows(None) == []
    page = write_report(h200["archive"], tmp_path / "r", backend="builtin").read_text()
    board = page[page.index('<table class="leaderboard">'):]
    board = board[:board.index("</table>")]
    assert board.count('<tr class="baseline">') == 2
    ranked = [c for c in kv8.leaderboard if c.status == "PASSED"]
    official = rows["FlashInfer (official)"].vs_reference
    above = [c.solution_name for c in ranked if c.score("vs_reference") >= official]
    position = board.index("FlashInfer (official)")
    assert all(board.index(f">{n}<") < position for n in above)
    assert all(board.index(f">{c.solution_name}<") > position for c in ranked if c.solution_name not in above)


def test_report_of_an_empty_archive_and_a_cpu_run(tmp_path):
    from harness.review import gather_report, write_report

    empty = Archive(tmp_path / "empty")
    page = write_report(empty, tmp_path / "r1", backend="builtin").read_text()
    assert "the archive holds no submissions" in page
    a = Archive(tmp_path / "cpu")
    sol = _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json")
    env = a.put_environment({"host": "ci", "hardware": "cpu (x86_64)"})
    _submit(a, env, sol, KV8_PS1, {"u1": {"label": "tiny_b2_t40", "status": "SKIPPED", "message": "skipped on CPU"}})
    data = gather_report(a)
    assert data.sections[0].roofline is None
    page = write_report(a, tmp_path / "r2", data=data, backend="builtin").read_text()
    # nothing evaluated: not promotable, so no per-workload table or plot; the reason is on its row
    assert "no promotable solution" in page and "no workload was evaluated" in page
    assert "no timed results" in page and "no controller runs" in page and 'data-chart="' not in page


def test_a_re_measurement_links_its_solutions_sass_and_logs():
    """The controller's paired timing re-submits the same code: the leaderboard row (the latest run) shows the
    SASS and build log its earlier submission recorded, and says which one."""
    from harness.review import Artifact, Candidate, WorkloadRow
    from harness.review.candidates import leaderboard

    def run(sid, artifacts, status="PASSED"):
        return Candidate(sid, "h1", "k", KV8_PS1, "controller/offline", "triton", status, "", None, "", {},
                         [WorkloadRow(sid, "u", "w", status)], artifacts=artifacts)

    first = run(1, {"sass": Artifact("sass", "SASS summary", "b1"), "build_log": Artifact("build_log", "build log", "b2")})
    paired = run(2, {"transcript": Artifact("transcript", "generation transcript", text="t")})
    cut = run(3, {}, status="INTERRUPTED")
    (row,) = leaderboard([first, paired, cut])
    assert row.submission_id == 2 and row.runs == 3  # an interrupted run never shadows a finished one
    assert row.artifacts["sass"].blob == "b1" and row.artifacts["sass"].title == "SASS summary (submission 1)"
    assert row.artifacts["transcript"].title == "generation transcript"  # its own stays as it was
    assert set(row.artifacts) == {"sass", "build_log", "transcript"}


# -- who may lead -------------------------------------------------------------------------------------------------


def _table(page: str, cls: str, start: int = 0) -> str:
    """The first <table class="cls"> at or after ``start``, as text."""
    at = page.index(f'<table class="{cls}">', start)
    return page[at:page.index("</table>", at)]


def _row(table: str, name: str) -> str:
    return next(r for r in table.split("<tr") if f">{name}</a>" in r)


def test_a_flagged_solution_never_outranks_a_promotable_one(h200, tmp_path):
    """A call-counting cheat scores 8420x with two static-gate errors and failed audits on 13 workloads, and one
    with static-gate errors alone scores 80x: both above every honest solution. Neither is ranked, neither leads,
    neither is plotted; each is listed under "Not promotable" with its reasons and its error count."""
    from harness.dataset import Dataset
    from harness.review import gather_report, write_report

    flagged = add_flagged_submissions(h200["archive"], h200["env"])
    data = gather_report(h200["archive"], dataset=Dataset(DEFINITIONS))
    kv8 = next(s for s in data.sections if s.name == KV8_PS1)
    honest = [c.solution_name for c in kv8.promotable]
    assert honest == ["ctl_r3_splitk", "ctl_r2_block128", "ctl_r1_stages3", "triton_gqa_decode"]
    assert [c.rank for c in kv8.promotable] == [1, 2, 3, 4]
    assert max(c.score("vs_reference") for c in kv8.promotable) < 80.0  # the flagged ones scored more
    assert kv8.best.solution_name == "ctl_r3_splitk"
    others = {c.solution_name: c for c in kv8.not_promotable}
    assert set(flagged) <= set(others) and all(c.rank is None for c in others.values())
    assert kv8.leaderboard == kv8.promotable + kv8.not_promotable
    cheat, static_only = others["cheat_call_counting"], others["cheat_static_only"]
    assert cheat.score("vs_reference") == pytest.approx(CHEAT_SCORE)
    assert cheat.blockers[:2] == ["static gate: 2 error findings, first call_counting at kernel.py:41",
                                  ("audit fresh_input_recheck failed on 13 of 14 workloads (uniform_b1_kv2048, "
                                   "uniform_b1_kv8192, uniform_b16_kv512, ...)")]
    assert static_only.blockers == ["static gate: 2 error findings, first call_counting at kernel.py:41"]
    assert static_only.audit_summary.text() == "2 static-gate errors"
    assert cheat.audit_summary.text() == "2 static-gate errors, 26 failed audits (attribution, fresh_input_recheck)"
    # the roofline is the leader's: nothing faster than the memory ceiling
    assert all(p.bytes_per_s <= READ_BW for p in kv8.roofline.points)

    page = write_report(h200["archive"], tmp_path / "r", data=data, backend="builtin").read_text()
    section = page[page.index(f'<section class="definition" id="{KV8_PS1}">'):]
    section = section[:section.index("</section>")]
    board = _table(section, "leaderboard")
    assert "cheat_" not in board
    assert board.count('<tr class="baseline">') == 2  # FlashInfer still ranked among the promotable
    assert re.search(r'<tr class="lead">.{0,300}>ctl_r3_splitk<', board, re.DOTALL)
    below = section.index('>Not promotable <')
    assert all(section.index(f">{n}</a>") < below for n in honest)
    rest = _table(section, "not-promotable")
    assert section.index(rest) > below
    row = _row(rest, "cheat_call_counting")
    assert "2 static-gate errors, 26 failed audits" in row and "clean" not in row
    assert "static gate: 2 error findings" in row and "audit fresh_input_recheck failed on 13 of 14" in row
    row = _row(rest, "cheat_static_only")
    assert "2 static-gate errors" in row and "clean" not in row and "static gate: 2 error findings" in row
    figures = re.findall(r'<figure class="chart" data-chart="([^"]+)">(.*?)</figure>', section, re.DOTALL)
    assert {k for k, _ in figures} >= {"latency", "roofline", "bandwidth"}
    assert all("cheat_" not in svg for _, svg in figures)
    assert "ctl_r3_splitk" in dict(figures)["bandwidth"]
    # its own page says why, and lists the static gate's findings
    own = (tmp_path / "r" / f"candidates/sub-{flagged['cheat_call_counting']}.html").read_text()
    assert "Not promotable (3 reasons above)" in own and "call_counting" in own and "global_state" in own


def test_a_partial_score_is_marked_with_the_workloads_left_out(tmp_path):
    from harness.review import gather_report, write_report

    a = Archive(tmp_path / "a")
    env = a.put_environment({"host": "h200-node-1", "hardware": "NVIDIA H200"})
    kv8 = [(u, l) for u, l in _labels(KV8_PS1) if l in ("uniform_b1_kv512", "skewed_b64", "uniform_b64_kv2048")]
    results = {u: _passed(l, H200_TRITON[l][0], H200_TRITON[l], 0.01) for u, l in kv8}
    sol = _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json")
    partial = _submit(a, env, sol, KV8_PS1, results, scores={
        "scores_partial": {"vs_flashinfer_kernel": ["skewed_b64"], "vs_reference": []}})
    other = _submit(a, env, _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json", "other",
                                      ("BLOCK_N=64", "BLOCK_N=128")), KV8_PS1, results,
                    scores={"scores_partial": "not a mapping"})  # malformed: read as absent
    data = gather_report(a)
    rows = {c.submission_id: c for c in data.sections[0].leaderboard}
    assert rows[partial].scores_partial == {"vs_flashinfer_kernel": ["skewed_b64"]}
    assert rows[other].scores_partial == {} and rows[partial].promotable and rows[other].promotable
    page = write_report(a, tmp_path / "r", data=data, backend="builtin").read_text()
    row = _row(_table(page, "leaderboard"), sol["name"])
    assert re.search(r'class="partial" title="partial: vs FlashInfer kernel leaves out 1 workload its baseline did '
                     r'not cover: skewed_b64">partial<', row)
    assert row.count('class="partial"') == 1 and 'class="partial"' not in _row(_table(page, "leaderboard"), "other")
    assert "Partial scores" in page and "vs FlashInfer kernel over 2 of 3 workloads (no baseline for skewed_b64)" in page
