"""What the API providers share: the tool loop as ``generate``, the agent context given by ``bind``, and one call
of a chat model under a true wall limit with its own retries.

The SDK's timeout bounds each socket operation, not the call: a stream that trickles, or the SDK's own retries
(each with the full timeout again), could run far past a request's wall time. So the SDK client retries nothing
(``max_retries=0``), each attempt runs in a worker thread that the caller waits on for what is left of the deadline
only, and a 429 / 529 / 5xx / connection error is retried here with backoff (the server's retry-after when given)
only while the wait and another attempt still fit before the deadline. Which failure is which, and how each is said
(one line, credentials masked), is api_errors.py; a fatal one (a refused key) ends the run with a ProviderError.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable, Optional

from harness.data.generation_request import GenerationRequest, GenerationResponse

from ..agent.tool_loop import ChatModel, FatalCallError, Journal, MemoryJournal, run_tool_loop
from ..agent.tools import Evaluate, Profile, ToolBox
from ..agent.transcript import AssistantTurn
from .api_errors import (RETRYABLE_STATUS, RETRYABLE_TYPES, Failure, classify_sdk_error, retry_after_s,
                         unsupported_parameter)
from .base import ProviderError, SdkProvider, no_price, price_of
from .cancel import mark

__all__ = ["RETRYABLE_STATUS", "RETRYABLE_TYPES", "ApiAgentProvider", "Failure", "call_within", "classify_sdk_error",
           "retry_after_s"]

MIN_ATTEMPT_S = 1.0  # a retry with less time than this left cannot answer: give up instead
USAGE_FIELDS = ("tokens_in", "tokens_out", "cache_read_tokens", "cache_write_tokens")

# (seconds left, cancelled, usage) -> the turn. ``usage`` is filled in as the stream reports it (Anthropic's
# message_start gives the input tokens at once), so an attempt that fails halfway is still charged for them.
Attempt = Callable[[float, threading.Event, dict[str, int]], AssistantTurn]


def _charged(turn: AssistantTurn, spent: dict[str, int]) -> AssistantTurn:
    """``turn`` with the tokens of the attempts before it that failed (and were billed) added."""
    if not any(spent.values()):
        return turn
    update = {k: getattr(turn, k) + spent.get(k, 0) for k in USAGE_FIELDS}
    return turn.model_copy(update=update)


def call_within(timeout_s: float, attempt: Attempt, classify: Callable[[BaseException], Failure], max_retries: int,
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                ) -> AssistantTurn:
    """``attempt(seconds_left, cancelled, usage)`` until it answers, within ``timeout_s`` of wall time in all. A
    fatal failure (a refused credential) comes back as a turn with ``fatal`` set: the run cannot go on."""
    deadline = clock() + timeout_s
    tries = 0
    spent = dict.fromkeys(USAGE_FIELDS, 0)  # what failed attempts were charged

    def failed(**fields: Any) -> AssistantTurn:
        return _charged(AssistantTurn(**fields), spent)

    while True:
        left = deadline - clock()
        if left <= 0:
            return failed(timed_out=True, stop_reason=f"wall time: {timeout_s:.1f} s used up")
        box: dict[str, Any] = {}
        usage: dict[str, int] = {}
        cancelled = threading.Event()

        def work() -> None:
            mark(cancelled)  # the client's streams stop reading once the caller has given up (cancel.py)
            try:
                box["turn"] = attempt(left, cancelled, usage)
            except BaseException as err:  # handed to the caller's thread, which decides
                box["error"] = err

        # A daemon thread: one that outlives its deadline is abandoned (told to stop at its next event), never
        # waited for, so it cannot hold the request or the process.
        worker = threading.Thread(target=work, name="chat-call", daemon=True)
        worker.start()
        worker.join(left)
        if worker.is_alive():
            cancelled.set()
            _add(spent, usage)
            return failed(timed_out=True, stop_reason=f"wall time: no answer within {timeout_s:.1f} s")
        if "turn" in box:
            return _charged(box["turn"], spent)
        _add(spent, usage)
        failure = classify(box["error"])
        if failure.kind == "timeout":
            return failed(timed_out=True, stop_reason=f"wall time: {failure.message}")
        if failure.kind in ("error", "fatal"):
            return failed(error=failure.message, stop_reason="error", fatal=failure.kind == "fatal")
        wait = failure.retry_after if failure.retry_after is not None else min(30.0, 0.5 * 2 ** tries) * (
            0.5 + random.random() / 2)  # jitter: parallel lanes hit by one 429 do not retry in lockstep
        tries += 1
        if tries > max_retries:
            return failed(error=f"{failure.message} (gave up after {max_retries} retries)", stop_reason="error")
        if clock() + wait + MIN_ATTEMPT_S > deadline:
            return failed(error=f"{failure.message} (the {wait:.1f} s wait before a retry does not fit the "
                                f"{max(0.0, deadline - clock()):.1f} s left)", stop_reason="error")
        sleep(wait)


def leaving_off(send: Callable[[float], AssistantTurn], params: dict[str, Any], optional: dict[str, tuple[str, ...]],
                dropped: set[str], timeout_s: float, clock: Callable[[], float] = time.monotonic) -> AssistantTurn:
    """``send(seconds)`` with ``params``; when the API refuses an optional parameter (a 400 naming it: thinking or
    reasoning on a model without it, a prompt cache key on a compatible endpoint), that parameter and those that
    depend on it (``optional[name]``) are left off and the call is sent again, once per parameter, within the same
    ``timeout_s``. ``dropped`` is the provider's: its later requests leave them off from the start."""
    notes = []
    for name in dropped:
        for key in optional.get(name, ()):
            params.pop(key, None)
    deadline = clock() + timeout_s
    while True:
        turn = send(deadline - clock())
        name = unsupported_parameter(turn.error, optional) if turn.error and not turn.fatal else None
        if name is None or not any(key in params for key in optional[name]):
            break
        dropped.add(name)
        for key in optional[name]:
            params.pop(key, None)
        notes.append(f"{name} left off: {turn.error}")
    if notes and not turn.error:
        turn = turn.model_copy(update={"stop_reason": f"{turn.stop_reason} ({'; '.join(notes)})"})
    return turn


