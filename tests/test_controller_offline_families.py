"""The offline provider serves every operator family whose skill ships a template: the skill is the family's,
the templates are those meant for the definition, fixed values and the first incumbent come from the skill's
data; a definition it cannot serve is one line and exit 2. End to end: `controller loop --definition moe` on a
tiny MoE definition through the real harness on CPU."""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.dispatch import DISPATCH
from controller.providers.offline import (SLUG_MAX, OfflineGenerator, OfflineProvider, fixed_values, naive_entry,
                                          config_key, naive_incumbent, narrowed_templates, offered_templates, skill_for,
                                          slug)
from controller.skills import KernelTemplate, SkillError, load_skills
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.families import OperatorFamily, register, unregister
from harness.data.generation_request import Budget, Diagnosis, GenerationRequest, HistoryItem, Incumbent
from harness.data.schema import Definition, Solution
from harness.sandbox.build import static_signature_problem

from support import DEFINITIONS, ROOT

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
DSA_ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
DSA_INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
GQA_PS64 = "gqa_paged_decode_h32_kv8_d128_ps64"

# definition -> (skill, templates offered, values fixed by the definition, the naive kernel's origin)
CASES = {
    GQA_PS64: ("gqa-decode", ["triton-per-kv-head", "triton-split-kv", "triton-split-kv-fused",
                              "cuda-mma-split-kv-fused"], {"PAGE_SIZE": 64},
               {"template": "triton-per-kv-head",
                "params": {"BLOCK_N": 16, "NUM_WARPS": 1, "NUM_STAGES": 1, "USE_DOT": 0, "KV_LOAD": 0,
                           "KV_LOAD_MIN_PROGRAMS_PER_SM": 0}}),
    MOE: ("moe-fp8", ["triton-moe-fp8"], {},
          {"template": "triton-moe-fp8",
           "params": {"BLOCK_M": 16, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 1, "DOT": "fp32"}}),
    # dsa-sparse lists one naive entry per template: each definition takes the one its template fits
    DSA_ATTENTION: ("dsa-sparse", ["triton-sparse-mla"], {"PAGE_SIZE": 64},
                    {"template": "triton-sparse-mla",
                     "params": {"BLOCK_N": 16, "SPLIT": 1, "NUM_WARPS": 4, "NUM_STAGES": 1}}),
    DSA_INDEXER: ("dsa-sparse", ["triton-topk-indexer"], {"PAGE_SIZE": 64},
                  {"template": "triton-topk-indexer", "params": {"BLOCK_N": 32, "NUM_WARPS": 4, "SELECT_WARPS": 4}}),
}


@pytest.fixture(scope="module")
def skills():
    return load_skills(ROOT / "skills")


@pytest.fixture(scope="module")
def dataset():
    return Dataset(DEFINITIONS)


def request(definition: str, origin: dict, round_number: int = 1, candidates: int = 2, regime: str = "",
            diagnosis=None, history=()) -> GenerationRequest:
    return GenerationRequest(run_id="run-x", round=round_number, key=f"r{round_number}/explore", definition=definition,
                             regime=regime, diagnosis=diagnosis, history=list(history),
                             incumbent=Incumbent(name="inc", solution={}, origin=origin),
                             budget=Budget(max_candidates=candidates))


