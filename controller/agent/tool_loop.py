"""The bounded tool conversation of one generation request.

One obvious loop: send the conversation, archive the model's turn with the results of its tool calls, repeat, until
the model stops calling tools, the candidate budget is used, or a bound stops it. Every bound is hard and checked
between turns (turns, tokens, cost, wall time; evaluations inside the evaluate tool) and inside each call (the
call's wall limit is what is left of the request's, its output cap what the token and cost budgets still allow).

A turn is written to the journal before the next call is sent, so a run killed mid-conversation resumes from its
last archived turn (the journal's turns are replayed into the conversation, nothing is sent twice), and a replay
provider hands the archived turns back in order.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Protocol

from harness.data.generation_request import (GenerationRequest, GenerationResponse, render_stable_prefix, render_task,
                                        render_template)

from ..providers.base import ProviderError, cost_usd, estimate_tokens, output_allowance
from .salvage import recover
from .tools import TOOL_SPECS, ToolBox, tool_name
from .transcript import AssistantTurn, ToolCall, ToolResult, Turn, valid_turn


class FatalCallError(ProviderError):
    """A call failed in a way no later call can avoid (a refused credential, no quota, an unknown model): the
    failed turn is archived, then the run stops with this one line."""


class ChatModel(Protocol):
    """A model that takes the conversation so far and answers one turn (providers/anthropic.py, openai.py)."""

    name: str
    model: str

    def send(self, system: str, stable: str, task: str, turns: list[Turn], tools: list[dict[str, Any]],
             max_tokens: int, timeout_s: float) -> AssistantTurn:
        """One call. ``system`` and ``stable`` are the same for every request of a definition (the cacheable
        prefix); ``task`` is this request's; ``turns`` the archived turns so far, to be sent back as they were."""
        ...


class Journal(Protocol):
    """Where a conversation's turns are kept, by request."""

    def turns(self, request: GenerationRequest) -> list[Turn]: ...

    def append(self, request: GenerationRequest, turn: Turn) -> None: ...


