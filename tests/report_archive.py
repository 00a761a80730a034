"""The realistic archive behind the `harness report` tests, built through the Archive API with the numbers an H200
run printed (benchmarks/results/2026-11-29_h200x2_run2/gpu_check.log): latencies, speedups vs the reference and
FlashInfer, % of floor, a throttled workload, an illegal-address candidate, plus a controller-like run (candidates
over four rounds with build logs, SASS summaries, profile digests and transcripts).

``build_h200_archive`` is shared by test_report, test_report_html, test_diff, test_browse and test_report_browser.
"""
# ruff: noqa: E501

from __future__ import annotations

import json
from pathlib import Path


import harness.archive.database as archive_mod
from harness.archive.database import Archive
from harness.pipeline.evaluate import WorkloadResult, definition_scores
from harness.data.schema import Solution, parse_model
from harness.archive.views import m005_review_views

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
    from harness.data.dataset import Dataset
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
        from harness.data.generation_request import GenerationRequest, GenerationResponse, Incumbent, Proposal, Rejection
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
                from harness.archive.views import add_artifact

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
    from harness.audits.verdicts import promotion_blockers

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
