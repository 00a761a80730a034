"""Search that does not stall (controller/search.py and the offline provider): a population per regime, a stall
rule, and a design switch when a regime stops improving; every decision in the archived response."""

from __future__ import annotations

import json

import pytest

from controller.providers.offline import OfflineProvider, config_key, naive_incumbent
from controller.search import SearchSettings, best_by_round, interleave, population, stalled
from controller.skills import SkillError, load_skills
from harness.data.generation_request import Budget, GenerationRequest, HistoryItem, Incumbent

from support import KV8_PS1, ROOT

R = "latency-bound"
PKV = "triton-per-kv-head"
SPLIT = "triton-split-kv"


def item(round_number, ms, template=PKV, block_n=16, status="PASSED", regime=R):
    return HistoryItem(round=round_number, name=f"c{round_number}_{block_n}_{template}", status=status,
                       origin={"template": template, "params": {"BLOCK_N": block_n}},
                       regime_latency_ms={} if ms is None else {regime: ms})


@pytest.mark.parametrize("history, expected", [
    ([], False),  # nothing tried
    ([item(0, 10.0), item(1, 9.0), item(2, 8.0)], False),  # improving every round
    ([item(0, 10.0), item(1, 9.9), item(2, 9.95)], True),  # two rounds within 2% of the best before them
    ([item(0, 10.0), item(1, 9.9), item(2, 9.7)], False),  # round 2 gained 3%: progress
    ([item(0, 10.0), item(1, 10.5)], False),  # only one round since the start: too early to call
    ([item(0, 10.0), item(1, None), item(2, 10.0), item(3, 10.1)], True),  # untimed rounds do not count
    ([item(0, 10.0), item(1, 12.0, regime="memory-bound"), item(2, 11.0, regime="memory-bound")], False),
])
def test_stalled(history, expected):
    assert stalled(history, R, SearchSettings(patience=2, min_gain=0.02)) is expected


def test_population_is_the_fastest_distinct_configurations_on_the_regime():
    history = [item(0, 10.0, block_n=16), item(1, 7.0, block_n=32), item(2, 6.5, template=SPLIT, block_n=32),
               item(2, 7.5, block_n=32), item(3, None, block_n=64), item(3, 5.0, block_n=128, regime="memory-bound")]
    got = population(history, R, 2)
    assert got == [{"template": SPLIT, "params": {"BLOCK_N": 32}}, {"template": PKV, "params": {"BLOCK_N": 32}}]
    assert best_by_round(history, R) == {0: 10.0, 1: 7.0, 2: 6.5}


FUSED = {"template": "triton-split-kv-fused", "params": {"BLOCK_N": 128}}
HEAD = {"template": PKV, "params": {"BLOCK_N": 64}}
DISPATCHED = {"template": "dispatch", "params": {"variants": {"latency-bound": FUSED, "memory-bound": HEAD},
                                                 "default": "memory-bound"}}


@pytest.mark.parametrize("regime, history, expected", [
    # a dispatching solution counts as the variant it runs on the regime, with its latency there
    ("latency-bound", [(DISPATCHED, {"latency-bound": 0.02, "memory-bound": 0.5})], [FUSED]),
    ("memory-bound", [(DISPATCHED, {"latency-bound": 0.02, "memory-bound": 0.5}),
                      ({"template": PKV, "params": {"BLOCK_N": 128}}, {"memory-bound": 0.45})],
     [{"template": PKV, "params": {"BLOCK_N": 128}}, HEAD]),
    # a regime it has no variant for gives nothing; the same variant judged alone keeps its faster figure
    ("skewed", [(DISPATCHED, {"skewed": 0.3})], []),
    ("latency-bound", [(DISPATCHED, {"latency-bound": 0.02}), (FUSED, {"latency-bound": 0.03})], [FUSED]),
])
def test_a_dispatching_solution_stands_for_its_variants(regime, history, expected):
    items = [HistoryItem(round=i + 1, name=f"c{i}", status="PASSED", origin=o, regime_latency_ms=lat)
             for i, (o, lat) in enumerate(history)]
    assert population(items, regime, 3) == expected


def test_interleave_gives_each_member_its_first_moves_early():
    assert interleave([1, 2, 3], [4], [5, 6]) == [1, 4, 5, 2, 6, 3]


def test_settings_are_data_and_unknown_keys_are_refused():
    assert SearchSettings.from_block({"patience": 3}).patience == 3
    assert SearchSettings.from_block(None) == SearchSettings()
    with pytest.raises(ValueError, match="unknown keys"):
        SearchSettings.from_block({"patients": 3})


