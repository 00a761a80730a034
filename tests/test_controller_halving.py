"""Successive halving of a round's candidates (controller/halving.py decides, controller/screening.py runs it):
the pure rung decision (ties, failures, eta and finalists at their edges), the settings as skill data, and the
loop with a timed fake evaluator that screens: more proposed than evaluated in full, every rung archived as the
cut candidates' decisions, shown in the round summary and the trajectory, and resumed at the next rung."""

from __future__ import annotations

import pytest

from controller.halving import (Rung, Screened, decide_rung, keep_count, needs_screening, rungs_of,
                                screening_line)
from controller.loop import run_loop
from controller.providers.offline import OfflineProvider, offline_generator
from controller.search import HalvingSettings, SearchSettings
from controller.skills import load_skills
from controller.store import Store
from controller.trajectory import trajectory_markdown
from harness.archive.database import Archive
from harness.data.dataset import Dataset

from support import KV8_PS1
from loop_support import SKILLS_DIR, WORKLOAD, FakeEvaluator, config, constant


def ok(name, *ms):
    return Screened(name, "PASSED", {f"w{i}": v for i, v in enumerate(ms)})


def bad(name, status="INCORRECT_NUMERICAL", message="trial 0: max error 3.2"):
    return Screened(name, status, {}, message)


# -- the pure decision ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, eta, finalists, kept", [
    (8, 2, 1, 4), (7, 2, 1, 4), (6, 3, 1, 2), (3, 2, 1, 2), (2, 2, 1, 1), (1, 2, 1, 1),
    (4, 2, 3, 3),  # never fewer than the finalists
    (2, 2, 5, 2),  # nor more than there are
    (9, 4, 1, 3), (0, 2, 1, 0),
])
def test_keep_count(n, eta, finalists, kept):
    assert keep_count(n, eta, finalists) == kept


@pytest.mark.parametrize("n, finalists, expected", [(1, 1, False), (2, 1, True), (2, 2, False), (3, 5, False),
                                                    (1, 0, False)])
def test_one_candidate_or_fewer_than_the_finalists_is_not_screened(n, finalists, expected):
    assert needs_screening(n, finalists) is expected


@pytest.mark.parametrize("results, eta, finalists, kept, cut_words", [
    # the fastest half, fastest first; the others say by how much they were slower
    ([ok("a", 2.0), ok("b", 1.0), ok("c", 4.0), ok("d", 3.0)], 2, 1, ["b", "a"],
     {"c": "300.0% slower than the best (4 ms vs 1 ms)", "d": "200.0% slower"}),
    # a tie at the boundary keeps the earlier proposal and says so
    ([ok("a", 2.0), ok("b", 1.0), ok("c", 2.0)], 2, 1, ["b", "a"], {"c": "tied with the last survivor"}),
    ([ok("a", 1.0), ok("b", 1.0)], 2, 1, ["a"], {"b": "tied"}),
    # failures never survive, even where fewer than ceil(n / eta) passed
    ([bad("a"), ok("b", 3.0), bad("c", "COMPILE_ERROR", "SyntaxError"), bad("d")], 2, 1, ["b"],
     {"a": "failed the screen: INCORRECT_NUMERICAL (trial 0: max error 3.2)", "c": "COMPILE_ERROR (SyntaxError)"}),
    ([bad("a"), bad("b")], 2, 1, [], {"a": "failed the screen", "b": "failed the screen"}),
    # passed but not timed on every workload: cut, it cannot be ranked
    ([ok("a", 1.0, None), ok("b", 2.0, 2.0)], 2, 1, ["b"], {"a": "not timed on every workload"}),
    # several workloads: the geometric mean ranks (a: sqrt(1 * 16) = 4 > b: sqrt(3 * 3) = 3)
    ([ok("a", 1.0, 16.0), ok("b", 3.0, 3.0)], 2, 1, ["b"], {"a": "33.3% slower"}),
    # eta 3 keeps a third; finalists bound it from below
    ([ok(c, float(i + 1)) for i, c in enumerate("abcdef")], 3, 1, ["a", "b"], {"f": "500.0% slower"}),
    ([ok(c, float(i + 1)) for i, c in enumerate("abcd")], 2, 3, ["a", "b", "c"], {"d": "kept 3 of 4"}),
    # more finalists than candidates: all kept (the loop does not screen them at all)
    ([ok("a", 2.0), ok("b", 1.0)], 2, 4, ["b", "a"], {}),
])
def test_decide_rung(results, eta, finalists, kept, cut_words):
    rung = decide_rung(results, eta, finalists, rung=1, iterations=20)
    assert list(rung.kept) == kept
    assert set(rung.cut) == {r.name for r in results} - set(kept)  # everyone else is cut, with a reason
    for name, words in cut_words.items():
        assert words in rung.cut[name], rung.cut[name]
    assert rung.entered == tuple(r.name for r in results) and rung.rung == 1 and rung.iterations == 20
    assert Rung.from_json(rung.to_json()) == rung


