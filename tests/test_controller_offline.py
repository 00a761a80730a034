"""The offline provider: deterministic neighbours of the incumbent's template parameters, rendered from skills."""

from __future__ import annotations

import pytest

from controller.dispatch import DISPATCH
from controller.providers.offline import OfflineProvider, config_key, naive_incumbent
from harness.data.generation_request import Budget, GenerationRequest, HistoryItem, Incumbent, Repair
from controller.skills import kernel_templates, load_skills
from harness.sandbox.build import static_signature_problem
from harness.data.dataset import Dataset
from harness.data.schema import Solution

from support import DEFINITIONS, KV8_PS1, KV8_PS64, ROOT

# The gqa naive kernel, as it has always been: the skill's `naive:` entry must keep giving exactly this.
NAIVE_ORIGIN = {"template": "triton-per-kv-head", "params": {"BLOCK_N": 16, "NUM_WARPS": 1, "NUM_STAGES": 1,
                                                             "USE_DOT": 0, "KV_LOAD": 0,
                                                             "KV_LOAD_MIN_PROGRAMS_PER_SM": 0}}
PS1_SIGNATURE = ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale", "output", "lse"]
SKILLS_DIR = ROOT / "skills"


@pytest.fixture(scope="module")
def skills():
    return load_skills(SKILLS_DIR)


def request(skills, round_number=1, history=(), candidates=2, regime="latency-bound", repair=None, seed=0):
    inc = naive_incumbent(skills, KV8_PS1)
    return GenerationRequest(run_id="run-x", round=round_number, key=f"r{round_number}/explore",
                             kind="repair" if repair else "explore", definition=KV8_PS1, regime=regime,
                             incumbent=Incumbent(name=inc.solution["name"], solution=inc.solution, origin=inc.origin),
                             budget=Budget(max_candidates=candidates), history=list(history), repair=repair,
                             seed=seed, constraints={"dps_signature": PS1_SIGNATURE})


def test_naive_incumbent_is_a_rendered_template_the_harness_accepts(skills):
    inc = naive_incumbent(skills, KV8_PS1)
    solution = Solution.model_validate(inc.solution)
    # The templates choose `run` inside `if PAGE_SIZE == 1:`; the harness's static signature check must read
    # module-level ifs, or every offline candidate would be a COMPILE_ERROR before it runs.
    assert static_signature_problem(solution, Dataset(DEFINITIONS).definition(KV8_PS1)) is None
    assert inc.origin == NAIVE_ORIGIN and "PAGE_SIZE = 1" in solution.sources[0].content
    assert solution.spec.entry_point == "kernel.py::run" and solution.spec.language.value == "triton"


def test_same_request_same_candidates(skills):
    provider = OfflineProvider(skills)
    first = provider.generate(request(skills))
    second = OfflineProvider(skills).generate(request(skills))
    assert [p.solution for p in first.proposals] == [p.solution for p in second.proposals]
    assert len(first.proposals) == 2 and first.tokens_in == first.tokens_out == 0 and first.cost_usd == 0


def test_neighbours_are_one_step_moves_within_the_allowed_values(skills):
    proposed = OfflineProvider(skills).propose(request(skills, candidates=20))
    # a run's first round from the naive kernel leads with the skill's starting points as one dispatching solution
    assert proposed[0]["template"] == DISPATCH
    origins = proposed[1:]
    templates = kernel_templates(skills["gqa-decode"])
    base = NAIVE_ORIGIN["params"]
    for origin in origins:
        templates[origin["template"]].check({**origin["params"], "PAGE_SIZE": 1})
        if origin["template"] == NAIVE_ORIGIN["template"]:
            assert sum(origin["params"][k] != v for k, v in base.items()) == 1, origin
    assert origins[0] == {"template": "triton-per-kv-head", "params": {**base, "BLOCK_N": 32}}
    assert any(o["template"] == "triton-split-kv" for o in origins)  # a template switch is offered
    assert len({config_key(o) for o in origins}) == len(origins)


def test_rounds_rotate_and_history_is_not_repeated(skills):
    provider = OfflineProvider(skills)
    round1 = provider.propose(request(skills, round_number=1))
    round2 = provider.propose(request(skills, round_number=2))
    assert round1 != round2
    tried = [HistoryItem(round=1, name=f"c{i}", status="PASSED", origin=o) for i, o in enumerate(round1)]
    again = provider.propose(request(skills, round_number=1, history=tried))
    assert not {config_key(o) for o in again} & {config_key(o) for o in round1}
    assert NAIVE_ORIGIN not in again  # the incumbent itself is never proposed


def test_page_size_comes_from_the_definition(skills):
    req = request(skills).model_copy(update={"definition": KV8_PS64})
    req.constraints.dps_signature = PS1_SIGNATURE[:5] + ["kv_last_page_len"] + PS1_SIGNATURE[5:]
    proposals = OfflineProvider(skills).generate(req).proposals
    for proposal in proposals:  # the dispatching one's kernels too
        kernels = [f["content"] for f in proposal.solution["sources"] if f["path"].startswith(("kernel", "kernel_"))]
        assert kernels and all("PAGE_SIZE = 64" in k for k in kernels), proposal.origin
    source = next(p for p in proposals if p.origin["template"] != DISPATCH).solution["sources"][0]["content"]
    assert "kv_last_page_len, sm_scale, output, lse):" in source


def test_repair_falls_back_to_the_templates_known_good_defaults(skills):
    broken = {"template": "triton-per-kv-head", "params": {"BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 3,
                                                           "USE_DOT": 1}}
    repair = Repair(candidate_id=7, status="RUNTIME_ERROR", solution={}, origin=broken, log_excerpt="boom")
    origins = OfflineProvider(skills).propose(request(skills, candidates=1, repair=repair))
    templates = kernel_templates(skills["gqa-decode"])
    assert origins == [{"template": "triton-per-kv-head",
                        "params": {k: v for k, v in templates["triton-per-kv-head"].defaults.items()}}]


def test_exhausted_neighbourhood_says_so(skills):
    provider = OfflineProvider(skills)
    tried: list = []
    for _ in range(3):  # round 1 (with the skill's dispatch standing for the starting points), then what is left
        tried += [HistoryItem(round=1, name="x", status="PASSED", origin=o)
                  for o in provider.propose(request(skills, candidates=50, history=tried))]
    response = provider.generate(request(skills, history=tried))
    assert response.proposals == [] and "already tried" in response.stopped
