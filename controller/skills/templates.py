"""Parametric kernel templates a skill ships: placeholders, allowed values, rendering."""

from __future__ import annotations

import itertools
import re
from typing import Any, Iterator, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .blocks import machine_blocks, pydantic_problems
from .markdown import resolve_inside
from .model import Skill, SkillError

# Template placeholders are {UPPER_CASE}; Python code in a template never uses that shape
# otherwise (dict literals and f-strings hold lowercase names or expressions), so no escaping
# scheme is needed and a missing value can always be detected.
PLACEHOLDER_PATTERN = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")


def template_placeholders(template_text: str) -> list[str]:
    """Placeholder names in a template, in order of first appearance."""
    names: list[str] = []
    for name in PLACEHOLDER_PATTERN.findall(template_text):
        if name not in names:
            names.append(name)
    return names


def render_template(template_text: str, params: dict) -> str:
    """Fill every {NAME} placeholder; raise SkillError on a missing or unknown placeholder."""
    wanted = template_placeholders(template_text)
    missing = [name for name in wanted if name not in params]
    unknown = sorted(set(params) - set(wanted))
    problems = []
    if missing:
        problems.append(f"no value for placeholder(s) {', '.join(missing)}")
    if unknown:
        problems.append(f"unknown placeholder(s) {', '.join(unknown)} "
                        f"(the template has: {', '.join(wanted) or 'none'})")
    for name, value in params.items():
        if name in wanted and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
            problems.append(f"{name}: value {value!r} must be an int, float or str")
        elif isinstance(value, str) and "\n" in value:
            problems.append(f"{name}: value must be a single line")
    if problems:
        raise SkillError("cannot render template: " + "; ".join(problems))
    return PLACEHOLDER_PATTERN.sub(lambda match: str(params[match.group(1)]), template_text)


class KernelTemplate(BaseModel):
    """One parametric kernel listed in a skill's yaml block under `templates:`."""

    model_config = ConfigDict(extra="forbid")

    name: str
    path: str  # relative to the skill folder
    language: str
    entry_point: str = "run"
    # a setup function (e.g. "plan"): run once per batch outside the kernel figure, its result passed to the
    # entry point as its last argument (as FlashInfer's plan() is)
    setup: Optional[str] = None
    description: str = ""
    placeholders: dict[str, list[int | float | str]]
    defaults: dict[str, int | float | str] = Field(default_factory=dict)
    fixed_by_definition: list[str] = Field(default_factory=list)

    @field_validator("placeholders")
    @classmethod
    def _non_empty_choices(cls, value: dict[str, list]) -> dict[str, list]:
        for name, choices in value.items():
            if not PLACEHOLDER_PATTERN.fullmatch("{" + name + "}"):
                raise ValueError(f"placeholder name {name!r} must be UPPER_CASE")
            if not choices:
                raise ValueError(f"placeholder {name} lists no allowed values")
        return value

    def grid(self) -> Iterator[dict[str, int | float | str]]:
        """Every combination of allowed values."""
        names = list(self.placeholders)
        for values in itertools.product(*(self.placeholders[name] for name in names)):
            yield dict(zip(names, values))

    def narrowed(self, keep: dict[str, Any]) -> "KernelTemplate":
        """This template with fewer allowed values where ``keep`` ({PLACEHOLDER: [values]}, a definition's `narrow:`)
        names its placeholders: a choice that does nothing for that definition (a TMA box of one token at page size
        1) is not offered there. The default must stay allowed; names the template lacks are left to the caller."""
        placeholders = dict(self.placeholders)
        for name, values in keep.items():
            if name not in placeholders:
                continue
            kept = [v for v in placeholders[name] if v in list(values)]
            if not kept or (name in self.defaults and self.defaults[name] not in kept):
                raise SkillError(f"template {self.name!r}: narrowing {name} to {list(values)} leaves "
                                 f"{kept or 'nothing'} of {placeholders[name]}, which must hold the default "
                                 f"{self.defaults.get(name)!r}")
            placeholders[name] = kept
        return self.model_copy(update={"placeholders": placeholders})

    def check(self, params: dict) -> None:
        """Raise SkillError unless params gives an allowed value for exactly the listed placeholders."""
        problems = []
        for name, choices in self.placeholders.items():
            if name not in params:
                problems.append(f"{name} missing (allowed: {choices})")
            elif params[name] not in choices or isinstance(params[name], bool):
                problems.append(f"{name}={params[name]!r} not allowed (allowed: {choices})")
        for name in sorted(set(params) - set(self.placeholders)):
            problems.append(f"{name} is not a placeholder of template {self.name!r}")
        if problems:
            raise SkillError(f"template {self.name!r}: " + "; ".join(problems))


def kernel_templates(skill: Skill) -> dict[str, KernelTemplate]:
    """Templates listed under `templates:` in the skill's yaml blocks, keyed by name."""
    templates: dict[str, KernelTemplate] = {}
    for block in machine_blocks(skill):
        for number, raw in enumerate(block.get("templates") or [], start=1):
            try:
                template = KernelTemplate.model_validate(raw)
            except ValidationError as error:
                raise SkillError(f"{skill.path}: template entry {number}: {pydantic_problems(error)}") from error
            if template.name in templates:
                raise SkillError(f"{skill.path}: template {template.name!r} is listed twice")
            if resolve_inside(skill.folder, template.path) is None:
                raise SkillError(f"{skill.path}: template {template.name!r} path {template.path!r} "
                                 "leaves the skill folder")
            templates[template.name] = template
    return templates


def render_skill_template(skill: Skill, template: KernelTemplate, params: dict) -> str:
    """Check params against the template's allowed values, then render its file."""
    template.check(params)
    file = skill.folder / template.path
    if not file.is_file():
        raise SkillError(f"{skill.path}: template {template.name!r} file {template.path!r} does not exist")
    return render_template(file.read_text(encoding="utf-8"), params)
