"""A ChatModel over the Anthropic Messages API: tools, streaming, extended thinking, prompt caching.

Each call rebuilds the whole conversation from the archived turns (the API is stateless): the stable prefix and the
task as the first user message, then every archived assistant turn's content blocks exactly as they came (thinking
blocks with their signatures must come back unchanged, or a tool conversation with thinking is refused), each
followed by a user message of its tool results.

Prompt caching: ``system`` and the stable prefix (the same for every request of a definition) each end with a
``cache_control`` breakpoint, and so does the last tool result, so every later turn of a conversation reads what
was sent before from the cache instead of paying for it again. The tools come first in the cached prefix and are
the same for every call.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Optional

from ..agent.transcript import AssistantTurn, ToolCall, Turn
from .api_agent import call_within, classify_sdk_error, leaving_off
from .api_errors import StreamFailed

EPHEMERAL = {"type": "ephemeral"}
MIN_THINKING = 1024  # the API's smallest thinking budget
THINKING_MODES = ("enabled", "adaptive", "off")
# Stop reasons of an answer cut off before its end: the output cap, or the model's context window filled up.
CUT_SHORT = ("max_tokens", "model_context_window_exceeded")
# Parameters a model or endpoint may not take, and those left off with each (a 400 naming it).
OPTIONAL = {"thinking": ("thinking",)}


def anthropic_tools(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The neutral tool specs as Messages API tools."""
    return [{"name": s["name"], "description": s["description"], "input_schema": s["parameters"]} for s in specs]


def thinking_config(mode: str, budget: Optional[int], max_tokens: int) -> tuple[Optional[dict[str, Any]], str]:
    """The ``thinking`` parameter for a call with ``max_tokens``, and a note when thinking had to be left off.

    The budget is at most half of max_tokens (thinking counts against max_tokens, and the answer, a whole kernel
    in a tool call, needs the other half); when even the API's minimum of 1024 does not fit, the call goes
    without thinking rather than failing."""
    if mode == "off":
        return None, ""
    if mode == "adaptive":  # the model sizes its own thinking
        return {"type": "adaptive"}, ""
    room = max_tokens // 2
    chosen = min(budget, room) if budget else room
    if chosen < MIN_THINKING:
        return None, f"thinking off: max_tokens {max_tokens} leaves no room for a {MIN_THINKING}-token budget"
    return {"type": "enabled", "budget_tokens": chosen}, ""


