"""What the controller asks a generator for, and what comes back: plain, serialisable data.

In the harness because both sides read it: the controller builds, sends and archives requests, and the
harness's report renders an archived request as the prompt the provider was sent. A ``GenerationRequest``
is archived before it is sent (so a request whose provider never answers, or a controller killed mid-call,
still leaves a record of what was asked); a ``GenerationResponse`` is archived when it arrives,
with its raw text, tokens, cost and, when a bound stopped the provider, why. ``render_prompt`` turns a request
into the Markdown every provider sends, from the templates in ``harness/prompts/`` (data: edit a prompt there).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

RequestKind = Literal["explore", "repair"]


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Budget(_Data):
    """Bounds of one request. Providers enforce them: over a bound, they stop and say why."""

    max_output_tokens: int = Field(8192, ge=1)  # per model call
    max_total_tokens: Optional[int] = Field(None, ge=1)  # input + output over the whole request
    max_candidates: int = Field(2, ge=1)
    wall_s: float = Field(600.0, gt=0)
    max_cost_usd: Optional[float] = Field(None, ge=0)
    max_turns: int = Field(16, ge=1)  # model calls of one tool conversation (API providers)
    max_evaluations: int = Field(3, ge=0)  # harness evaluations the model may ask for with the evaluate tool


class Constraints(_Data):
    language: str = "triton"
    entry_point: str = "kernel.py::run"
    dps_signature: list[str] = Field(default_factory=list)
    editable_files: list[str] = Field(default_factory=lambda: ["kernel.py"])
    forbidden: list[str] = Field(default_factory=list)


class Acceptance(_Data):
    """How the candidate will be judged (promotion-rules), stated up front."""

    all_workloads_passed: bool = True
    clean_audits: bool = True
    min_repeats: int = 2
    paired_order: str = "ABBA"
    noise_floor_rel: float = 0.02
    max_regime_regression_rel: float = 0.05
    max_workload_regression_rel: float = 0.05
    note: str = ""


class Evidence(_Data):
    kind: Literal["profile", "latency-only", "correctness-only"] = "correctness-only"
    markdown: str = ""
    # Where it came from: ncu digests of the incumbent (controller/evidence/) or the archived timings alone
    # (controller/evidence/latency.py); `note` says why a request carries latency evidence (no GPU, no ncu,
    # ERR_NVGPUCTRPERM, a failed profile, --no-profile), or what was profiled.
    source: Literal["ncu", "latency"] = "latency"
    note: str = ""


class Diagnosis(_Data):
    """What ncu said about the incumbent's dominant kernel in the planned regime (controller/tactics.py).
    Providers act on it: the offline generator maps `limiter` to parameter moves of its templates."""

    source: Literal["ncu"] = "ncu"
    workload: str = ""  # label of the profiled workload
    kernel: str = ""
    classification: str = ""  # at-roofline | latency-bound | memory-bound | compute-bound | unknown
    limiter: Optional[str] = None  # an id of ncu-profiling's `limiters`
    occupancy_limiter: Optional[str] = None  # registers | shared_mem | warps | blocks
    tactics: list[str] = Field(default_factory=list)  # tactic ids of the target's tactics skill
    verify: list[str] = Field(default_factory=list)  # ncu metrics that must move if the tactic worked
    facts: dict[str, float] = Field(default_factory=dict)  # the numbers the limiter was decided on


class Incumbent(_Data):
    name: str
    solution: dict[str, Any]  # Solution JSON
    origin: dict[str, Any] = Field(default_factory=dict)  # e.g. {"template": ..., "params": {...}}
    status: str = ""
    mean_latency_ms: Optional[float] = None


class HistoryItem(_Data):
    """One line per earlier candidate: enough for a generator not to repeat itself."""

    round: int
    name: str
    status: str
    origin: dict[str, Any] = Field(default_factory=dict)
    mean_latency_ms: Optional[float] = None
    verdict: str = ""
    # its mean latency per regime where every workload of that regime PASSED with a time: what the search's
    # population and stall rules read (controller/search.py)
    regime_latency_ms: dict[str, float] = Field(default_factory=dict)


class Repair(_Data):
    """A failed candidate going back once more, with the harness's words about why."""

    candidate_id: int
    status: str
    solution: dict[str, Any]
    origin: dict[str, Any] = Field(default_factory=dict)
    log_excerpt: str = ""


