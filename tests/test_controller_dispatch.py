"""Dispatch by shape (controller/dispatch.py, the offline provider's dispatching candidates, the gqa-decode skill's
regime function): one solution of per-regime winners that picks its kernel per batch in setup, judged by the
harness like any other candidate."""

from __future__ import annotations

import ast
import importlib.util
import json

import pytest
import torch

from controller.dispatch import DISPATCH, dispatch_origin, dispatcher_source, splice, worth_dispatching
from controller.loop import run_loop
from controller.providers.offline import OfflineProvider, naive_incumbent
from controller.skills import load_skills
from controller.store import Store
from harness.archive.database import Archive
from harness.audits.static_gate import load_policy, scan_sources
from harness.data.dataset import Dataset
from harness.data.generation_request import Budget, GenerationRequest, HistoryItem, Incumbent
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.sandbox.build import static_signature_problem

from loop_support import WORKLOAD, FakeEvaluator, config
from support import DEFINITIONS, KV8_PS1, KV8_PS64, ROOT

SKILL = ROOT / "skills" / "gqa-decode"
GQA_DECODE = [KV8_PS1, KV8_PS64, "gqa_paged_decode_h32_kv4_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps64"]


def _regime_module():
    spec = importlib.util.spec_from_file_location("regime_dispatch", SKILL / "references" / "regime_dispatch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _batch(lengths, page_size=1, kv_heads=8):
    pages = [-(-n // page_size) for n in lengths]
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=torch.int32)
    q = torch.zeros(len(lengths), 32, 128)
    k = torch.zeros(1, page_size, kv_heads, 128)
    last = torch.tensor([n - (p - 1) * page_size if p else 0 for n, p in zip(lengths, pages)], dtype=torch.int32)
    rest = (last, 0.088) if page_size > 1 else (0.088,)
    return (q, k, k, indptr, torch.zeros(int(indptr[-1]), dtype=torch.int32), *rest)


@pytest.mark.parametrize("lengths, page_size, expected", [
    ([8192], 1, "latency-bound"),  # batch 1 x 8 KV heads: 8 programs for 132 SMs
    ([1024] * 64, 1, "memory-bound"),  # 512 programs
    ([8192] + [256] * 15, 1, "skewed"),  # the long request is 6.4x the mean
    ([8192] + [256] * 15, 64, "skewed"),
    ([100, 130, 64], 64, "latency-bound"),  # partial last pages counted by kv_last_page_len
    ([4096] * 17, 64, "latency-bound"),  # 136 programs: fewer than two per SM
    ([4096] * 33, 64, "memory-bound"),  # 264 programs: two per SM
])
def test_the_skills_regime_function(lengths, page_size, expected):
    assert _regime_module().regime(*_batch(lengths, page_size)) == expected


@pytest.mark.parametrize("kv_heads", [4, 8])
def test_the_harness_and_the_skills_dispatch_name_the_same_regime(kv_heads):
    """The harness groups workloads (evidence, planning, the splice) by the regime a dispatching solution will run
    them in: both rules must agree at every batch size, the two-programs-per-SM boundary included."""
    from harness.families import family_for

    family = family_for("gqa_paged")
    mod = _regime_module()
    for batch in range(1, 80):
        axes = {"batch_size": batch, "num_kv_heads": kv_heads}
        assert mod.regime(*_batch([128] * batch, 1, kv_heads)) == family.regime(axes), batch
    assert family.regime({"batch_size": 64, "num_kv_heads": 4}) == "latency-bound"  # 256 programs, 132 SMs
    assert family.regime({"batch_size": 64, "num_kv_heads": 8}) == "memory-bound"


def test_lengths_from_a_paged_table():
    mod = _regime_module()
    assert mod.request_lengths(torch.tensor([0, 2, 2, 5]), torch.tensor([10, 0, 64]), 64) == [74, 0, 192]


@pytest.mark.parametrize("winners, expected", [
    ({"a": {"template": "t", "params": {"X": 1}}, "b": {"template": "t", "params": {"X": 1}}}, False),
    ({"a": {"template": "t", "params": {"X": 1}}, "b": {"template": "t", "params": {"X": 2}}}, True),
    ({"a": {"template": "t", "params": {"X": 1}}}, False),
])
def test_worth_dispatching_only_when_regimes_disagree(winners, expected):
    assert worth_dispatching(winners) is expected


def test_the_dispatcher_maps_every_regime_and_falls_back_to_the_default():
    text = dispatcher_source({"latency-bound": "kernel_1", "memory-bound": "kernel_0", "skewed": "kernel_1"},
                             "memory-bound")
    ast.parse(text)
    assert "from . import kernel_0, kernel_1" in text and "'skewed': kernel_1" in text
    assert "MODULES.get(regime(*inputs), kernel_0)" in text and "PLANS = {}" in text
    planned = dispatcher_source({"latency-bound": "kernel_1", "memory-bound": "kernel_0"}, "memory-bound",
                                frozenset({"kernel_1"}))
    assert "PLANS = {kernel_1: kernel_1.plan}" in planned


@pytest.fixture(scope="module")
def skills():
    return load_skills(ROOT / "skills")


def _request(skills, definition, history):
    inc = naive_incumbent(skills, definition)
    return GenerationRequest(run_id="run-d", round=2, key="r2/explore", definition=definition, regime="memory-bound",
                             budget=Budget(max_candidates=2), history=history,
                             incumbent=Incumbent(name=inc.solution["name"], solution=inc.solution, origin=inc.origin))


def _winners_history(provider, definition, small="triton-split-kv"):
    g = provider.generator_for(definition)
    split = {"template": small, "params": g.complete(small, {"SPLIT_KV": 2, "CHUNK_BLOCKS": 2, "BLOCK_N": 16,
                                                             "USE_DOT": 0})}
    per_head = {"template": "triton-per-kv-head", "params": g.complete("triton-per-kv-head", {"BLOCK_N": 16,
                                                                                             "USE_DOT": 0})}
    return [HistoryItem(round=1, name="s", status="PASSED", origin=split,
                        regime_latency_ms={"latency-bound": 0.02, "memory-bound": 0.9}),
            HistoryItem(round=1, name="p", status="PASSED", origin=per_head,
                        regime_latency_ms={"latency-bound": 0.2, "memory-bound": 0.5})]


@pytest.mark.parametrize("definition", [KV8_PS1, KV8_PS64])
def test_regimes_that_disagree_get_a_dispatching_candidate_the_harness_accepts(skills, definition):
    provider = OfflineProvider(skills)
    response = provider.generate(_request(skills, definition, _winners_history(provider, definition)))
    first = response.proposals[0]
    assert first.origin["template"] == DISPATCH
    variants = first.origin["params"]["variants"]
    assert variants["latency-bound"]["template"] == "triton-split-kv"
    assert variants["memory-bound"]["template"] == "triton-per-kv-head"
    solution = Solution.model_validate(first.solution)
    assert [s.path for s in solution.sources] == ["kernel_0.py", "kernel_1.py", "regime.py", "dispatch.py"]
    assert solution.spec.setup == "dispatch.py::plan" and solution.spec.entry_point == "dispatch.py::run"
    assert static_signature_problem(solution, Dataset(DEFINITIONS).definition(definition)) is None
    findings = scan_sources({x.path: x.content for x in solution.sources}, "triton", load_policy(definition=definition))
    errors = [f for f in findings if f.severity == "error"]
    assert not errors, errors
    # proposed once: with it in the history, the next request moves on
    tried = HistoryItem(round=2, name="d", status="PASSED", origin=first.origin)
    again = provider.propose(_request(skills, definition, [*_winners_history(provider, definition), tried]))
    assert all(o["template"] != DISPATCH for o in again)


@pytest.mark.parametrize("small", ["triton-split-kv", "triton-split-kv-fused"])
def test_a_dispatching_solution_passes_through_the_harness(skills, tiny_dataset_root, tmp_path, small):
    """On CPU the tiny batch is latency-bound: the dispatcher runs the small-batch winner (with its own plan, for
    the fused template) and must match the reference."""
    provider = OfflineProvider(skills)
    proposal = provider.generate(_request(skills, KV8_PS1, _winners_history(provider, KV8_PS1, small))).proposals[0]
    assert proposal.origin["params"]["variants"]["latency-bound"]["template"] == small
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300)) as session:
        result = session.submit(Solution.model_validate(proposal.solution))
    assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message


