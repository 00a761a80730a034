"""How a failed API call is handled: retried, a timeout, an error that ends the call, or a fatal one that ends the
run (a refused credential, no quota, an unknown model: every later call would fail the same way).

Messages are one line, bounded, and never carry a credential: what the server echoes back (some servers quote the
key they refused), the key the request was sent with and the credential variables of the environment are masked.
"""

from __future__ import annotations

import email.utils
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
RETRYABLE_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "server_error", "timeout_error"}
# A stream's error event or failed response (OpenAI) names a code rather than an HTTP status.
RETRYABLE_CODES = {"server_error", "rate_limit_exceeded", "overloaded", "overloaded_error", "internal_error",
                   "service_unavailable", "timeout", "api_error", "rate_limit_error"}
# Refusals that no retry and no later request can change: the run stops with one line.
FATAL_STATUS = {401, 402, 403, 404}
FATAL_TYPES = {"authentication_error", "permission_error", "billing_error", "not_found_error"}
FATAL_CODES = {"insufficient_quota", "invalid_api_key", "model_not_found", "billing_hard_limit_reached"}
CREDENTIAL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY")
MAX_MESSAGE = 500
TOKEN_PATTERN = re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_*.\-]{8,}")


@dataclass
class Failure:
    """How one failed attempt is handled: retried (after ``retry_after`` when the server said), a timeout, an error
    that ends the call, or a fatal error that ends the run."""

    kind: str  # "retry" | "timeout" | "error" | "fatal"
    message: str
    retry_after: Optional[float] = None


class StreamFailed(Exception):
    """A stream that broke off (no final event) or reported an error inside its 200: ``code`` says whether it is
    worth a retry."""

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        self.code = code


def mask(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """``text`` with every credential masked: ``secrets``, the credential variables of the environment, and
    anything shaped like an API key."""
    values = [s for s in (*secrets, *(os.environ.get(v) for v in CREDENTIAL_ENV)) if s and len(s) >= 6]
    for value in sorted(set(values), key=len, reverse=True):
        text = text.replace(value, "[redacted]")
    return TOKEN_PATTERN.sub(lambda m: m.group(1) + "-[redacted]", text)


REFUSED_PARAMETER = ("unsupported", "not supported", "does not support", "unrecognized", "extra inputs are not "
                     "permitted", "unknown parameter", "not allowed", "not available")


def unsupported_parameter(message: str, optional: Iterable[str]) -> Optional[str]:
    """Which of the ``optional`` request parameters a 400's message says the model or endpoint does not take
    (thinking on a model without it, reasoning effort on a model without reasoning, a prompt cache key on a
    compatible endpoint), the one named first; None when the message is about something else."""
    text = message.lower()
    if not message.startswith("HTTP 400") or not any(marker in text for marker in REFUSED_PARAMETER):
        return None
    found = [(text.find(name), name) for name in optional if name in text]
    return min(found)[1] if found else None


def redact(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """``text`` on one line, at most MAX_MESSAGE characters, with every credential masked."""
    text = " ".join(mask(text, secrets).split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def request_secrets(err: BaseException) -> list[str]:
    """The credential a failed request was sent with (x-api-key, or a bearer token), to mask it in messages."""
    try:
        headers = getattr(err, "request").headers
    except Exception:
        return []
    found = [headers.get("x-api-key"), headers.get("api-key")]
    bearer = headers.get("authorization") or ""
    found.append(bearer.split()[-1] if bearer.split() else None)
    return [s for s in found if s]


def retry_after_s(headers: Any, now: Optional[float] = None) -> Optional[float]:
    """The server's requested wait: ``retry-after-ms``, or ``retry-after`` in seconds or as an HTTP date."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            seconds = _http_date_s(value, now)
            if seconds is None:
                continue
        if seconds == seconds and seconds != float("inf"):  # NaN and inf are no wait at all
            return max(0.0, seconds)
    return None


def _http_date_s(value: str, now: Optional[float]) -> Optional[float]:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return when.timestamp() - (time.time() if now is None else now)


def _error_fields(body: Any) -> tuple[Optional[str], Optional[str]]:
    """(type, code) of an API error body: Anthropic ``{"error": {"type"}}``, OpenAI ``{"error": {"type", "code"}}``
    or the error object itself."""
    if not isinstance(body, dict):
        return None, None
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    kind, code = inner.get("type"), inner.get("code")
    return (kind if isinstance(kind, str) else None), (code if isinstance(code, str) else None)


def classify_sdk_error(sdk: Any, err: BaseException) -> Failure:
    """The Anthropic and OpenAI SDKs share their error classes' names and shape."""
    secrets = request_secrets(err)
    if isinstance(err, sdk.APITimeoutError):  # the SDK's timeout is what is left of the deadline: it is spent
        return Failure("timeout", redact(str(err), secrets))
    if isinstance(err, sdk.APIStatusError):
        kind, code = _error_fields(getattr(err, "body", None))
        message = redact(f"HTTP {err.status_code}: {getattr(err, 'message', err)}", secrets)
        if code in FATAL_CODES or kind in FATAL_TYPES or err.status_code in FATAL_STATUS:
            return Failure("fatal", message)
        # An error event inside a stream arrives with the stream's 200: its type says whether it is transient.
        if err.status_code in RETRYABLE_STATUS or kind in RETRYABLE_TYPES or code in RETRYABLE_CODES:
            return Failure("retry", message, retry_after_s(getattr(err.response, "headers", None)))
        return Failure("error", message)
    if isinstance(err, sdk.APIConnectionError):
        return Failure("retry", redact(f"connection error: {err}", secrets))
    if isinstance(err, StreamFailed):
        if err.code in FATAL_CODES:
            return Failure("fatal", redact(str(err)))
        retry = err.code is None or err.code in RETRYABLE_CODES
        return Failure("retry" if retry else "error", redact(str(err)))
    transport = _transport_error(err)
    if transport == "timeout":  # a socket operation ran out of what was left of the deadline
        return Failure("timeout", redact(f"{type(err).__name__}: {err}"))
    if transport:  # the connection broke while the stream was read
        return Failure("retry", redact(f"connection error: {type(err).__name__}: {err}"))
    if isinstance(err, ValueError) and "tool parameter JSON" in str(err):
        # The SDK parses a tool call's arguments as they stream; invalid JSON ends the stream. Another sample may
        # well be valid: a retry, bounded like the others.
        return Failure("retry", redact(f"the model's tool call was not valid JSON: {err}"))
    if isinstance(err, Exception):  # e.g. a stream the SDK cannot parse: this call fails, the run goes on
        return Failure("error", redact(f"{type(err).__name__}: {err}"))
    raise err  # KeyboardInterrupt and the like are not the model's failure


def _transport_error(err: BaseException) -> str:
    """"timeout", "broken" (any other transport error of httpx2, raised as the stream is read) or ""."""
    try:
        import httpx2
    except ImportError:  # pragma: no cover - the SDKs bring it
        return ""
    if isinstance(err, httpx2.TimeoutException):
        return "timeout"
    return "broken" if isinstance(err, httpx2.TransportError) else ""