def build_messages(stable: str, task: str, turns: list[Turn]) -> list[dict[str, Any]]:
    """The conversation as Messages API messages (see the module's docstring for the shape)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": stable, "cache_control": EPHEMERAL}, {"type": "text", "text": task}]}]
    for turn in turns:
        if not turn.assistant.native:  # a failed call (error, timeout) left nothing the API would accept
            continue
        # A tool call whose arguments were not an object goes back with none: the API takes only an object there.
        content = [{**b, "input": {}} if b.get("type") == "tool_use" and not isinstance(b.get("input"), dict) else b
                   for b in turn.assistant.native]
        messages.append({"role": "assistant", "content": content})
        answered = {r.call_id: r for r in turn.results}
        results = []
        for call in turn.assistant.tool_calls:  # every tool_use needs its tool_result, in the next message
            r = answered.get(call.id)
            content, is_error = (r.content, r.is_error) if r else ("not run: the turn was cut short", True)
            results.append({"type": "tool_result", "tool_use_id": call.id, "content": content, "is_error": is_error})
        if results:
            messages.append({"role": "user", "content": results})
    last = messages[-1]["content"][-1]
    if messages[-1]["role"] == "user" and len(messages) > 1:
        # The newest tool result ends the cached prefix: the next turn re-reads everything up to here cheaply.
        messages[-1]["content"][-1] = {**last, "cache_control": EPHEMERAL}
    return messages


class AnthropicChat:
    """ChatModel over ``client.messages.stream``. ``client`` builds the SDK client lazily (a provider's)."""

    name = "anthropic"

    def __init__(self, model: str, client: Callable[[], Any], sdk: Any, thinking: str = "enabled",
                 thinking_budget: Optional[int] = None, max_retries: int = 6,
                 unsupported: Optional[set[str]] = None):
        if thinking not in THINKING_MODES:
            raise ValueError(f"thinking must be one of {', '.join(THINKING_MODES)}, not {thinking!r}")
        self.model, self.client, self.sdk = model, client, sdk
        self.thinking, self.thinking_budget, self.max_retries = thinking, thinking_budget, max_retries
        self.sent: list[dict[str, Any]] = []  # the parameters of every call (tests, debugging)
        self.unsupported = unsupported if unsupported is not None else set()  # left off, once refused

    def params(self, system: str, stable: str, task: str, turns: list[Turn], tools: list[dict[str, Any]],
               max_tokens: int) -> tuple[dict[str, Any], str]:
        thinking, note = thinking_config(self.thinking, self.thinking_budget, max_tokens)
        params: dict[str, Any] = {
            "model": self.model, "max_tokens": max_tokens,
            "system": [{"type": "text", "text": system, "cache_control": EPHEMERAL}],
            "messages": build_messages(stable, task, turns), "tools": anthropic_tools(tools),
            # "auto": a forced tool choice is refused together with thinking, and the model must be free to stop.
            "tool_choice": {"type": "auto"}}
        if thinking is not None:
            params["thinking"] = thinking
        return params, note

    def send(self, system: str, stable: str, task: str, turns: list[Turn], tools: list[dict[str, Any]],
             max_tokens: int, timeout_s: float) -> AssistantTurn:
        params, note = self.params(system, stable, task, turns, tools, max_tokens)
        self.sent.append(params)
        client = self.client()

        def attempt(left: float, cancelled: threading.Event, usage: dict[str, int]) -> AssistantTurn:
            raw_json: dict[int, str] = {}  # each tool call's arguments as sent, parsed strictly at the end
            finished, streamed = False, 0
            with client.messages.stream(**params, timeout=left) as stream:
                for event in stream:  # the accumulator builds the message; we watch usage, arguments, the end
                    if cancelled.is_set():
                        return AssistantTurn(timed_out=True)
                    if event.type == "message_start":
                        usage.update(usage_counts(event.message.usage))
                    elif event.type == "content_block_delta":
                        delta = event.delta
                        piece = getattr(delta, "partial_json", None) or getattr(delta, "text", None) or getattr(
                            delta, "thinking", None) or ""
                        if getattr(delta, "type", "") == "input_json_delta":
                            raw_json[event.index] = raw_json.get(event.index, "") + piece
                        streamed += len(piece)  # output so far, should the stream break before it is counted
                        usage["tokens_out"] = max(usage.get("tokens_out", 0), streamed // 3)
                    elif event.type == "message_delta":
                        out = getattr(event.usage, "output_tokens", None)
                        if isinstance(out, int):
                            usage["tokens_out"] = out
                    elif event.type == "message_stop":
                        finished = True
                if not finished:  # a tool call cut off here would otherwise run with what had arrived
                    raise StreamFailed("the stream ended before its final event (message_stop)")
                message = stream.get_final_message()
            return to_turn(message, note, raw_json)

        return leaving_off(lambda left: call_within(left, attempt, lambda err: classify_sdk_error(self.sdk, err),
                                                     self.max_retries), params, OPTIONAL, self.unsupported, timeout_s)


def usage_counts(usage: Any) -> dict[str, int]:
    """Token counts of a usage object (``tokens_in`` with the cached input); a missing or null field counts 0."""
    fields = (("tokens_in", "input_tokens"), ("tokens_out", "output_tokens"),
              ("cache_read_tokens", "cache_read_input_tokens"), ("cache_write_tokens", "cache_creation_input_tokens"))
    counts = {ours: getattr(usage, theirs, None) for ours, theirs in fields}
    counts = {k: v if isinstance(v, int) and v > 0 else 0 for k, v in counts.items()}
    counts["tokens_in"] += counts["cache_read_tokens"] + counts["cache_write_tokens"]
    return counts


def tool_arguments(block: Any, raw: Optional[str]) -> tuple[dict[str, Any], Optional[str]]:
    """(arguments, why they are invalid): the streamed JSON parsed strictly (the SDK's own parse accepts a cut-off
    object), else the block's input."""
    if raw is None or not raw.strip():
        value: Any = block.input if raw is None else {}
    else:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as err:
            return {}, f"the arguments are not valid JSON ({err.msg} at character {err.pos} of {len(raw)})"
    if not isinstance(value, dict):
        return {}, f"the arguments are a JSON {type(value).__name__}, not an object"
    return value, None


def to_turn(message: Any, note: str = "", raw_json: Optional[dict[int, str]] = None) -> AssistantTurn:
    """The final message as an AssistantTurn; ``native`` keeps every block as JSON for the next call's echo."""
    text, calls, native = [], [], []
    for index, block in enumerate(message.content):
        native.append(block.model_dump(mode="json", exclude_none=True, by_alias=True, warnings=False))
        if block.type == "text":
            text.append(block.text)
        elif block.type == "tool_use":
            arguments, invalid = tool_arguments(block, (raw_json or {}).get(index))
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments, invalid_arguments=invalid))
    usage = message.usage
    counts = usage_counts(usage)
    missing = usage is None or (getattr(usage, "input_tokens", None) is None
                                and getattr(usage, "output_tokens", None) is None)
    read, written = counts["cache_read_tokens"], counts["cache_write_tokens"]
    stop = message.stop_reason or ""
    return AssistantTurn(text="\n".join(text), tool_calls=calls, native=native,
                         tokens_in=counts["tokens_in"], tokens_out=counts["tokens_out"],
                         cache_read_tokens=read, cache_write_tokens=written, usage_missing=missing,
                         stop_reason=f"{stop} ({note})" if note else stop, truncated=stop in CUT_SHORT,
                         refused=stop == "refusal")
