"""A ChatModel over the OpenAI Responses API: function tools, streaming, reasoning effort, prompt caching.

Stateless on purpose (``store=False``): nothing of a conversation lives on OpenAI's side, so a killed run resumes
from the archive alone and a replay needs nothing remote. Each call therefore sends the whole conversation: the
stable prefix and the task as the first user input, then every archived turn's output items (reasoning items carry
their ``encrypted_content``, asked for with ``include=["reasoning.encrypted_content"]``, which is how reasoning
continues across stateless calls), each followed by its ``function_call_output`` items.

Prompt caching is automatic for a prefix the calls share: ``instructions`` and the stable prefix come first, and
``prompt_cache_key`` (a hash of them, so one per definition) routes every request of a definition to the same cache.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Callable, Optional

from ..agent.transcript import AssistantTurn, ToolCall, Turn
from .api_agent import call_within, classify_sdk_error, leaving_off
from .api_errors import FATAL_CODES, RETRYABLE_CODES, StreamFailed
from .base import estimate_tokens

EFFORTS = ("minimal", "low", "medium", "high", "off")  # "off": no reasoning parameter (non-reasoning models)
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
# Parameters a model or endpoint may not take, and those left off with each (a 400 naming it).
OPTIONAL = {"reasoning": ("reasoning", "include"), "include": ("include",),
            "prompt_cache_key": ("prompt_cache_key",)}


def _strict_ok(schema: Any) -> bool:
    """Whether a JSON schema meets strict mode (every object closed, every property required)."""
    if isinstance(schema, list):
        return all(_strict_ok(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" and (schema.get("additionalProperties") is not False
                                           or set(schema.get("required", [])) != set(schema.get("properties", {}))):
        return False
    return all(_strict_ok(v) for k, v in schema.items() if k in ("properties", "items", "anyOf", "$defs")) and all(
        _strict_ok(v) for v in (schema.get("properties") or {}).values())


def openai_tools(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The neutral tool specs as Responses API function tools (strict where the schema allows it, so arguments
    always parse)."""
    return [{"type": "function", "name": s["name"], "description": s["description"], "parameters": s["parameters"],
             "strict": _strict_ok(s["parameters"])} for s in specs]


def echo(item: dict[str, Any]) -> Optional[dict[str, Any]]:
    """An archived output item as input. Its ``id`` is dropped: with ``store=False`` the server looks an id up,
    finds nothing stored and refuses the request; the content (a reasoning item's encrypted_content) is what
    carries the conversation. A reasoning item without encrypted content cannot be sent back at all."""
    if item.get("type") == "reasoning" and not item.get("encrypted_content"):
        return None
    return {k: v for k, v in item.items() if k != "id"}


def build_input(stable: str, task: str, turns: list[Turn]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "input_text", "text": stable},
                                                                {"type": "input_text", "text": task}]}]
    for turn in turns:
        items.extend(e for e in (echo(i) for i in turn.assistant.native) if e is not None)
        answered = {r.call_id: r for r in turn.results}
        for call in turn.assistant.tool_calls:  # every function_call needs its output before the next call
            r = answered.get(call.id)
            content = ("ERROR: " + r.content if r.is_error else r.content) if r else "ERROR: not run (turn cut short)"
            items.append({"type": "function_call_output", "call_id": call.id, "output": content})
    return items


def cache_key(system: str, stable: str) -> str:
    return "crucible-" + hashlib.sha256((system + "\0" + stable).encode()).hexdigest()[:24]