def test_screening_line_and_rungs_from_their_records():
    r0 = decide_rung([ok(c, float(i + 1)) for i, c in enumerate("abcdef")], 2, 1, rung=0)
    r1 = decide_rung([ok(c, float(i + 1)) for i, c in enumerate(r0.kept)], 2, 1, rung=1)
    r2 = decide_rung([ok(c, float(i + 1)) for i, c in enumerate(r1.kept)], 2, 1, rung=2)
    assert screening_line([r2, r0, r1]) == "screened 6 -> 3 -> 2 -> 1"
    repair = decide_rung([ok("x", 1.0), ok("y", 2.0)], 2, 1, rung=0, depth=1)
    assert screening_line([r0, repair]) == "screened 6 -> 3; repairs (depth 1) screened 2 -> 1"
    assert screening_line([]) == ""
    # one record per cut candidate: the same rung many times over
    assert rungs_of([r1.to_json(), r0.to_json(), r0.to_json(), repair.to_json()]) == [r0, r1, repair]


# -- settings as data ----------------------------------------------------------------------------------------


def test_halving_settings_are_data_validated():
    assert SearchSettings.from_block(None).halving is None  # off unless a skill turns it on
    assert SearchSettings.from_block({"halving": False}).halving is None
    assert SearchSettings.from_block({"halving": True}).halving == HalvingSettings()
    got = SearchSettings.from_block({"patience": 3, "halving": {"eta": 3, "finalists": 2, "screen_iterations": 5}})
    assert got.patience == 3 and got.halving == HalvingSettings(eta=3, finalists=2, screen_iterations=5)
    with pytest.raises(ValueError, match=r"halving settings: unknown keys \['etta'\]"):
        SearchSettings.from_block({"halving": {"etta": 2}})
    for wrong in ({"eta": 1}, {"finalists": 0}, {"screen_iterations": 0}, {"screen_trials": 0}, {"eta": 2.5},
                  {"max_proposals": 0}, {"rungs": -1}, {"eta": True}):
        with pytest.raises(ValueError, match="must be an integer"):
            SearchSettings.from_block({"halving": wrong})
    with pytest.raises(ValueError, match="expected a mapping"):
        SearchSettings.from_block({"halving": [2]})


@pytest.mark.parametrize("settings, candidates, proposals", [
    (HalvingSettings(), 2, 8), (HalvingSettings(), 1, 4), (HalvingSettings(), 3, 8),
    (HalvingSettings(rungs=0), 2, 2), (HalvingSettings(eta=3, rungs=1, max_proposals=20), 2, 6),
    (HalvingSettings(max_proposals=4), 6, 6),  # never fewer than the candidates asked for
])
def test_proposals_grow_by_eta_per_rung_within_their_bound(settings, candidates, proposals):
    assert settings.proposals(candidates) == proposals


def test_iterations_grow_by_eta_per_rung():
    assert [HalvingSettings(eta=3, screen_iterations=5).iterations(r) for r in range(3)] == [5, 15, 45]


def test_the_gqa_decode_skill_turns_halving_on():
    settings = offline_generator(load_skills(SKILLS_DIR), KV8_PS1).search.halving
    assert settings == HalvingSettings(eta=2, finalists=1, rungs=2, max_proposals=8, screen_iterations=10,
                                       screen_trials=1)


# -- the loop ------------------------------------------------------------------------------------------------


def speed(s) -> float:
    """Bigger blocks, more warps and stages are faster: distinct latencies for the offline provider's moves."""
    if s is None:
        return 1.0
    bn, warps, stages = constant(s, "BLOCK_N", 16), constant(s, "NUM_WARPS", 1), constant(s, "NUM_STAGES", 1)
    return round(1.0 / (bn / 16) ** 0.5 / warps ** 0.3 / stages ** 0.1, 6)


