"""OpenAI Responses API through the official SDK (openai >= 3, on httpx2).

Structured output by a strict JSON schema (`text.format`); max_output_tokens from the budget; SDK
retries (408, 409, 429, 5xx, connection errors) and a timeout from the budget's wall time; usage ->
tokens and cost from the price table. Tests pass ``http_client=httpx2.Client(transport=httpx2.MockTransport(...))``.
"""

from __future__ import annotations

import json

from harness.generation_request import REPLY_SCHEMA, SYSTEM_PROMPT, GenerationRequest, GenerationResponse

from .base import CallResult, SdkProvider, api_generate, price_of

DEFAULT_MODEL = "gpt-5"
TEXT_FORMAT = {"format": {"type": "json_schema", "name": "kernel_candidate", "schema": REPLY_SCHEMA, "strict": True}}


class OpenAIProvider(SdkProvider):
    name = "openai"
    sdk_module = "openai"
    client_class = "OpenAI"
    error_class = "OpenAIError"
    default_model = DEFAULT_MODEL
    credential_env = ("OPENAI_API_KEY",)

    def _call(self, prompt: str, max_tokens: int, timeout_s: float) -> CallResult:
        sdk = self._sdk()
        try:
            r = self._client().responses.create(model=self.model, instructions=SYSTEM_PROMPT, input=prompt,
                                                max_output_tokens=max_tokens, text=TEXT_FORMAT, timeout=timeout_s)
        except sdk.APITimeoutError:
            return CallResult(timed_out=True)
        except sdk.APIStatusError as err:
            return CallResult(error=f"HTTP {err.status_code}: {err.message}", raw=str(getattr(err, "body", "")))
        except sdk.APIConnectionError as err:
            return CallResult(error=f"connection error: {err}")
        tokens_in = r.usage.input_tokens if r.usage else 0
        tokens_out = r.usage.output_tokens if r.usage else 0
        details = getattr(r, "incomplete_details", None)
        truncated = r.status == "incomplete" and getattr(details, "reason", None) == "max_output_tokens"
        data, problem = None, None
        if not truncated:
            try:
                data = json.loads(r.output_text)
            except (json.JSONDecodeError, TypeError) as err:
                problem = f"reply is not JSON: {err}"
        return CallResult(raw=r.model_dump_json(), tokens_in=tokens_in, tokens_out=tokens_out, data=data,
                          truncated=truncated, reply_problem=problem)

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        self.preflight()  # set-up problems (no SDK, no API key) raise ProviderError before anything is sent
        price = price_of(self.model, self.prices)
        return api_generate(self.name, self.model, request, price, self._call)