class MemoryJournal:
    """Turns kept in memory (tests, one-off calls)."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], list[Turn]] = {}

    def turns(self, request: GenerationRequest) -> list[Turn]:
        return list(self.kept.get((request.run_id, request.key), []))

    def append(self, request: GenerationRequest, turn: Turn) -> None:
        self.kept.setdefault((request.run_id, request.key), []).append(turn)


SYSTEM = render_template("tool_system").strip()  # harness/prompts/tool_system.md.j2


def _conversation(system: str, stable: str, task: str, turns: list[Turn]) -> str:
    """What the next call sends, as text for a (high) token estimate: the whole conversation is sent again each
    turn."""
    return system + stable + task + "".join(t.model_dump_json() for t in turns)


def split_prompt(request: GenerationRequest) -> tuple[str, str]:
    return render_stable_prefix(request), render_task(request)


def run_tool_loop(request: GenerationRequest, chat: ChatModel, toolbox: ToolBox, journal: Journal,
                  price: Optional[tuple[float, float]],
                  render: Callable[[GenerationRequest], tuple[str, str]] = split_prompt,
                  clock: Callable[[], float] = time.monotonic) -> GenerationResponse:
    """Run (or resume) the conversation of ``request``; the proposals are what ``submit_kernel`` accepted."""
    stable, task = render(request)
    b = request.budget
    response = GenerationResponse(provider=chat.name, model=chat.model if price else f"{chat.model} (no price: "
                                                                                       "cost not counted)")
    turns = journal.turns(request)
    for turn in turns:  # a resumed conversation: what was spent and submitted before the kill counts
        _account(response, turn)
        answered = {r.call_id: r for r in turn.results}
        for call in turn.assistant.tool_calls:
            result = answered.get(call.id)
            if result is None or result.is_error:  # refused or not run: it took nothing from the budgets
                continue
            if tool_name(call.name) == "submit_kernel":
                toolbox.call(call)  # re-derive the proposals; nothing is sent or evaluated again
            elif tool_name(call.name) == "evaluate":
                toolbox.evaluations += 1
    started = clock() - sum(t.wall_s for t in turns)
    toolbox.deadline, toolbox.clock = started + b.wall_s, clock  # no draft evaluation starts past the wall time
    tools = [dict(spec) for spec in TOOL_SPECS]
    while True:
        why = _stop_before_turn(request, toolbox, turns, clock() - started)
        if why is not None:
            response.stopped = _ended(toolbox, turns) if why == "done" else why
            break
        max_tokens, why_not = output_allowance(request, _conversation(SYSTEM, stable, task, turns), price,
                                               response.tokens_in + response.tokens_out, response.cost_usd)
        if why_not:
            response.stopped = why_not
            break
        call_started = clock()
        # A failed turn (HTTP error, timeout, cut short) stays in the journal but is not part of the conversation
        # sent again: a resumed conversation retries from the last turn that worked.
        sent = [t for t in turns if not _failed(t)]
        assistant = valid_turn(chat.send(SYSTEM, stable, task, sent, tools, max_tokens,
                                         b.wall_s - (call_started - started)))
        if assistant.usage_missing:  # never a free call: charged as the (high) estimate of what was sent and came
            assistant = assistant.model_copy(update={
                "tokens_in": max(assistant.tokens_in, estimate_tokens(_conversation(SYSTEM, stable, task, sent))),
                "tokens_out": max(assistant.tokens_out,
                                  estimate_tokens("".join(str(n) for n in assistant.native) or assistant.text)),
                "stop_reason": f"{assistant.stop_reason} (no usage reported: tokens estimated)".strip()})
        turn = Turn(index=len(turns), assistant=assistant, wall_s=clock() - call_started,
                    cost_usd=turn_cost(assistant, price))
        if assistant.error or assistant.timed_out or assistant.truncated:
            journal.append(request, turn)
            turns.append(turn)
            _account(response, turn)
            response.error = assistant.error
            if assistant.timed_out:
                response.stopped = f"wall time: no answer within the request's {b.wall_s:g} s"
            elif "model_context_window_exceeded" in assistant.stop_reason:
                response.stopped = f"the conversation filled the model's context window: turn {turn.index} cut short"
            elif assistant.truncated:
                response.stopped = f"output hit max_tokens ({max_tokens}): turn {turn.index} cut short"
            if assistant.fatal:
                raise FatalCallError(assistant.error or "the API refused the request")
            break
        over = _over_budget(request, response, turn)
        if over:  # this turn broke a bound: its tool calls are not run, its submissions not taken
            turn.results = [ToolResult(call_id=c.id, name=c.name, content=f"not run: {over}", is_error=True)
                            for c in assistant.tool_calls]
        else:
            turn.results = [toolbox.call(c) for c in assistant.tool_calls]
        journal.append(request, turn)  # before the next call is sent
        turns.append(turn)
        _account(response, turn)
        if over:
            response.stopped = over
            break
    response.proposals, response.rejected = list(toolbox.proposals), list(toolbox.rejected)
    response.raw_text = "\n".join(t.model_dump_json() for t in turns)
    response.wall_s = clock() - started
    return response


# Prompt-cache prices relative to the input price: a cache read costs a tenth (Anthropic and OpenAI alike), an
# Anthropic cache write (5-minute) a quarter more; OpenAI reports no writes.
CACHE_READ_RATE, CACHE_WRITE_RATE = 0.1, 1.25


def turn_cost(assistant: AssistantTurn, price: Optional[tuple[float, float]]) -> float:
    """USD of one turn: input at the input price, its cached part at the cache rates, output at the output price."""
    if price is None:
        return 0.0
    cached = assistant.cache_read_tokens + assistant.cache_write_tokens
    plain = max(assistant.tokens_in - cached, 0)
    weighted_in = (plain + CACHE_READ_RATE * assistant.cache_read_tokens
                   + CACHE_WRITE_RATE * assistant.cache_write_tokens)
    return cost_usd(0, assistant.tokens_out, price) + weighted_in * price[0] / 1e6


def _ended(toolbox: ToolBox, turns: list[Turn]) -> Optional[str]:
    """How a conversation the model ended stands: None when it submitted, else why there is no candidate (a
    refusal, or an answer in text, from which a written-out candidate is recovered where one is there)."""
    if toolbox.submitted or not turns:
        return None
    last = turns[-1].assistant
    said = " ".join(last.text.split())[:300]
    if last.refused:
        return f"the model refused: {said or last.stop_reason or 'no reason given'}"
    arguments, how = recover(last.text, toolbox.request.constraints.editable_files,
                             toolbox.request.constraints.entry_point)
    if arguments is None:
        return f"the model ended without calling submit_kernel, and nothing was taken from its answer: {how}"
    arguments.setdefault("notes", f"recovered from the model's answer ({how}): {said}")
    result = toolbox.call(ToolCall(id=f"recovered-{turns[-1].index}", name="submit_kernel", arguments=arguments))
    return f"the model ended without calling submit_kernel; {how} was submitted for it: {result.content}"


def _failed(turn: Turn) -> bool:
    a = turn.assistant
    return bool(a.error or a.timed_out or a.truncated)


def _account(response: GenerationResponse, turn: Turn) -> None:
    response.tokens_in += turn.assistant.tokens_in
    response.tokens_out += turn.assistant.tokens_out
    response.cost_usd += turn.cost_usd


def _stop_before_turn(request: GenerationRequest, toolbox: ToolBox, turns: list[Turn],
                      elapsed_s: float) -> Optional[str]:
    """"done" when the conversation is over, a bound's reason when one stops it, None to go on."""
    b = request.budget
    if turns and not turns[-1].assistant.tool_calls and not _failed(turns[-1]):
        return "done"  # the model answered without tools: it has nothing more to do
    if toolbox.submitted >= b.max_candidates:
        return "done"
    if len(turns) >= b.max_turns:
        return f"turn budget: {b.max_turns} turns used"
    if elapsed_s >= b.wall_s:
        return f"wall time: {b.wall_s:g} s used up"
    return None


def _over_budget(request: GenerationRequest, response: GenerationResponse, turn: Turn) -> Optional[str]:
    b = request.budget
    tokens = response.tokens_in + response.tokens_out + turn.assistant.tokens_in + turn.assistant.tokens_out
    if b.max_total_tokens is not None and tokens > b.max_total_tokens:
        return f"token budget: {tokens} tokens > {b.max_total_tokens}; turn {turn.index} discarded"
    cost = response.cost_usd + turn.cost_usd
    if b.max_cost_usd is not None and cost > b.max_cost_usd:
        return f"cost budget: ${cost:.4f} > ${b.max_cost_usd:.4f}; turn {turn.index} discarded"
    return None
