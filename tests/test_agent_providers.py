"""The API providers as tool conversations: the real SDK clients, scripted SSE servers (tests/agent_sse.py), the
whole tool loop (read a skill, evaluate a draft, submit), retries, the wall limit, budgets and resume, including
resume after the process was killed with SIGKILL mid-conversation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("anthropic")
pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

from agent_sse import (REPLY, SKILL_BODY, Server, claude_conversation, claude_stream, error_response,  # noqa: E402
                       gpt_conversation, gpt_stream, request, skills, stream_response)
from controller.agent.tool_loop import MemoryJournal  # noqa: E402
from controller.providers.anthropic import AnthropicProvider  # noqa: E402
from controller.providers.openai import OpenAIProvider  # noqa: E402

from support import ROOT  # noqa: E402

REPORT = "PASSED: 3/3 workloads correct, 41.2 us (incumbent 55.0 us)"


def claude(server: Server, **options) -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-test", base_url="http://anthropic.test", http_client=server.client(),
                             **options)


def gpt(server: Server, **options) -> OpenAIProvider:
    return OpenAIProvider(api_key="sk-test", base_url="http://openai.test/v1", http_client=server.client(), **options)


def bound(provider, tmp_path, journal=None):
    evaluated = []
    journal = journal or MemoryJournal()
    provider.bind(skills(tmp_path / "skills"), journal,
                  evaluate=lambda solution, workloads, budget_s: evaluated.append(solution["name"]) or REPORT)
    return provider, journal, evaluated


# -- the whole conversation ------------------------------------------------------------------------------------


def test_anthropic_reads_a_skill_evaluates_a_draft_and_submits(tmp_path):
    server = Server(*claude_conversation())
    provider, journal, evaluated = bound(claude(server), tmp_path)
    response = provider.generate(request())
    assert response.error is None and response.stopped is None, response.stopped
    (proposal,) = response.proposals
    assert proposal.notes == "split-K decode" and proposal.solution["author"] == "controller/anthropic"
    assert len(evaluated) == 1 and evaluated[0].startswith("draft0_")
    turns = journal.turns(request())
    assert [t.assistant.tool_calls[0].name for t in turns] == ["read_skill", "evaluate", "submit_kernel"]
    assert turns[1].assistant.cache_read_tokens == 900 and turns[1].assistant.tokens_in == 1900
    assert response.tokens_in == 1000 + 1900 + 2000 and response.tokens_out == 1500

    first, second, third = server.bodies
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 4096}  # half of max_tokens
    assert first["tool_choice"] == {"type": "auto"} and first["stream"] is True and first["max_tokens"] == 8192
    assert {t["name"] for t in first["tools"]} == {"read_skill", "read_reference", "evaluate", "read_profile",
                                                   "submit_kernel"}
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    stable = [json.dumps([b["system"], b["messages"][0]["content"][0]]) for b in server.bodies]
    assert stable[0] == stable[1] == stable[2]  # the cached prefix is byte-identical on every call
    assert first["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "Generation request r1/explore" in first["messages"][0]["content"][1]["text"]

    assistant, results = second["messages"][1], second["messages"][2]
    assert assistant == {"role": "assistant", "content": turns[0].assistant.native}  # echoed as it came
    thinking = assistant["content"][0]
    assert thinking == {"type": "thinking", "thinking": "I should read the decode skill", "signature": "sig-1"}
    assert assistant["content"][1]["type"] == "tool_use" and assistant["content"][1]["input"] == {"name": "gqa-decode"}
    (result,) = results["content"]
    assert result["tool_use_id"] == "tu_1" and result["is_error"] is False and SKILL_BODY in result["content"]
    assert result["cache_control"] == {"type": "ephemeral"}  # the conversation so far is cached too
    assert third["messages"][:3] == [second["messages"][0], second["messages"][1],
                                     {**second["messages"][2], "content": [
                                         {k: v for k, v in result.items() if k != "cache_control"}]}]
    assert REPORT in third["messages"][4]["content"][0]["content"]


def test_openai_reads_a_skill_evaluates_a_draft_and_submits(tmp_path):
    server = Server(*gpt_conversation())
    provider, journal, evaluated = bound(gpt(server), tmp_path)
    response = provider.generate(request())
    assert response.error is None and response.stopped is None, response.stopped
    assert len(response.proposals) == 1 and len(evaluated) == 1
    turns = journal.turns(request())
    assert [t.assistant.tool_calls[0].name for t in turns] == ["read_skill", "evaluate", "submit_kernel"]
    assert turns[1].assistant.cache_read_tokens == 900 and turns[1].assistant.text == "Evaluating a draft."

    first, second, third = server.bodies
    assert first["reasoning"] == {"effort": "high"} and first["include"] == ["reasoning.encrypted_content"]
    assert first["store"] is False and first["stream"] is True and first["max_output_tokens"] == 8192
    assert first["tools"][0]["type"] == "function" and all(t["strict"] for t in first["tools"])
    keys = {b["prompt_cache_key"] for b in server.bodies}
    assert len(keys) == 1 and len({json.dumps([b["instructions"], b["input"][0]]) for b in server.bodies}) == 1
    reasoning, call, output = second["input"][1:4]
    assert reasoning == {"type": "reasoning", "summary": [], "encrypted_content": "enc-1"}  # no id: store=False
    assert call["type"] == "function_call" and call["call_id"] == "call_1" and "id" not in call
    assert output["type"] == "function_call_output" and output["call_id"] == "call_1"
    assert SKILL_BODY in output["output"]
    assert third["input"][:4] == second["input"][:4] and REPORT in third["input"][-1]["output"]


# -- retries and the wall limit ------------------------------------------------------------------------------


SUBMIT_ONLY = {"anthropic": lambda: claude_stream([("tool", "tu_9", "submit_kernel", REPLY)]),
               "openai": lambda: gpt_stream([("call", "call_9", "submit_kernel", REPLY)])}
MAKE = {"anthropic": claude, "openai": gpt}


@pytest.mark.parametrize("name", ["anthropic", "openai"])
def test_a_429_is_retried_within_the_deadline(name):
    server = Server(error_response(429, "slow down", {"retry-after-ms": "20"}), SUBMIT_ONLY[name]())
    response = MAKE[name](server).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and len(response.proposals) == 1 and response.error is None


@pytest.mark.parametrize("name", ["anthropic", "openai"])
def test_a_retry_after_past_the_deadline_is_not_waited_for(name):
    server = Server(error_response(529, "overloaded", {"retry-after": "60"}), SUBMIT_ONLY[name]())
    started = time.monotonic()
    response = MAKE[name](server).generate(request(wall_s=5))
    assert time.monotonic() - started < 2 and len(server.bodies) == 1
    assert response.error.startswith("HTTP 529") and "does not fit" in response.error and response.proposals == []


@pytest.mark.parametrize("name", ["anthropic", "openai"])
def test_a_client_error_is_not_retried(name):
    server = Server(error_response(400, "bad tool schema"))
    response = MAKE[name](server).generate(request())
    assert len(server.bodies) == 1 and response.error.startswith("HTTP 400") and "bad tool schema" in response.error


@pytest.mark.parametrize("name", ["anthropic", "openai"])
def test_a_server_that_hangs_is_cut_at_the_wall_limit(name):
    def slow(req):
        time.sleep(3)
        return SUBMIT_ONLY[name]()

    server = Server(slow, SUBMIT_ONLY[name]())
    started = time.monotonic()
    response = MAKE[name](server).generate(request(wall_s=0.6))
    assert time.monotonic() - started < 1.5  # a true wall limit: not the 3 s the server takes
    assert response.stopped.startswith("wall time") and response.proposals == [] and len(server.bodies) == 1


@pytest.mark.parametrize("name", ["anthropic", "openai"])
def test_a_timeout_is_not_retried(name):
    server = Server(httpx2.ReadTimeout("timed out"), SUBMIT_ONLY[name]())
    response = MAKE[name](server).generate(request(wall_s=20))
    assert response.stopped.startswith("wall time") and len(server.bodies) == 1


# -- bounds -----------------------------------------------------------------------------------------------------


def test_a_cost_budget_broken_on_turn_two_runs_none_of_its_tools(tmp_path):
    first, _, third = claude_conversation()
    expensive = claude_stream([("tool", "tu_2", "evaluate", {"files": [], "workloads": []})], tokens_in=20_000)
    server = Server(first, expensive, third)
    provider, journal, evaluated = bound(claude(server), tmp_path)
    response = provider.generate(request(max_cost_usd=0.05))
    assert response.stopped.startswith("cost budget") and "turn 1 discarded" in response.stopped
    assert evaluated == [] and len(server.bodies) == 2 and response.proposals == []
    assert journal.turns(request())[1].results[0].content.startswith("not run: cost budget")
    assert server.bodies[0]["max_tokens"] < 8192  # $0.05 at $15/MTok out, less the prompt, caps the first call


def test_a_token_budget_broken_on_turn_two_stops_the_conversation(tmp_path):
    first, second, third = gpt_conversation()
    server = Server(first, gpt_stream([("call", "call_2", "evaluate", {"files": [], "workloads": []})],
                                      tokens_in=70_000), third)
    provider, _, evaluated = bound(gpt(server), tmp_path)
    response = provider.generate(request(max_total_tokens=60_000))
    assert response.stopped.startswith("token budget: 72000 tokens > 60000") and evaluated == []
    assert len(server.bodies) == 2


def test_a_model_without_a_price_is_refused_under_a_cost_budget_naming_the_file(tmp_path):
    server = Server(*gpt_conversation())
    provider = OpenAIProvider(model="gpt-9-preview", api_key="k", base_url="http://openai.test/v1",
                              http_client=server.client())
    refused = provider.generate(request(max_cost_usd=10.0))
    assert server.bodies == [] and refused.proposals == []
    assert "controller/providers/prices.yaml" in refused.stopped and "CRUCIBLE_PRICES" in refused.stopped
    response = provider.generate(request())  # without a cost budget it runs, its spend marked as not counted
    assert response.cost_usd == 0.0 and response.model == "gpt-9-preview (no price: cost not counted)"


def test_output_cap_hit_stops_with_the_turn_archived():
    server = Server(gpt_stream([("reasoning", "rs_1", "enc")], status="incomplete", tokens_out=8192,
                               incomplete={"reason": "max_output_tokens"}))
    journal = MemoryJournal()
    provider = gpt(server)
    provider.bind({}, journal)
    response = provider.generate(request())
    assert "max_tokens (8192)" in response.stopped and journal.turns(request())[0].assistant.truncated


def test_thinking_is_left_off_when_max_tokens_leaves_no_room_and_the_turn_says_so():
    server = Server(SUBMIT_ONLY["anthropic"]())
    journal = MemoryJournal()
    provider = claude(server)
    provider.bind({}, journal)
    provider.generate(request(max_output_tokens=1500))
    assert "thinking" not in server.bodies[0]
    assert "thinking off: max_tokens 1500" in journal.turns(request())[0].assistant.stop_reason


def test_thinking_and_effort_are_settable():
    server = Server(SUBMIT_ONLY["anthropic"](), SUBMIT_ONLY["openai"]())
    AnthropicProvider(api_key="k", base_url="http://anthropic.test", http_client=server.client(),
                      thinking_budget=2000).generate(request())
    OpenAIProvider(api_key="k", base_url="http://openai.test/v1", http_client=server.client(),
                   effort="medium").generate(request())
    assert server.bodies[0]["thinking"]["budget_tokens"] == 2000 and server.bodies[1]["reasoning"]["effort"] == "medium"
    with pytest.raises(ValueError, match="reasoning effort"):
        OpenAIProvider(api_key="k", effort="extreme")
    with pytest.raises(ValueError, match="thinking must be"):
        AnthropicProvider(api_key="k", thinking="always")


# -- resume -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["anthropic", "openai"])
def test_resume_sends_the_archived_turns_once_and_finishes(tmp_path, name):
    script = claude_conversation() if name == "anthropic" else gpt_conversation()
    full = Server(*script)
    provider, journal, _ = bound(MAKE[name](full), tmp_path)
    provider.generate(request())
    archived = MemoryJournal()
    for turn in journal.turns(request())[:2]:  # as if the run died after its second turn was archived
        archived.append(request(), turn)

    again = Server(*(claude_conversation() if name == "anthropic" else gpt_conversation())[2:])
    provider, _, evaluated = bound(MAKE[name](again), tmp_path, archived)
    response = provider.generate(request())
    assert len(again.bodies) == 1 and again.bodies[0] == full.bodies[2]  # the same third call, nothing re-sent
    assert evaluated == [] and len(response.proposals) == 1 and len(archived.turns(request())) == 3
    assert response.tokens_in == sum(t.assistant.tokens_in for t in archived.turns(request()))


KILLED = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path[:0] = [sys.argv[2], sys.argv[3]]
    import agent_sse
    from controller.agent.journal import StoreJournal
    from controller.providers.anthropic import AnthropicProvider
    from controller.store import Store
    from harness.archive.database import Archive

    folder = Path(sys.argv[1])
    store = Store(Archive(folder / "archive"))
    store.create_run("run-k", agent_sse.INCUMBENT["definition"], "anthropic", {"provider": "anthropic"})
    script = agent_sse.claude_conversation()

    def die(req):
        os.kill(os.getpid(), signal.SIGKILL)  # the third call: killed mid-conversation, nothing else runs

    server = agent_sse.Server(script[0], script[1], die)
    provider = AnthropicProvider(api_key="sk-test", base_url="http://anthropic.test", http_client=server.client())
    provider.bind(agent_sse.skills(folder / "skills"), StoreJournal(store), evaluate=lambda s, w, b: "PASSED")
    provider.generate(agent_sse.request(run_id="run-k"))
""")


