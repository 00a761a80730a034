"""A model conversation as data: what each turn asked for and what the tools answered.

Provider-neutral, so one archive row format serves Anthropic and OpenAI, a resumed run rebuilds the provider's
messages from it, and a replay hands the same turns back. ``native`` keeps the provider's own content blocks of an
assistant turn (thinking blocks with their signatures must be sent back unchanged in a tool conversation).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Data):
    """One tool call of an assistant turn."""

    id: str  # the provider's call id, echoed in the result
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Why the arguments the model sent are not a JSON object (cut off, malformed); the tool is then not run and the
    # model is told so, and no candidate slot is used.
    invalid_arguments: Optional[str] = None


class AssistantTurn(_Data):
    """What the model sent back in one call."""

    text: str = ""  # visible text (not thinking)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    native: list[dict[str, Any]] = Field(default_factory=list)  # the provider's content blocks / output items
    tokens_in: int = 0  # every input token, cached ones included
    tokens_out: int = 0  # output tokens, thinking included
    cache_read_tokens: int = 0  # input tokens served from the provider's prompt cache
    cache_write_tokens: int = 0
    stop_reason: str = ""
    truncated: bool = False  # hit the output cap
    timed_out: bool = False  # no complete answer within the wall limit
    error: Optional[str] = None  # HTTP status, connection error: the conversation stops
    fatal: bool = False  # an error no later call can avoid (a refused credential): the run stops
    refused: bool = False  # the model declined the task (a refusal stop reason or refusal content)
    usage_missing: bool = False  # the API reported no token counts: the tool loop charges an estimate


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(value: Any) -> Any:
    """``value`` with every lone surrogate (half of a character's \\uXXXX pair, which a model can write into JSON)
    replaced by U+FFFD: such a string cannot be stored, sent or written as UTF-8."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, list):
        return [valid_text(v) for v in value]
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    return value


def valid_turn(turn: AssistantTurn) -> AssistantTurn:
    """``turn`` as valid UTF-8 throughout (see ``valid_text``); the same object when it already is."""
    data = turn.model_dump()
    cleaned = valid_text(data)
    return turn if cleaned == data else AssistantTurn.model_validate(cleaned)


class ToolResult(_Data):
    """The harness side's answer to one tool call."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


class Turn(_Data):
    """One round trip: the model's turn and the results of its tool calls (empty when it called none)."""

    index: int
    assistant: AssistantTurn
    results: list[ToolResult] = Field(default_factory=list)
    wall_s: float = 0.0
    cost_usd: float = 0.0
