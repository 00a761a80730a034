"""What real APIs return when things go wrong, through the real SDK clients and scripted SSE servers
(tests/agent_sse.py, no network): refused keys, retry-after dates, error events inside a 200 stream, streams that
break off or end without their final event, odd chunking, pings and unknown events, null usage, malformed tool
arguments and refusals. Each ends as a recorded status, never a traceback; a refused key stops the run on one line."""

from __future__ import annotations

import email.utils
import json
import time

import pytest

pytest.importorskip("anthropic")
pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

from agent_sse import (REPLY, Server, _response, claude_stream, gpt_stream, request, sse,  # noqa: E402
                       stream_response)
from controller.agent.tool_loop import MemoryJournal  # noqa: E402
from controller.providers.anthropic import AnthropicProvider  # noqa: E402
from controller.providers.api_errors import redact, retry_after_s  # noqa: E402
from controller.providers.base import ProviderError  # noqa: E402
from controller.providers.openai import OpenAIProvider  # noqa: E402

KEY = "sk-ant-api03-SECRETSECRETSECRET"


def claude(server: Server, **options) -> AnthropicProvider:
    return AnthropicProvider(api_key=KEY, base_url="http://anthropic.test", http_client=server.client(), **options)


def gpt(server: Server, **options) -> OpenAIProvider:
    return OpenAIProvider(api_key=KEY, base_url="http://openai.test/v1", http_client=server.client(), **options)


MAKE = {"anthropic": claude, "openai": gpt}
SUBMIT = {"anthropic": lambda: claude_stream([("tool", "tu_9", "submit_kernel", REPLY)]),
          "openai": lambda: gpt_stream([("call", "call_9", "submit_kernel", REPLY)])}
BOTH = pytest.mark.parametrize("name", ["anthropic", "openai"])


def bound(provider):
    journal = MemoryJournal()
    provider.bind({}, journal)
    return provider, journal


def chunked(data: bytes, size: int) -> httpx2.Response:
    return httpx2.Response(200, content=(data[i:i + size] for i in range(0, len(data), size)),
                           headers={"content-type": "text/event-stream"})


def events_of(response: httpx2.Response) -> list[str]:
    return [e for e in response.content.decode().split("\n\n") if e]


def raw_stream(events: list[str]) -> httpx2.Response:
    return httpx2.Response(200, content=("\n\n".join(events) + "\n\n").encode(),
                           headers={"content-type": "text/event-stream"})


# -- retry-after and refusals of the request ---------------------------------------------------------------------


