"""A model that ends its conversation with the kernel in its text instead of a submit_kernel call: which text is
taken (a JSON reply, a written-out tool call, the last code block that defines the entry point, blocks matched to
files by name), which is not (another language, no entry point, a block cut off), and the reason recorded when
nothing is; and the bounds that end a conversation without a candidate (the wall time inside a turn of draft
evaluations, a context window filled up)."""

from __future__ import annotations

import json

import pytest

from controller.agent.salvage import recover
from controller.agent.scripted import ScriptedChat
from controller.agent.tool_loop import MemoryJournal, run_tool_loop
from controller.agent.tools import ToolBox
from controller.agent.transcript import AssistantTurn, ToolCall

from agent_sse import KERNEL, REPLY, request

EDITABLE, ENTRY = ["kernel.py"], "kernel.py::run"
OLD = "def run(q, k, v):\n    pass  # first try\n"
NEW = "def run(q, k, v):\n    return None  # revised\n"


def test_no_code_block_is_said():
    assert recover("I would split the KV cache across CTAs.", EDITABLE, ENTRY) == (None, "no code block in the answer")


def test_the_last_block_that_defines_the_entry_point_is_the_solution():
    text = (f"First attempt:\n```python\n{OLD}```\nA helper:\n```python\ndef helper():\n    pass\n```\n"
            f"Revised:\n```python\n{NEW}```\nUsage:\n```bash\npython kernel.py\n```\n")
    arguments, how = recover(text, EDITABLE, ENTRY)
    assert arguments["files"] == [{"path": "kernel.py", "content": NEW}] and "code block" in how


def test_a_block_in_a_language_the_file_cannot_hold_is_never_taken():
    text = "```cuda\n__global__ void run(float* q) {}\n```\n"
    arguments, why = recover(text, EDITABLE, ENTRY)
    assert arguments is None and "cuda" in why and "kernel.py" in why


def test_a_block_without_the_entry_point_is_not_taken():
    arguments, why = recover("```python\ndef helper():\n    pass\n```", EDITABLE, ENTRY)
    assert arguments is None and "defines run()" in why


def test_a_block_cut_off_is_said():
    arguments, why = recover(f"```python\n{NEW}", EDITABLE, ENTRY)
    assert arguments is None and "never closed" in why


def test_blocks_are_matched_to_files_by_name():
    text = ("`kernel.py`:\n```python\ndef run(q):\n    pass\n```\n"
            "```cpp title=\"helper.cu\"\n__global__ void k() {}\n```\n")
    arguments, _ = recover(text, ["kernel.py", "helper.cu"], ENTRY)
    assert [f["path"] for f in arguments["files"]] == ["kernel.py", "helper.cu"]
    assert arguments["files"][1]["content"] == "__global__ void k() {}\n"


@pytest.mark.parametrize("text", [
    "Here is my answer:\n```json\n" + json.dumps(REPLY) + "\n```",
    "<tool_call>" + json.dumps({"name": "submit_kernel", "arguments": json.dumps(REPLY)}) + "</tool_call>",
    json.dumps({"type": "function", "function": {"name": "functions.submit_kernel", "arguments": json.dumps(REPLY)}}),
    "I'll call the tool now: " + json.dumps({"tool": "submit_kernel", "input": REPLY}) + " done.",
])
def test_a_json_reply_or_a_written_out_tool_call_is_taken_with_its_escaped_source(text):
    arguments, how = recover(text, EDITABLE, ENTRY)
    assert arguments["files"] == REPLY["files"] and arguments["files"][0]["content"] == KERNEL and "JSON" in how


def test_json_of_another_tool_is_not_a_submission():
    text = json.dumps({"name": "evaluate", "arguments": REPLY})
    assert recover(text, EDITABLE, ENTRY)[0] is None


def test_an_enormous_answer_is_scanned_within_bounds():
    text = "{" * 300_000 + "\n```python\n" + NEW + "```\n" + "x" * 3_000_000
    arguments, _ = recover(text, EDITABLE, ENTRY)
    assert arguments["files"][0]["content"] == NEW


def run(text: str, **budget):
    journal = MemoryJournal()
    box = ToolBox(request(**budget), {}, "scripted")
    response = run_tool_loop(request(**budget), ScriptedChat([AssistantTurn(text=text, tokens_in=10, tokens_out=5)]),
                             box, journal, (3.0, 15.0))
    return response


