"""``controller loop --dry-run``: the first request of a run exactly as it would be sent, and nothing sent.

The run is built in a throw-away archive: the starting incumbent is archived without being evaluated (a dry run
evaluates nothing), the first explore request is built as the loop builds it, and the provider says what it would
send: a tool-using API provider its call's parameters (system, messages, tools, limits), a CLI agent or the offline
generator the request document it would get. The size is an estimate in tokens (3 characters a token, on the high
side, as the budget checks count).
"""

from __future__ import annotations

import json
import tempfile
from typing import Any, Optional

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.generation_request import GenerationRequest, render_prompt

from ..providers.base import estimate_tokens
from ..skills import load_skills, require_indexable
from ..store import Store
from .tool_loop import SYSTEM, split_prompt
from .tools import TOOL_SPECS


class _NothingEvaluated:
    """The evaluator of a dry run: it evaluates nothing and says so."""

    def why_no_timing(self) -> Optional[str]:
        return "dry run: nothing is evaluated"

    def evaluate(self, solution: Any, on_start: Any) -> int:
        raise RuntimeError("a dry run evaluates nothing")

    def close(self) -> None:
        return None


def preview(provider: Any, request: GenerationRequest) -> dict[str, Any]:
    """What ``provider`` would send for ``request``: the API call's parameters, or the request document."""
    chat_of = getattr(provider, "chat", None)
    if callable(chat_of) and getattr(provider, "bind", None) is not None:
        stable, task = split_prompt(request)
        made = chat_of().params(SYSTEM, stable, task, [], [dict(s) for s in TOOL_SPECS],
                                request.budget.max_output_tokens)
        params, note = made if isinstance(made, tuple) else (made, "")
        return {"kind": "api call", "params": params, **({"note": note} if note else {})}
    return {"kind": "request document", "document": render_prompt(request)}


def dry_run(config: Any, provider: Any) -> dict[str, Any]:
    """The first request of a run of ``config`` (a LoopConfig) through ``provider``, built and not sent."""
    from ..loop import Loop, new_run_id  # the loop imports this package; imported here, not at import time

    dataset = Dataset(config.dataset)
    skills = load_skills(config.skills)
    require_indexable(skills)
    with tempfile.TemporaryDirectory(prefix="crucible-dry-run-") as folder:
        store = Store(Archive(folder))
        run_id = new_run_id()
        store.create_run(run_id, config.definition, config.provider, config.model_dump(mode="json"))
        loop = Loop(config, run_id, store, provider, _NothingEvaluated(), skills, dataset)
        incumbent = store.add_incumbent(run_id, loop.initial_incumbent())
        store.add_decision(run_id, 0, incumbent, None, "BASELINE", "incumbent", ["the starting incumbent"],
                           {"status": "not evaluated (dry run)"})
        request = loop.request_for(1, "r1/explore", "explore")
    sent = preview(provider, request)
    size = estimate_tokens(json.dumps(sent, default=str))
    return {"provider": config.provider, "model": getattr(provider, "model", None), "definition": config.definition,
            "skills_listed": [e.name for e in request.skill_index],
            "skill_files_readable": sum(len(e.references) for e in request.skill_index),
            "skills_whole": list(request.skill_excerpts), "hint": request.hint or None,
            "limits": request.budget.model_dump(mode="json"), "tools": [s["name"] for s in TOOL_SPECS],
            "size_tokens_estimate": size, "request": sent}
