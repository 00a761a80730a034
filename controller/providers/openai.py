"""OpenAI Responses API through the official SDK (openai >= 3, on httpx2), as a tool conversation.

``generate`` runs the tool loop (controller/agent) over an ``OpenAIChat``: function tools, streamed answers,
stateless calls (``store=False``, reasoning carried by its encrypted content). Reasoning effort is "high" by default
for kernel work (``effort``: minimal, low, medium, high, or off for a model without reasoning); ``max_output_tokens``
covers reasoning and answer. The default model is data: the ``defaults:`` section of prices.yaml. Tests pass
``http_client=httpx2.Client(transport=httpx2.MockTransport(...))``.
"""

from __future__ import annotations

from typing import Any, Optional

from .api_agent import ApiAgentProvider
from .openai_chat import OpenAIChat

DEFAULT_MODEL = "gpt-5"  # used only when prices.yaml names no default


class OpenAIProvider(ApiAgentProvider):
    name = "openai"
    sdk_module = "openai"
    client_class = "OpenAI"
    error_class = "OpenAIError"
    default_model = DEFAULT_MODEL
    credential_env = ("OPENAI_API_KEY",)

    def __init__(self, model: Optional[str] = None, effort: str = "high", **kwargs: Any):
        super().__init__(model, **kwargs)
        self.effort = effort
        OpenAIChat(self.model, self._client, None, effort)  # a bad setting fails here, early

    def chat(self) -> OpenAIChat:
        return OpenAIChat(self.model, self._client, self._sdk(), self.effort, self.max_retries, self.unsupported)
