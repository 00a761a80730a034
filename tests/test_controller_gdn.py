"""The offline provider on the gdn family: each definition gets the gdn skill's template meant for it (never the
other's), the skill's naive kernel first, proposals that render destination-passing kernels, starting points
keyed by the family's regimes; end to end, `controller loop --definition gdn` runs a round of both definitions
through the real harness on CPU."""

from __future__ import annotations

import ast
import json

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.providers.offline import OfflineProvider, naive_incumbent, skill_for
from controller.skills import load_skills
from controller.store import Store
from gdn_support import DECODE, PREFILL, make_gdn_dataset
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.families import family_for
from harness.data.generation_request import Diagnosis, HistoryItem
from harness.data.schema import Solution
from support import DEFINITIONS, ROOT
from test_controller_offline_families import request

# prefill is offered both the recurrent and the chunked kernel; the first is the naive one
TEMPLATES = {DECODE: ["triton-gdn-decode"], PREFILL: ["triton-gdn-prefill", "triton-gdn-prefill-chunked"]}
NAIVE = {DECODE: {"BLOCK_V": 128, "NUM_WARPS": 8}, PREFILL: {"BLOCK_V": 128, "NUM_WARPS": 8, "NUM_STAGES": 1}}


@pytest.fixture(scope="module")
def skills():
    return load_skills(ROOT / "skills")


@pytest.fixture(scope="module")
def dataset():
    return Dataset(DEFINITIONS)




def run_parameters(solution: Solution) -> list[str]:
    (run,) = [n for n in ast.parse(solution.sources[0].content).body
              if isinstance(n, ast.FunctionDef) and n.name == solution.spec.entry_symbol]
    return [a.arg for a in run.args.args]


@pytest.mark.parametrize("name", [DECODE, PREFILL])
def test_each_definition_gets_its_template_naive_kernel_and_dps_proposals(name, skills, dataset):
    definition = dataset.definition(name)
    assert family_for(definition.op_type).skill == "gdn" and skill_for(skills, definition).name == "gdn"
    provider = OfflineProvider(skills, definition)
    assert list(provider.generator_for(name).templates) == TEMPLATES[name]
    inc = naive_incumbent(skills, definition)
    assert inc.origin == {"template": TEMPLATES[name][0], "params": NAIVE[name]}
    # the naive kernel sits at a corner (largest tile, most warps): one step down in each parameter, at least
    proposals = provider.generate(request(name, inc.origin, candidates=2)).proposals
    assert len(proposals) == 2 and len({json.dumps(p.origin, sort_keys=True) for p in proposals}) == 2
    for proposal in [inc, *proposals]:
        solution = Solution.model_validate(proposal.solution)
        assert solution.definition == name and solution.spec.destination_passing_style
        assert run_parameters(solution) == [*definition.inputs, *definition.outputs]


@pytest.mark.parametrize("name, other", [(DECODE, PREFILL), (PREFILL, DECODE)])
def test_the_other_definitions_template_is_never_offered(name, other, skills, dataset):
    """Not as a switch, not as a regime's starting point, not by a tactic, over several rounds."""
    provider = OfflineProvider(skills, dataset.definition(name))
    g = provider.generator_for(name)
    origin, seen = naive_incumbent(skills, dataset.definition(name)).origin, []
    for round_number in range(1, 4):
        for regime in g.starting_points:
            for limiter in [None, *g.tactic_moves]:
                diagnosis = Diagnosis(classification=regime, limiter=limiter) if limiter else None
                req = request(name, origin, round_number, 3, regime, diagnosis,
                              [HistoryItem(round=0, name="x", status="PASSED", origin=o) for o in seen])
                seen += provider.propose(req)
    assert seen and all(o["template"] in TEMPLATES[name] for o in seen), TEMPLATES[other]


def test_starting_points_are_keyed_by_the_familys_regimes_and_moves_by_known_limiters(skills, dataset):
    from controller.skills import machine_blocks

    regimes = {rule["name"] for rule in family_for("gdn").rules()}
    (block,) = machine_blocks(skills["gdn"])
    assert set(block["starting_points"]) <= regimes
    (ncu,) = machine_blocks(skills["ncu-profiling"])
    assert set(block["tactic_moves"]) <= set(ncu["limiters"])
    g = OfflineProvider(skills, dataset.definition(PREFILL)).generator_for(PREFILL)
    assert g.starting_point("prefill few long sequences")["params"]["BLOCK_V"] == 8
    assert g.starting_point("decode memory-bound") is None  # the decode template's, not offered here


def test_cli_loop_gdn_offline_one_round_of_both_definitions_through_the_harness(tmp_path, monkeypatch):
    """`controller loop --definition gdn` (the alias names both definitions) with the offline provider: per
    definition the naive kernel from the skill's `naive:` entry and one neighbour, all judged by the harness."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    root = make_gdn_dataset(tmp_path / "ds", {DECODE: ["b1_0"], PREFILL: ["t6_n1"]})
    archive = tmp_path / "archive"
    archive.mkdir()
    result = CliRunner().invoke(main, ["loop", "--definition", "gdn", "--rounds", "1", "--candidates", "1",
                                       "--repairs", "0", "--dataset", str(root), "--archive", str(archive),
                                       "--no-profile", "--timeout-s", "300", "--json"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert sorted(r["definition"] for r in reports) == [DECODE, PREFILL]
    store = Store(Archive(archive))
    for report in reports:
        assert report["provider"] == "offline" and report["status"] == "DONE", report
        assert [r["statuses"] for r in report["rounds"]] == [{"PASSED": 1}, {"PASSED": 1}], report["rounds"]
        names = [c["solution_name"] for c in store.candidates(report["run_id"])]
        tag = "decode" if report["definition"] == DECODE else "prefill"
        assert names[0].startswith(f"naive_gdn-{tag}_block_v128_w8") and names[1].startswith(f"r1_gdn-{tag}_"), names