class ScreeningEvaluator(FakeEvaluator):
    """A timed fake evaluator that also screens: ``screen_judge`` (default: ``judge``) says what a short run finds;
    ``stop_after`` screening runs it raises, as a kill would."""

    def __init__(self, *args, screen_judge=None, stop_after=None, **kw):
        super().__init__(*args, **kw)
        self.screen_judge = screen_judge or self.judge
        self.screens: list[tuple[str, int, int, list]] = []
        self.stop_after = stop_after

    def screen(self, solution, workloads, iterations, trials):
        if self.stop_after is not None and len(self.screens) >= self.stop_after:
            raise KeyboardInterrupt("killed mid-screening")
        self.screens.append((solution.name, iterations, trials, workloads))
        return self._submit(solution, "off", lambda: (*self.screen_judge(solution), []))


def run(root, tmp_path, evaluator_kw=None, **kw):
    archive = Archive(tmp_path / "a")
    fake = ScreeningEvaluator(archive, Dataset(root), [WORKLOAD], lambda s: ("PASSED", speed(s)),
                              **(evaluator_kw or {}))
    events = []
    report = run_loop(config(root, **{"rounds": 1, "candidates": 2, **kw}), tmp_path / "a",
                      provider=OfflineProvider(load_skills(SKILLS_DIR)), evaluator=fake,
                      on_event=lambda kind, data: events.append((kind, data)))
    return report, fake, Store(archive), events


