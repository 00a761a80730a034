"""The provider registry: a provider's name -> the module and class that implement it.

Above base.py and the providers (each provider module imports base.py; base.py imports none of them). A
provider module is imported only when its name is asked for, by its dotted path, so an uninstalled SDK only
matters to the provider that needs it.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from .base import Provider, ProviderError

# name -> "module:attribute" (relative to this package); order is the order shown to users.
REGISTRY = {
    "offline": "offline:OfflineProvider",
    "replay": "replay:ReplayProvider",
    "anthropic": "anthropic:AnthropicProvider",
    "openai": "openai:OpenAIProvider",
    "claude-code": "cli_agents:CLIAgentProvider",
    "codex": "cli_agents:CLIAgentProvider",
}
PROVIDERS = tuple(REGISTRY)


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), attribute)


def provider_class(name: str) -> Any:
    if name not in REGISTRY:
        raise ProviderError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}")
    return _load(REGISTRY[name])


def default_provider(env: dict[str, str]) -> str:
    """offline unless an API key is set (Anthropic first)."""
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if env.get("OPENAI_API_KEY"):
        return "openai"
    return "offline"


def _build(name: str, make: Any) -> Any:
    """``make()``, with a setting the provider does not take said on one line (a typo in --provider-option)."""
    try:
        return make()
    except TypeError as err:
        raise ProviderError(f"provider {name}: {' '.join(str(err).split())} (check --model / --provider-option)"
                            ) from None


def make_provider(name: str, options: Optional[dict[str, Any]] = None, **context: Any) -> Provider:
    """Build a provider by name. ``context`` carries what some need: skills, skills_root, store, definition."""
    options = dict(options or {})
    cls = provider_class(name)
    if name == "offline":
        return _build(name, lambda: cls(context["skills"], definition=context.get("definition"), **options))
    if name == "replay":
        return _build(name, lambda: cls(context["store"], **options))
    if name in ("claude-code", "codex"):
        return _build(name, lambda: cls(name, skills_root=context["skills_root"], **options))
    return _build(name, lambda: cls(**options))


def preflight(name: str, options: dict[str, Any] | None = None) -> None:
    """The cheap set-up check run before anything is evaluated; sends nothing. API providers: the SDK is
    installed and a credential is configured; CLI agents: the executable is on PATH; offline and replay need
    nothing. Raises ProviderError naming what to set or install."""
    options = dict(options or {})
    cls = provider_class(name)
    if name in ("offline", "replay"):
        return
    if name in ("claude-code", "codex"):
        _load("cli_agents:require_executable")(name, options.get("command"))
    else:
        _build(name, lambda: cls(**options)).preflight()
