"""A deterministic chat model for tests: its turns are scripted in advance (mini-swe-agent's DeterministicModel).

Each script entry is an ``AssistantTurn`` (or a callable taking the turns so far and returning one); every call's
arguments are kept in ``calls`` so tests can assert what was sent (the stable prefix first, the turns echoed).
"""

from __future__ import annotations

from typing import Any, Callable, Union

from .transcript import AssistantTurn, Turn

Entry = Union[AssistantTurn, Callable[[list[Turn]], AssistantTurn]]


class ScriptedChat:
    def __init__(self, script: list[Entry], name: str = "scripted", model: str = "scripted-1"):
        self.script, self.name, self.model = list(script), name, model
        self.calls: list[dict[str, Any]] = []

    def send(self, system: str, stable: str, task: str, turns: list[Turn], tools: list[dict[str, Any]],
             max_tokens: int, timeout_s: float) -> AssistantTurn:
        self.calls.append({"system": system, "stable": stable, "task": task, "turns": len(turns),
                           "tools": [t["name"] for t in tools], "max_tokens": max_tokens, "timeout_s": timeout_s})
        if not self.script:
            return AssistantTurn(text="(script exhausted)")
        entry = self.script.pop(0)
        return entry(turns) if callable(entry) else entry
