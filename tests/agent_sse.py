"""Scripted API servers for the tool-conversation tests: hand-built SSE streams of the Anthropic Messages API and the
OpenAI Responses API, served to the real SDK clients through ``httpx2.MockTransport`` (no network).

Shared by tests/test_agent_providers.py and the subprocess it kills mid-conversation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Union

try:
    import httpx2
except ImportError:  # a GPU host without the test extras: the shared constants below still import
    httpx2 = None

from harness.data.generation_request import Budget, Constraints, GenerationRequest, Incumbent, SkillEntry

KERNEL = "import triton\n\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n    pass\n"
INCUMBENT = {"name": "inc", "definition": "gqa_paged_decode_h32_kv8_d128_ps1", "author": "t",
             "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::run",
                      "dependencies": [], "destination_passing_style": True},
             "sources": [{"path": "kernel.py", "content": "def run(*a):\n    pass\n"}]}
FILES = [{"path": "kernel.py", "content": KERNEL}]
REPLY = {"files": FILES, "entry_point": "kernel.py::run", "notes": "split-K decode"}
SKILL_BODY = "Split the KV sequence across CTAs and combine with the log-sum-exp."


def request(run_id: str = "run-t", **budget: Any) -> GenerationRequest:
    return GenerationRequest(run_id=run_id, round=1, key="r1/explore", definition=INCUMBENT["definition"],
                             incumbent=Incumbent(name="inc", solution=INCUMBENT),
                             constraints=Constraints(editable_files=["kernel.py"]),
                             skill_index=[SkillEntry(name="gqa-decode", description="decode tactics")],
                             budget=Budget(**{"max_candidates": 1, "max_output_tokens": 8192, **budget}))


def skills(folder: Path) -> dict[str, Any]:
    from controller.skills.model import Skill

    (folder / "gqa-decode").mkdir(parents=True, exist_ok=True)
    path = folder / "gqa-decode" / "SKILL.md"
    path.write_text(f"---\nname: gqa-decode\ndescription: decode tactics\n---\n{SKILL_BODY}\n")
    return {"gqa-decode": Skill(name="gqa-decode", description="decode tactics", body=SKILL_BODY, path=path)}


def sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def stream_response(events: list[dict[str, Any]]) -> httpx2.Response:
    return httpx2.Response(200, content=sse(events), headers={"content-type": "text/event-stream"})


# -- Anthropic: ("thinking", text, signature) | ("text", text) | ("tool", id, name, arguments) ---------------------


def claude_stream(blocks: list[tuple], stop: str = "tool_use", tokens_in: int = 1000, tokens_out: int = 500,
                  cache_read: int = 0, cache_write: int = 0) -> httpx2.Response:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": tokens_in, "output_tokens": 1, "cache_read_input_tokens": cache_read,
                  "cache_creation_input_tokens": cache_write}}}]
    for i, block in enumerate(blocks):
        kind = block[0]
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block[1][:5]},
                      {"type": "thinking_delta", "thinking": block[1][5:]},
                      {"type": "signature_delta", "signature": block[2]}]
        elif kind == "text":
            start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block[1]}]
        else:
            raw = json.dumps(block[3])
            start = {"type": "tool_use", "id": block[1], "name": block[2], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": raw[:7]},
                      {"type": "input_json_delta", "partial_json": raw[7:]}]
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": tokens_out}})
    events.append({"type": "message_stop"})
    return stream_response(events)


# -- OpenAI: ("reasoning", id, encrypted) | ("text", text) | ("call", call_id, name, arguments) --------------------


def _response(status: str, output: list[dict[str, Any]], usage: Any, incomplete: Any = None) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-5", "status": status,
            "incomplete_details": incomplete, "output": output, "usage": usage, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "error": None}


def gpt_stream(items: list[tuple], tokens_in: int = 1000, tokens_out: int = 500, cached: int = 0,
               status: str = "completed", incomplete: Any = None) -> httpx2.Response:
    seq = iter(range(10_000))
    events: list[dict[str, Any]] = [{"type": "response.created", "sequence_number": next(seq),
                                     "response": _response("in_progress", [], None)}]
    output = []
    for i, it in enumerate(items):
        if it[0] == "reasoning":
            item = {"type": "reasoning", "id": it[1], "summary": [], "encrypted_content": it[2]}
        elif it[0] == "text":
            item = {"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": it[1], "annotations": []}]}
        else:
            item = {"type": "function_call", "id": f"fc_{i}", "call_id": it[1], "name": it[2],
                    "arguments": json.dumps(it[3]), "status": "completed"}
        events.append({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": i,
                       "item": {**item, "arguments": ""} if it[0] == "call" else item})
        if it[0] == "call":
            raw = item["arguments"]
            for part in (raw[:9], raw[9:]):
                events.append({"type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                               "item_id": item["id"], "output_index": i, "delta": part})
            events.append({"type": "response.function_call_arguments.done", "sequence_number": next(seq),
                           "item_id": item["id"], "output_index": i, "arguments": raw, "name": it[2]})
        events.append({"type": "response.output_item.done", "sequence_number": next(seq), "output_index": i,
                       "item": item})
        output.append(item)
    usage = {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out,
             "input_tokens_details": {"cached_tokens": cached}, "output_tokens_details": {"reasoning_tokens": 100}}
    final = "response.completed" if status == "completed" else f"response.{status}"
    events.append({"type": final, "sequence_number": next(seq),
                   "response": _response(status, output, usage, incomplete)})
    return stream_response(events)


Item = Union["httpx2.Response", Exception, Callable[[Any], "httpx2.Response"]]


class Server:
    """Scripted responses in order (a Response, an exception to raise, or a callable of the request); records
    every request body."""

    def __init__(self, *responses: Item):
        self.responses = list(responses)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, req: Any) -> httpx2.Response:
        self.bodies.append(json.loads(req.content))
        item = self.responses.pop(0)
        if isinstance(item, Exception):
            raise item
        return item(req) if callable(item) and not isinstance(item, httpx2.Response) else item

    def client(self) -> httpx2.Client:
        return httpx2.Client(transport=httpx2.MockTransport(self))


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "invalid_request_error")
    return httpx2.Response(status, json={"type": "error", "error": {"type": kind, "message": message}},
                           headers=headers or {})


# The conversation both providers are scripted through: read a skill, evaluate a draft, submit.
READ = ("read_skill", {"name": "gqa-decode"})
EVALUATE = ("evaluate", {"files": FILES, "workloads": []})
SUBMIT = ("submit_kernel", REPLY)


def claude_conversation() -> list[httpx2.Response]:
    return [claude_stream([("thinking", "I should read the decode skill", "sig-1"), ("tool", "tu_1", *READ)]),
            claude_stream([("thinking", "Now try a split-K draft", "sig-2"), ("text", "Evaluating a draft."),
                           ("tool", "tu_2", *EVALUATE)], cache_read=900),
            claude_stream([("thinking", "It passed; submit", "sig-3"), ("tool", "tu_3", *SUBMIT)], cache_read=1000)]


def gpt_conversation() -> list[httpx2.Response]:
    return [gpt_stream([("reasoning", "rs_1", "enc-1"), ("call", "call_1", *READ)]),
            gpt_stream([("reasoning", "rs_2", "enc-2"), ("text", "Evaluating a draft."), ("call", "call_2", *EVALUATE)],
                       cached=900),
            gpt_stream([("reasoning", "rs_3", "enc-3"), ("call", "call_3", *SUBMIT)], cached=1000)]
