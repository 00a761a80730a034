"""A loaded skill, the errors about one, and the format limits of the Agent Skills spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SKILL_FILE = "SKILL.md"
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500
MAX_BODY_LINES = 500  # the body must stay strictly under this many lines
ALLOWED_FRONT_MATTER_KEYS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class SkillError(ValueError):
    """A skill (or a machine-readable part of one) cannot be used; the message says where and why."""


class Skill(BaseModel):
    """One loaded skill. `problems_on_load` holds what made loading partial (unreadable front matter)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    description: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    body: str
    path: Path  # the SKILL.md file
    references: list[str] = Field(default_factory=list)  # local link targets, as written, in order
    front_matter: dict[str, Any] = Field(default_factory=dict)
    problems_on_load: list[str] = Field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def body_line_count(self) -> int:
        return len(self.body.splitlines())
