"""The archive as the Journal of tool conversations: each turn a row of ``agent_turns``, written before the next
call is sent (controller/store.py speaks the SQL)."""

from __future__ import annotations

from typing import Any

from harness.data.generation_request import GenerationRequest

from .transcript import Turn


class StoreJournal:
    def __init__(self, store: Any):
        self.store = store

    def turns(self, request: GenerationRequest) -> list[Turn]:
        return [Turn.model_validate(p) for p in self.store.agent_turns(request.run_id, request.key)]

    def append(self, request: GenerationRequest, turn: Turn) -> None:
        self.store.add_agent_turn(request.run_id, request.key, turn.index, turn.model_dump(mode="json"))
