"""The bounded tool loop (controller/agent) with a scripted chat model: tools inside the request's bounds, budgets,
the journal written before each next call, resume from archived turns."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.agent.scripted import ScriptedChat
from controller.agent.tool_loop import MemoryJournal, run_tool_loop, split_prompt
from controller.agent.tools import ToolBox
from controller.agent.transcript import AssistantTurn, ToolCall
from controller.skills import load_skills
from harness.data.generation_request import (Budget, Constraints, GenerationRequest, Incumbent, SkillEntry,
                                        render_stable_prefix)

from agent_sse import FILES, INCUMBENT
from support import ROOT

SUBMIT = {"files": FILES, "entry_point": "kernel.py::run", "notes": "split-KV"}
SKILLS = load_skills(ROOT / "skills")


def request(key: str = "r1/explore", hint: str = "", **budget) -> GenerationRequest:
    gqa = SKILLS["gqa-decode"]
    refs = sorted(p.relative_to(gqa.folder).as_posix() for p in (gqa.folder / "references").iterdir())
    return GenerationRequest(
        run_id="run-t", round=1, key=key, definition=INCUMBENT["definition"], hint=hint,
        incumbent=Incumbent(name="inc", solution=INCUMBENT), constraints=Constraints(editable_files=["kernel.py"]),
        skill_index=[SkillEntry(name="gqa-decode", description=gqa.description, references=refs)],
        budget=Budget(**{"max_candidates": 1, "max_output_tokens": 4096, **budget}))


def turn(*calls: tuple[str, dict], tokens=(1000, 200), text="") -> AssistantTurn:
    return AssistantTurn(text=text, tool_calls=[ToolCall(id=f"c{i}", name=n, arguments=a)
                                                for i, (n, a) in enumerate(calls)],
                         tokens_in=tokens[0], tokens_out=tokens[1])


def run(script, req=None, journal=None, evaluate=None, price=(3.0, 15.0)):
    req = req or request()
    chat = ScriptedChat(script)
    box = ToolBox(req, SKILLS, "scripted", evaluate=evaluate)
    journal = journal if journal is not None else MemoryJournal()
    return run_tool_loop(req, chat, box, journal, price), chat, journal, req


def test_a_conversation_reads_a_skill_evaluates_a_draft_and_submits():
    evaluated = []

    def evaluate(solution, workloads, budget_s):
        evaluated.append((solution["name"], workloads))
        return "uniform_b1_kv512: PASSED 0.012 ms"

    response, chat, journal, req = run([
        turn(("read_skill", {"name": "gqa-decode"})),
        turn(("evaluate", {"files": FILES, "workloads": ["uniform_b1_kv512"]})),
        turn(("submit_kernel", SUBMIT)),
    ], evaluate=evaluate)
    assert [p.notes for p in response.proposals] == ["split-KV"] and not response.rejected
    assert evaluated and evaluated[0][1] == ["uniform_b1_kv512"]
    turns = journal.turns(req)
    assert [t.index for t in turns] == [0, 1, 2]
    assert turns[0].results[0].content.startswith("# skill: gqa-decode") and "## " in turns[0].results[0].content
    assert "PASSED 0.012 ms" in turns[1].results[0].content and "1 of 3 evaluations" in turns[1].results[0].content
    assert response.tokens_in == 3000 and response.cost_usd == pytest.approx(3 * (1000 * 3 + 200 * 15) / 1e6)
    # every call sends the same stable prefix first, and the whole conversation so far
    assert {c["stable"] for c in chat.calls} == {render_stable_prefix(req)}
    assert [c["turns"] for c in chat.calls] == [0, 1, 2]
    assert response.stopped is None and response.error is None


def test_tools_stay_inside_the_request():
    response, _, journal, req = run([
        turn(("read_skill", {"name": "moe-fp8"}), ("read_reference", {"skill": "gqa-decode", "path": "../SKILL.md"}),
             ("evaluate", {"files": FILES, "workloads": []}), ("no_such_tool", {}),
             ("submit_kernel", {**SUBMIT, "files": [{"path": "harness.py", "content": "x"}]})),
        turn(text="done"),
    ])
    results = journal.turns(req)[0].results
    assert all(r.is_error for r in results[:4])
    assert "may read: gqa-decode" in results[0].content
    assert "not a file of skill 'gqa-decode'" in results[1].content
    assert "evaluation is not available" in results[2].content
    assert "no tool 'no_such_tool'" in results[3].content
    assert "rejected" in results[4].content and response.rejected and "harness.py" in response.rejected[0].reason
    assert not response.proposals


def test_reading_a_listed_reference_returns_the_whole_file():
    req = request()
    path = req.skill_index[0].references[0]
    _, _, journal, req = run([turn(("read_reference", {"skill": "gqa-decode", "path": path})), turn(text="ok")],
                             req=req)
    content = journal.turns(req)[0].results[0].content
    whole = (SKILLS["gqa-decode"].folder / path).read_text()
    assert len(whole) < 60_000 and content == whole  # whole, not an excerpt


def test_evaluation_budget_is_hard():
    response, _, journal, req = run([
        turn(("evaluate", {"files": FILES, "workloads": []}), ("evaluate", {"files": FILES, "workloads": []})),
        turn(text="fine"),
    ], req=request(max_evaluations=1), evaluate=lambda s, w, b: "PASSED")
    first, second = journal.turns(req)[0].results
    assert not first.is_error and second.is_error and "evaluation budget of this request (1)" in second.content


def test_turn_budget_stops_the_conversation():
    response, chat, _, _ = run([turn(("read_skill", {"name": "gqa-decode"}))] * 5, req=request(max_turns=2))
    assert len(chat.calls) == 2 and response.stopped == "turn budget: 2 turns used"


def test_a_turn_over_the_token_budget_is_discarded_with_its_tool_calls():
    # the budget leaves room for the next prompt (the whole gqa-decode skill, ~10k tokens, is in it), so the call
    # is made; its reply then overruns the budget and is discarded
    response, chat, journal, req = run([
        turn(("read_skill", {"name": "gqa-decode"}), tokens=(2000, 100)),
        turn(("submit_kernel", SUBMIT), tokens=(36000, 3000)),
    ], req=request(max_total_tokens=40000, max_output_tokens=2000))
    assert not response.proposals
    assert response.stopped == "token budget: 41100 tokens > 40000; turn 1 discarded"
    assert journal.turns(req)[1].results[0].content.startswith("not run: token budget")


def test_the_output_cap_is_what_the_cost_budget_still_pays_for():
    response, chat, _, _ = run([turn(("submit_kernel", SUBMIT), tokens=(100, 10))],
                               req=request(max_cost_usd=0.05, max_output_tokens=8000))
    assert chat.calls[0]["max_tokens"] < 8000 and response.proposals


def test_cost_budget_without_a_price_sends_nothing():
    response, chat, _, _ = run([turn(("submit_kernel", SUBMIT))], req=request(max_cost_usd=1.0), price=None)
    assert not chat.calls and "no price is known" in response.stopped


def test_truncated_and_timed_out_turns_stop_with_the_reason():
    r1, _, _, _ = run([AssistantTurn(truncated=True, tokens_in=10, tokens_out=4096)])
    assert "output hit max_tokens" in r1.stopped
    r2, _, _, _ = run([AssistantTurn(timed_out=True)], req=request(wall_s=30))
    assert r2.stopped == "wall time: no answer within the request's 30 s"
    r3, _, _, _ = run([AssistantTurn(error="HTTP 400: bad request")])
    assert r3.error == "HTTP 400: bad request"


def test_resume_continues_from_the_last_archived_turn_and_sends_nothing_twice():
    journal = MemoryJournal()
    req = request(max_candidates=2)
    first = [turn(("read_skill", {"name": "gqa-decode"})), turn(("submit_kernel", SUBMIT))]

    def killed(_turns):
        raise KeyboardInterrupt  # the process dies mid-conversation, after two archived turns

    with pytest.raises(KeyboardInterrupt):
        run([*first, killed], req=req, journal=journal)
    assert len(journal.turns(req)) == 2
    response, chat, journal, _ = run([turn(("submit_kernel", {**SUBMIT, "notes": "second"}))], req=req,
                                     journal=journal)
    assert len(chat.calls) == 1 and chat.calls[0]["turns"] == 2  # only the new turn was asked for
    assert [p.notes for p in response.proposals] == ["split-KV", "second"]
    assert response.tokens_in == 3000  # the archived turns' spend counts


def test_the_prompt_splits_into_a_stable_prefix_and_the_task():
    req = request(hint="try a persistent kernel over a work queue")
    stable, task = split_prompt(req)
    other_stable, other_task = split_prompt(request(key="r2/explore"))
    assert stable == other_stable and task != other_task
    assert "Skills you may read" in stable and "**gqa-decode**" in stable and "references/" in stable
    assert "A person's direction for this run" in task and "persistent kernel" in task
    assert "(run run-t)" not in stable and "r1/explore" not in stable  # nothing of one request in the cacheable part


def test_skill_index_files_exist(tmp_path: Path):
    for entry in request().skill_index:
        for ref in entry.references:
            assert (SKILLS[entry.name].folder / ref).is_file()


def test_cached_input_is_charged_at_the_cache_rates():
    from controller.agent.tool_loop import turn_cost

    plain = AssistantTurn(tokens_in=10_000, tokens_out=1_000)
    cached = AssistantTurn(tokens_in=10_000, tokens_out=1_000, cache_read_tokens=8_000, cache_write_tokens=1_000)
    assert turn_cost(plain, (3.0, 15.0)) == pytest.approx((10_000 * 3 + 1_000 * 15) / 1e6)
    assert turn_cost(cached, (3.0, 15.0)) == pytest.approx((1_000 * 3 + 800 * 3 + 1_250 * 3 + 1_000 * 15) / 1e6)
    assert turn_cost(cached, None) == 0.0


def test_a_resumed_conversation_retries_after_a_failed_turn():
    journal = MemoryJournal()
    req = request()
    run([turn(("read_skill", {"name": "gqa-decode"})), AssistantTurn(error="HTTP 529: overloaded")], req=req,
        journal=journal)
    response, chat, journal, _ = run([turn(("submit_kernel", SUBMIT))], req=req, journal=journal)
    assert response.proposals and len(chat.calls) == 1
    assert chat.calls[0]["turns"] == 1  # the failed turn is kept in the journal but not sent again
    assert [t.index for t in journal.turns(req)] == [0, 1, 2]


def test_bound_provider_profiles_the_drafts_it_evaluated():
    from controller.agent.context import bind_provider

    class Provider:
        def bind(self, **context):
            self.context = context

    class Evaluator:
        def evaluate_on(self, solution, workloads, budget_s=None):
            return 41

    class Store:
        def eval_records(self, submission_id, figure="official"):
            return []

    provider = Provider()
    bind_provider(provider, SKILLS, Store(), Evaluator(), ["uniform_b1_kv512"],
                  profile_draft=lambda solution, sid: f"## ncu digest of {solution.name} (submission {sid})")
    evaluate, profile = provider.context["evaluate"], provider.context["profile"]
    assert "not among this run's workloads" in evaluate({**INCUMBENT, "name": "d0"}, ["skewed_b64"])
    assert profile("d0") is None  # refused above: never evaluated
    assert "recorded no workload" in evaluate({**INCUMBENT, "name": "d0"}, ["uniform_b1_kv512"])
    assert profile("d0") == "## ncu digest of d0 (submission 41)"
    assert profile("incumbent") is None and profile("someone-else") is None
