"""A deterministic fake model: replies scripted in advance, in order (mini-swe-agent's DeterministicModel).

Each script entry is a KernelReply-shaped dict ({"files": [...], "entry_point", "notes"}), or a callable
taking the request and returning one; optional per-entry tokens and cost make budget accounting testable.
Every request it saw is kept in ``seen``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Union

from harness.data.generation_request import GenerationRequest, GenerationResponse, Rejection

from .base import add, candidate_name, parse_reply, proposal_from_files

Entry = Union[dict[str, Any], Callable[[GenerationRequest], dict[str, Any]]]


class ScriptedProvider:
    def __init__(self, script: list[Entry], name: str = "scripted", tokens: tuple[int, int] = (0, 0),
                 cost_usd: float = 0.0):
        self.script = list(script)
        self.name = name
        self.tokens, self.cost = tokens, cost_usd
        self.seen: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        self.seen.append(request)
        response = GenerationResponse(provider=self.name, model="scripted")
        raws = []
        for index in range(request.budget.max_candidates):
            if not self.script:
                response.stopped = response.stopped or "script exhausted"
                break
            entry = self.script.pop(0)
            data = entry(request) if callable(entry) else entry
            raws.append(json.dumps(data))
            response.tokens_in += self.tokens[0]
            response.tokens_out += self.tokens[1]
            response.cost_usd += self.cost
            reply, problem = parse_reply(data)
            name = candidate_name(request, self.name, index)
            if reply is None:
                response.rejected.append(Rejection(name=name, reason=problem or "no reply"))
                continue
            add(response, proposal_from_files(request, {f.path: f.content for f in reply.files}, reply.entry_point,
                                              name, f"controller/{self.name}", {"provider": self.name}, reply.notes))
        response.raw_text = "\n".join(raws)
        return response