def _naive_history(skills, definition):
    inc = naive_incumbent(skills, definition)
    return [HistoryItem(round=0, name=inc.solution["name"], status="PASSED", origin=inc.origin,
                        regime_latency_ms={"latency-bound": 0.5, "memory-bound": 2.0, "skewed": 1.0})]


@pytest.mark.parametrize("definition", GQA_DECODE)
def test_round_one_proposes_the_skills_starting_points_as_one_dispatching_solution(skills, definition):
    """Before the search has a winner per regime, the skill's starting points (split-KV plan for small and skewed
    batches, one program per KV head for large ones) are the first candidate, dispatching by regime."""
    provider = OfflineProvider(skills)
    g = provider.generator_for(definition)
    first = provider.propose(_request(skills, definition, _naive_history(skills, definition)))[0]
    assert first["template"] == DISPATCH
    assert first["params"]["variants"] == {r: g.starting_point(r) for r in ("latency-bound", "memory-bound", "skewed")}
    assert first["params"]["variants"]["memory-bound"]["template"] == "triton-per-kv-head"
    assert first["params"]["variants"]["latency-bound"]["template"] == "triton-split-kv-fused"
    proposal = provider.generate(_request(skills, definition, _naive_history(skills, definition))).proposals[0]
    assert "the skill's starting points" in proposal.notes
    solution = Solution.model_validate(proposal.solution)
    assert static_signature_problem(solution, Dataset(DEFINITIONS).definition(definition)) is None
    # once any dispatching solution was judged, only per-regime winners that disagree make another
    tried = HistoryItem(round=1, name="d", status="SCREENED_OUT", origin=first)
    again = provider.propose(_request(skills, definition, [*_naive_history(skills, definition), tried]))
    assert all(o["template"] != DISPATCH for o in again)


