"""The tools of a generation request's conversation, and the ToolBox that answers them inside its bounds.

Every tool is answered here, in the controller: skills and their files are read from the skills folder, limited to
what the request's ``skill_index`` lists; a draft is evaluated by the harness (ground truth: a separate process per
candidate, the full pipeline) through the ``Evaluate`` callable the loop passes in, at most ``max_evaluations``
times, and stopped where the request's wall time ends; a candidate is submitted with ``submit_kernel`` and becomes
a proposal like any provider's. Results are text, cut to ``MAX_RESULT_CHARS`` so one tool answer cannot flood the
conversation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Optional

from harness.data.generation_request import REPLY_SCHEMA, GenerationRequest, Proposal, Rejection

from ..providers.base import candidate_name, parse_reply, proposal_from_files
from ..skills import Skill
from .transcript import ToolCall, ToolResult

MAX_RESULT_CHARS = 60_000

# (solution JSON, workload labels or [] for the request's default set, seconds the request has left or None for no
# limit) -> a report of the evaluation, as text; the harness stops the draft where those seconds end
Evaluate = Callable[[dict[str, Any], list[str], Optional[float]], str]
# (target: "incumbent" or a draft's name) -> the ncu digest as Markdown, or None where there is none
Profile = Callable[[str], Optional[str]]

_FILES = REPLY_SCHEMA["properties"]["files"]

TOOL_SPECS: list[dict[str, Any]] = [
    {"name": "read_skill", "description": "Read a skill's full body (SKILL.md without its front matter). Only the "
                                          "skills listed under 'Skills you may read'.",
     "parameters": {"type": "object", "additionalProperties": False, "required": ["name"],
                    "properties": {"name": {"type": "string", "description": "the skill's name"}}}},
    {"name": "read_reference", "description": "Read one file of a skill (a reference or a kernel template), whole. "
                                              "Only the files the skill index lists.",
     "parameters": {"type": "object", "additionalProperties": False, "required": ["skill", "path"],
                    "properties": {"skill": {"type": "string"},
                                   "path": {"type": "string", "description": "as listed, e.g. references/x.py.tmpl"}}}},
    {"name": "evaluate", "description": "Run a draft through the harness (build, correctness on every trial, "
                                        "official timing where a GPU is present, fast audits) and read the result. "
                                        "Counts against the request's evaluation budget; a draft is not a "
                                        "candidate until you submit it.",
     "parameters": {"type": "object", "additionalProperties": False, "required": ["files", "workloads"],
                    "properties": {"files": _FILES,
                                   "workloads": {"type": "array", "items": {"type": "string"},
                                                 "description": "workload labels; [] for the request's default set"}}}},
    {"name": "read_profile", "description": "Read the Nsight Compute digest of the incumbent ('incumbent') or of a "
                                            "draft you evaluated (its name from the evaluate result).",
     "parameters": {"type": "object", "additionalProperties": False, "required": ["target"],
                    "properties": {"target": {"type": "string"}}}},
    {"name": "submit_kernel", "description": "Submit one kernel candidate: the complete content of each file you "
                                             "change, the entry point and one paragraph of notes. The harness then "
                                             "judges it; each call is one candidate of the request's budget.",
     "parameters": REPLY_SCHEMA},
]
TOOL_NAMES = tuple(spec["name"] for spec in TOOL_SPECS)


def tool_name(name: str) -> str:
    """The tool a call names, as some models write it: ``functions.submit_kernel``, with stray spaces."""
    name = name.strip()
    return name.split(".", 1)[1] if name.startswith(("functions.", "tools.")) else name


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n[... cut at {MAX_RESULT_CHARS} characters of {len(text)}]"


@dataclass
class ToolBox:
    """Answers one request's tool calls. ``proposals`` and ``rejected`` collect what ``submit_kernel`` produced."""

    request: GenerationRequest
    skills: dict[str, Skill]
    provider: str
    evaluate: Optional[Evaluate] = None
    profile: Optional[Profile] = None
    evaluations: int = 0
    deadline: Optional[float] = None  # the request's wall time, on ``clock``: an evaluation past it is refused
    clock: Callable[[], float] = time.monotonic
    proposals: list[Proposal] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)

    @property
    def submitted(self) -> int:
        return len(self.proposals) + len(self.rejected)

    def call(self, call: ToolCall) -> ToolResult:
        name = tool_name(call.name)
        handler = getattr(self, f"_{name}", None) if name in TOOL_NAMES else None
        if handler is None:
            return ToolResult(call_id=call.id, name=call.name, is_error=True,
                              content=f"no tool {call.name[:100]!r}; the tools are {', '.join(TOOL_NAMES)}")
        if call.invalid_arguments:  # not run, and no candidate slot or evaluation is used: the model may resend
            return ToolResult(call_id=call.id, name=call.name, is_error=True,
                              content=f"not run: {call.invalid_arguments}; send the call again with a JSON object "
                                      "that matches the tool's schema")
        try:
            text = handler(call.arguments)
        except ToolRefused as refused:
            return ToolResult(call_id=call.id, name=call.name, content=str(refused), is_error=True)
        except Exception as err:  # the harness or a profiler failed on this call: the model hears why, the turn
            why = " ".join(f"{type(err).__name__}: {err}".split())[:1000]  # (and what it cost) stays archived
            return ToolResult(call_id=call.id, name=call.name, is_error=True,
                              content=f"the tool failed (not the model's fault): {why}")
        return ToolResult(call_id=call.id, name=call.name, content=_cut(text))

    # -- the tools ----------------------------------------------------------------------------------------------

    def _entry(self, name: Any):
        for entry in self.request.skill_index:
            if entry.name == name:
                return entry
        allowed = ", ".join(e.name for e in self.request.skill_index) or "none"
        raise ToolRefused(f"skill {name!r} is not one this request may read (it may read: {allowed})")

    def _read_skill(self, args: dict[str, Any]) -> str:
        entry = self._entry(args.get("name"))
        skill = self.skills.get(entry.name)
        if skill is None:
            raise ToolRefused(f"skill {entry.name!r} is not in the skills folder")
        return f"# skill: {skill.name}\n{skill.description.strip()}\n\n{skill.body.strip()}\n"

    def _read_reference(self, args: dict[str, Any]) -> str:
        entry = self._entry(args.get("skill"))
        path = PurePosixPath(str(args.get("path", ""))).as_posix()
        if path not in {PurePosixPath(p).as_posix() for p in entry.references}:
            listed = ", ".join(entry.references) or "none"
            raise ToolRefused(f"{path!r} is not a file of skill {entry.name!r} this request may read ({listed})")
        skill = self.skills.get(entry.name)
        if skill is None:
            raise ToolRefused(f"skill {entry.name!r} is not in the skills folder")
        folder = skill.folder.resolve()
        target = (folder / path).resolve()
        if folder not in target.parents or not target.is_file():
            raise ToolRefused(f"{path!r} is not a file inside skill {entry.name!r}")
        return Path(target).read_text(encoding="utf-8", errors="replace")

    def _draft(self, args: dict[str, Any]) -> dict[str, Any]:
        reply, problem = parse_reply({"files": args.get("files"), "entry_point": self.request.constraints.entry_point,
                                      "notes": "draft"})
        if reply is None:
            raise ToolRefused(problem or "no files")
        name = f"draft{self.evaluations}_{candidate_name(self.request, self.provider, self.submitted)}"
        made = proposal_from_files(self.request, {f.path: f.content for f in reply.files}, reply.entry_point, name,
                                   f"controller/{self.provider}", {"provider": self.provider, "draft": True})
        if isinstance(made, Rejection):
            raise ToolRefused(f"not evaluated: {made.reason}")
        return made.solution

    def _evaluate(self, args: dict[str, Any]) -> str:
        budget = self.request.budget.max_evaluations
        if self.evaluate is None:
            raise ToolRefused("evaluation is not available in this run; submit your candidate instead")
        if self.evaluations >= budget:
            raise ToolRefused(f"the evaluation budget of this request ({budget}) is used up; submit your candidate")
        if self.deadline is not None and self.clock() >= self.deadline:
            raise ToolRefused("the request's wall time is used up: no evaluation can start; submit your candidate")
        solution = self._draft(args)
        self.evaluations += 1
        workloads = [str(w) for w in (args.get("workloads") or [])]
        left = None if self.deadline is None else self.deadline - self.clock()  # the draft is cut there
        return f"draft `{solution['name']}` ({self.evaluations} of {budget} evaluations)\n\n" + self.evaluate(
            solution, workloads, left)

    def _read_profile(self, args: dict[str, Any]) -> str:
        target = str(args.get("target", ""))
        if target == "incumbent" and self.request.evidence.kind == "profile":
            return self.request.evidence.markdown
        found = self.profile(target) if self.profile is not None else None
        if not found:
            raise ToolRefused(f"no Nsight Compute profile of {target!r} (profiles need a GPU host with ncu; the "
                              "incumbent's is in the evidence when one was taken)")
        return found

    def _submit_kernel(self, args: dict[str, Any]) -> str:
        budget = self.request.budget.max_candidates
        if self.submitted >= budget:
            raise ToolRefused(f"the candidate budget of this request ({budget}) is used up")
        name = candidate_name(self.request, self.provider, self.submitted)
        reply, problem = parse_reply(args)
        if reply is None:
            self.rejected.append(Rejection(name=name, reason=problem or "no reply"))
            return f"candidate {name} rejected: {problem}"
        made = proposal_from_files(self.request, {f.path: f.content for f in reply.files}, reply.entry_point, name,
                                   f"controller/{self.provider}", {"provider": self.provider}, reply.notes)
        if isinstance(made, Rejection):
            self.rejected.append(made)
            return f"candidate {name} rejected: {made.reason}"
        self.proposals.append(made)
        left = budget - self.submitted
        return (f"candidate {name} accepted for evaluation by the harness"
                + (f"; {left} more candidate(s) allowed" if left else "; that was the last one: stop here"))


class ToolRefused(Exception):
    """A tool call outside the request's bounds; its message goes back to the model as an error result."""