class OpenAIChat:
    """ChatModel over ``client.responses.create(stream=True)``. ``client`` builds the SDK client lazily."""

    name = "openai"

    def __init__(self, model: str, client: Callable[[], Any], sdk: Any, effort: str = "high", max_retries: int = 6,
                 unsupported: Optional[set[str]] = None):
        if effort not in EFFORTS:
            raise ValueError(f"reasoning effort must be one of {', '.join(EFFORTS)}, not {effort!r}")
        self.model, self.client, self.sdk, self.effort, self.max_retries = model, client, sdk, effort, max_retries
        self.sent: list[dict[str, Any]] = []
        self.unsupported = unsupported if unsupported is not None else set()  # left off, once refused

    def params(self, system: str, stable: str, task: str, turns: list[Turn], tools: list[dict[str, Any]],
               max_tokens: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model, "instructions": system, "input": build_input(stable, task, turns),
            "tools": openai_tools(tools), "tool_choice": "auto",
            "max_output_tokens": max_tokens,  # reasoning tokens count against it too
            "store": False, "prompt_cache_key": cache_key(system, stable)}
        if self.effort != "off":
            params["reasoning"] = {"effort": self.effort}
            params["include"] = ["reasoning.encrypted_content"]
        return params

    def send(self, system: str, stable: str, task: str, turns: list[Turn], tools: list[dict[str, Any]],
             max_tokens: int, timeout_s: float) -> AssistantTurn:
        params = self.params(system, stable, task, turns, tools, max_tokens)
        self.sent.append(params)
        client = self.client()

        def attempt(left: float, cancelled: threading.Event, usage: dict[str, int]) -> AssistantTurn:
            done: dict[int, Any] = {}
            final, streamed = None, 0
            stream = client.responses.create(**params, stream=True, timeout=left)
            try:
                for event in stream:
                    if cancelled.is_set():
                        return AssistantTurn(timed_out=True)
                    # Usage comes with the final event only: should the stream break first, the attempt is
                    # charged an estimate of what it sent (once the server took it) and what had come back.
                    delta = getattr(event, "delta", None)
                    if event.type == "response.created":
                        usage["tokens_in"] = estimate_tokens(params["instructions"] + json.dumps(params["input"]))
                    elif isinstance(delta, str):
                        streamed += len(delta)
                        usage["tokens_out"] = streamed // 3
                    if event.type == "response.output_item.done":
                        done[event.output_index] = event.item
                    elif event.type in FINAL_EVENTS:
                        final = event.response
                    elif event.type == "error":  # inside the stream's 200: its code says whether to retry
                        code = getattr(event, "code", None)
                        raise StreamFailed(f"stream error: {code or 'no code'}: {getattr(event, 'message', event)}",
                                           code if isinstance(code, str) else "")
            finally:
                stream.close()
            if final is None:
                raise StreamFailed("the stream ended without a final response event")
            usage.clear()
            usage.update(usage_counts(final.usage))
            err = getattr(final, "error", None)
            code = getattr(err, "code", None)
            if final.status == "failed" and code in RETRYABLE_CODES | FATAL_CODES:
                raise StreamFailed(f"response failed: {code} {getattr(err, 'message', '') or ''}".strip(), code)
            return to_turn(final, [done[i] for i in sorted(done)])

        return leaving_off(lambda left: call_within(left, attempt, lambda err: classify_sdk_error(self.sdk, err),
                                                     self.max_retries), params, OPTIONAL, self.unsupported, timeout_s)


def usage_counts(usage: Any) -> dict[str, int]:
    """Token counts of a Responses API usage object; a missing or null field counts 0."""
    def count(value: Any) -> int:
        return value if isinstance(value, int) and value > 0 else 0

    cached = count(getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None))
    return {"tokens_in": count(getattr(usage, "input_tokens", None)),
            "tokens_out": count(getattr(usage, "output_tokens", None)), "cache_read_tokens": cached}


def function_arguments(raw: Any) -> tuple[dict[str, Any], Optional[str]]:
    """(arguments, why they are invalid) of a function call's JSON string."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as err:
        return {}, f"the arguments are not valid JSON ({err.msg} at character {err.pos} of {len(raw)})"
    if not isinstance(value, dict):
        return {}, f"the arguments are a JSON {type(value).__name__}, not an object"
    return value, None


def to_turn(response: Any, streamed: list[Any]) -> AssistantTurn:
    """The final response as an AssistantTurn: its output items (those streamed, else the final event's) kept as
    JSON in ``native``."""
    output = streamed or list(response.output or [])
    text, calls, native, refusals = [], [], [], []
    for item in output:
        native.append(item.model_dump(mode="json", exclude_none=True, by_alias=True))
        if item.type == "message":
            for c in item.content or []:
                if getattr(c, "type", "") == "output_text":
                    text.append(c.text or "")
                elif getattr(c, "type", "") == "refusal":
                    refusals.append(getattr(c, "refusal", "") or "")
        elif item.type == "function_call":
            arguments, invalid = function_arguments(item.arguments)
            calls.append(ToolCall(id=item.call_id, name=item.name, arguments=arguments, invalid_arguments=invalid))
    usage = response.usage
    counts = usage_counts(usage)
    missing = usage is None or (getattr(usage, "input_tokens", None) is None
                                and getattr(usage, "output_tokens", None) is None)
    details = getattr(response, "incomplete_details", None)
    reason = getattr(details, "reason", None)
    truncated = response.status == "incomplete" and reason == "max_output_tokens"
    error = None
    if response.status == "failed":
        err = getattr(response, "error", None)
        error = f"response failed: {getattr(err, 'code', '') or ''} {getattr(err, 'message', '') or ''}".strip()
    refused = bool(refusals) or reason == "content_filter"
    stop = "tool_calls" if calls else ("refusal" if refusals else (reason or response.status or ""))
    return AssistantTurn(text="\n".join(text + refusals), tool_calls=calls, native=native,
                         tokens_in=counts["tokens_in"], tokens_out=counts["tokens_out"],
                         cache_read_tokens=counts["cache_read_tokens"], usage_missing=missing, stop_reason=stop,
                         truncated=truncated, error=error, refused=refused and not calls)
