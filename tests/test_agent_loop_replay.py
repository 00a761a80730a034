"""A tool-using provider inside the controller's loop: its turns archived per request (skill read, a draft evaluated
through the run's evaluator, a submission), the request carrying the skill index and the run's hint; then
`controller loop --provider replay` replays the whole conversation into a new run with the same candidates."""

from __future__ import annotations

import json

from click.testing import CliRunner

from controller.agent.scripted import ScriptedChat
from controller.agent.tool_loop import run_tool_loop
from controller.agent.tools import ToolBox
from controller.agent.transcript import AssistantTurn, ToolCall
from controller.cli import main
from controller.loop import run_loop
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset

from support import KV8_PS1, TORCH_CANDIDATE
from loop_support import WORKLOAD, FakeEvaluator, config

FILES = [{"path": "kernel.py", "content": TORCH_CANDIDATE}]


class DraftingEvaluator(FakeEvaluator):
    """The fake harness, able to evaluate a tool conversation's drafts on named workloads."""

    drafts: list[tuple[str, list]] = []

    def evaluate_on(self, solution, workloads, budget_s=None):
        self.drafts.append((solution.name, list(workloads or [])))
        return self.evaluate(solution, on_start=None)


class ScriptedAgent:
    """A tool-using provider whose model is scripted: read the family's skill, evaluate a draft, submit it."""

    name, model = "scripted-agent", "scripted-1"

    def __init__(self):
        self.context = None

    def bind(self, skills, journal, evaluate=None, profile=None):
        self.context = (skills, journal, evaluate)

    def generate(self, request):
        skills, journal, evaluate = self.context
        script = [AssistantTurn(tool_calls=[ToolCall(id="a", name="read_skill", arguments={"name": "gqa-decode"})],
                                tokens_in=900, tokens_out=100),
                  AssistantTurn(tool_calls=[ToolCall(id="b", name="evaluate",
                                                     arguments={"files": FILES, "workloads": [WORKLOAD]})],
                                tokens_in=1900, tokens_out=300),
                  AssistantTurn(tool_calls=[ToolCall(id="c", name="submit_kernel", arguments={
                      "files": FILES, "entry_point": "kernel.py::run", "notes": "the draft passed"})],
                                tokens_in=2500, tokens_out=400)]
        box = ToolBox(request, skills, self.name, evaluate=evaluate)
        return run_tool_loop(request, ScriptedChat(script), box, journal, (3.0, 15.0))


def test_a_tool_conversation_in_the_loop_is_archived_and_replayed_whole(tiny_dataset_root, tmp_path):
    folder = tmp_path / "archive"
    archive = Archive(folder)
    evaluator = DraftingEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", None))
    recorded = run_loop(config(tiny_dataset_root, rounds=1, candidates=1, hint="keep the state in registers"),
                        folder, provider=ScriptedAgent(), evaluator=evaluator)
    store = Store(archive)
    run_id = recorded["run_id"]
    _, request = store.request(run_id, "r1/explore")
    assert request.hint == "keep the state in registers" and request.skill_index[0].name == "gqa-decode"
    turns = store.agent_turns(run_id, "r1/explore")
    assert [t["index"] for t in turns] == [0, 1, 2]
    assert turns[0]["results"][0]["content"].startswith("# skill: gqa-decode")
    draft = turns[1]["results"][0]["content"]
    assert "1 of 3 evaluations" in draft and "1 of 1 workloads PASSED" in draft and WORKLOAD in draft
    assert evaluator.drafts and evaluator.drafts[-1][1] == [WORKLOAD]
    assert "accepted for evaluation" in turns[2]["results"][0]["content"]
    cands = [c for c in store.candidates(run_id) if c["round"] == 1]
    assert [c["status"] for c in cands] == ["PASSED"]
    assert recorded["rounds"][1]["tokens"] == 6100

    result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--provider", "replay", "--replay-run",
                                       run_id, "--rounds", "1", "--candidates", "1", "--archive", str(folder),
                                       "--dataset", str(tiny_dataset_root), "--workloads", WORKLOAD,
                                       "--timeout-s", "120", "--json"])
    assert result.exit_code == 0, result.output
    replayed = json.loads(result.stdout)["run_id"]
    again = store.agent_turns(replayed, "r1/explore")
    assert again == turns  # the whole conversation, turn by turn
    assert [c["solution_hash"] for c in store.candidates(replayed) if c["round"] == 1] == [
        c["solution_hash"] for c in cands]
    assert store.responses_of_run(replayed)[0]["model"].endswith("3 turns)")
    assert store.agent_conversations(replayed) == ["r1/explore"]


def test_a_claude_conversation_through_the_sdk_is_archived_by_the_loop_and_replayed(tiny_dataset_root, tmp_path):
    import pytest

    pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")
    from agent_sse import Server, claude_stream

    from controller.providers.anthropic import AnthropicProvider

    submit = {"files": FILES, "entry_point": "kernel.py::run", "notes": "after one draft"}
    server = Server(
        claude_stream([("thinking", "read the contract first", "sig-1"),
                       ("tool", "tu_1", "read_skill", {"name": "gqa-decode"})], tokens_in=3000, tokens_out=400),
        claude_stream([("tool", "tu_2", "evaluate", {"files": FILES, "workloads": [WORKLOAD]})],
                      tokens_in=6000, tokens_out=900, cache_read=2500),
        claude_stream([("tool", "tu_3", "submit_kernel", submit)], tokens_in=7000, tokens_out=900, cache_read=5000))
    provider = AnthropicProvider(api_key="sk-test", base_url="http://anthropic.test",
                                 http_client=httpx2.Client(transport=httpx2.MockTransport(server)))
    folder = tmp_path / "archive"
    archive = Archive(folder)
    evaluator = DraftingEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", None))
    recorded = run_loop(config(tiny_dataset_root, rounds=1, candidates=1), folder, provider=provider,
                        evaluator=evaluator)
    store = Store(archive)
    turns = store.agent_turns(recorded["run_id"], "r1/explore")
    assert [c["name"] for t in turns for c in t["assistant"]["tool_calls"]] == ["read_skill", "evaluate",
                                                                                "submit_kernel"]
    assert turns[0]["assistant"]["native"][0]["signature"] == "sig-1"
    # the second call sent back the first turn's thinking block and the skill it asked for
    second = server.bodies[1]["messages"]
    assert second[1]["content"][0]["signature"] == "sig-1" and second[2]["content"][0]["type"] == "tool_result"
    assert [c["status"] for c in store.candidates(recorded["run_id"]) if c["round"] == 1] == ["PASSED"]

    result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--provider", "replay", "--replay-run",
                                       recorded["run_id"], "--rounds", "1", "--candidates", "1", "--archive",
                                       str(folder), "--dataset", str(tiny_dataset_root), "--workloads", WORKLOAD,
                                       "--timeout-s", "120", "--json"])
    assert result.exit_code == 0, result.output
    replayed = json.loads(result.stdout)["run_id"]
    assert store.agent_turns(replayed, "r1/explore") == turns and len(server.bodies) == 3  # nothing sent again