def entry_parameters(solution: Solution, folder: Path) -> list[str]:
    """The entry point's parameters as Python sees them once the file is imported (a template may pick its
    `run` under a module-level `if`, so the text alone does not say)."""
    file = folder / f"{solution.name}.py"
    file.write_text(solution.sources[0].content)
    spec = importlib.util.spec_from_file_location(f"offline_rendered_{solution.name}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(inspect.signature(getattr(module, solution.spec.entry_symbol)).parameters)


@pytest.mark.parametrize("name", list(CASES))
def test_each_family_gets_its_skill_templates_fixed_values_and_naive_kernel(name, skills, dataset, tmp_path):
    skill, templates, fixed, naive = CASES[name]
    definition: Definition = dataset.definition(name)
    provider = OfflineProvider(skills, definition)
    generator = provider.generator_for(name)
    assert skill_for(skills, definition).name == skill and generator.skill.name == skill
    assert list(generator.templates) == templates
    assert {t: generator.fixed(generator.templates[t], name) for t in templates} == {t: fixed for t in templates}

    inc = naive_incumbent(skills, definition)
    assert inc.origin == naive
    proposals = provider.generate(request(name, inc.origin, candidates=3)).proposals
    assert len(proposals) == 3
    expected = [*definition.inputs, *definition.outputs]
    for proposal in [inc, *proposals]:
        solution = Solution.model_validate(proposal.solution)
        if proposal.origin["template"] == DISPATCH:  # gqa-decode's starting points, dispatched by regime
            assert solution.definition == name and solution.spec.entry_point == "dispatch.py::run"
            assert static_signature_problem(solution, definition) is None
            continue
        assert solution.definition == name and proposal.origin["template"] in templates
        assert entry_parameters(solution, tmp_path) == expected, solution.name
        for placeholder, value in fixed.items():
            assert f"{placeholder} = {value}" in solution.sources[0].content


@pytest.mark.parametrize("name, other", [(DSA_ATTENTION, "triton-topk-indexer"),
                                         (DSA_INDEXER, "triton-sparse-mla")])
def test_a_template_meant_for_the_other_definition_is_never_offered(name, other, skills, dataset):
    """Not as a template switch, not as a regime's starting point, not by a tactic, over many rounds."""
    provider = OfflineProvider(skills, dataset.definition(name))
    g = provider.generator_for(name)
    assert all(g.starting_point(regime) is None or g.starting_point(regime)["template"] != other
               for regime in g.starting_points)
    origin, seen = naive_incumbent(skills, dataset.definition(name)).origin, []
    for round_number in range(1, 7):
        for regime in g.starting_points:
            for limiter in [None, *g.tactic_moves]:
                diagnosis = Diagnosis(classification=regime, limiter=limiter) if limiter else None
                req = request(name, origin, round_number, 4, regime, diagnosis,
                              [HistoryItem(round=0, name="x", status="PASSED", origin=o) for o in seen])
                seen += provider.propose(req)
    assert seen and all(o["template"] != other for o in seen)
    assert provider.base(request(name, {"file": "mine.json"}, regime="select-all" if other == "triton-sparse-mla"
                                 else "latency-bound"))["template"] != other


def test_without_a_definition_the_provider_finds_the_skill_that_lists_the_name(skills):
    """Callers that know only a name (no op_type) get the skill whose front matter lists it."""
    provider = OfflineProvider(skills)
    assert provider.generator_for(DSA_INDEXER).skill.name == "dsa-sparse"
    assert list(provider.generator_for(GQA_PS64).templates) == CASES[GQA_PS64][1]
    with pytest.raises(SkillError, match="no skill lists definition 'nobody_lists_me'"):
        provider.generator_for("nobody_lists_me")


# -- what it cannot serve ------------------------------------------------------------------------------------


class _Family(OperatorFamily):
    def __init__(self, op_type: str, skill: str):
        self.op_type, self.skill = op_type, skill


@pytest.mark.parametrize("skill, message", [
    ("", "op_type 'offline_test_op' has no skill (its operator family names none)"),
    ("no-such-skill", "skill 'no-such-skill' (of op_type 'offline_test_op') is not in the skills folder"),
    ("promotion-rules", "skill 'promotion-rules' (of op_type 'offline_test_op') ships no kernel template"),
], ids=["no skill", "missing skill", "no template"])
def test_a_family_without_a_usable_skill_is_one_line(skill, message, skills, dataset):
    definition = dataset.definition(GQA_PS64).model_copy(update={"op_type": "offline_test_op", "name": "x_def"})
    register(_Family("offline_test_op", skill))
    try:
        for call in (lambda: skill_for(skills, definition), lambda: OfflineProvider(skills, definition),
                     lambda: naive_incumbent(skills, definition)):
            with pytest.raises(SkillError) as caught:
                call()
            assert message in str(caught.value) and "\n" not in str(caught.value)
    finally:
        unregister("offline_test_op")


def template(name: str, fixed: list[str]) -> KernelTemplate:
    return KernelTemplate(name=name, path=f"{name}.tmpl", language="triton",
                          placeholders={"PAGE_SIZE": [1, 64], "BLOCK_N": [16]}, fixed_by_definition=fixed)


def test_the_skill_data_decides_templates_fixed_values_and_the_naive_kernel():
    templates = {"a": template("a", ["PAGE_SIZE"]), "b": template("b", [])}
    assert list(offered_templates(templates, {}, "w")) == ["a", "b"]
    assert list(offered_templates(templates, {"template": "b"}, "w")) == ["b"]
    assert list(offered_templates(templates, {"template": ["b", "a"]}, "w")) == ["b", "a"]
    with pytest.raises(SkillError, match="names \\['c'\\]"):
        offered_templates(templates, {"template": "c"}, "w")
    assert fixed_values(templates["a"], {"page_size": 64}, "w") == {"PAGE_SIZE": 64}
    assert fixed_values(templates["b"], {}, "w") == {}
    with pytest.raises(SkillError, match="fixes PAGE_SIZE by definition.*no 'page_size'"):
        fixed_values(templates["a"], {"head_dim": 128}, "w")
    entries = [{"template": "a", "BLOCK_N": 16}, {"template": "b", "BLOCK_N": 16}]
    assert naive_entry(entries, {"b": templates["b"]}) == {"template": "b", "params": {"BLOCK_N": 16}}
    assert naive_entry(entries[0], templates) == {"template": "a", "params": {"BLOCK_N": 16}}
    assert naive_entry(entries[0], {"b": templates["b"]}) is None and naive_entry(None, templates) is None


@pytest.mark.parametrize("keep, allowed", [
    ({}, [0, 1, 2]),
    ({"LOAD": [0, 1]}, [0, 1]),  # page size 1: no TMA box to take
    ({"LOAD": [2, 0, 7]}, [0, 2]),  # the template's order; a value it never allowed is not added
    ({"OTHER": [1]}, [0, 1, 2]),  # another template's placeholder: this one is unchanged
])
def test_a_definition_narrows_a_placeholders_allowed_values(keep, allowed):
    t = KernelTemplate(name="a", path="a.tmpl", language="triton", placeholders={"LOAD": [0, 1, 2]},
                       defaults={"LOAD": 0})
    assert t.narrowed(keep).placeholders["LOAD"] == allowed
    assert t.placeholders["LOAD"] == [0, 1, 2]  # the skill's own template is left as it is


@pytest.mark.parametrize("keep, message", [
    ({"LOAD": [1, 2]}, "must hold the default 0"),
    ({"LOAD": [9]}, "leaves nothing"),
])
def test_narrowing_that_drops_the_default_or_everything_is_refused(keep, message):
    t = KernelTemplate(name="a", path="a.tmpl", language="triton", placeholders={"LOAD": [0, 1, 2]},
                       defaults={"LOAD": 0})
    with pytest.raises(SkillError, match=message):
        t.narrowed(keep)
    with pytest.raises(SkillError, match="^w: template 'a'"):
        narrowed_templates({"a": t}, {"narrow": keep}, "w")


def test_narrowing_a_placeholder_no_template_has_is_refused():
    with pytest.raises(SkillError, match="unknown: \\['BLOK_N'\\]"):
        narrowed_templates({"a": template("a", [])}, {"narrow": {"BLOK_N": [16]}}, "w")


def test_the_gqa_generator_never_offers_a_tma_box_at_page_size_1():
    """The shipped skill narrows KV_LOAD to [0, 1] on page size 1: no neighbour, tactic or completion reaches 2 there,
    while page size 64 keeps it (the memory-bandwidth tactic's first move)."""
    skills = load_skills(ROOT / "skills")
    for definition, allowed in [(GQA_PS64, [0, 1, 2]), (GQA_PS64.replace("ps64", "ps1"), [0, 1])]:
        generator = OfflineGenerator(skills["gqa-decode"], definition)
        start = generator.starting_point("latency-bound")
        start = {**start, "params": {**start["params"], "KV_LOAD": 1}}  # one step from both 0 and 2
        assert generator.templates["triton-split-kv-fused"].placeholders["KV_LOAD"] == allowed
        values = {m["params"].get("KV_LOAD") for m in generator.neighbours(start, "latency-bound", 0)
                  + generator.tactic_options(start, "memory-bandwidth") + generator.far_moves(start)}
        assert values - {None} == set(allowed)
        assert generator.complete("triton-split-kv-fused", {"KV_LOAD": 2})["KV_LOAD"] == (2 if 2 in allowed else 0)


def test_cli_loop_on_a_definition_without_a_skill_exits_2_on_one_line(tmp_path):
    root = tmp_path / "ds"
    (root / "definitions" / "offline_test_op").mkdir(parents=True)
    d = json.loads((DEFINITIONS / "definitions" / "gqa_paged" / f"{GQA_PS64}.json").read_text())
    d.update(name="mystery_def", op_type="offline_test_op")
    (root / "definitions" / "offline_test_op" / "mystery_def.json").write_text(json.dumps(d))
    archive = tmp_path / "archive"
    archive.mkdir()
    result = CliRunner().invoke(main, ["loop", "--definition", "mystery_def", "--provider", "offline", "--dataset",
                                       str(root), "--archive", str(archive), "--no-profile"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: definition 'mystery_def': op_type 'offline_test_op' "
                                                   "has no skill"), result.stderr
    assert Store(Archive(archive)).runs() == []  # nothing archived for a run that could not start


# -- end to end --------------------------------------------------------------------------------------------


def test_cli_loop_moe_offline_one_round_through_the_harness(tmp_path, monkeypatch):
    """`controller loop --definition moe` (the alias, here naming a tiny MoE definition) with the offline
    provider: the naive kernel from the skill's `naive:` entry and a neighbour, both judged by the harness."""
    from moe_support import TINY, make_moe_dataset

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    root = make_moe_dataset(tmp_path / "ds", {"moe_t1": (1, 0)})
    (root / "aliases.yaml").write_text(f"moe:\n  - {TINY}\n")
    archive = tmp_path / "archive"
    archive.mkdir()
    result = CliRunner().invoke(main, ["loop", "--definition", "moe", "--rounds", "1", "--candidates", "1",
                                       "--repairs", "0", "--dataset", str(root), "--archive", str(archive),
                                       "--no-profile", "--timeout-s", "300", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["provider"] == "offline" and report["definition"] == TINY and report["status"] == "DONE"
    assert [r["statuses"] for r in report["rounds"]] == [{"PASSED": 1}, {"PASSED": 1}]
    store = Store(Archive(archive))
    names = [c["solution_name"] for c in store.candidates(report["run_id"])]
    assert names == ["naive_moe-fp8_block_m16_bn64_w4_s1_dotfp32", "r1_moe-fp8_block_m32_bn64_w4_s1_dotfp32"]
    assert all(c["submission_id"] for c in store.candidates(report["run_id"]))


def test_a_configurations_name_fits_a_file_name_and_stays_unique():
    """The fused template's every parameter spelled out runs past a file name's 255 bytes (a sweep writes
    `sweep3_<name>.json`): past SLUG_MAX the rest is a digest of the whole configuration; short names stay as
    they were."""
    # the skill's own latency-bound start (each definition lays its own over it)
    generator = OfflineGenerator(load_skills(ROOT / "skills")["gqa-decode"])
    start = generator.starting_point("latency-bound")
    configurations = [start, *generator.neighbours(start, "latency-bound", 0)]
    names = {slug(m) for m in configurations}
    assert len(names) == len({config_key(m) for m in configurations})  # every configuration its own name
    assert all(len(n) <= SLUG_MAX for n in names)
    assert slug(start) == ("split-kv-fused_bn128_w4_s2_dot2_chunk_blocks16_pps2_heads_fastest1_merge_stages3"
                           "_merge_unroll1_merge_block1_merge_fanin8_mcb1_scd0_wsps-1_max_registers0_kv_load0_spps0"
                           "_ors1_enough_programs0")
    many = {"template": "t", "params": {f"PARAMETER_{i}": i for i in range(40)}}
    assert len(slug(many)) == SLUG_MAX and slug(many) != slug({**many, "params": {**many["params"], "PARAMETER_39": 0}})
    short = {"template": "triton-per-kv-head", "params": {"BLOCK_N": 64, "NUM_WARPS": 4}}
    assert slug(short) == "per-kv-head_bn64_w4"
