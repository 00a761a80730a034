"""The loop: plan -> request -> candidates -> harness -> repair -> promotion; resumable, bounded, archived.

Every step first looks in the archive: a request already archived is not rebuilt, a response already
archived is not asked for again, a finished evaluation is not repeated, a decision already taken is not
taken again. So `controller loop --resume RUN_ID` after any kill (even `kill -9` mid-evaluation) continues
where the run was: an evaluation that was cut off is redone, one the harness had finished is adopted.

Evidence: where a GPU and ncu are present, each incumbent is profiled once (controller/evidence/incumbent.py;
archived profiles of the same code are reused, so a resumed run plans the same) and requests carry the ncu
Markdown and a diagnosis the planner picks the regime and hypothesis from; otherwise, or when profiling
fails, latency evidence and the reason. A profile never stops a run.

The harness is ground truth: candidates are judged only by `harness.pipeline.evaluate.Session` (candidate code
runs in the harness's worker processes, never here), and promotion reads only archived evaluations. Candidates
are evaluated at the fast audit level; one about to be promoted (past the screen, and the paired measurement
says promote) is evaluated once more at the full audit level, and promoted only if that evaluation is
promotable too.

Beside it: controller/evaluator.py (the harness behind the ``Evaluator`` port), controller/screening.py (a round's
candidate evaluation: successive halving on short runs when the skill turns it on, the evaluations, the promotion
decisions) and controller/rounds.py (the run read back from the archive: incumbent, history, round summaries, the
report).
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from harness.archive.database import Archive
from harness.data.statuses import EvaluationStatus, RunStatus
from harness.sandbox.build import expected_params
from harness.data.dataset import Dataset
from harness.families import family_for
from harness.pipeline.evaluate import SubmitOptions
from harness.data.generation_request import (Constraints, GenerationRequest, GenerationResponse, Incumbent,
                                        Proposal, Repair, RequestKind)
from harness.data.schema import Definition, Solution, dump_json, load_model

from .agent.context import bind_provider, draft_profiler, policy_excerpts, skill_index
from .evidence.incumbent import IncumbentEvidence, IncumbentProfiler, NcuIncumbentProfiler, profile_incumbent
from .evidence.latency import mean_latency, regime_of
from .evidence.profiles import workload_facts
from .evaluator import Evaluator, HarnessEvaluator
from .plan import (REPAIRABLE, RoundPlan, build_request, log_excerpt, plan_round, request_budget,
                   stop_reason)
from .providers.api_errors import redact
from .providers.base import Provider, ProviderError
from .providers.registry import make_provider
from .providers.offline import naive_incumbent, offline_generator
from .skills import (PromotionThresholds, Skill, load_skills, machine_blocks, promotion_thresholds,
                     require_indexable)
from .screening import RoundEvaluation, search_settings
from .search import stalled_regimes
from . import runlock
from .startcheck import check_incumbent
from .store import Store
from .tactics import tactic_book

DEFAULT_FORBIDDEN = ["torch or flashinfer compute calls", "caching outputs across calls", "side streams or threads",
                     "reading harness state, the reference or files", "timer or L2-flush tampering",
                     "mutating inputs or aliasing outputs to inputs", "accumulation below fp32"]
Event = Callable[[str, dict[str, Any]], None]


class LoopConfig(BaseModel):
    """Everything a run needs, stored with the run so a resume uses exactly the same settings."""

    model_config = ConfigDict(extra="forbid")

    definition: str
    provider: str = "offline"
    provider_options: dict[str, Any] = Field(default_factory=dict)
    rounds: int = Field(3, ge=0)
    candidates: int = Field(2, ge=1)
    repairs: int = Field(1, ge=0)  # repair rounds per failed candidate
    workloads: Optional[list[str]] = None
    dataset: Optional[str] = None
    skills: str = str(Path(__file__).resolve().parent.parent / "skills")
    incumbent: Optional[str] = None  # a solution JSON to start from; default: the skill's naive kernel
    target_hardware: str = "H200"
    timeout_s: Optional[float] = None  # per workload, for the harness
    max_output_tokens: int = Field(8192, ge=1)
    request_wall_s: float = Field(600.0, gt=0)
    budget_tokens: Optional[int] = Field(None, ge=1)
    budget_cost_usd: Optional[float] = Field(None, ge=0)
    budget_wall_s: Optional[float] = Field(None, gt=0)
    excerpt_chars: int = Field(6000, ge=200)  # unused since skills are read whole on demand; kept for stored runs
    log_excerpt_chars: int = Field(4000, ge=200)
    seed: int = 0
    profile: Optional[bool] = None  # ncu evidence: None = when a GPU and ncu are here, False = never
    profile_timeout_s: float = Field(600.0, gt=0)  # per profiled workload
    hint: str = ""  # a person's hypothesis, put into every request of the run (agent-assisted mode)
    max_turns: int = Field(16, ge=1)  # model calls per request's tool conversation (API providers)
    max_evaluations: int = Field(3, ge=0)  # drafts a model may evaluate per request
    # Each time a person gave the run more (controller/extend.py): when, the limits changed [before, after], how
    # the run had stopped, and the deferred decisions of its last round taken back (with what they said).
    extensions: list[dict[str, Any]] = Field(default_factory=list)


# -- the loop ----------------------------------------------------------------------------------------------


def new_run_id() -> str:
    return "run-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class Loop(RoundEvaluation):
    def __init__(self, config: LoopConfig, run_id: str, store: Store, provider: Provider, evaluator: Evaluator,
                 skills: dict[str, Skill], dataset: Dataset, on_event: Optional[Event] = None,
                 profiler: Optional[IncumbentProfiler] = None):
        self.config, self.run_id, self.store = config, run_id, store
        self.provider, self.evaluator, self.skills, self.dataset = provider, evaluator, skills, dataset
        self.profiler = profiler
        self.emit: Event = on_event or (lambda kind, data: None)
        self.thresholds: PromotionThresholds = promotion_thresholds(skills)
        self.book = tactic_book(skills, config.target_hardware)
        self.definition: Definition = dataset.definition(config.definition)
        self.workloads = dataset.workloads_for(config.definition, config.workloads)
        self.regimes = {w.uuid: regime_of(w.axes, self.definition.const_axes, config.target_hardware,
                                          dataset.label(w), workload_facts(dataset, self.definition, w)[0],
                                          op_type=self.definition.op_type)
                        for w in self.workloads}
        self.signature = expected_params(self.definition, True)
        self.search = search_settings(skills, self.definition)  # the skill's search settings (controller/search.py)
        self.halving = self.search.halving  # successive halving (controller/screening.py)
        self._evidence: dict[int, IncumbentEvidence] = {}  # incumbent candidate id -> its evidence (profiled once)
        self._no_profiler: Optional[str] = None  # set once the profiler said it cannot work here
        # A tool-using provider gets the skills, the archive's journal of its turns and draft evaluation.
        bind_provider(provider, skills, store, evaluator, [dataset.label(w) for w in self.workloads],
                      draft_profiler(self), self.thresholds.ranked_figure)

    # -- steps ------------------------------------------------------------------------------------------

    def initial_incumbent(self) -> Proposal:
        if self.config.incumbent:
            solution = load_model(Solution, self.config.incumbent)
            return Proposal(solution=dump_json(solution), origin={"file": self.config.incumbent})
        return naive_incumbent(self.skills, self.definition, self.config.target_hardware)

    def constraints(self, incumbent: Solution) -> Constraints:
        forbidden = DEFAULT_FORBIDDEN
        for skill in self.skills.values():  # the skill that owns this definition states what is forbidden
            if self.definition.name in str(skill.metadata.get("definitions", "")).split():
                forbidden = next((b["forbidden"] for b in machine_blocks(skill) if "forbidden" in b), forbidden)
        return Constraints(language=incumbent.spec.language.value, entry_point=incumbent.spec.entry_point,
                           dps_signature=self.signature, editable_files=[s.path for s in incumbent.sources],
                           forbidden=list(forbidden))

    # -- evidence and plan -----------------------------------------------------------------------------

    def incumbent_evidence(self) -> IncumbentEvidence:
        """ncu evidence of the current incumbent, profiled once per incumbent (archived profiles of the same
        code are reused); latency evidence with the reason whenever that is not possible."""
        inc = self.incumbent()
        if inc["id"] not in self._evidence:
            found = self._profile(inc)
            if found.profiler_unusable:
                self._no_profiler = found.note
            self._evidence[inc["id"]] = found
            self.emit("evidence", {"incumbent": inc["solution_name"], "source": found.source, "note": found.note})
        return self._evidence[inc["id"]]

    def _profile(self, inc: dict[str, Any]) -> IncumbentEvidence:
        if self.config.profile is False:
            return IncumbentEvidence(note="profiling switched off (--no-profile)")
        if self.profiler is None:
            return IncumbentEvidence(note="no profiler configured")
        if self._no_profiler is not None:
            return IncumbentEvidence(note=self._no_profiler)
        records = self.records(inc)
        if not records or any(r.status != EvaluationStatus.PASSED for r in records):
            return IncumbentEvidence(note="the incumbent has not passed every workload; not profiled")
        try:
            ok, why = self.profiler.available()
            if not ok:
                return IncumbentEvidence(note=f"no profiler here: {why}", profiler_unusable=True)
            return profile_incumbent(self.profiler, self.store.archive, self.dataset, self.definition,
                                     self.store.solution(inc), self.store.archive.submission(inc["submission_id"]),
                                     self.workloads, self.regimes, self.book)
        except Exception as err:  # a profiler bug or a broken report costs the digest, never the run
            return IncumbentEvidence(note=f"profiling failed: {type(err).__name__}: {' '.join(str(err).split())[:300]}")

    def plan(self) -> RoundPlan:
        stalled = stalled_regimes(self.history(), sorted(set(self.regimes.values())), self.search)
        return plan_round(self.records(self.incumbent()), self.incumbent_evidence().diagnoses, self.book, stalled,
                          self.regimes_tried_since_promotion())

    def known_hashes(self) -> dict[str, int]:
        known: dict[str, int] = {}
        for c in self.store.candidates(self.run_id):
            if c["solution_hash"]:
                known.setdefault(c["solution_hash"], c["id"])
        return known

    def ask(self, request: GenerationRequest, depth: int, parent_id: Optional[int]) -> None:
        """Archive the request (before sending), then get and archive the response with its candidates."""
        found = self.store.request(self.run_id, request.key)
        if found is not None:
            request_id, request = found
        else:
            request_id = self.store.add_request(request)
        if self.store.response(request_id) is not None:
            return
        self.emit("request", {"round": request.round, "key": request.key, "provider": self.provider.name})
        response = self._call(request)
        self.store.add_response(request, request_id, response, depth, parent_id, self.known_hashes())
        self.emit("response", {"round": request.round, "key": request.key, "proposals": len(response.proposals),
                               "rejected": len(response.rejected), "stopped": response.stopped,
                               "error": response.error, "tokens": response.tokens_in + response.tokens_out,
                               "cost_usd": response.cost_usd})

    def _call(self, request: GenerationRequest) -> GenerationResponse:
        started = time.monotonic()
        try:
            response = self.provider.generate(request.model_copy(deep=True))  # it cannot widen its own bounds
        except ProviderError:
            raise  # set-up problems (no SDK, no price for a cost budget) stop the run with their message
        except Exception as err:  # a provider bug or an SDK surprise costs this request, not the run
            return GenerationResponse(provider=self.provider.name, error=redact(f"{type(err).__name__}: {err}"),
                                      wall_s=time.monotonic() - started)
        extra = len(response.proposals) + len(response.rejected) - request.budget.max_candidates
        if extra > 0 and response.proposals:  # bounds are enforced, not advisory: rejections count too
            extra = min(extra, len(response.proposals))
            response.proposals = response.proposals[: len(response.proposals) - extra]
            note = f"{extra} proposal(s) over the candidate budget of {request.budget.max_candidates} dropped"
            response.stopped = f"{response.stopped}; {note}" if response.stopped else note
        return response

    def request_for(self, round_number: int, key: str, kind: RequestKind, repair: Optional[Repair] = None
                    ) -> GenerationRequest:
        cfg = self.config
        inc_row = self.incumbent()
        inc_solution = self.store.solution(inc_row)
        inc_records = self.records(inc_row)
        incumbent = Incumbent(name=inc_solution.name, solution=dump_json(inc_solution),
                              origin={k: v for k, v in inc_row["origin"].items() if k != "notes"},
                              status=inc_row["status"], mean_latency_ms=mean_latency(inc_records))
        spent = self.store.spend(self.run_id)
        halving = self.halving_active()  # a round that halves proposes more than it evaluates in full
        wanted = 1 if repair else halving.proposals(cfg.candidates) if halving else cfg.candidates
        budget = request_budget(cfg.max_output_tokens, wanted, cfg.request_wall_s, spent,
                                cfg.budget_tokens, cfg.budget_cost_usd, cfg.budget_wall_s)
        summary = (self.definition.description or "")[:800]
        evidence = self.incumbent_evidence()
        return build_request(
            run_id=self.run_id, round_number=round_number, key=key, kind=kind, definition=self.definition.name,
            definition_summary=summary, target_hardware=cfg.target_hardware, plan=self.plan(),
            incumbent=incumbent, incumbent_records=inc_records, history=self.history(),
            skill_excerpts=policy_excerpts(self.skills),
            constraints=self.constraints(inc_solution), budget=budget, thresholds=self.thresholds, repair=repair,
            seed=cfg.seed, why_no_timing=self.evaluator.why_no_timing() or "", ncu_markdown=evidence.ncu_markdown,
            evidence_note=evidence.note).model_copy(update={
                "hint": cfg.hint, "skill_index": skill_index(self.skills, family_for(self.definition.op_type).skill,
                                                             cfg.target_hardware),
                "budget": budget.model_copy(update={"max_turns": cfg.max_turns,
                                                    "max_evaluations": cfg.max_evaluations})})

    def repair_for(self, candidate: dict[str, Any]) -> Repair:
        records = self.records(candidate)
        failing = [(r, self.store.log_text(r)) for r in records if r.status != EvaluationStatus.PASSED]
        return Repair(candidate_id=candidate["id"], status=candidate["status"],
                      solution=dump_json(self.store.solution(candidate)),
                      origin={k: v for k, v in candidate["origin"].items() if k != "notes"},
                      log_excerpt=log_excerpt(failing, self.config.log_excerpt_chars))

    # -- rounds -----------------------------------------------------------------------------------------

    def baseline_round(self) -> None:
        row = self.store.round(self.run_id, 0)
        if row is not None and row["status"] == RunStatus.DONE:
            return
        started = time.monotonic()
        self.store.start_round(self.run_id, 0, "baseline", {"note": "evaluate the starting incumbent"})
        if not self.store.candidates(self.run_id, 0):
            self.store.add_incumbent(self.run_id, self.initial_incumbent())
        self.evaluate_pending(0)
        c = self.store.candidates(self.run_id, 0)[0]
        if self.store.decision(self.run_id, c["id"]) is None:
            self.store.add_decision(self.run_id, 0, c["id"], None, "BASELINE", "incumbent",
                                    ["the starting incumbent"], {"status": c["status"]})
        self.finish_round(0, "baseline", time.monotonic() - started)

    def play_round(self, round_number: int) -> None:
        started = self.round_started = time.monotonic()
        self.budget_stop = None
        plan = self.plan()
        self.store.start_round(self.run_id, round_number, "explore", plan.to_json())
        self.emit("round_start", {"round": round_number, **plan.to_json()})
        self.ask(self.request_for(round_number, f"r{round_number}/explore", "explore"), 0, None)
        self.evaluate_pending(round_number)
        self.note_progress(round_number, "explore", started)
        for depth in range(1, self.config.repairs + 1):
            if self.budget_stop:
                break
            failed = [c for c in self.store.candidates(self.run_id, round_number)
                      if c["depth"] == depth - 1 and c["status"] in REPAIRABLE]
            for c in failed:
                key = f"r{round_number}/repair/c{c['id']}"
                if self.store.request(self.run_id, key) is None:
                    self.ask(self.request_for(round_number, key, "repair", self.repair_for(c)), depth, c["id"])
                else:
                    self.ask(self.store.request(self.run_id, key)[1], depth, c["id"])
            self.evaluate_pending(round_number)
            self.note_progress(round_number, "explore", started)
        self.decide_round(round_number)
        self.finish_round(round_number, "explore", time.monotonic() - started)

    def note_progress(self, round_number: int, kind: str, started: float) -> None:
        """What the round has measured so far, archived before the decision (whose paired measurement and full-audit
        evaluation take minutes): a run cut short there still shows its screening and evaluations."""
        summary = {**self.summarize(round_number, kind, time.monotonic() - started),
                   "decision": "cut short before its decision"}
        self.store.note_round_progress(self.run_id, round_number, summary)

    def finish_round(self, round_number: int, kind: str, wall_s: float) -> None:
        summary = self.store.finish_round(self.run_id, round_number, self.summarize(round_number, kind, wall_s), wall_s)
        self.emit("round", summary)

    def stop_check(self) -> Optional[str]:
        cfg = self.config
        return stop_reason(self.store.spend(self.run_id), cfg.budget_tokens, cfg.budget_cost_usd, cfg.budget_wall_s,
                           self.rounds_without_promotion(), self.records(self.incumbent()), self.thresholds)

    def run(self) -> dict[str, Any]:
        row = self.store.run(self.run_id)
        if row is not None and row["status"] == RunStatus.DONE:
            return self.report()
        self.store.set_run_status(self.run_id, RunStatus.RUNNING)
        try:
            self.baseline_round()
            stop = None
            for r in range(1, self.config.rounds + 1):
                existing = self.store.round(self.run_id, r)
                if existing is not None and existing["status"] == RunStatus.DONE:
                    continue
                if existing is None:
                    stop = self.stop_check()
                    if stop:
                        break
                self.play_round(r)
                if self.budget_stop:  # spent inside the round: it decided on what it measured
                    stop = self.budget_stop
                    break
            stop = stop or f"ran all {self.config.rounds} rounds"
            self.store.set_run_status(self.run_id, RunStatus.DONE, stop)
        except BaseException as err:
            status = RunStatus.FAILED if isinstance(err, Exception) else RunStatus.INTERRUPTED
            try:
                self.store.set_run_status(self.run_id, status, _stop_reason(err))
            except Exception:  # the archive cannot take it either (a full disk): the run stays RUNNING, which
                pass  # `--resume unfinished` continues; the error that stopped it is the one said
            raise
        return self.report()


# -- wiring ------------------------------------------------------------------------------------------------


def run_loop(config: Optional[LoopConfig], archive_path: Path | str, *, resume: Optional[str] = None,
             provider: Optional[Provider] = None, evaluator: Optional[Evaluator] = None,
             on_event: Optional[Event] = None, profiler: Optional[IncumbentProfiler] = None,
             device_index: Optional[int] = None) -> dict[str, Any]:
    """Start a run (or resume one) and play it to its end; returns the report. ``device_index``: the GPU its
    evaluations and profiles use (a host setting, not part of the stored config: a resume may run elsewhere)."""
    archive = Archive(archive_path)
    store = Store(archive)
    if resume is not None:
        row = store.run(resume)
        if row is None:
            raise ValueError(f"no run {resume!r} in {archive.folder}")
        config, run_id = LoopConfig.model_validate(row["config"]), resume
    else:
        if config is None:
            raise ValueError("a new run needs a LoopConfig")
        run_id = new_run_id()
    dataset = Dataset(config.dataset)
    if config.dataset is None:
        config = config.model_copy(update={"dataset": str(dataset.root.resolve())})
    skills = load_skills(config.skills)
    require_indexable(skills)  # a skill whose front matter is broken: said before a run is archived
    # A definition the skills cannot serve (no naive kernel to start from, no template for the offline
    # provider) is said here, on one line, before a run is archived.
    definition = dataset.definition(config.definition)
    dataset.workloads_for(config.definition, config.workloads)  # a workload selector that selects nothing: said now
    if config.incumbent is None:
        offline_generator(skills, definition)
    else:
        check_incumbent(config.incumbent, definition.name)  # not a solution of it: said before a run is archived
    provider = provider or make_provider(config.provider, config.provider_options, skills=skills,
                                         skills_root=config.skills, store=store, definition=definition)
    if hasattr(provider, "check_source"):  # replay: nothing to replay is said before the loop starts
        provider.check_source(definition.name, run_id)
    left = runlock.acquire(archive.folder, run_id)  # RunLocked: another process drives it (controller/runlock.py)
    try:
        if resume is None:
            try:
                store.create_run(run_id, config.definition, config.provider, config.model_dump(mode="json"))
            except BaseException:
                runlock.discard(archive.folder, run_id)  # no run was made, so no lock file is left for it
                raise
        if on_event and left:
            on_event("lock_takeover", {"note": runlock.describe_takeover(run_id, left)})
        return _play(config, run_id, resume, archive, store, provider, evaluator, skills, dataset, on_event,
                     profiler, device_index)
    finally:
        runlock.release(archive.folder, run_id)


def _play(config: LoopConfig, run_id: str, resume: Optional[str], archive: Archive, store: Store,
          provider: Provider, evaluator: Optional[Evaluator], skills: dict[str, Skill], dataset: Dataset,
          on_event: Optional[Event], profiler: Optional[IncumbentProfiler], device_index: Optional[int]
          ) -> dict[str, Any]:
    """run_loop's second half, under the run's lock: the evaluator and profiler, then the loop."""
    if on_event:
        on_event("run", {"run_id": run_id, "definition": config.definition, "provider": config.provider,
                         "resumed": resume is not None})
    own_evaluator = evaluator is None
    evaluator = evaluator or HarnessEvaluator(dataset, archive, SubmitOptions(workloads=config.workloads,
                                                                              timeout_s=config.timeout_s,
                                                                              spare_worker=True,
                                                                              device_index=device_index))
    if profiler is None and config.profile is not False:
        profiler = NcuIncumbentProfiler(dataset.root, timeout_s=config.profile_timeout_s, seed=config.seed,
                                        device_index=device_index, hidden=[str(archive.folder)])
    try:
        return Loop(config, run_id, store, provider, evaluator, skills, dataset, on_event, profiler).run()
    finally:
        if own_evaluator:
            evaluator.close()


def resume_loop(run_id: str, archive_path: Path | str, *, on_event: Optional[Event] = None,
                device_index: Optional[int] = None) -> dict[str, Any]:
    """Continue one archived run with its stored settings (run_loops' runner for ``--resume``)."""
    return run_loop(None, archive_path, resume=run_id, on_event=on_event, device_index=device_index)


def run_loops(jobs: Sequence[Any], archive_path: Path | str, gpus: int, *, on_event: Optional[Event] = None,
              runner: Callable[..., dict[str, Any]] = run_loop) -> list[dict[str, Any]]:
    """One run per job (a LoopConfig for run_loop, e.g. the four definitions of gqa_decode, or a run id for
    resume_loop): with two or more GPUs, one lane per GPU takes the next job, so runs go side by side, each on
    its own GPU; else one after the other. Reports come back in the order of ``jobs``; the first error is
    raised after every lane has stopped."""
    from harness.pipeline.parallel import run_lanes

    if gpus < 2 or len(jobs) < 2:
        return [runner(job, archive_path, on_event=on_event) for job in jobs]
    reports: list[Optional[dict[str, Any]]] = [None] * len(jobs)

    def serve(device: int, take: Callable[[], Optional[tuple[int, Any]]]) -> None:
        while (item := take()) is not None:
            i, job = item
            events = _labelled(on_event, job.definition if isinstance(job, LoopConfig) else str(job))
            try:
                reports[i] = runner(job, archive_path, on_event=events, device_index=device)
            except Exception as err:  # said now: the other lanes may run for a long while before it is raised
                if events:
                    events("lane_error", {"error": f"{type(err).__name__}: {err}"})
                raise

    run_lanes(list(jobs), min(gpus, len(jobs)), serve)
    return [r for r in reports if r is not None]


def _labelled(on_event: Optional[Event], lane: str) -> Optional[Event]:
    """Runs side by side interleave their events: each carries the run's label (its definition or run id)."""
    if on_event is None:
        return None
    return lambda kind, data: on_event(kind, {**data, "lane": lane})


def _stop_reason(err: BaseException) -> str:
    """What stopped a run, as `controller runs` shows it: an interruption in words, an error by its type and text."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted (Ctrl-C); continue it with --resume"
    if isinstance(err, SystemExit):
        return "terminated (SIGTERM); continue it with --resume"
    return f"{type(err).__name__}: {err}"

