"""What the API providers share: the tool loop as ``generate``, the agent context given by ``bind``, and one call
of a chat model under a true wall limit with its own retries.

The SDK's timeout bounds each socket operation, not the call: a stream that trickles, or the SDK's own retries
(each with the full timeout again), could run far past a request's wall time. So the SDK client retries nothing
(``max_retries=0``), each attempt runs in a worker thread that the caller waits on for what is left of the deadline
only, and a 429 / 529 / 5xx / connection error is retried here with backoff (the server's retry-after when given)
only while the wait and another attempt still fit before the deadline.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from harness.data.generation_request import GenerationRequest, GenerationResponse

from ..agent.tool_loop import ChatModel, Journal, MemoryJournal, run_tool_loop
from ..agent.tools import Evaluate, Profile, ToolBox
from ..agent.transcript import AssistantTurn
from .base import SdkProvider, no_price, price_of

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
RETRYABLE_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "server_error"}
MIN_ATTEMPT_S = 1.0  # a retry with less time than this left cannot answer: give up instead


@dataclass
class Failure:
    """How one failed attempt is handled: retried (after ``retry_after`` when the server said), a timeout, or an
    error that ends the call."""

    kind: str  # "retry" | "timeout" | "error"
    message: str
    retry_after: Optional[float] = None


def retry_after_s(headers: Any) -> Optional[float]:
    """The server's requested wait (``retry-after-ms`` or ``retry-after`` in seconds), if it sent one."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
    return None


def classify_sdk_error(sdk: Any, err: BaseException) -> Failure:
    """The Anthropic and OpenAI SDKs share their error classes' names and shape."""
    if isinstance(err, sdk.APITimeoutError):  # the SDK's timeout is what is left of the deadline: it is spent
        return Failure("timeout", str(err))
    if isinstance(err, sdk.APIStatusError):
        message = f"HTTP {err.status_code}: {getattr(err, 'message', err)}"
        body = getattr(err, "body", None)
        kind = (body.get("error") or {}).get("type") if isinstance(body, dict) else None
        # An error event inside a stream arrives with the stream's 200: its type says whether it is transient.
        if err.status_code in RETRYABLE_STATUS or kind in RETRYABLE_TYPES:
            return Failure("retry", message, retry_after_s(getattr(err.response, "headers", None)))
        return Failure("error", message)
    if isinstance(err, sdk.APIConnectionError):
        return Failure("retry", f"connection error: {err}")
    if isinstance(err, Exception):  # e.g. a stream the SDK cannot parse: this call fails, the run goes on
        return Failure("error", f"{type(err).__name__}: {err}")
    raise err  # KeyboardInterrupt and the like are not the model's failure


def call_within(timeout_s: float, attempt: Callable[[float, threading.Event], AssistantTurn],
                classify: Callable[[BaseException], Failure], max_retries: int,
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                ) -> AssistantTurn:
    """``attempt(seconds_left, cancelled)`` until it answers, within ``timeout_s`` of wall time in all."""
    deadline = clock() + timeout_s
    tries = 0
    while True:
        left = deadline - clock()
        if left <= 0:
            return AssistantTurn(timed_out=True, stop_reason=f"wall time: {timeout_s:.1f} s used up")
        box: dict[str, Any] = {}
        cancelled = threading.Event()

        def work() -> None:
            try:
                box["turn"] = attempt(left, cancelled)
            except BaseException as err:  # handed to the caller's thread, which decides
                box["error"] = err

        # A daemon thread: one that outlives its deadline is abandoned (told to stop at its next event), never
        # waited for, so it cannot hold the request or the process.
        worker = threading.Thread(target=work, name="chat-call", daemon=True)
        worker.start()
        worker.join(left)
        if worker.is_alive():
            cancelled.set()
            return AssistantTurn(timed_out=True, stop_reason=f"wall time: no answer within {timeout_s:.1f} s")
        if "turn" in box:
            return box["turn"]
        failure = classify(box["error"])
        if failure.kind == "timeout":
            return AssistantTurn(timed_out=True, stop_reason=f"wall time: {failure.message}")
        if failure.kind == "error":
            return AssistantTurn(error=failure.message, stop_reason="error")
        wait = failure.retry_after if failure.retry_after is not None else min(30.0, 0.5 * 2 ** tries) * (
            0.5 + random.random() / 2)  # jitter: parallel lanes hit by one 429 do not retry in lockstep
        tries += 1
        if tries > max_retries:
            return AssistantTurn(error=f"{failure.message} (gave up after {max_retries} retries)", stop_reason="error")
        if clock() + wait + MIN_ATTEMPT_S > deadline:
            return AssistantTurn(error=f"{failure.message} (the {wait:.1f} s wait before a retry does not fit the "
                                       f"{max(0.0, deadline - clock()):.1f} s left)", stop_reason="error")
        sleep(wait)


class ApiAgentProvider(SdkProvider):
    """An API provider whose ``generate`` is the tool loop over its ``chat()`` model."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.skills: dict[str, Any] = {}
        self.journal: Journal = MemoryJournal()
        self.evaluate: Optional[Evaluate] = None
        self.profile: Optional[Profile] = None

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
        return run_tool_loop(request, self.chat(), toolbox, self.journal, price)