def test_the_tool_loop_submits_a_kernel_written_into_the_answer():
    response = run(f"Done. The kernel:\n```python\n{KERNEL}```")
    (proposal,) = response.proposals
    assert proposal.solution["sources"][0]["content"] == KERNEL
    assert "without calling submit_kernel" in response.stopped and "accepted" in response.stopped


def test_the_tool_loop_records_why_an_answer_gave_no_candidate():
    response = run("```cuda\n__global__ void run() {}\n```")
    assert response.proposals == [] and response.rejected == []
    assert response.stopped.startswith("the model ended without calling submit_kernel") and "cuda" in response.stopped


# -- bounds of the conversation that end it without a candidate --------------------------------------------------


def test_no_draft_evaluation_starts_past_the_requests_wall_time():
    now = [0.0]
    evaluated = []

    def evaluate(solution, workloads, budget_s):
        evaluated.append(solution["name"])
        now[0] += 100.0  # each evaluation takes 100 s of the request's 150
        return "PASSED"

    draft = {"files": REPLY["files"], "workloads": []}
    calls = [ToolCall(id=f"e{i}", name="evaluate", arguments=draft) for i in range(3)]
    req = request(wall_s=150, max_evaluations=3)
    box = ToolBox(req, {}, "scripted", evaluate=evaluate)
    journal = MemoryJournal()
    response = run_tool_loop(req, ScriptedChat([AssistantTurn(tool_calls=calls)]), box, journal, (3.0, 15.0),
                             clock=lambda: now[0])
    results = journal.turns(req)[0].results
    assert len(evaluated) == 2  # the third would have started at 200 s of the request's 150
    assert results[2].is_error and "wall time is used up" in results[2].content
    assert response.stopped.startswith("wall time")


def test_a_context_window_filled_up_is_said_as_such():
    response = run_tool_loop(request(), ScriptedChat([AssistantTurn(
        text="```python\ndef run(", truncated=True, stop_reason="model_context_window_exceeded")]),
        ToolBox(request(), {}, "scripted"), MemoryJournal(), (3.0, 15.0))
    assert response.proposals == [] and "context window" in response.stopped


def test_a_harness_failure_inside_a_tool_is_the_models_to_read_and_the_turn_stays_archived():
    def evaluate(solution, workloads, budget_s):
        raise RuntimeError("worker died\nwhile building")

    draft = {"files": REPLY["files"], "workloads": []}
    script = [AssistantTurn(tool_calls=[ToolCall(id="e1", name="evaluate", arguments=draft)], tokens_in=10),
              AssistantTurn(tool_calls=[ToolCall(id="s1", name="submit_kernel", arguments=REPLY)], tokens_in=10)]
    journal = MemoryJournal()
    req = request(max_evaluations=1)
    response = run_tool_loop(req, ScriptedChat(script), ToolBox(req, {}, "scripted", evaluate=evaluate), journal,
                             (3.0, 15.0))
    first = journal.turns(req)[0].results[0]
    assert first.is_error and "RuntimeError: worker died while building" in first.content
    assert response.error is None and len(response.proposals) == 1


def test_a_submission_with_files_as_a_mapping_and_null_notes_is_a_candidate():
    arguments = {"files": {"kernel.py": KERNEL}, "entry_point": ENTRY, "notes": None}
    req = request()
    response = run_tool_loop(req, ScriptedChat([AssistantTurn(tool_calls=[
        ToolCall(id="s1", name="submit_kernel", arguments=arguments)])]), ToolBox(req, {}, "scripted"),
        MemoryJournal(), (3.0, 15.0))
    (proposal,) = response.proposals
    assert proposal.solution["sources"][0] == {"path": "kernel.py", "content": KERNEL} and response.rejected == []


@pytest.mark.parametrize("written, taken", [("kernel.py:run", True), ("run", True), ("./kernel.py::run", True),
                                             ("kernel.py::forward", False), ("other.py::run", False)])
def test_the_entry_point_as_models_write_it(written, taken):
    req = request()
    arguments = {"files": REPLY["files"], "entry_point": written, "notes": ""}
    response = run_tool_loop(req, ScriptedChat([AssistantTurn(tool_calls=[
        ToolCall(id="s1", name="submit_kernel", arguments=arguments)])]), ToolBox(req, {}, "scripted"),
        MemoryJournal(), (3.0, 15.0))
    if taken:
        assert response.proposals[0].solution["spec"]["entry_point"] == ENTRY
    else:
        assert response.proposals == [] and "is not the required" in response.rejected[0].reason
