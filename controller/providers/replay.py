"""Replay the archived responses of an earlier run, in the order they were received.

Stateless on purpose: the n-th call of a run gets the n-th response of the source run, where n is the
number of responses the current run has already archived, so a resumed replay continues where it was.
A replay is strict: if the request's round or kind differs from the archived one, the loop has
diverged and the response says so instead of handing over candidates meant for something else.

A response that came out of a tool conversation (an API model's turns, ``agent_turns``) is replayed whole: its turns
are copied into the replaying run under the new request, so the replay's archive shows the same conversation (skill
reads, draft evaluations, submissions) next to the same candidates.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from harness.data.generation_request import GenerationRequest, GenerationResponse, Proposal, Rejection

from .base import ProviderError


class ReplayProvider:
    name = "replay"

    def __init__(self, store: Any, run: Optional[str] = None):
        self.store = store
        self.source_run = run

    def _source(self, request: GenerationRequest) -> Optional[str]:
        if self.source_run is None:
            runs = [r for r in self.store.runs(definition=request.definition)
                    if r["provider"] != "replay" and r["id"] != request.run_id]
            self.source_run = runs[0]["id"] if runs else None
        return self.source_run

    def check_source(self, definition: str, run_id: Optional[str] = None) -> str:
        """Before the loop starts (no run row, no evaluation yet): the run to replay exists, is of ``definition``
        and holds responses; returns its id. ``run_id``: the replaying run, when resumed (never its own source).
        ProviderError, on one line, otherwise."""
        if self.source_run is not None and not isinstance(self.source_run, str):  # --provider-option run=[1]
            raise ProviderError(f"replay: run {json.dumps(self.source_run)} is not a run id (`controller runs` "
                                "lists them)")
        if self.source_run is not None:
            row = self.store.run(self.source_run)
            if row is None:
                raise ProviderError(f"replay: no run {self.source_run!r} in the archive (`controller runs` lists them)")
            if row["definition"] != definition:
                raise ProviderError(f"replay: run {self.source_run} is of {row['definition']}, not {definition}")
        else:
            runs = [r for r in self.store.runs(definition=definition)
                    if r["provider"] != "replay" and r["id"] != run_id]
            if not runs:
                raise ProviderError(f"replay: no earlier run of {definition} in the archive to replay "
                                    "(use --replay-run RUN_ID)")
            self.source_run = runs[0]["id"]
        if self.source_run == run_id:
            raise ProviderError(f"replay: run {run_id} cannot replay itself")
        if not self.store.response_count(self.source_run):
            raise ProviderError(f"replay: run {self.source_run} has no responses to replay (it has none archived); "
                                "name another with --replay-run RUN_ID")
        return self.source_run

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        started = time.monotonic()
        source = self._source(request)
        if source is None:
            return GenerationResponse(provider=self.name, error=f"replay: no earlier run of {request.definition} "
                                                                  "in the archive (use --replay-run RUN_ID)")
        archived = self.store.responses_of_run(source)
        index = self.store.response_count(request.run_id)
        if index >= len(archived):
            return GenerationResponse(provider=self.name, stopped=f"replay: run {source} has no response #{index + 1} "
                                                                   f"(it has {len(archived)})")
        row = archived[index]
        if (row["round"], row["kind"]) != (request.round, request.kind):
            return GenerationResponse(provider=self.name, error=(
                f"replay out of step: response #{index + 1} of run {source} answered round {row['round']} "
                f"{row['kind']}, this request is round {request.round} {request.kind}"))
        reply = json.loads(row["reply"] or "{}")
        turns = self._replay_turns(source, row["key"], request)
        conversation = f", {turns} turns" if turns else ""
        return GenerationResponse(
            provider=self.name,
            model=f"replay of {row['provider']}/{row['model'] or '-'} (response {row['id']}{conversation})",
            proposals=[Proposal.model_validate(p) for p in reply.get("proposals", [])],
            rejected=[Rejection.model_validate(r) for r in reply.get("rejected", [])],
            raw_text=self.store.raw_text(row), wall_s=time.monotonic() - started,
            stopped=row["stopped"], error=row["error"])

    def _replay_turns(self, source: str, key: str, request: GenerationRequest) -> int:
        """Copy the source request's tool conversation to this request (once: a resumed replay finds it there)."""
        turns = self.store.agent_turns(source, key)
        if turns and not self.store.agent_turns(request.run_id, request.key):
            for index, payload in enumerate(turns):
                self.store.add_agent_turn(request.run_id, request.key, index, payload)
        return len(turns)