def test_the_skills_dispatching_solution_passes_through_the_harness(skills, tiny_dataset_root, tmp_path):
    """The starting points as they ship (bf16 tiles to tl.dot, 128-token tiles) behind the dispatcher, on CPU."""
    provider = OfflineProvider(skills)
    proposal = provider.generate(_request(skills, KV8_PS1, _naive_history(skills, KV8_PS1))).proposals[0]
    assert proposal.origin["template"] == DISPATCH
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300)) as session:
        result = session.submit(Solution.model_validate(proposal.solution))
    assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message


def test_a_loop_from_the_naive_kernel_judges_the_skills_dispatch_in_round_one(tiny_dataset_root, tmp_path):
    """Wired through the loop: round 1 proposes the starting points as one dispatching solution next to the naive
    kernel's neighbours, and promotes it where it is the fastest; round 2 does not propose it again."""
    archive = Archive(tmp_path / "a")

    def judge(s):  # the dispatching solution 0.4 ms, every other candidate 0.8, the naive kernel 1.0
        if s is None or s.name.startswith("naive"):
            return "PASSED", 1.0
        return "PASSED", 0.4 if s.spec.entry_point == "dispatch.py::run" else 0.8

    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], judge)
    report = run_loop(config(tiny_dataset_root, rounds=2, candidates=2), tmp_path / "a",
                      provider=OfflineProvider(load_skills(ROOT / "skills")), evaluator=fake)
    (promoted,) = [d for d in report["decisions"] if d["verdict"] == "PROMOTED"]
    assert promoted["round"] == 1 and promoted["candidate"].startswith("r1_dispatch_")
    assert report["incumbent"]["name"] == promoted["candidate"]
    # Round 2 plans one regime; each candidate is the promoted dispatch with that regime's kernel replaced (never
    # the round-1 dispatch again, nor a lone kernel that would be judged against the dispatch on every regime).
    store = Store(archive)
    regime = store.round(report["run_id"], 2)["plan"]
    regime = (json.loads(regime) if isinstance(regime, str) else regime)["regime"]
    incumbent = _variants(store, report["run_id"], promoted["candidate"])
    round2 = [c for c in store.candidates(report["run_id"], 2)]
    assert round2
    for c in round2:
        variants = _variants(store, report["run_id"], c["solution_name"])
        assert c["solution_name"] != promoted["candidate"]
        assert {r: v for r, v in variants.items() if r != regime} == \
            {r: v for r, v in incumbent.items() if r != regime}
        assert variants[regime] != incumbent[regime]


def _variants(store, run_id, name):
    """A dispatching candidate's kernel per regime, from its description (slugs)."""
    (c,) = [c for r in (1, 2) for c in store.candidates(run_id, r) if c["solution_name"] == name]
    return json.loads(store.solution(c).description.removeprefix("dispatch by regime: "))


def test_the_starting_points_are_not_proposed_alone_next_to_their_dispatch(skills):
    """On the regime a round screens, a starting point alone runs the same kernel as the dispatching solution that
    holds it: the two would tie, and the finalist would be chosen by noise."""
    provider = OfflineProvider(skills)
    g = provider.generator_for(KV8_PS1)
    proposed = provider.propose(_request(skills, KV8_PS1, _naive_history(skills, KV8_PS1)).model_copy(
        update={"budget": Budget(max_candidates=40)}))
    starts = [g.starting_point(r) for r in ("latency-bound", "memory-bound", "skewed")]
    assert proposed[0]["template"] == DISPATCH and len(proposed) >= 5
    assert not [o for o in proposed if o in starts]
    naive = naive_incumbent(skills, KV8_PS1).origin
    assert any(o in starts for o in g.neighbours(naive, "latency-bound", 0))  # what it would have had


