"""The promotion thresholds, read from the yaml block of skills/promotion-rules."""

from __future__ import annotations

import re

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .blocks import machine_blocks, pydantic_problems
from .model import SKILL_FILE, Skill, SkillError


class PromotionThresholds(BaseModel):
    """The promotion skill's machine-readable rules: the thresholds the controller's promotion gate applies before a
    candidate replaces the incumbent (controller/promote.py).

    Strict types: `min_repeats: "2"` or `require_clean_audits: yes-please` is a typo to report,
    not a value to coerce.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    require_all_workloads_passed: bool
    require_clean_audits: bool
    # A candidate about to be promoted is evaluated again at the full audit level (run-time attribution),
    # and promoted only if that evaluation is promotable too.
    require_full_audit: bool
    min_repeats: int
    # Promote iff the mean over workloads of per-workload speedups (incumbent / candidate latency, as the
    # definition score aggregates) exceeds 1 + noise_floor_rel, and no regime's mean speedup and no single
    # workload's speedup is below 1 - max_regime_regression_rel / 1 - max_workload_regression_rel.
    noise_floor_rel: float
    paired_order: str
    max_regime_regression_rel: float
    max_workload_regression_rel: float
    stop_no_improvement_rounds: int
    stop_at_fraction_of_floor: float
    # A candidate whose own evaluation's mean speedup over the incumbent's own evaluation is below 1 - this
    # does not get a paired measurement (2 x ABBA = 8 full submissions): screening can only refuse, never promote.
    screen_slack_rel: float = 0.01
    # The latency figure candidates are ranked, screened and paired on. "kernel": a solution's setup (its plan)
    # outside the timed call where it has one (how FlashInfer's figure is taken, with plan() outside; the figure
    # the speedup-vs-FlashInfer goals are stated in); "official": setup inside every timed call (what the
    # contest's own harness times). A solution without a setup has one figure: both are the same there.
    ranked_figure: Literal["kernel", "official"] = "kernel"
    # A candidate whose own evaluation is at least this many times faster than the incumbent's own evaluation on
    # every workload, both on the same card, is not given a paired measurement (8 full submissions): drift between
    # two evaluations of one card is a few percent, far inside such a margin. None: every promotion is paired.
    decisive_speedup: Optional[float] = None
    # A paired measurement stops after a complete repeat (before the last) whose paired mean speedup so far is below
    # this, and the candidate is rejected: it can only refuse (a promotion still needs every repeat). None: off.
    futility_below: Optional[float] = None
    # A candidate within the noise floor is still promoted when its paired mean speedup is at least 1 (the score does
    # not go down), on a workload where the incumbent trails the library baseline its paired speedup is at least
    # 1 + this and it was faster there in every repeat, and no workload where the incumbent leads the baseline falls
    # behind it (rules 7 and 8 still hold). None: off.
    gap_gain_rel: Optional[float] = None
    # Where candidate and incumbent are dispatching solutions (controller/dispatch.py) whose calls in some regimes run
    # byte-identical code, the paired measurement times only the other workloads; the identical ones count 1x.
    pair_changed_only: bool = False

    @field_validator("require_all_workloads_passed")
    @classmethod
    def _all_workloads_must_pass(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "must be true: the official score of a definition is 0 when any workload fails, "
                "so a candidate with a failed workload can never be better"
            )
        return value

    @field_validator("require_clean_audits")
    @classmethod
    def _audits_must_be_clean(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "must be true: a candidate with a failed audit is never promoted (a failed audit means its speed "
                "may be a reward hack, not a faster kernel)"
            )
        return value

    @field_validator("require_full_audit")
    @classmethod
    def _full_audit_before_promotion(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "must be true: the fast audit level skips run-time attribution, so a candidate is promoted "
                "only on an evaluation at the full audit level"
            )
        return value

    @field_validator("min_repeats")
    @classmethod
    def _enough_repeats(cls, value: int) -> int:
        if value < 2:
            raise ValueError(f"must be at least 2 (one measurement cannot show it repeats), got {value}")
        return value

    @field_validator("noise_floor_rel", "max_regime_regression_rel", "max_workload_regression_rel",
                     "screen_slack_rel")
    @classmethod
    def _relative_fraction(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"is a relative fraction and must be in [0, 1), got {value}")
        return value

    @field_validator("gap_gain_rel")
    @classmethod
    def _gap_gain_bound(cls, value: Optional[float]) -> Optional[float]:
        if value is not None and not 0.005 <= value < 0.1:
            raise ValueError(f"must be in [0.005, 0.1) (a gain below half a percent is one workload's noise), "
                             f"got {value}")
        return value

    @field_validator("decisive_speedup")
    @classmethod
    def _decisive_margin(cls, value: Optional[float]) -> Optional[float]:
        if value is not None and value < 1.2:
            raise ValueError(f"must be at least 1.2 (a margin far beyond drift between two evaluations), got {value}")
        return value

    @field_validator("futility_below")
    @classmethod
    def _futility_bound(cls, value: Optional[float]) -> Optional[float]:
        if value is not None and not 0.5 <= value <= 1.0:
            raise ValueError(f"must be in [0.5, 1.0] (a stop above 1x would refuse candidates that are faster), "
                             f"got {value}")
        return value

    @field_validator("paired_order")
    @classmethod
    def _balanced_pairing(cls, value: str) -> str:
        if not re.fullmatch(r"[AB]+", value):
            raise ValueError(f"must be a sequence of A (incumbent) and B (candidate), got {value!r}")
        if value.count("A") != value.count("B") or len(value) < 2:
            raise ValueError(
                f"must run A and B equally often (at least once each) so drift cancels, got {value!r}"
            )
        return value

    @field_validator("stop_no_improvement_rounds")
    @classmethod
    def _positive_rounds(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        return value

    @field_validator("stop_at_fraction_of_floor")
    @classmethod
    def _fraction_of_floor(cls, value: float) -> float:
        if not 0.0 < value <= 1.0:
            raise ValueError(
                f"is the fraction of the roofline floor at which to stop and must be in (0, 1], got {value}"
            )
        return value


PROMOTION_SKILL = "promotion-rules"


def promotion_thresholds(skills: dict[str, Skill]) -> PromotionThresholds:
    """The thresholds from the one yaml block of skills['promotion-rules'] that holds them."""
    skill = skills.get(PROMOTION_SKILL)
    if skill is None:
        raise SkillError(f"no {PROMOTION_SKILL!r} skill loaded (expected skills/{PROMOTION_SKILL}/{SKILL_FILE})")
    field_names = set(PromotionThresholds.model_fields)
    candidates = [block for block in machine_blocks(skill) if field_names & set(block)]
    if not candidates:
        raise SkillError(f"{skill.path}: no yaml block holds promotion thresholds ({', '.join(sorted(field_names))})")
    if len(candidates) > 1:
        raise SkillError(f"{skill.path}: {len(candidates)} yaml blocks hold promotion thresholds; keep exactly one")
    try:
        return PromotionThresholds.model_validate(candidates[0])
    except ValidationError as error:
        raise SkillError(f"{skill.path}: promotion thresholds are wrong: {pydantic_problems(error)}") from error