@pytest.fixture(scope="module")
def skills():
    return load_skills(ROOT / "skills")


def request(skills, history, candidates=4, round_number=3):
    inc = naive_incumbent(skills, KV8_PS1)
    return GenerationRequest(run_id="run-s", round=round_number, key=f"r{round_number}/explore", definition=KV8_PS1,
                             regime=R, budget=Budget(max_candidates=candidates), history=history,
                             incumbent=Incumbent(name=inc.solution["name"], solution=inc.solution, origin=inc.origin))


def naive_history(skills, ms):
    inc = naive_incumbent(skills, KV8_PS1)
    return HistoryItem(round=0, name="naive", status="PASSED", origin=inc.origin, regime_latency_ms={R: ms})


def test_neighbours_of_the_runner_up_are_explored_too(skills):
    provider = OfflineProvider(skills)
    inc = naive_incumbent(skills, KV8_PS1)
    runner_up = {"template": SPLIT, "params": provider.generator_for(KV8_PS1).complete(SPLIT, {"SPLIT_KV": 16})}
    history = [naive_history(skills, 10.0), HistoryItem(round=1, name="ru", status="PASSED", origin=runner_up,
                                                        regime_latency_ms={R: 8.0})]
    origins = provider.propose(request(skills, history, candidates=6))
    # the second proposal is already a one-step move of the runner-up (same template, one parameter changed)
    moved = [o for o in origins if o["template"] == SPLIT and
             sum(o["params"][k] != v for k, v in runner_up["params"].items()) == 1]
    assert moved and origins.index(moved[0]) <= 1
    assert all(config_key(o) not in {config_key(inc.origin), config_key(runner_up)} for o in origins)


def test_a_stalled_regime_switches_design_first_and_says_so(skills):
    provider = OfflineProvider(skills)
    inc = naive_incumbent(skills, KV8_PS1)
    same = [naive_history(skills, 10.0),
            HistoryItem(round=1, name="a", status="PASSED", origin={**inc.origin, "params": {
                **inc.origin["params"], "BLOCK_N": 32}}, regime_latency_ms={R: 9.95}),
            HistoryItem(round=2, name="b", status="PASSED", origin={**inc.origin, "params": {
                **inc.origin["params"], "NUM_WARPS": 2}}, regime_latency_ms={R: 10.1})]
    response = provider.generate(request(skills, same))
    first = response.proposals[0]
    assert first.origin["template"] == SPLIT and "design switch" in first.notes
    search = json.loads(response.raw_text)["search"]
    assert search["stalled"] is True and search["regime"] == R and search["population"][0].startswith("per-kv-head")
    # without the stall the same request leads with neighbours of the incumbent, not a switch
    calm = provider.generate(request(skills, same[:1]))
    assert json.loads(calm.raw_text)["search"]["stalled"] is False
    assert "design switch" not in calm.proposals[0].notes


def test_two_step_jumps_when_every_design_is_already_in_the_population(skills):
    g = OfflineProvider(skills).generator_for(KV8_PS1)
    base = naive_incumbent(skills, KV8_PS1).origin
    jumps = g.far_moves(base)
    assert jumps and all(sum(j["params"][k] != v for k, v in base["params"].items()) == 2 for j in jumps)
    members = [base, *({"template": t, "params": g.complete(t, {})} for t in g.templates if t != base["template"])]
    assert g.escape(members, R)[0] == jumps[0]  # no template left to switch to: the jumps lead
    # with a template the population lacks, the switch comes first, from its defaults or starting point
    assert g.escape(members[:2], R)[0]["template"] not in {m["template"] for m in members[:2]}


def test_a_skill_with_bad_search_settings_is_refused_on_one_line(skills):
    from controller.providers.offline import OfflineGenerator

    skill = skills["gqa-decode"]
    line = "search: {population: 3, patience: 2, min_gain: 0.02,"
    assert line in skill.body  # the shipped settings are data in the skill
    broken = skill.model_copy(update={"body": skill.body.replace(line, "search: {patients: 2,")})
    with pytest.raises(SkillError, match="search"):
        OfflineGenerator(broken)


@pytest.mark.parametrize("within, expected", [
    (None, [16, 32, 64]),  # every configuration timed on the regime, fastest first
    (2.0, [16, 32]),  # 64 is 2.5x the best: no member
    (1.0, [16]),
])
def test_a_population_member_is_within_a_factor_of_the_best(within, expected):
    history = [item(0, 1.0, block_n=16), item(1, 1.9, block_n=32), item(1, 2.5, block_n=64)]
    assert [m["params"]["BLOCK_N"] for m in population(history, R, 3, within)] == expected