def test_resume_after_kill_9_mid_conversation(tmp_path):
    from controller.agent.journal import StoreJournal
    from controller.store import Store
    from harness.archive.database import Archive

    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    tests = str(ROOT / "tests")
    done = subprocess.run([sys.executable, str(script), str(tmp_path), str(ROOT), tests], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == -9, done.stderr

    store = Store(Archive(tmp_path / "archive"))
    journal = StoreJournal(store)
    req = request(run_id="run-k")
    assert [t.index for t in journal.turns(req)] == [0, 1]  # both archived before the call that died

    again = Server(claude_conversation()[2])
    provider, _, evaluated = bound(claude(again), tmp_path, journal)
    response = provider.generate(req)
    assert len(again.bodies) == 1 and evaluated == []
    messages = again.bodies[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[1]["content"][0]["signature"] == "sig-1" and messages[3]["content"][0]["signature"] == "sig-2"
    assert len(response.proposals) == 1 and [t.index for t in journal.turns(req)] == [0, 1, 2]


def test_an_overloaded_error_inside_the_stream_is_retried():
    start = {"type": "message_start", "message": {
        "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}}
    overloaded = stream_response([start, {"type": "error", "error": {"type": "overloaded_error",
                                                                      "message": "Overloaded"}}])
    server = Server(overloaded, SUBMIT_ONLY["anthropic"]())
    response = claude(server).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and len(response.proposals) == 1 and response.error is None