def test_a_round_proposes_more_screens_them_and_evaluates_only_the_finalist(tiny_dataset_root, tmp_path):
    report, fake, store, events = run(tiny_dataset_root, tmp_path)
    r1 = report["rounds"][1]
    n = r1["candidates"]
    assert 4 < n <= 8  # 2 candidates x 2^2, bounded by 8 (and by the untried neighbours of the naive kernel)
    rungs = r1["screening"]
    entered = [len(r["entered"]) for r in rungs]
    assert entered[0] == n and all(b == -(-a // 2) for a, b in zip(entered, entered[1:]))  # ceil(n / 2) each rung
    assert len(rungs[-1]["kept"]) == 1
    assert [r["iterations"] for r in rungs] == [10 * 2 ** i for i in range(len(rungs))]
    assert f"screened {' -> '.join(map(str, entered))} -> 1" in r1["search"]
    assert "screened " + " -> ".join(map(str, entered)) + " -> 1" in trajectory_markdown(report)
    # Every screening run: one trial, on the planned regime's workloads (the run's only one here).
    assert len(fake.screens) == sum(entered) and {t for _, _, t, _ in fake.screens} == {1}
    assert {tuple(w) for *_, w in fake.screens} == {(Dataset(tiny_dataset_root).workloads_for(
        KV8_PS1, [WORKLOAD])[0].uuid,)}
    # Only the baseline and the finalist got a full evaluation; the finalist is the fastest screened one.
    finalist = rungs[-1]["kept"][0]
    assert fake.calls == ["naive_per-kv-head_bn16_w1_s1_dot0_kv_load0_klmpps0", finalist]
    assert min(rungs[0]["scores"], key=lambda k: rungs[0]["scores"][k]) == finalist
    # Each cut candidate: status SCREENED_OUT, its last screening run, a decision saying why.
    cut = [d for d in report["decisions"] if d["rule"] == "halving"]
    assert len(cut) == n - 1 and {d["verdict"] for d in cut} == {"SCREENED_OUT"}
    assert all(d["reasons"][0].startswith("rung ") and "% slower than the best" in d["reasons"][0] for d in cut)
    cands = {c["solution_name"]: c for c in store.candidates(report["run_id"], 1)}
    assert r1["statuses"]["SCREENED_OUT"] == n - 1
    for d in cut:
        c = cands[d["candidate"]]
        assert c["status"] == "SCREENED_OUT" and c["reason"] == d["reasons"][0]
        assert store.archive.submission(c["submission_id"])["options"]["audit_level"] == "off"
    # The finalist's decision is the usual one (promoted here: it is faster), not a halving one.
    assert report["decisions"][-1]["candidate"] == finalist and report["decisions"][-1]["verdict"] == "PROMOTED"
    assert r1["decision"] == f"promoted {finalist}" and r1["best_candidate"] == finalist
    assert [k for k, _ in events].count("screen") == len(rungs)
    # The history a later request reads: a screened-out candidate has no mean over all workloads.
    history = {h.name: h for h in _view(report, store).history()}
    assert all(history[d["candidate"]].mean_latency_ms is None for d in cut)
    assert history[finalist].mean_latency_ms == pytest.approx(speed(store.solution(cands[finalist])))


def _view(report, store):
    from controller.rounds import RunView
    from controller.skills import promotion_thresholds

    view = RunView()
    view.store, view.run_id, view.regimes = store, report["run_id"], {}
    view.thresholds = promotion_thresholds(load_skills(SKILLS_DIR))
    return view


def test_failed_screens_never_survive_and_are_repaired(tiny_dataset_root, tmp_path):
    """A candidate whose screening run is incorrect is cut at rung 0 with the harness's failing status (so it is
    repaired like any failed candidate); the repairs are screened in their own batch."""
    failing = lambda s: ("INCORRECT_NUMERICAL", None) if constant(s, "NUM_WARPS", 1) == 2 else (  # noqa: E731
        "PASSED", speed(s))
    report, fake, store, _ = run(tiny_dataset_root, tmp_path, {"screen_judge": failing}, repairs=1)
    cut = {d["candidate"]: d for d in report["decisions"] if d["rule"] == "halving"}
    failed = [name for name, d in cut.items() if "failed the screen: INCORRECT_NUMERICAL" in d["reasons"][0]]
    assert failed and all("_w2_" in name for name in failed)
    cands = {c["solution_name"]: c for c in store.candidates(report["run_id"], 1)}
    assert all(cands[name]["status"] == "INCORRECT_NUMERICAL" for name in failed)
    assert not any("_w2_" in name for name in report["rounds"][1]["screening"][0]["kept"])
    repairs = [c for c in cands.values() if c["depth"] == 1]
    assert {c["parent_id"] for c in repairs} == {cands[name]["id"] for name in failed}
    if len(repairs) > 1:
        assert "repairs (depth 1) screened" in report["rounds"][1]["search"]


def test_without_timing_or_a_screening_evaluator_nothing_is_screened(tiny_dataset_root, tmp_path):
    """Halving ranks by latency: untimed runs (a host without a GPU) evaluate the usual candidates in full."""
    archive = Archive(tmp_path / "a")
    fake = ScreeningEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", None))
    report = run_loop(config(tiny_dataset_root, candidates=2), tmp_path / "a",
                      provider=OfflineProvider(load_skills(SKILLS_DIR)), evaluator=fake)
    assert fake.screens == [] and report["rounds"][1]["candidates"] == 2 and report["rounds"][1]["screening"] == []
    plain = FakeEvaluator(Archive(tmp_path / "b"), Dataset(tiny_dataset_root), [WORKLOAD],
                          lambda s: ("PASSED", speed(s)))
    report = run_loop(config(tiny_dataset_root, candidates=2), tmp_path / "b",
                      provider=OfflineProvider(load_skills(SKILLS_DIR)), evaluator=plain)
    assert report["rounds"][1]["candidates"] == 2 and len(plain.calls) == 3


def test_a_run_killed_mid_screening_resumes_at_the_next_rung(tiny_dataset_root, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run(tiny_dataset_root, tmp_path, {"stop_after": 10})  # rung 0 (n runs) done, rung 1 cut short
    store = Store(Archive(tmp_path / "a"))
    run_id = store.runs()[0]["id"]
    first = [d for d in store.decisions(run_id) if d["rule"] == "halving"]
    assert first and {d["details"]["halving"]["rung"] for d in first} == {0}
    archive = Archive(tmp_path / "a")
    fake = ScreeningEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", speed(s)))
    report = run_loop(None, tmp_path / "a", resume=run_id, evaluator=fake,
                      provider=OfflineProvider(load_skills(SKILLS_DIR)))
    rungs = report["rounds"][1]["screening"]
    assert [r["rung"] for r in rungs] == list(range(len(rungs))) and len(rungs[-1]["kept"]) == 1
    assert {it for _, it, _, _ in fake.screens} >= {20}  # it went on at rung 1, not from rung 0
    assert 10 not in {it for _, it, _, _ in fake.screens}
    assert report["status"] == "DONE" and len(fake.calls) == 1  # the finalist alone; the baseline was done


def test_the_wall_budget_stops_inside_a_rung_before_a_screen_that_would_not_fit(tiny_dataset_root, tmp_path):
    """A rung of CUDA builds takes minutes: the budget is asked before each screen, with the longest screen so far
    as the next one's estimate. The run stops inside rung 0, before the screen that would run past the budget,
    every candidate left ends NOT_EVALUATED with the reason, and the run ends DONE with its report."""
    import time

    def slow(solution):
        time.sleep(0.6)
        return "PASSED", speed(solution)

    report, fake, store, _ = run(tiny_dataset_root, tmp_path, {"screen_judge": slow}, budget_wall_s=2.2)
    assert report["status"] == "DONE"
    assert "the next step would not fit (~1 s, the longest of its kind so far), in round 1" in report["stop_reason"]
    # the baseline's evaluation, the round's proposals (up to 1 s on a loaded host) and two or three 0.6 s screens
    # fit in 2.2 s; the next would not
    assert 2 <= len(fake.screens) <= 3 and fake.calls == ["naive_per-kv-head_bn16_w1_s1_dot0_kv_load0_klmpps0"]
    statuses = [c["status"] for c in store.candidates(report["run_id"], 1)]
    assert statuses.count("NOT_EVALUATED") == len(statuses)  # no rung finished: nothing was decided
    assert report["rounds"][1]["screening"] == []


@pytest.mark.parametrize("spent, budget, expected, stop", [
    (10.0, None, 500.0, None),  # no budget
    (10.0, 100.0, 0.0, None),  # nothing of the kind ran yet: no estimate
    (10.0, 100.0, 60.0, None),
    (50.0, 100.0, 60.0, "would not fit (~60 s"),  # a CUDA build would run 10 s past it
    (100.0, 100.0, 0.0, "100 s wall time spent of 100 s"),
    (120.0, 100.0, 1.0, "120 s wall time spent of 100 s"),
])
def test_wall_budget_stop(spent, budget, expected, stop):
    from controller.plan import wall_budget_stop

    why = wall_budget_stop(spent, budget, expected)
    assert (why is None) if stop is None else (stop in why and why.startswith("budget: "))


# -- the harness's screening run ---------------------------------------------------------------------------


def test_a_screening_run_is_short_unaudited_on_the_given_workloads_and_still_rejects_wrong_numbers(
        tiny_dataset_root, tmp_path):
    """On the real harness (CPU): one correctness trial, the short run recorded in the submission's options, audits
    off, only the named workloads; wrong numbers fail the screen; the session's settings are back afterwards."""
    from controller.evaluator import HarnessEvaluator
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import SubmitOptions

    from support import TORCH_CANDIDATE, solution_dict

    archive = Archive(tmp_path / "a")
    evaluator = HarnessEvaluator(Dataset(tiny_dataset_root), archive,
                                 SubmitOptions(workloads=["tiny_b2_t40", "tiny_b3_t96"], timeout_s=60))
    try:
        good = Solution.model_validate(solution_dict(TORCH_CANDIDATE))
        wrong = Solution.model_validate(solution_dict(TORCH_CANDIDATE.replace("* sm_scale", "* sm_scale * 1.5"),
                                                      name="wrong"))
        sid = evaluator.screen(good, ["tiny_b2_t40"], 3, 1)
        row = archive.submission(sid)
        assert row["options"]["short_run"] == {"iterations": 3, "num_trials": 1}
        assert row["options"]["audit_level"] == "off" and len(row["evaluations"]) == 1
        assert row["evaluations"][0]["status"] == "PASSED"
        bad_row = archive.submission(evaluator.screen(wrong, ["tiny_b2_t40"], 3, 1))
        assert bad_row["evaluations"][0]["status"] == "INCORRECT_NUMERICAL"
        assert evaluator.session.options.workloads == ["tiny_b2_t40", "tiny_b3_t96"]
        full = archive.submission(evaluator.evaluate(good, on_start=lambda sid: None))
        assert "short_run" not in full["options"] and full["options"]["audit_level"] == "fast"
        assert full["options"]["preset"]["num_trials"] == 3 and len(full["evaluations"]) == 2
    finally:
        evaluator.close()