@pytest.mark.parametrize("block, problem", [
    ({"population_within": 0.5}, "population_within"),
    ({"first_moves": {"latency-bound": "CHUNK_BLOCKS"}}, "first_moves"),
    ({"first_moves": ["CHUNK_BLOCKS"]}, "first_moves"),
])
def test_bad_population_bounds_and_first_moves_are_refused(block, problem):
    with pytest.raises(ValueError, match=problem):
        SearchSettings.from_block(block)


def _round_two_of_the_seed_dispatch(skills, regime):
    """(the skill's round-1 dispatch on kv8 ps1, the offline provider's 8 proposals for a round 2 on ``regime``)."""
    provider = OfflineProvider(skills)
    g = provider.generator_for(KV8_PS1)
    naive = naive_incumbent(skills, KV8_PS1)
    dispatch = g.seed_dispatch([], naive.origin)
    solution = g.render_dispatch(dispatch, KV8_PS1, "r1_dispatch", "controller/offline", "H200")
    history = [naive_history(skills, 0.6),
               HistoryItem(round=1, name="r1_dispatch", status="PASSED", origin=dispatch,
                           regime_latency_ms={R: 0.03, "memory-bound": 0.4, "skewed": 0.1})]
    req = GenerationRequest(run_id="run-s", round=2, key="r2/explore", definition=KV8_PS1, regime=regime,
                            budget=Budget(max_candidates=8), history=history,
                            incumbent=Incumbent(name="r1_dispatch", solution=solution, origin=dispatch))
    return dispatch, provider.propose(req)


def test_round_two_of_a_dispatch_leads_with_the_skills_first_moves_and_leaves_the_naive_kernel_out(skills):
    """Run 16's round 2 (latency-bound, the skill's dispatch the incumbent): half its proposals were neighbours of
    the naive kernel (10-25x slower on the regime, all screened out) and the rest moved NUM_WARPS and NUM_STAGES,
    while what moved that regime in the sweeps was CHUNK_BLOCKS and the direct write (run 18: capping the registers,
    MAX_REGISTERS 168, lost on every kv4 batch, so it is no first move). Now the population holds only
    configurations near the best, and the skill's `first_moves` for the regime lead, each spliced into the
    incumbent's dispatch."""
    from controller.dispatch import DISPATCH

    dispatch, origins = _round_two_of_the_seed_dispatch(skills, R)
    assert len(origins) == 8 and all(o["template"] == DISPATCH for o in origins)
    start = dispatch["params"]["variants"][R]["params"]
    moved = []
    for o in origins:
        variant = o["params"]["variants"][R]
        assert variant["template"] == "triton-split-kv-fused"  # no neighbour of the naive per-KV-head kernel
        moved.append([(k, v) for k, v in variant["params"].items() if start.get(k) != v])
    # run 19: the bandwidth term (0 -> 2) took kv4's b64 x 2048 and b16 x 8192 past FlashInfer; kv8 page 1 starts its
    # chunks at 8 tiles (its definition's own starting point), one step from 16 and 4
    assert start["CHUNK_BLOCKS"] == 8
    assert moved[:4] == [[("CHUNK_BLOCKS", 16)], [("CHUNK_BLOCKS", 4)], [("SATURATING_PROGRAMS_PER_SM", 2)],
                         [("SINGLE_CHUNK_DIRECT", 1)]]
    assert [("MAX_REGISTERS", 168)] not in moved[:3]
    assert all(o["params"]["variants"]["memory-bound"] == dispatch["params"]["variants"]["memory-bound"]
               for o in origins)  # the change alone


def test_a_memory_bound_round_of_a_dispatch_leads_with_kv_load(skills):
    """Run 19: the per-KV-head kernel's KV_LOAD (the page index a step ahead, then TMA boxes) was what moved kv8 ps64's
    b256 x 8192 past FlashInfer; the skill makes it the memory-bound regime's first move."""
    dispatch, origins = _round_two_of_the_seed_dispatch(skills, "memory-bound")
    start = dispatch["params"]["variants"]["memory-bound"]["params"]
    first = origins[0]["params"]["variants"]["memory-bound"]
    assert first["template"] == "triton-per-kv-head" and start["KV_LOAD"] == 0
    assert [(k, v) for k, v in first["params"].items() if start.get(k) != v] == [("KV_LOAD", 1)]
