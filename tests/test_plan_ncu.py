"""The planner with ncu evidence (table-driven): limiter -> regime, hypothesis and tactic ids from the skills;
the offline provider turns the limiter into template moves; latency-only planning is unchanged."""

from __future__ import annotations

import pytest

from controller.evidence import WorkloadStat, build_evidence
from controller.plan import HYPOTHESES, plan_round, request_evidence
from controller.promote import EvalRecord
from controller.providers.offline import OfflineProvider
from harness.data.generation_request import Budget, Diagnosis, GenerationRequest, Incumbent
from controller.skills import load_skills, machine_blocks
from controller.tactics import diagnoses_by_regime, limiter_rows, tactic_book
from harness.profiling import OK, ProfileSummary, finish_summary, parse_ncu_csv

from support import KV8_PS1, ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"
SKILLS = load_skills(ROOT / "skills")


def summary_of(name: str, uuid: str) -> ProfileSummary:
    s = ProfileSummary(backend="ncu", status=OK, raw_csv=(FIXTURES / name).read_text(), workload_uuid=uuid)
    return finish_summary(s, parse_ncu_csv)


def record(uuid: str, regime: str, fraction=None, status="PASSED") -> EvalRecord:
    latency = None if fraction is None else 0.1
    return EvalRecord(workload=uuid, status=status, latency_ms=latency, fraction_of_floor=fraction, regime=regime)


def diagnosis_from(fixture: str, target: str = "H200", fraction=0.3) -> Diagnosis:
    stats = [WorkloadStat(uuid="w1", label="b1", axes={"batch_size": 1}, latency_ms=0.1, floor_ms=0.1 * fraction,
                          fraction_of_floor=fraction)]
    evidence = build_evidence("d", "s", stats, [summary_of(fixture, "w1")])
    found = diagnoses_by_regime(evidence.profiles, {"w1": "latency-bound"}, tactic_book(SKILLS, target))
    return found["latency-bound"]


# -- the skills' tables are what the planner reads ----------------------------------------------------------


def test_every_limiter_of_the_skill_has_a_tactic_row_and_template_moves_are_limiters():
    ncu_limiters = next(b for b in machine_blocks(SKILLS["ncu-profiling"]) if "limiters" in b)["limiters"]
    rows = limiter_rows(SKILLS["ncu-profiling"])
    assert set(ncu_limiters) == set(rows)
    assert rows["grid-too-small"].tactic.startswith("split-KV")
    book = tactic_book(SKILLS, "H200")
    assert book.arch_skill == "hopper-tactics" and book.limiter_order == list(ncu_limiters)
    assert set(book.arch_tactics) <= set(ncu_limiters)  # tactics are keyed by the same ids
    moves = next(b for b in machine_blocks(SKILLS["gqa-decode"]) if "templates" in b)["tactic_moves"]
    assert set(moves) <= set(ncu_limiters)


# -- limiter -> hypothesis, table-driven over the ncu fixtures ---------------------------------------------

CASES = [
    # fixture, target, classification, limiter, tactic ids of the arch skill, words of the first tactic
    ("synthetic_flashinfer_cuda_cores_sm90.csv", "H200", "latency-bound", "grid-too-small", ["split-kv"],
     "split-KV / more programs per request"),
    ("synthetic_triton_example_sm90.csv", "H200", "memory-bound", "register-occupancy", ["warp-specialisation"],
     "fewer warps per block"),
    ("synthetic_flashinfer_tensor_cores_sm90.csv", "H200", "memory-bound", "shared-memory-occupancy",
     ["fewer-stages-smaller-tiles"], "fewer pipeline stages"),
    ("synthetic_details_page_sm90.csv", "H200", "memory-bound", "dependent-loads", ["cp-async-pipeline"],
     "num_stages"),
    ("synthetic_b200_sm100.csv", "B200", "compute-bound", "tensor-pipe", ["two-cta-mma"], "larger MMA tiles"),
]


@pytest.mark.parametrize("fixture, target, classification, limiter, tactics, words", CASES)
def test_the_limiter_picks_the_hypothesis(fixture, target, classification, limiter, tactics, words):
    d = diagnosis_from(fixture, target)
    assert (d.classification, d.limiter, d.tactics) == (classification, limiter, tactics)
    assert d.verify and d.workload == "b1" and d.kernel
    plan = plan_round([record("w1", "latency-bound", 0.3)], {"latency-bound": d}, tactic_book(SKILLS, target))
    assert plan.regime == "latency-bound" and plan.diagnosis == d
    assert words in plan.hypothesis and f"limiter {limiter}" in plan.hypothesis
    assert f"limiter {limiter}" in plan.reason and plan.to_json()["diagnosis"]["limiter"] == limiter