def _add(spent: dict[str, int], usage: dict[str, int]) -> None:
    for key in USAGE_FIELDS:
        value = usage.get(key)
        spent[key] += value if isinstance(value, int) and value > 0 else 0


class ApiAgentProvider(SdkProvider):
    """An API provider whose ``generate`` is the tool loop over its ``chat()`` model."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.skills: dict[str, Any] = {}
        self.journal: Journal = MemoryJournal()
        self.evaluate: Optional[Evaluate] = None
        self.profile: Optional[Profile] = None
        self.unsupported: set[str] = set()  # optional parameters the model refused: left off its later requests

    def bind(self, skills: dict[str, Any], journal: Journal, evaluate: Optional[Evaluate] = None,
             profile: Optional[Profile] = None) -> None:
        """The agent context the controller's loop gives: skills the tools read, the journal its turns go to
        (the archive, so a killed run resumes), and the harness behind the evaluate and read_profile tools.
        Unbound, the model has no skills and no evaluation (the tool says so) but can still submit."""
        self.skills, self.journal, self.evaluate, self.profile = skills, journal, evaluate, profile

    def chat(self) -> ChatModel:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        self.preflight()  # set-up problems (no SDK, no credential) raise ProviderError before anything is sent
        price = price_of(self.model, self.prices)
        if request.budget.max_cost_usd is not None and price is None:
            return GenerationResponse(provider=self.name, model=f"{self.model} (no price: cost not counted)",
                                      stopped=no_price(self.model))
        toolbox = ToolBox(request, self.skills, self.name, self.evaluate, self.profile)
        try:
            return run_tool_loop(request, self.chat(), toolbox, self.journal, price)
        except FatalCallError as err:  # archived as a failed turn; the run stops with one line naming us
            raise ProviderError(f"the {self.name} API refused the request, so the run cannot go on: {err} (model "
                                f"{self.model}; credential from {' or '.join(self.credential_env)})") from None