def test_the_skills_dispatch_runs_its_large_batch_kernel_right(tmp_path):
    """33 requests x 8 KV heads give every SM two programs (memory-bound): the dispatcher runs the per-KV-head
    starting point (bf16 tiles, 3 stages, no plan of its own), which must match the reference like the planned
    kernel does."""
    import json as _json

    from support import make_tiny_dataset

    root = make_tiny_dataset(tmp_path / "dataset")
    uuid = "00000000-0000-4000-8000-000000000017"
    workload = {"uuid": uuid, "axes": {"batch_size": 33, "num_pages": 160, "len_indptr": 34, "num_kv_indices": 132},
                "inputs": {"sm_scale": {"type": "scalar", "value": 0.08838834764831845}}}
    lines = root / "workloads" / "gqa_paged" / f"{KV8_PS1}.jsonl"
    lines.write_text(lines.read_text() + _json.dumps({"definition": KV8_PS1, "solution": None, "workload": workload,
                                                      "evaluation": None}) + "\n")
    labels = root / "workloads" / "gqa_paged" / "labels.json"
    labels.write_text(_json.dumps({**_json.loads(labels.read_text()), uuid: "tiny_b33_t132"}))
    skills = load_skills(ROOT / "skills")
    batch = _batch([4] * 33)
    assert _regime_module().regime(*batch) == "memory-bound"
    proposal = OfflineProvider(skills).generate(_request(skills, KV8_PS1, _naive_history(skills, KV8_PS1))).proposals[0]
    assert proposal.origin["template"] == DISPATCH
    with Session(Dataset(root), Archive(tmp_path / "a"), SubmitOptions(workloads=["tiny_b33_t132"], timeout_s=300)) \
            as session:
        result = session.submit(Solution.model_validate(proposal.solution))
    assert [w.status for w in result.workloads] == ["PASSED"], result.workloads[0].message


A = {"template": "triton-split-kv-fused", "params": {"BLOCK_N": 128}}
B = {"template": "triton-per-kv-head", "params": {"BLOCK_N": 64}}
C = {"template": "triton-per-kv-head", "params": {"BLOCK_N": 128}}
DISPATCHING = dispatch_origin({"latency-bound": A, "memory-bound": B, "skewed": A}, "memory-bound")


@pytest.mark.parametrize("incumbent, regime, variant, expected", [
    (DISPATCHING, "memory-bound", C, {"latency-bound": A, "memory-bound": C, "skewed": A}),
    (DISPATCHING, "skewed", B, {"latency-bound": A, "memory-bound": B, "skewed": B}),
    (DISPATCHING, "batch-1", C, None),  # a regime the dispatch does not have
    (A, "memory-bound", C, None),  # the incumbent does not dispatch
    (DISPATCHING, "memory-bound", DISPATCHING, None),  # a dispatch is not put inside a dispatch
    (DISPATCHING, "memory-bound", {"params": {}}, None),
])
def test_splice(incumbent, regime, variant, expected):
    out = splice(incumbent, regime, variant)
    if expected is None:
        assert out is None
    else:
        assert out == {"template": DISPATCH, "params": {"variants": expected, "default": "memory-bound"}}
        assert incumbent["params"]["variants"]["memory-bound"] == B  # the incumbent itself is left as it was


def test_with_a_dispatching_incumbent_a_regime_round_proposes_that_dispatch_with_the_regime_changed(skills):
    """Each kernel proposed for the planned regime goes into the incumbent's dispatch in that regime's place; the
    incumbent's own kernel for it is never proposed (alone or spliced), and the notes say what changed."""
    provider = OfflineProvider(skills)
    g = provider.generator_for(KV8_PS1)
    seed = provider.propose(_request(skills, KV8_PS1, _naive_history(skills, KV8_PS1)))[0]
    judged = HistoryItem(round=1, name="r1_dispatch", status="PASSED", origin=seed)
    request = _request(skills, KV8_PS1, [*_naive_history(skills, KV8_PS1), judged]).model_copy(update={
        "incumbent": Incumbent(name="r1_dispatch", origin=seed, solution={}), "regime": "memory-bound",
        "round": 2, "budget": Budget(max_candidates=6)})
    proposed = provider.propose(request)
    assert len(proposed) == 6 and all(o["template"] == DISPATCH for o in proposed)
    own = seed["params"]["variants"]
    for o in proposed:
        variants = o["params"]["variants"]
        assert variants["latency-bound"] == own["latency-bound"] and variants["skewed"] == own["skewed"]
        assert variants["memory-bound"] != own["memory-bound"]
        assert variants["memory-bound"]["template"] in g.templates
    notes = [p.notes for p in provider.generate(request).proposals]
    assert all("(the incumbent's dispatch with memory-bound on " in n for n in notes)