def test_grid_too_small_facts_are_quoted():
    d = diagnosis_from("synthetic_flashinfer_cuda_cores_sm90.csv")
    assert d.facts["waves_per_sm"] == 0.19 and d.facts["dram_pct"] == 19.0
    assert "waves_per_sm 0.19" in plan_round([record("w1", "latency-bound", 0.3)], {"latency-bound": d},
                                             tactic_book(SKILLS, "H200")).hypothesis


# -- which regime ----------------------------------------------------------------------------------------

LAT = Diagnosis(classification="latency-bound", limiter="grid-too-small")
MEM = Diagnosis(classification="memory-bound", limiter="register-occupancy")
ROOF = Diagnosis(classification="at-roofline")
TIMED = [record("a", "latency-bound", 0.3), record("b", "memory-bound", 0.8)]


@pytest.mark.parametrize("records, diagnoses, regime, reason_words", [
    (TIMED, None, "latency-bound", ["furthest from the roofline (30%"]),  # latency only
    (TIMED, {"latency-bound": LAT, "memory-bound": MEM}, "latency-bound", ["limiter grid-too-small"]),
    (TIMED, {"latency-bound": ROOF, "memory-bound": MEM}, "memory-bound", ["latency-bound at the roofline",
                                                                          "limiter register-occupancy"]),
    (TIMED, {"latency-bound": ROOF, "memory-bound": ROOF}, "latency-bound", ["ncu: at-roofline"]),
    (TIMED, {"memory-bound": MEM}, "latency-bound", ["no ncu profile of this regime"]),
    ([record("a", "latency-bound"), record("b", "memory-bound", status="RUNTIME_ERROR")],
     {"latency-bound": LAT}, "memory-bound", ["1 failing", "no ncu profile"]),
])
def test_regime_choice(records, diagnoses, regime, reason_words):
    plan = plan_round(records, diagnoses, tactic_book(SKILLS, "H200"))
    assert plan.regime == regime
    for w in reason_words:
        assert w in plan.reason, plan.reason


def test_latency_only_planning_is_unchanged():
    for records in (TIMED, [], [record("a", "latency-bound", status="COMPILE_ERROR"), record("b", "memory-bound")]):
        plain = plan_round(records)
        assert plan_round(records, {}) == plain and plain.diagnosis is None and "diagnosis" not in plain.to_json()
    assert plan_round(TIMED).hypothesis == HYPOTHESES["latency-bound"]


def test_request_evidence_kinds():
    ncu = request_evidence([record("a", "x", 0.5)], "", "# Evidence: ncu", "profiled 2 workloads")
    assert (ncu.kind, ncu.source, ncu.markdown) == ("profile", "ncu", "# Evidence: ncu")
    lat = request_evidence([record("a", "x", 0.5)], "", None, "ncu not found on PATH")
    assert (lat.kind, lat.source, lat.note) == ("latency-only", "latency", "ncu not found on PATH")
    assert lat.markdown.endswith("No ncu profile: ncu not found on PATH")
    none = request_evidence([record("a", "x")], "no GPU on this host", None, "")
    assert (none.kind, none.source, none.note) == ("correctness-only", "latency", "")


# -- the offline provider acts on the limiter -------------------------------------------------------------

PER_HEAD = {"template": "triton-per-kv-head",
            "params": {"BLOCK_N": 32, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 1, "KV_LOAD": 0,
                       "KV_LOAD_MIN_PROGRAMS_PER_SM": 0}}
