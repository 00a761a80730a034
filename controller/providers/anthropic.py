"""Anthropic Messages API through the official SDK (anthropic >= 1, on httpx2).

Structured output by a forced tool call (`submit_kernel`, input schema = the reply schema); max_tokens
from the budget; SDK retries (429, 5xx, connection errors, with backoff) and a timeout from the budget's
wall time; usage -> tokens and cost from the price table. No sampling parameters are sent (anthropic 2.x
rejects temperature/top_p/top_k). Tests pass ``http_client=httpx2.Client(transport=httpx2.MockTransport(...))``.
"""

from __future__ import annotations

from typing import Any

from harness.generation_request import REPLY_SCHEMA, SYSTEM_PROMPT, GenerationRequest, GenerationResponse

from .base import CallResult, ProviderError, SdkProvider, api_generate, price_of

DEFAULT_MODEL = "claude-sonnet-4-6"
TOOL_NAME = "submit_kernel"
TOOL = {"name": TOOL_NAME, "description": "Submit one kernel candidate: complete files, entry point, notes.",
        "input_schema": REPLY_SCHEMA}


class AnthropicProvider(SdkProvider):
    name = "anthropic"
    sdk_module = "anthropic"
    client_class = "Anthropic"
    error_class = "AnthropicError"
    default_model = DEFAULT_MODEL
    credential_env = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE")

    def has_credential(self, client: Any) -> bool:
        # A key, a bearer token, or credentials the SDK found (a profile, workload identity federation).
        return bool(client.api_key or client.auth_token or getattr(client, "credentials", None) is not None)

    def _call(self, prompt: str, max_tokens: int, timeout_s: float) -> CallResult:
        sdk = self._sdk()
        client = self._client()
        try:
            message = client.messages.create(
                model=self.model, max_tokens=max_tokens, system=SYSTEM_PROMPT,
                messages=[{"role": "user", "content": prompt}], tools=[TOOL],
                tool_choice={"type": "tool", "name": TOOL_NAME}, timeout=timeout_s)
        except sdk.APITimeoutError:
            return CallResult(timed_out=True)
        except sdk.APIStatusError as err:
            return CallResult(error=f"HTTP {err.status_code}: {err.message}", raw=str(getattr(err, "body", "")))
        except sdk.APIConnectionError as err:
            return CallResult(error=f"connection error: {err}")
        except TypeError as err:  # the SDK's way of saying it has no credentials
            raise ProviderError(f"anthropic: {err}") from err
        usage = message.usage
        tokens_in = usage.input_tokens + (getattr(usage, "cache_creation_input_tokens", 0) or 0) + (
            getattr(usage, "cache_read_input_tokens", 0) or 0)
        data = next((block.input for block in message.content
                     if block.type == "tool_use" and block.name == TOOL_NAME), None)
        truncated = message.stop_reason == "max_tokens"
        return CallResult(raw=message.model_dump_json(), tokens_in=tokens_in, tokens_out=usage.output_tokens,
                          data=data, truncated=truncated,
                          reply_problem=(None if data is not None or truncated
                                         else "no submit_kernel tool call in the reply"))

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        self.preflight()  # set-up problems (no SDK, no credential) raise ProviderError before anything is sent
        price = price_of(self.model, self.prices)
        return api_generate(self.name, self.model, request, price, self._call)