def test_retry_after_as_an_http_date_is_the_wait_it_names():
    now = time.time()
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert retry_after_s({"retry-after": date}, now=now) == pytest.approx(7, abs=1)
    assert retry_after_s({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0.0
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({"retry-after": "nan"}) is None
    assert retry_after_s({"retry-after-ms": "1500"}) == 1.5


@BOTH
def test_a_retry_after_date_past_the_deadline_is_not_waited_for(name):
    date = email.utils.formatdate(time.time() + 120, usegmt=True)
    server = Server(httpx2.Response(429, json={"error": {"type": "rate_limit_error", "message": "slow"}},
                                    headers={"retry-after": date}), SUBMIT[name]())
    started = time.monotonic()
    response = MAKE[name](server).generate(request(wall_s=20))
    assert time.monotonic() - started < 5 and len(server.bodies) == 1
    assert "does not fit" in response.error and response.proposals == []


@BOTH
@pytest.mark.parametrize("status, body", [
    (401, {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"}}),
    (401, {"error": {"message": "Incorrect API key provided: sk-ant-a***********CRET.", "type": "invalid_request_error",
                     "code": "invalid_api_key"}}),
    (403, {"type": "error", "error": {"type": "permission_error", "message": "not allowed\nfor this key"}}),
    (429, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                     "code": "insufficient_quota"}}),
])
def test_a_refused_credential_stops_the_run_on_one_line_without_the_key(name, status, body):
    server = Server(httpx2.Response(status, json=body), SUBMIT[name]())
    provider, journal = bound(MAKE[name](server))
    with pytest.raises(ProviderError) as raised:
        provider.generate(request(wall_s=30))
    line = str(raised.value)
    assert len(server.bodies) == 1  # never retried
    assert name in line and "\n" not in line and KEY not in line and "SECRET" not in line and f"HTTP {status}" in line
    (turn,) = journal.turns(request())  # the failed call is archived with its reason
    assert turn.assistant.fatal and turn.assistant.error and KEY not in turn.assistant.error


def test_credentials_are_masked_wherever_they_appear(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "plain-env-credential-value")
    text = redact("key plain-env-credential-value and sk-proj-abcdEFGH1234****wxyz\nand a second line", ["x" * 3])
    assert "plain-env" not in text and "abcdEFGH" not in text and "\n" not in text
    assert len(redact("y" * 5000)) <= 500


@BOTH
def test_a_prompt_too_long_is_one_error_of_the_request_not_retried(name):
    message = "prompt is too long: 210000 tokens > 200000 maximum"
    server = Server(httpx2.Response(400, json={"type": "error", "error": {"type": "invalid_request_error",
                                                                         "message": message}}))
    response = MAKE[name](server).generate(request(wall_s=30))
    assert len(server.bodies) == 1 and "HTTP 400" in response.error and message in response.error


@BOTH
def test_an_html_gateway_page_is_retried_and_its_error_kept_short(name):
    page = "<html>" + "bad gateway " * 2000 + "</html>"
    server = Server(httpx2.Response(502, text=page), httpx2.Response(503, text=page))
    response = MAKE[name](server, max_retries=1).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and "gave up after 1 retries" in response.error
    assert len(response.error) < 600 and "\n" not in response.error


# -- streams -------------------------------------------------------------------------------------------------------


@BOTH
def test_an_error_event_inside_a_200_stream_is_retried_when_transient(name):
    if name == "anthropic":
        start = {"type": "message_start", "message": {
            "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 700, "output_tokens": 1}}}
        broken = stream_response([start, {"type": "error", "error": {"type": "api_error", "message": "Internal"}}])
    else:
        created = {"type": "response.created", "sequence_number": 0, "response": _response("in_progress", [], None)}
        broken = stream_response([created, {"type": "error", "sequence_number": 1, "code": "server_error",
                                            "message": "The server had an error", "param": None}])
    server = Server(broken, SUBMIT[name]())
    response = MAKE[name](server).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and len(response.proposals) == 1 and response.error is None
    if name == "anthropic":  # the failed attempt's input tokens (message_start said 700) are charged too
        assert response.tokens_in == 1000 + 700


def test_an_openai_response_failed_with_a_server_error_is_retried():
    created = {"type": "response.created", "sequence_number": 0, "response": _response("in_progress", [], None)}
    failed = {**_response("failed", [], None), "error": {"code": "server_error", "message": "boom"}}
    server = Server(stream_response([created, {"type": "response.failed", "sequence_number": 1, "response": failed}]),
                    SUBMIT["openai"]())
    response = gpt(server).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and len(response.proposals) == 1


@BOTH
@pytest.mark.parametrize("keep", [1, 2, 3, 5])
def test_a_stream_that_ends_before_its_final_event_is_retried_never_half_used(name, keep):
    full = events_of(SUBMIT[name]())
    server = Server(raw_stream(full[:len(full) - keep]), raw_stream(full[:len(full) - keep]))
    provider, journal = bound(MAKE[name](server, max_retries=1))
    response = provider.generate(request(wall_s=30))
    assert len(server.bodies) == 2 and response.proposals == [] and response.rejected == []
    assert "final" in response.error and "gave up after 1 retries" in response.error


@BOTH
def test_a_connection_reset_mid_stream_is_retried(name):
    data = SUBMIT[name]().content

    def reset():
        yield data[: len(data) // 2]
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")

    broken = httpx2.Response(200, content=reset(), headers={"content-type": "text/event-stream"})
    server = Server(broken, SUBMIT[name]())
    response = MAKE[name](server).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and len(response.proposals) == 1 and response.error is None


@BOTH
def test_odd_chunks_inside_utf8_characters_pings_comments_and_unknown_events_are_read(name):
    reply = {**REPLY, "notes": "héllo — ünïcödé 🚀"}
    made = (claude_stream([("text", "Voilà 🚀"), ("tool", "tu_1", "submit_kernel", reply)]) if name == "anthropic"
            else gpt_stream([("text", "Voilà 🚀"), ("call", "call_1", "submit_kernel", reply)]))
    events = events_of(made)
    noise = ['event: ping\ndata: {"type": "ping"}', ": keep-alive comment",
             'event: brand_new_event\ndata: {"type": "brand_new_event", "x": 1}']
    data = ("\n\n".join(events[:2] + noise + events[2:]) + "\n\n").encode()
    server = Server(chunked(data, 7))  # 7 bytes: every multibyte character above is split somewhere
    response = MAKE[name](server).generate(request(wall_s=30))
    assert response.error is None and response.proposals[0].notes == reply["notes"]


# -- what the model sent ----------------------------------------------------------------------------------------


def test_null_and_missing_usage_is_charged_as_an_estimate_never_as_free():
    start = {"type": "message_start", "message": {
        "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": None, "output_tokens": None}}}
    tool = json.dumps(REPLY)
    events = [start, {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "tu_1", "name": "submit_kernel", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": tool}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {}},
        {"type": "message_stop"}]
    response = claude(Server(stream_response(events))).generate(request(wall_s=30))
    assert len(response.proposals) == 1 and response.tokens_in > 300 and response.tokens_out > 50
    assert response.cost_usd > 0

    created = {"type": "response.created", "sequence_number": 0, "response": _response("in_progress", [], None)}
    nulls = {"input_tokens": None, "output_tokens": None, "total_tokens": None, "input_tokens_details": None,
             "output_tokens_details": None}
    item = {"type": "function_call", "id": "fc_0", "call_id": "c1", "name": "submit_kernel", "arguments": tool,
            "status": "completed"}
    server = Server(stream_response([created, {"type": "response.completed", "sequence_number": 1,
                                               "response": _response("completed", [item], nulls)}]))
    provider, journal = bound(gpt(server))
    response = provider.generate(request(wall_s=30))
    assert response.error is None and len(response.proposals) == 1 and response.tokens_in > 300
    assert "tokens estimated" in journal.turns(request())[0].assistant.stop_reason


@BOTH
def test_malformed_tool_arguments_are_sent_back_and_use_no_candidate_slot(name):
    cut = json.dumps(REPLY)[:60]  # a JSON object that stops in the middle of the kernel
    if name == "anthropic":
        start = {"type": "message_start", "message": {
            "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}
        first = stream_response([start, {"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": "tu_1", "name": "submit_kernel", "input": {}}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": cut}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
             "usage": {"output_tokens": 20}}, {"type": "message_stop"}])
    else:
        created = {"type": "response.created", "sequence_number": 0, "response": _response("in_progress", [], None)}
        item = {"type": "function_call", "id": "fc_0", "call_id": "call_1", "name": "submit_kernel",
                "arguments": cut, "status": "completed"}
        usage = {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30}
        first = stream_response([created, {"type": "response.output_item.done", "sequence_number": 1,
                                           "output_index": 0, "item": item},
                                 {"type": "response.completed", "sequence_number": 2,
                                  "response": _response("completed", [item], usage)}])
    server = Server(first, SUBMIT[name]())
    provider, journal = bound(MAKE[name](server))
    response = provider.generate(request(wall_s=30))
    first_turn = journal.turns(request())[0]
    assert first_turn.results[0].is_error and "not valid JSON" in first_turn.results[0].content
    assert response.rejected == [] and len(response.proposals) == 1  # the resent call took the one slot
    assert len(server.bodies) == 2


def test_invalid_json_that_breaks_the_sdks_stream_parser_is_retried():
    start = {"type": "message_start", "message": {
        "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}
    bad = stream_response([start, {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "tu_1", "name": "submit_kernel", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"files": "x\\q"}'}}])
    server = Server(bad, SUBMIT["anthropic"]())
    response = claude(server).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and len(response.proposals) == 1 and response.error is None


@BOTH
def test_a_refusal_is_the_recorded_reason_for_no_candidate(name):
    if name == "anthropic":
        made = claude_stream([("text", "I can't help with that.")], stop="refusal")
    else:
        created = {"type": "response.created", "sequence_number": 0, "response": _response("in_progress", [], None)}
        item = {"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}]}
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        made = stream_response([created, {"type": "response.completed", "sequence_number": 1,
                                          "response": _response("completed", [item], usage)}])
    response = MAKE[name](Server(made)).generate(request(wall_s=30))
    assert response.proposals == [] and response.stopped == "the model refused: I can't help with that."


def test_sse_helper_is_the_wire_format():  # the helper the tests above build on
    assert sse([{"type": "ping"}]) == b'event: ping\ndata: {"type": "ping"}\n\n'


@BOTH
def test_a_lone_surrogate_the_model_wrote_is_replaced_not_a_lost_turn(name):
    reply = {**REPLY, "files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # \ud83d cut emoji\n"}]}
    made = (claude_stream([("text", "a note \udc00"), ("tool", "tu_1", "submit_kernel", REPLY)]) if name == "anthropic"
            else gpt_stream([("text", "a note \udc00"), ("call", "c1", "submit_kernel", reply)]))
    provider, journal = bound(MAKE[name](Server(made)))
    response = provider.generate(request(wall_s=30))
    assert response.error is None and len(response.proposals) == 1
    (turn,) = journal.turns(request())
    assert turn.assistant.text == "a note \ufffd" and "\ufffd" in response.raw_text
    if name == "openai":  # the source the harness will write as UTF-8
        assert response.proposals[0].solution["sources"][0]["content"].endswith("# \ufffd cut emoji\n")


@BOTH
def test_an_attempt_that_breaks_mid_stream_is_charged_what_it_had_used(name):
    raw = json.dumps({**REPLY, "notes": "n" * 3000})
    pieces = [raw[i:i + 100] for i in range(0, len(raw), 100)]
    if name == "anthropic":
        start = {"type": "message_start", "message": {
            "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 2000, "output_tokens": 1}}}
        events = [start, {"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": "tu_1", "name": "submit_kernel", "input": {}}}]
        events += [{"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                                          "partial_json": p}} for p in pieces]
    else:
        created = {"type": "response.created", "sequence_number": 0, "response": _response("in_progress", [], None)}
        item = {"type": "function_call", "id": "fc_0", "call_id": "c1", "name": "submit_kernel", "arguments": "",
                "status": "in_progress"}
        events = [created, {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                            "item": item}]
        events += [{"type": "response.function_call_arguments.delta", "sequence_number": 2 + i, "item_id": "fc_0",
                    "output_index": 0, "delta": p} for i, p in enumerate(pieces)]
    data = sse(events)

    def reset():
        yield data
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")

    server = Server(httpx2.Response(200, content=reset(), headers={"content-type": "text/event-stream"}),
                    SUBMIT[name]())
    response = MAKE[name](server).generate(request(wall_s=30))
    assert len(server.bodies) == 2 and len(response.proposals) == 1
    # the successful attempt reports 1000 in / 500 out; the broken one adds its input and ~1000 streamed tokens
    assert response.tokens_in > 1000 + 300 and response.tokens_out > 500 + 900


@BOTH
def test_an_answer_cut_at_max_tokens_mid_code_block_submits_nothing(name):
    half = "Here is the kernel:\n```python\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output):\n"
    made = (claude_stream([("text", half)], stop="max_tokens") if name == "anthropic"
            else gpt_stream([("text", half)], status="incomplete", incomplete={"reason": "max_output_tokens"}))
    response = MAKE[name](Server(made)).generate(request(wall_s=30))
    assert response.proposals == [] and response.rejected == [] and "max_tokens" in response.stopped


def test_an_openai_answer_stopped_by_its_content_filter_is_a_refusal():
    made = gpt_stream([("text", "I can")], status="incomplete", incomplete={"reason": "content_filter"})
    response = gpt(Server(made)).generate(request(wall_s=30))
    assert response.proposals == [] and response.stopped == "the model refused: I can"


@pytest.mark.parametrize("name, refused, left_off", [
    ("anthropic", "'claude-3-5-haiku-20241022' does not support thinking.", ["thinking"]),
    ("openai", "Unsupported parameter: 'reasoning.effort' is not supported with this model.", ["reasoning", "include"]),
    ("openai", "Unrecognized request argument supplied: prompt_cache_key", ["prompt_cache_key"]),
])
def test_an_optional_parameter_the_model_refuses_is_left_off_and_stays_off(name, refused, left_off):
    bad = httpx2.Response(400, json={"type": "error", "error": {"type": "invalid_request_error", "message": refused}})
    server = Server(bad, SUBMIT[name](), SUBMIT[name]())
    provider = MAKE[name](server)
    first = provider.generate(request(wall_s=30))
    assert first.error is None and len(first.proposals) == 1 and len(server.bodies) == 2
    assert all(key in server.bodies[0] for key in left_off) and not any(key in server.bodies[1] for key in left_off)
    second = provider.generate(request(run_id="run-2", wall_s=30))  # the provider's next request: off from the start
    assert len(second.proposals) == 1 and len(server.bodies) == 3 and not any(k in server.bodies[2] for k in left_off)


def test_a_bad_request_about_something_else_is_not_sent_again():
    bad = httpx2.Response(400, json={"type": "error", "error": {
        "type": "invalid_request_error", "message": "messages.1.content.0.thinking.signature: Field required"}})
    server = Server(bad, SUBMIT["anthropic"]())
    response = claude(server).generate(request(wall_s=30))
    assert len(server.bodies) == 1 and "HTTP 400" in response.error


def test_tool_arguments_that_are_no_object_go_back_as_an_empty_object():
    start = {"type": "message_start", "message": {
        "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}
    listed = stream_response([start, {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "tu_1", "name": "submit_kernel", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                              "partial_json": '["kernel.py", "def run(): pass"]'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 20}}, {"type": "message_stop"}])
    server = Server(listed, SUBMIT["anthropic"]())
    provider, journal = bound(claude(server))
    response = provider.generate(request(wall_s=30))
    assert "not an object" in journal.turns(request())[0].results[0].content and len(response.proposals) == 1
    echoed = server.bodies[1]["messages"][1]["content"][0]
    assert echoed["type"] == "tool_use" and echoed["input"] == {}


@BOTH
def test_a_stream_that_only_trickles_keep_alives_is_cut_and_stops_being_read(name):
    import threading

    head = events_of(SUBMIT[name]())[:1]
    reads = []

    def trickle():
        yield ("\n\n".join(head) + "\n\n").encode()
        for _ in range(400):  # the server keeps the connection alive and never answers (20 s)
            time.sleep(0.05)
            reads.append(time.monotonic())
            yield b'event: ping\ndata: {"type": "ping"}\n\n' if name == "anthropic" else b": keep-alive\n\n"

    server = Server(httpx2.Response(200, content=trickle(), headers={"content-type": "text/event-stream"}))
    earlier = set(threading.enumerate())
    started = time.monotonic()
    response = MAKE[name](server).generate(request(wall_s=0.8))
    assert time.monotonic() - started < 2 and response.stopped.startswith("wall time")
    time.sleep(0.5)
    assert reads and reads[-1] < time.monotonic() - 0.3  # the abandoned call no longer reads the stream
    assert not any(t.name == "chat-call" and t.is_alive() for t in set(threading.enumerate()) - earlier)
