"""One type for an audit's outcome (``Audit``) and the catalogue of every audit the harness runs
(``AUDIT_REGISTRY``, read from definitions/audits.yaml).

An ``Audit`` can only carry a registered name: a new audit cannot be added without its catalogue entry, which says
what it catches, the audit levels it runs at, where its evidence comes from and whether a failure blocks promotion.
Live results (harness.data.results) hold ``Audit`` objects; the archive and ``harness submit --json`` hold their
JSON (``Audit.to_json``: the keys ``name``, ``passed``, ``detail``, and attribution's ``share``/``own_kernels``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

REGISTRY_PATH = Path(__file__).resolve().parents[2] / "definitions" / "audits.yaml"

# "off" exists to measure what the audits cost; an evaluation without audits is never promotable.
AUDIT_LEVELS = ("off", "fast", "full")

Level = Literal["off", "fast", "full"]
Evidence = Literal["worker", "reference_worker", "cupti", "sass", "ncu", "roofline", "baselines", "static_gate"]


class AuditEntry(BaseModel):
    """One audit in the catalogue (definitions/audits.yaml)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The audit's name, as an Audit and the archive carry it.")
    catches: str = Field(min_length=1, description="What it catches, in one sentence.")
    levels: tuple[Level, ...] = Field(min_length=1, description="The audit levels it runs at (AUDIT_LEVELS).")
    evidence: tuple[Evidence, ...] = Field(min_length=1, description="Where its evidence comes from.")
    blocks_promotion: bool = Field(description="Whether a failure keeps the submission from being promoted.")
    recorded_as: Literal["audit", "static_findings"] = Field(
        description="An Audit in the audits lists, or the static gate's findings (never an Audit).")
    scope: Literal["workload", "submission"] = Field(
        description="One workload's audits, or the submission's as a whole.")


@lru_cache(maxsize=None)
def load_registry(path: Path = REGISTRY_PATH) -> dict[str, AuditEntry]:
    """The catalogue, name -> entry; a malformed entry raises (pydantic's ValidationError) when it is read."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    audits = data.get("audits") if isinstance(data, dict) else None
    if not isinstance(audits, dict) or not audits:
        raise ValueError(f"{path}: expected a mapping `audits:` of name -> entry")
    return {name: AuditEntry(name=name, **entry) for name, entry in audits.items()}


def audit_names() -> frozenset[str]:
    """The names an ``Audit`` may carry: the catalogue's entries recorded as audits."""
    return frozenset(n for n, e in load_registry().items() if e.recorded_as == "audit")


class Audit(BaseModel):
    """One audit's outcome, on one workload or on the submission as a whole. Any failed audit blocks promotion
    (harness.audits.verdicts.promotion_blockers)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Which audit (a key of definitions/audits.yaml; any other name raises).")
    passed: bool = Field(description="False: the audit found what it looks for, or could not clear the candidate.")
    detail: str = Field(description="The evidence in words: figures, limits, and what a failure points to.")
    share: Optional[float] = Field(
        default=None, description="attribution only: the share of compute time in the candidate's own kernels.")
    own_kernels: Optional[list[str]] = Field(
        default=None, description="attribution only: the candidate's kernels that ran (at most 8, sorted).")

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in audit_names():
            raise ValueError(f"audit {name!r} is not in the catalogue {REGISTRY_PATH.name} "
                             f"(registered: {', '.join(sorted(audit_names()))})")
        return name

    def to_json(self) -> dict[str, Any]:
        """As archived and printed: ``name``, ``passed``, ``detail`` (and attribution's figures where set)."""
        return self.model_dump(exclude_none=True)


def audits_json(audits: Iterable[Audit]) -> list[dict[str, Any]]:
    return [a.to_json() for a in audits]


def as_audits(audits: Iterable[Union[Audit, Mapping[str, Any]]]) -> list[Audit]:
    """Audits as objects: an ``Audit`` as is, a dict (as archived) read into one."""
    return [Audit.model_validate(a) for a in audits]