SPLIT = {"template": "triton-split-kv",
         "params": {"BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 1, "SPLIT_KV": 16}}
FUSED = {"template": "triton-split-kv-fused",
         "params": {"BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 1, "CHUNK_BLOCKS": 8,
                    "PROGRAMS_PER_SM": 2, "HEADS_FASTEST": 1, "MERGE_STAGES": 3, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1,
                    "MERGE_FANIN": 0, "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                    "MAX_REGISTERS": 0, "KV_LOAD": 0, "SATURATING_PROGRAMS_PER_SM": 0,
                    "ONE_REQUEST_SCALARS": 0, "ENOUGH_PROGRAMS": 0}}
FUSED_DEFAULTS = {"CHUNK_BLOCKS": 8, "PROGRAMS_PER_SM": 2, "HEADS_FASTEST": 1, "MERGE_STAGES": 3, "MERGE_UNROLL": 1,
                  "MERGE_BLOCK": 1, "MERGE_FANIN": 0, "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0,
                  "WAVE_SLOTS_PER_SM": 0, "MAX_REGISTERS": 0, "KV_LOAD": 0, "SATURATING_PROGRAMS_PER_SM": 0,
                  "ONE_REQUEST_SCALARS": 0, "ENOUGH_PROGRAMS": 0}


def request_with(origin: dict, diagnosis, candidates: int = 3) -> GenerationRequest:
    return GenerationRequest(run_id="r", round=1, key="r1/explore", definition=KV8_PS1, regime="latency-bound",
                             diagnosis=diagnosis, incumbent=Incumbent(name="inc", solution={}, origin=origin),
                             budget=Budget(max_candidates=candidates))


def moved(origin: dict, template: str = "", **params) -> dict:
    return {"template": template or origin["template"], "params": {**origin["params"], **params}}


@pytest.mark.parametrize("origin, limiter, first", [
    # to the fused plan, with the skill's defaults for what the old template lacked (SPLIT_KV has no place there)
    (PER_HEAD, "grid-too-small", [{"template": "triton-split-kv-fused",
                                   "params": {**{k: v for k, v in PER_HEAD["params"].items()
                                                 if k != "KV_LOAD_MIN_PROGRAMS_PER_SM"}, **FUSED_DEFAULTS}}]),
    (SPLIT, "grid-too-small", [{"template": "triton-split-kv-fused",
                                "params": {**{k: v for k, v in SPLIT["params"].items() if k != "SPLIT_KV"},
                                           **FUSED_DEFAULTS}}]),
    # one step up each, alone then together: more programs, and the merge in two levels for their partials
    (FUSED, "grid-too-small", [moved(FUSED, PROGRAMS_PER_SM=4), moved(FUSED, MERGE_FANIN=4),
                               moved(FUSED, PROGRAMS_PER_SM=4, MERGE_FANIN=4)]),
    (PER_HEAD, "register-occupancy", [moved(PER_HEAD, NUM_WARPS=2), moved(PER_HEAD, BLOCK_N=16),
                                      moved(PER_HEAD, NUM_WARPS=2, BLOCK_N=16)]),  # alone, then together
    # the fused kernel's merge unpipelined first: its 40 registers back at a group of 8 (a move on a placeholder the
    # per-KV-head template lacks is skipped there)
    (FUSED, "register-occupancy", [moved(FUSED, MERGE_STAGES=1), moved(FUSED, NUM_WARPS=2),
                                   moved(FUSED, BLOCK_N=32)]),
    (PER_HEAD, "dependent-loads", [moved(PER_HEAD, KV_LOAD=1), moved(PER_HEAD, NUM_STAGES=3),
                                   moved(PER_HEAD, BLOCK_N=64)]),
    # the fused kernel's page indices a step ahead first (the K/V tiles' pipeline deepens with NUM_STAGES)
    (FUSED, "dependent-loads", [moved(FUSED, KV_LOAD=1), moved(FUSED, NUM_STAGES=3), moved(FUSED, BLOCK_N=128)]),
    # TMA boxes lead where a page holds a box; page size 1 (this request's definition) narrows KV_LOAD to [0, 1], so
    # the move is dropped there and the plain bandwidth moves come first
    (FUSED, "memory-bandwidth", [moved(FUSED, BLOCK_N=128), moved(FUSED, NUM_STAGES=3)]),
    (SPLIT, "memory-bandwidth", [moved(SPLIT, BLOCK_N=128), moved(SPLIT, NUM_STAGES=3), moved(SPLIT, SPLIT_KV=32)]),
])
def test_offline_proposes_the_tactic_first(origin, limiter, first):
    provider = OfflineProvider(SKILLS)
    chosen = provider.propose(request_with(origin, Diagnosis(classification="x", limiter=limiter)))
    assert chosen[: len(first)] == first
    response = provider.generate(request_with(origin, Diagnosis(classification="x", limiter=limiter), 1))
    assert f"tactic for ncu limiter {limiter}" in response.proposals[0].notes


def test_offline_without_a_diagnosis_or_with_an_unmapped_limiter_is_unchanged():
    provider = OfflineProvider(SKILLS)
    plain = provider.propose(request_with(PER_HEAD, None))
    assert provider.propose(request_with(PER_HEAD, Diagnosis(classification="at-roofline"))) == plain
    assert provider.propose(request_with(PER_HEAD, Diagnosis(classification="x", limiter="launch-gaps"))) == plain


def test_offline_starting_point_follows_the_ncu_class():
    provider = OfflineProvider(SKILLS)
    no_template: dict = {"file": "mine.json"}
    assert provider.base(request_with(no_template, None))["template"] == "triton-split-kv-fused"  # latency-bound
    ncu_says = Diagnosis(classification="memory-bound", limiter="dependent-loads")
    assert provider.base(request_with(no_template, ncu_says))["template"] == "triton-per-kv-head"
    unknown = Diagnosis(classification="unknown")
    assert provider.base(request_with(no_template, unknown))["template"] == "triton-split-kv-fused"
