"""The loop end to end: offline through the real harness on CPU (correctness only), the CLI's table and JSON
report, requests archived before sending, repair with the log excerpt, forbidden edits rejected, and, with a fake
timed evaluator, promotion and export. Budgets are in test_controller_budget.py, several definitions side by side
(lanes) in test_controller_lanes.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controller.cli import main, out, print_report
from controller.loop import run_loop
from controller.promote import NO_TIMING
from controller.providers.offline import OfflineProvider
from controller.providers.scripted import ScriptedProvider
from controller.skills import load_skills
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution

from loop_support import CLEAN_AUDITS, SKILLS_DIR, WORKLOAD, FakeEvaluator, config, constant, unseeded_skills
from support import KV8_PS1

# -- offline, the real harness, the CLI ----------------------------------------------------------------------

# The offline generator's names of the per-KV-head candidates these tests follow (controller.providers.offline.slug)
R1_BN32 = "r1_per-kv-head_bn32_w1_s1_dot0_kv_load0_klmpps0"
R2_BN32_W2 = "r2_per-kv-head_bn32_w2_s1_dot0_kv_load0_klmpps0"
R1_BN16_W2 = "r1_per-kv-head_bn16_w2_s1_dot0_kv_load0_klmpps0"
R2_BN16_W4 = "r2_per-kv-head_bn16_w4_s1_dot0_kv_load0_klmpps0"
NAIVE = "naive_per-kv-head_bn16_w1_s1_dot0_kv_load0_klmpps0"



def test_cli_loop_offline_end_to_end_correctness_only(tiny_dataset_root, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    archive = tmp_path / "archive"
    archive.mkdir()
    args = ["loop", "--definition", KV8_PS1, "--rounds", "1", "--candidates", "2", "--archive", str(archive),
            "--dataset", str(tiny_dataset_root), "--workloads", WORKLOAD, "--timeout-s", "120"]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # stdout is the JSON alone; the progress went to stderr
    assert "round 1" in result.stderr and "candidates" in result.stderr
    assert report["provider"] == "offline"  # the default without API keys
    assert report["status"] == "DONE" and report["stop_reason"] == "ran all 1 rounds"
    assert report["timing"] == "unavailable: no GPU on this host"
    rounds = report["rounds"]
    assert [r["round"] for r in rounds] == [0, 1]
    assert rounds[0]["statuses"] == {"PASSED": 1} and rounds[1]["statuses"] == {"PASSED": 2}
    assert rounds[1]["best_latency_ms"] is None and rounds[1]["speedup_vs_flashinfer"] is None  # never faked
    assert rounds[1]["decision"] == NO_TIMING
    assert not report["incumbent"]["promoted"] and report["incumbent"]["exported"] is None
    assert [d["verdict"] for d in report["decisions"]] == ["BASELINE", "REJECTED", "REJECTED"]
    assert report["totals"] == {"candidates": 3, "evaluated": 3, "tokens": 0, "cost_usd": 0.0,
                                "wall_s": report["totals"]["wall_s"]}
    # Every candidate is a harness submission, archived by the harness.
    store = Store(Archive(archive))
    assert store.submission_count() == 3
    assert all(c["submission_id"] for c in store.candidates(report["run_id"]))

    # The text form of the same report: the per-round table and the final lines; `runs` lists the run.
    with out.capture() as captured:
        print_report(report)
    text = captured.get()
    for phrase in ("best latency ms", "speedup vs FlashInfer", "baseline", "explore", "2 PASSED",
                   "timing: unavailable: no GPU", "incumbent: naive_per-kv-head", "not promoted: " + NO_TIMING):
        assert phrase in text, text
    listing = CliRunner().invoke(main, ["runs", "--archive", str(archive)])
    assert report["run_id"] in listing.output and "DONE" in listing.output
    listing = CliRunner().invoke(main, ["runs", "--archive", str(archive), "--json"])
    (row,) = json.loads(listing.output)
    assert (row["run_id"], row["status"], row["rounds_done"]) == (report["run_id"], "DONE", 1)
    # the wall its rounds spent (what a wall budget counts, and what an extension's timeout is sized from)
    assert row["wall_s"] == pytest.approx(Store(Archive(archive)).spend(report["run_id"])["wall_s"], abs=0.05)
    assert row["wall_s"] > 0


class Failing:
    """A provider whose every call fails, as an agent CLI missing from PATH does."""

    name = "failing"

    def generate(self, request):
        from harness.data.generation_request import GenerationResponse

        return GenerationResponse(provider=self.name, error="claude not found on PATH")


@pytest.mark.parametrize("provider, reason", [
    (lambda: Failing(), "no round produced a candidate: claude not found on PATH"),
    (lambda: ScriptedProvider([{"files": "not a list"}] * 4, name="garbled"), "no round produced a candidate: "),
], ids=["provider error", "every reply unparseable"])
def test_cli_loop_exits_1_when_no_round_produced_a_candidate(tiny_dataset_root, tmp_path, monkeypatch, provider,
                                                             reason):
    import controller.loop as loop_module

    made = provider()
    monkeypatch.setattr(loop_module, "make_provider", lambda *a, **kw: made)
    monkeypatch.setattr(loop_module, "HarnessEvaluator", lambda dataset, archive, options: FakeEvaluator(
        archive, dataset, [WORKLOAD], lambda s: ("PASSED", None)))
    archive = tmp_path / "archive"
    archive.mkdir()
    args = ["loop", "--definition", KV8_PS1, "--provider", "offline", "--rounds", "2", "--archive", str(archive),
            "--dataset", str(tiny_dataset_root), "--workloads", WORKLOAD, "--no-profile"]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and reason in lines[0], result.stderr
    if isinstance(made, ScriptedProvider):
        assert "files" in lines[0].split(reason, 1)[1]  # the parse problem is named
    report = json.loads(result.stdout)  # the report is still printed
    assert report["status"] == "DONE" and len(report["rounds"]) == 3
    assert report["nothing_produced"] == lines[0].removeprefix("error: ")

    # Without --json: the report's tables on stdout, then the same exit code and one line (a fresh run; the
    # scripted provider's script is used up by now, which is no candidate either).
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no round produced a candidate: " in lines[0], result.stderr
    assert "stopped because ran all 2 rounds" in result.stdout


def test_requests_are_archived_before_they_are_sent(tiny_dataset_root, tmp_path):
    archive = Archive(tmp_path / "a")
    dataset = Dataset(tiny_dataset_root)
    skills = load_skills(SKILLS_DIR)
    seen_in_archive = []

    class Watching(OfflineProvider):
        def generate(self, request):
            seen_in_archive.append(Store(archive).request(request.run_id, request.key) is not None)
            return super().generate(request)

    fake = FakeEvaluator(archive, dataset, [WORKLOAD], lambda s: ("PASSED", None))
    report = run_loop(config(tiny_dataset_root, rounds=2), tmp_path / "a", provider=Watching(skills), evaluator=fake)
    assert seen_in_archive == [True, True]
    req_id, req = Store(archive).request(report["run_id"], "r1/explore")
    assert req.definition == KV8_PS1 and req.evidence.kind == "correctness-only"
    assert req.constraints.dps_signature[-2:] == ["output", "lse"] and req.constraints.editable_files == ["kernel.py"]
    # skills by progressive disclosure: the family's, the target's tactics and profiling listed, read on demand;
    # the promotion rules (policy) whole
    assert [e.name for e in req.skill_index] == ["gqa-decode", "hopper-tactics", "ncu-profiling"]
    assert any(r.endswith(".py.tmpl") for r in req.skill_index[0].references)
    assert list(req.skill_excerpts) == ["promotion-rules"] and "[... cut" not in req.skill_excerpts["promotion-rules"]
    assert req.budget.max_turns == 16 and req.budget.max_evaluations == 3 and req.hint == ""
    assert req.incumbent.origin["template"] == "triton-per-kv-head" and req.budget.max_candidates == 1
    assert "none can be promoted" in req.acceptance.note


# -- repair -----------------------------------------------------------------------------------------------


def test_a_failed_candidate_goes_back_once_with_the_log_excerpt(tiny_dataset_root, tmp_path):
    from support import TORCH_CANDIDATE

    broken = {"files": [{"path": "kernel.py", "content": "def run(q, k_cache:\n    pass\n"}],
              "entry_point": "kernel.py::run", "notes": "first try"}

    def fixed(request):
        assert request.kind == "repair" and request.repair.status == "COMPILE_ERROR"
        assert "syntax error" in request.repair.log_excerpt
        assert request.repair.solution["sources"][0]["content"].startswith("def run(q, k_cache:")
        return {"files": [{"path": "kernel.py", "content": TORCH_CANDIDATE}], "entry_point": "kernel.py::run",
                "notes": "fixed"}

    provider = ScriptedProvider([broken, fixed])
    report = run_loop(config(tiny_dataset_root), tmp_path / "a", provider=provider)
    r1 = report["rounds"][1]
    assert r1["statuses"] == {"COMPILE_ERROR": 1, "PASSED": 1} and r1["repairs"] == 1
    assert [req.key for req in provider.seen] == ["r1/explore", f"r1/repair/c{2}"]
    store = Store(Archive(tmp_path / "a"))
    cands = store.candidates(report["run_id"], 1)
    assert (cands[1]["parent_id"], cands[1]["depth"]) == (cands[0]["id"], 1)


# -- bounds ------------------------------------------------------------------------------------------------


def test_candidates_over_the_count_are_dropped_and_forbidden_edits_rejected(tiny_dataset_root, tmp_path):
    archive = Archive(tmp_path / "a")
    dataset = Dataset(tiny_dataset_root)
    good = {"files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # 1\n"}],
            "entry_point": "kernel.py::run", "notes": ""}
    sneaky = {"files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # 2\n"},
                        {"path": "harness_patch.py", "content": "x = 1\n"}], "entry_point": "kernel.py::run",
              "notes": ""}

    class Greedy(ScriptedProvider):
        def generate(self, request):
            request.budget.max_candidates = 3  # ignores its bound
            return super().generate(request)

    fake = FakeEvaluator(archive, dataset, [WORKLOAD], lambda s: ("PASSED", None))
    other = {**good, "files": [{"path": "kernel.py", "content": "def run(*a): pass\n"}]}
    report = run_loop(config(tiny_dataset_root, candidates=2, repairs=0), tmp_path / "a",
                      provider=Greedy([sneaky, good, other]), evaluator=fake)
    r1 = report["rounds"][1]
    assert r1["statuses"] == {"REJECTED": 1, "PASSED": 1}
    assert "edits files it may not touch: harness_patch.py" in r1["rejected"][0]
    assert any("1 proposal(s) over the candidate budget of 2 dropped" in s for s in r1["stopped"])


# -- with timing: promotion and export ---------------------------------------------------------------------


def test_with_timing_a_clear_win_is_promoted_exported_and_becomes_the_incumbent(tiny_dataset_root, tmp_path):
    archive = Archive(tmp_path / "a")
    dataset = Dataset(tiny_dataset_root)
    skills = unseeded_skills(tmp_path / "skills")
    # BLOCK_N >= 32 and 2 warps each take 20% off: naive 1.0 ms, either 0.8 ms, both 0.64 ms.
    def judge(s):
        bn, warps = constant(s, "BLOCK_N", 16), constant(s, "NUM_WARPS", 1)
        return "PASSED", 1.0 * (0.8 if bn >= 32 else 1.0) * (0.8 if warps == 2 else 1.0)

    fake = FakeEvaluator(archive, dataset, [WORKLOAD], judge)
    provider = OfflineProvider(skills)
    seen = []
    original = provider.generate
    provider.generate = lambda request: (seen.append(request), original(request))[1]
    report = run_loop(config(tiny_dataset_root, rounds=2, candidates=2), tmp_path / "a", provider=provider,
                      evaluator=fake)
    promoted = [d for d in report["decisions"] if d["verdict"] == "PROMOTED"]
    # Round 1 (from the naive kernel): bn32 wins; w2 then only ties the new incumbent. Round 2 (from bn32): w2 wins.
    assert [d["candidate"] for d in promoted] == [R1_BN32,
                                                  R2_BN32_W2]
    assert report["incumbent"]["promoted"] and report["incumbent"]["name"] == R2_BN32_W2
    exported = json.loads(open(report["incumbent"]["exported"]).read())
    assert Solution.model_validate(exported).name == R2_BN32_W2
    assert seen[1].incumbent.name == R1_BN32  # round 2 starts from the promoted one
    assert seen[1].evidence.kind == "latency-only" and "0.8" in seen[1].evidence.markdown
    # Paired measurements only for candidates past the gates and the screen; the decision rests on them.
    # Round 2 explores the population: a neighbour of the runner-up w2 (bn16_w4: 1.0 ms, screened out) beside
    # one of the incumbent (bn32_w2: promoted).
    assert [(d["candidate"], d["rule"]) for d in report["decisions"][1:]] == [
        (R1_BN32, "promoted"),
        (R1_BN16_W2, "noise_floor"),
        (R2_BN16_W4, "screen"), (R2_BN32_W2, "promoted")]
    assert len(fake.paired) == 3
    # Each promotion rests on an evaluation at the full audit level, made only for the two it promoted.
    assert fake.full_calls == [R1_BN32, R2_BN32_W2]
    decision = Store(archive).decisions(report["run_id"])[1]
    assert decision["details"]["measurement"]["order"] == "ABBA" and decision["details"]["repeats"] == 2
    assert decision["details"]["mean_speedup"] == pytest.approx(1.25)
    full = archive.submission(decision["details"]["full_audit_submission"])
    assert full["options"]["audit_level"] == "full"
    assert full["solution_name"] == R1_BN32
    assert report["rounds"][1]["best_latency_ms"] == pytest.approx(0.8)
    assert report["rounds"][1]["speedup_vs_flashinfer"] == pytest.approx(0.025)


@pytest.mark.parametrize("card, paired", [("GPU-0", False), (None, True)], ids=["same card", "card unknown"])
def test_a_decisive_win_on_the_same_card_skips_the_paired_measurement(tiny_dataset_root, tmp_path, card, paired):
    """2.5x on every workload (skills/promotion-rules: decisive_speedup 1.5): promoted on the two evaluations,
    still through the full audit level; where the cards cannot be told the same, paired as before."""
    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD],
                         lambda s: ("PASSED", 0.4 if constant(s, "BLOCK_N", 16) >= 32 else 1.0), card=card)
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=2), tmp_path / "a",
                      provider=OfflineProvider(unseeded_skills(tmp_path / "skills")), evaluator=fake)
    (promoted,) = [d for d in report["decisions"] if d["verdict"] == "PROMOTED"]
    assert promoted["candidate"] == R1_BN32
    assert fake.full_calls == [R1_BN32]
    (details,) = [d["details"] for d in Store(archive).decisions(report["run_id"]) if d["verdict"] == "PROMOTED"]
    assert details["mean_speedup"] == pytest.approx(2.5)
    if paired:
        assert (NAIVE, R1_BN32) in \
            fake.paired
        assert details["measurement"]["order"] == "ABBA"
    else:
        assert (NAIVE,
                R1_BN32) not in fake.paired
        assert details["decisive"] is True and details["measurement"] is None
        assert "no paired measurement needed" in promoted["reasons"][0]


KERNEL_ATTRIBUTION_FAILED = [{"name": "input_mutation", "passed": True},
                             {"name": "kernel_attribution", "passed": False,
                              "detail": "62% of GPU time in the candidate's own kernels (< 95%)"}]


@pytest.mark.parametrize("full_result, reason", [
    (("PASSED", KERNEL_ATTRIBUTION_FAILED),
     "audit kernel_attribution failed on tiny_b2_t40: 62% of GPU time in the candidate's own kernels"),
    (("INCORRECT_NUMERICAL", CLEAN_AUDITS), "1 of 1 workloads not PASSED: tiny_b2_t40 INCORRECT_NUMERICAL"),
], ids=["failed audit", "failed workload"])
def test_a_candidate_whose_full_audit_evaluation_fails_is_not_promoted(tiny_dataset_root, tmp_path, full_result,
                                                                       reason):
    """It passed its fast evaluation, the screen and the paired measurement; the full-level evaluation finds
    what the fast level does not run. Rejected with that evaluation's reason; the next candidate, clean at the
    full level, is promoted over the same incumbent."""
    archive = Archive(tmp_path / "a")
    dataset = Dataset(tiny_dataset_root)

    def judge(s):  # naive 1.0 ms; every neighbour 0.8 ms
        return "PASSED", 1.0 if s is not None and "naive" in s.name else 0.8

    first = R1_BN32
    fake = FakeEvaluator(archive, dataset, [WORKLOAD], judge,
                         full_judge=lambda s: full_result if s.name == first else ("PASSED", CLEAN_AUDITS))
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=2), tmp_path / "a",
                      provider=OfflineProvider(unseeded_skills(tmp_path / "skills")), evaluator=fake)
    assert [(d["candidate"], d["verdict"], d["rule"]) for d in report["decisions"][1:]] == [
        (first, "REJECTED", "full_audit"), (R1_BN16_W2, "PROMOTED", "promoted")]
    rejected = report["decisions"][1]["reasons"]
    assert rejected[0].startswith("full-audit evaluation (submission ") and reason in rejected[0], rejected
    assert fake.full_calls == [first, R1_BN16_W2]
    assert report["incumbent"]["name"] == R1_BN16_W2
    details = Store(archive).decisions(report["run_id"])[1]["details"]
    assert details["mean_speedup"] == pytest.approx(1.25)  # what it would have won on is kept
    assert archive.submission(details["full_audit_submission"])["options"]["audit_level"] == "full"
    assert Store(archive).candidate(Store(archive).decisions(report["run_id"])[1]["candidate_id"])["status"] == "PASSED"


def test_with_timing_the_loop_stops_after_rounds_without_improvement(tiny_dataset_root, tmp_path):
    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", 1.0))
    report = run_loop(config(tiny_dataset_root, rounds=6), tmp_path / "a",
                      provider=OfflineProvider(load_skills(SKILLS_DIR)), evaluator=fake)
    assert report["stop_reason"] == "no improvement for 3 rounds" and len(report["rounds"]) == 4
    assert {d["rule"] for d in report["decisions"][1:]} == {"noise_floor"}


def test_an_api_provider_over_its_bound_is_stopped_and_the_round_records_why(tiny_dataset_root, tmp_path):
    httpx2 = pytest.importorskip("httpx2")
    pytest.importorskip("anthropic")
    from controller.providers.anthropic import AnthropicProvider

    from agent_sse import claude_stream

    def handler(request):  # a streamed turn that runs out of output tokens mid-kernel
        body = json.loads(request.content)
        return claude_stream([("text", "def run(...): # and so on, until the tokens ran out")], stop="max_tokens",
                             tokens_in=3000, tokens_out=body["max_tokens"])

    provider = AnthropicProvider(api_key="sk-test", base_url="http://anthropic.test", max_retries=0,
                                 http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", None))
    report = run_loop(config(tiny_dataset_root, provider="anthropic", max_output_tokens=2000, budget_cost_usd=1.0),
                      tmp_path / "a", provider=provider, evaluator=fake)
    r1 = report["rounds"][1]
    assert r1["candidates"] == 0 and r1["tokens"] == 5000
    assert r1["cost_usd"] == pytest.approx((3000 * 3 + 2000 * 15) / 1e6)
    assert r1["stopped"] == ["output hit max_tokens (2000): turn 0 cut short"]
    assert report["totals"]["cost_usd"] == pytest.approx(0.039)


def test_harness_paired_measurement_interleaves_abba_in_one_session(tiny_dataset_root, tmp_path):
    """The GPU-host hook, against a stand-in Session: A B B A per repeat, latencies per workload."""
    from types import SimpleNamespace

    from controller.loop import HarnessEvaluator
    from harness.pipeline.evaluate import SubmitOptions

    order, latency = [], {"inc": 1.0, "cand": 0.7}

    class GpuSession:
        has_gpu = True

        def submit(self, solution, audit_level=None):
            assert audit_level == "off"  # timing runs; the audits belong to each one's own evaluation
            order.append(solution)
            w = SimpleNamespace(workload="w1", evaluated=True, latency_ms=latency[solution])
            return SimpleNamespace(timing_unavailable_reason=None, all_passed=True, workloads=[w],
                                   submission_id=len(order))

    evaluator = HarnessEvaluator(Dataset(tiny_dataset_root), Archive(tmp_path / "a"), SubmitOptions())
    evaluator._session = GpuSession()
    m = evaluator.measure_paired("inc", "cand", repeats=2, order="ABBA")
    assert order == ["inc", "cand", "cand", "inc"] * 2
    assert [(s.role, s.repeat, s.latencies, s.submission_id) for s in m.samples][:4] == [
        ("A", 0, {"w1": 1.0}, 1), ("B", 0, {"w1": 0.7}, 2), ("B", 0, {"w1": 0.7}, 3), ("A", 0, {"w1": 1.0}, 4)]
    evaluator._session = SimpleNamespace(has_gpu=False)
    assert evaluator.measure_paired("inc", "cand", 2) is None and evaluator.why_no_timing() == "no GPU on this host"


def test_harness_full_evaluation_asks_for_the_full_audit_level(tiny_dataset_root, tmp_path):
    from types import SimpleNamespace

    from controller.loop import HarnessEvaluator
    from harness.pipeline.evaluate import SubmitOptions

    levels = []

    class Session:
        def submit(self, solution, audit_level=None):
            levels.append((solution, audit_level))
            return SimpleNamespace(submission_id=41)

    evaluator = HarnessEvaluator(Dataset(tiny_dataset_root), Archive(tmp_path / "a"), SubmitOptions())
    evaluator._session = Session()
    assert evaluator.evaluate_full("cand") == 41 and levels == [("cand", "full")]
    evaluator.evaluate("cand", on_start=lambda sid: None)
    assert levels[-1] == ("cand", None)  # a candidate's own evaluation: the session's (fast) level


def test_a_paired_measurement_stops_once_the_candidate_is_no_faster(tiny_dataset_root, tmp_path):
    """skills/promotion-rules `futility_below: 1.0`: a candidate within the screen's slack (0.995x of the incumbent in
    its own evaluation) gets a paired measurement; after its first ABBA repeat it is still 0.995x, so the other four
    timing runs are not made and the decision says why (run 15's finalist: eight runs, 150 s, to learn 0.99x)."""
    reply = {"files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # a hair slower\n"}],
             "entry_point": "kernel.py::run", "notes": ""}

    def judge(solution):
        return "PASSED", (1.0 / 0.995 if solution is not None and not solution.name.startswith("naive") else 1.0)

    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], judge)
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=1), tmp_path / "a",
                      provider=ScriptedProvider([reply]), evaluator=fake)
    (decision,) = [d for d in Store(archive).decisions(report["run_id"]) if d["round"] == 1]
    assert (decision["verdict"], decision["rule"]) == ("REJECTED", "futility")
    assert decision["reasons"][0].startswith("paired measurement stopped after 1 of 2 repeats: mean speedup 0.995x")
    assert len(fake.paired) == 1 and fake.timing_runs == 4
    assert decision["details"]["measurement"]["stopped"] == decision["reasons"][0]
