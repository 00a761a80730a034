"""Anthropic Messages API through the official SDK (anthropic >= 2, on httpx2), as a tool conversation.

``generate`` runs the tool loop (controller/agent) over an ``AnthropicChat``: the model reads skills, evaluates
drafts through the harness and submits candidates with ``submit_kernel``, every turn archived before the next call.
Extended thinking is on by default (``thinking="enabled"`` with ``thinking_budget`` tokens, default half of each
call's max_tokens; ``"adaptive"`` lets the model size it; ``"off"``). The default model is data: the ``defaults:``
section of prices.yaml. No sampling parameters are sent (anthropic 2.x rejects temperature/top_p/top_k with
thinking). Tests pass ``http_client=httpx2.Client(transport=httpx2.MockTransport(...))``.
"""

from __future__ import annotations

from typing import Any, Optional

from .anthropic_chat import AnthropicChat
from .api_agent import ApiAgentProvider

DEFAULT_MODEL = "claude-sonnet-4-6"  # used only when prices.yaml names no default


class AnthropicProvider(ApiAgentProvider):
    name = "anthropic"
    sdk_module = "anthropic"
    client_class = "Anthropic"
    error_class = "AnthropicError"
    default_model = DEFAULT_MODEL
    credential_env = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE")

    def __init__(self, model: Optional[str] = None, thinking: str = "enabled", thinking_budget: Optional[int] = None,
                 **kwargs: Any):
        super().__init__(model, **kwargs)
        self.thinking, self.thinking_budget = thinking, thinking_budget
        AnthropicChat(self.model, self._client, None, thinking, thinking_budget)  # a bad setting fails here, early

    def has_credential(self, client: Any) -> bool:
        # A key, a bearer token, or credentials the SDK found (a profile, workload identity federation).
        return bool(client.api_key or client.auth_token or getattr(client, "credentials", None) is not None)

    def chat(self) -> AnthropicChat:
        return AnthropicChat(self.model, self._client, self._sdk(), self.thinking, self.thinking_budget,
                             self.max_retries, self.unsupported)
