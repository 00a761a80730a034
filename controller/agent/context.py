"""What a run gives its requests and its model: which skills it may read, the policy it reads in whole, and the
agent context a tool-using provider is bound to (skills, the archive's journal, draft evaluation, profiles).

Pure choices (``skill_index``, ``policy_excerpts``, ``draft_report``) are tested on their own; ``bind_provider`` is
the one place the loop hands its harness and archive to a provider.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from harness.data.generation_request import SkillEntry
from harness.data.schema import Solution
from harness.data.statuses import EvaluationStatus

from ..skills import Skill
from ..tactics import tactics_skill
from .journal import StoreJournal

# Policy, not kernel advice: every request carries it whole (the promotion rules decide what the model's work is
# worth; an excerpt could cut the rule that matters).
POLICY_SKILLS = ("promotion-rules",)
PROFILING_SKILL = "ncu-profiling"


def _files(skill: Skill) -> list[str]:
    """Every file of a skill's folder but SKILL.md, as paths relative to the folder, in order."""
    folder = skill.folder
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name != "SKILL.md" and not any(part.startswith(".") for part in p.parts))


def skill_index(skills: dict[str, Skill], family_skill: str, target_hardware: str) -> list[SkillEntry]:
    """The skills a request may read on demand: its operator family's, the target's tactics and the profiling one,
    each with the files of its folder. The policy skills are not listed: they come whole with every request."""
    names = [family_skill, tactics_skill(target_hardware), PROFILING_SKILL]
    entries = []
    for name in dict.fromkeys(n for n in names if n and n in skills):
        skill = skills[name]
        entries.append(SkillEntry(name=skill.name or name, description=" ".join(skill.description.split()),
                                  references=_files(skill)))
    return entries


def policy_excerpts(skills: dict[str, Skill]) -> dict[str, str]:
    """The policy skills, whole."""
    return {name: f"# skill: {skills[name].name}\n{skills[name].description.strip()}\n\n{skills[name].body.strip()}\n"
            for name in POLICY_SKILLS if name in skills}


def draft_report(records: list[Any]) -> str:
    """What a model reads after evaluating a draft: per workload, status, latency, speedup against FlashInfer,
    fraction of the roofline floor, failed audits and the harness's message."""
    if not records:
        return "the harness recorded no workload for this draft"
    def fmt(x: Optional[float], spec: str) -> str:
        return "-" if x is None else format(x, spec)

    lines = ["| workload | status | latency ms | vs FlashInfer | of floor | failed audits | message |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        failed = ", ".join(a.get("name", "?") for a in r.audits if not a.get("passed", True)) or "-"
        message = " ".join((r.message or "").split())[:300] or "-"
        lines.append(f"| {r.label or r.workload} | {r.status} | {fmt(r.latency_ms, '.4g')} | "
                     f"{fmt(r.speedup_vs_fi, '.3g')} | {fmt(r.fraction_of_floor, '.0%')} | {failed} | {message} |")
    passed = sum(r.status == EvaluationStatus.PASSED for r in records)
    return f"{passed} of {len(records)} workloads PASSED\n\n" + "\n".join(lines)


def bind_provider(provider: Any, skills: dict[str, Skill], store: Any, evaluator: Any,
                  run_workloads: Optional[list[str]],
                  profile_draft: Optional[Callable[[Solution, int], Optional[str]]] = None,
                  figure: str = "kernel") -> None:
    """Give a tool-using provider (one with ``bind``) its context; other providers are left as they are.
    ``figure``: the latency figure a draft's report shows, the one the loop ranks on (PromotionThresholds).

    ``profile_draft(solution, submission_id)``: the ncu digest of a draft the model evaluated (None where no
    profiler runs here); the model asks for it by the draft's name."""
    bind = getattr(provider, "bind", None)
    if bind is None:
        return
    evaluate = None
    drafts: dict[str, tuple[Solution, int]] = {}
    if hasattr(evaluator, "evaluate_on"):
        allowed = set(run_workloads or [])

        def evaluate(solution: dict[str, Any], workloads: list[str], budget_s: Optional[float] = None) -> str:
            unknown = sorted(set(workloads) - allowed) if allowed else []
            if unknown:
                return (f"not evaluated: {', '.join(unknown)} not among this run's workloads "
                        f"({', '.join(sorted(allowed))})")
            draft = Solution.model_validate(solution)
            # the request's wall time left: the harness stops the draft there (a TIMEOUT that says so)
            submission_id = evaluator.evaluate_on(draft, workloads or None, budget_s)
            drafts[draft.name] = (draft, submission_id)
            return draft_report(store.eval_records(submission_id, figure=figure))

    def profile(target: str) -> Optional[str]:
        if target not in drafts or profile_draft is None:
            return None
        return profile_draft(*drafts[target])

    bind(skills=skills, journal=StoreJournal(store), evaluate=evaluate, profile=profile)


def draft_profiler(loop: Any) -> Callable[[Solution, int], Optional[str]]:
    """Profile a draft the way the loop profiles an incumbent (one workload per regime, archived profiles reused),
    where a profiler works here and the draft passed every workload it ran."""
    from ..evidence.incumbent import profile_incumbent

    def profile(solution: Solution, submission_id: int) -> Optional[str]:
        if loop.config.profile is False or loop.profiler is None or loop._no_profiler is not None:
            return None
        records = loop.store.eval_records(submission_id, figure=loop.thresholds.ranked_figure)
        if not records or any(r.status != EvaluationStatus.PASSED for r in records):
            return None
        ok, _ = loop.profiler.available()
        if not ok:
            return None
        evidence = profile_incumbent(loop.profiler, loop.store.archive, loop.dataset, loop.definition, solution,
                                     loop.store.archive.submission(submission_id), loop.workloads, loop.regimes,
                                     loop.book)
        return evidence.ncu_markdown
    return profile