class SkillEntry(_Data):
    """A skill the model may read whole, on demand (the Agent Skills spec's progressive disclosure): the request
    carries its name and description; the read_skill tool returns its body, read_reference one of its files."""

    name: str
    description: str
    references: list[str] = Field(default_factory=list)  # files of the skill's folder it may read, relative paths


class GenerationRequest(_Data):
    run_id: str
    round: int
    key: str  # unique within the run: "r1/explore", "r1/repair/c7"
    kind: RequestKind = "explore"
    definition: str
    definition_summary: str = ""
    target_hardware: str = "H200"
    regime: str = ""
    hypothesis: str = ""
    diagnosis: Optional[Diagnosis] = None  # only with ncu evidence, never for repairs
    incumbent: Incumbent
    evidence: Evidence = Field(default_factory=Evidence)
    skill_excerpts: dict[str, str] = Field(default_factory=dict)
    constraints: Constraints = Field(default_factory=Constraints)
    budget: Budget = Field(default_factory=Budget)
    acceptance: Acceptance = Field(default_factory=Acceptance)
    history: list[HistoryItem] = Field(default_factory=list)
    repair: Optional[Repair] = None
    seed: int = 0
    # The skills (and their files) this request may read; archived with it, so what a model could see is on record.
    skill_index: list[SkillEntry] = Field(default_factory=list)
    hint: str = ""  # a person's hypothesis for the whole run (controller loop --hint): agent-assisted mode

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()


class Proposal(_Data):
    solution: dict[str, Any]  # Solution JSON
    origin: dict[str, Any] = Field(default_factory=dict)
    notes: str = ""


class Rejection(_Data):
    name: str
    reason: str
    files: list[str] = Field(default_factory=list)


class GenerationResponse(_Data):
    provider: str
    model: str = ""
    proposals: list[Proposal] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    raw_text: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    stopped: Optional[str] = None  # a bound (tokens, time, cost) stopped the provider: why
    error: Optional[str] = None  # the provider failed (HTTP error, CLI exit code, unparseable reply)

    def reply_json(self) -> dict[str, Any]:
        """What a replay needs to give the same candidates back."""
        return {"proposals": [p.model_dump(mode="json") for p in self.proposals],
                "rejected": [r.model_dump(mode="json") for r in self.rejected]}


# ------------------------------------------------------------------------------------------ prompt

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
SYSTEM_PROMPT = (PROMPTS / "system.md.j2").read_text().strip()

REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["files", "entry_point", "notes"],
    "properties": {
        "files": {
            "type": "array",
            "description": "Complete content of each file of the candidate (only the editable files).",
            "items": {"type": "object", "additionalProperties": False, "required": ["path", "content"],
                      "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
        },
        "entry_point": {"type": "string", "description": "file.py::symbol"},
        "notes": {"type": "string", "description": "One paragraph: what changed and why (cite evidence)."},
    },
}


def _fence(text: str, info: str = "") -> str:
    """``text`` in a code fence longer than any run of backticks in it (CommonMark): a candidate's log or source
    cannot close the fence and write the request's own sections."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


def _environment():
    """The prompt templates (harness/prompts/*.md.j2): data, so a prompt is edited without touching code."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(PROMPTS)), trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["fence"] = _fence
    return env


_templates: dict[str, Any] = {}


def render_template(name: str, **context: Any) -> str:
    """One prompt template of harness/prompts, rendered; runs of blank lines collapsed to one."""
    if not _templates:
        _templates["env"] = _environment()
    text = _templates["env"].get_template(f"{name}.md.j2").render(**context)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def render_stable_prefix(request: GenerationRequest) -> str:
    """What every request of a definition shares (definition, constraints, acceptance, skill index, policy), first in
    the conversation so that a provider's prompt cache serves it from the second request on."""
    return render_template("stable_prefix", r=request, c=request.constraints, a=request.acceptance)


def render_task(request: GenerationRequest) -> str:
    """This request's own part: regime, hypothesis, a person's hint, evidence, incumbent, repair, history, budget."""
    return render_template("task", r=request, b=request.budget)


def render_prompt(request: GenerationRequest) -> str:
    """The request as one Markdown document (the user message of a one-shot call, REQUEST.md in an agent workspace):
    the definition's stable part, then this request's task."""
    return render_stable_prefix(request) + "\n" + render_task(request) + "\n" + render_template("answer")
