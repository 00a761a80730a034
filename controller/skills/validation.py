"""Every format problem of a skill (the format rules are listed in controller/skills/__init__.py), reported all
at once."""

from __future__ import annotations

from pathlib import Path

import yaml

from .markdown import local_links, one_line, resolve_inside, yaml_block_texts
from .model import (
    ALLOWED_FRONT_MATTER_KEYS,
    MAX_BODY_LINES,
    MAX_COMPATIBILITY_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    NAME_PATTERN,
    SKILL_FILE,
    Skill,
    SkillError,
)

# Only these files are scanned for further links: a template or script is not a document, and
# Python such as `table[i](x)` would read as a link.
DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt")


def _check_name(skill: Skill, where: str) -> list[str]:
    raw = skill.front_matter.get("name")
    if raw is None:
        return [f"{where}: front matter has no 'name'"]
    if not isinstance(raw, str):
        return [f"{where}: 'name' must be a string, got {type(raw).__name__}"]
    problems = []
    if not raw:
        problems.append(f"{where}: 'name' is empty")
    elif len(raw) > MAX_NAME_CHARS:
        problems.append(f"{where}: 'name' has {len(raw)} characters, at most {MAX_NAME_CHARS} allowed")
    if raw and not NAME_PATTERN.match(raw):
        problems.append(
            f"{where}: 'name' {raw!r} must be lowercase letters, digits and single hyphens, "
            "not starting or ending with a hyphen"
        )
    if raw != skill.folder.name:
        problems.append(f"{where}: 'name' {raw!r} does not match its folder name {skill.folder.name!r}")
    return problems


def _check_description(skill: Skill, where: str) -> list[str]:
    raw = skill.front_matter.get("description")
    if raw is None:
        return [f"{where}: front matter has no 'description' (say what the skill is and when to use it)"]
    if not isinstance(raw, str):
        return [f"{where}: 'description' must be a string, got {type(raw).__name__}"]
    if not raw.strip():
        return [f"{where}: 'description' is empty"]
    problems = []
    if len(raw) > MAX_DESCRIPTION_CHARS:
        problems.append(
            f"{where}: 'description' has {len(raw)} characters, at most {MAX_DESCRIPTION_CHARS} allowed"
        )
    if "<" in raw or ">" in raw:
        # Clients embed descriptions in XML-like catalogs; some validators reject angle brackets.
        problems.append(f"{where}: 'description' must not contain '<' or '>'")
    return problems


def _check_other_keys(skill: Skill, where: str) -> list[str]:
    problems = []
    for key in sorted(set(skill.front_matter) - ALLOWED_FRONT_MATTER_KEYS):
        problems.append(
            f"{where}: front-matter key {key!r} is not in the spec "
            f"(allowed: {', '.join(sorted(ALLOWED_FRONT_MATTER_KEYS))}); put extras under 'metadata'"
        )
    metadata = skill.front_matter.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            problems.append(f"{where}: 'metadata' must be a mapping, got {type(metadata).__name__}")
        else:
            for key, value in metadata.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    problems.append(
                        f"{where}: 'metadata' maps strings to strings; entry {key!r}: {value!r} is not"
                    )
    compatibility = skill.front_matter.get("compatibility")
    if compatibility is not None and (
        not isinstance(compatibility, str) or not 1 <= len(compatibility) <= MAX_COMPATIBILITY_CHARS
    ):
        problems.append(f"{where}: 'compatibility' must be a string of 1-{MAX_COMPATIBILITY_CHARS} characters")
    return problems



def _check_references(skill: Skill, where: str) -> list[str]:
    problems = []
    folder = skill.folder
    for target in skill.references:
        resolved = resolve_inside(folder, target)
        if resolved is None:
            problems.append(f"{where}: link {target!r} points outside the skill folder")
            continue
        if not resolved.is_file():
            problems.append(f"{where}: link {target!r} points at a file that does not exist")
            continue
        if resolved.suffix.lower() not in DOCUMENT_SUFFIXES:
            continue
        try:
            nested = local_links(resolved.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
        own_name = resolved.name
        for further in nested:
            if further in (own_name, f"./{own_name}"):
                continue
            problems.append(
                f"{folder / target}: links to {further!r}; references must be one level deep "
                f"(link it from {SKILL_FILE} instead)"
            )
    return problems


def _check_machine_blocks(skill: Skill, where: str) -> list[str]:
    problems = []
    for number, (line, text) in enumerate(yaml_block_texts(skill.body), start=1):
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as error:
            problems.append(f"{where}: yaml block {number} (body line {line}) does not parse: {one_line(error)}")
            continue
        if not isinstance(parsed, dict):
            problems.append(
                f"{where}: yaml block {number} (body line {line}) must be a mapping, "
                f"got {type(parsed).__name__}"
            )
    return problems


def validate_skill(skill: Skill) -> list[str]:
    """Every problem found in one skill; an empty list means it is clean."""
    where = str(skill.path)
    problems = list(skill.problems_on_load)
    if not skill.problems_on_load:
        problems += _check_name(skill, where)
        problems += _check_description(skill, where)
        problems += _check_other_keys(skill, where)
    if skill.body_line_count >= MAX_BODY_LINES:
        problems.append(
            f"{where}: body has {skill.body_line_count} lines, it must stay under {MAX_BODY_LINES} "
            "(move detail into references/)"
        )
    problems += _check_references(skill, where)
    problems += _check_machine_blocks(skill, where)
    return problems


def require_indexable(skills: dict[str, Skill]) -> None:
    """SkillError, on one line, where a skill's front matter does not parse or lacks its name or description: the
    skill index every request carries is made of them, and a skill listed with no description is one no model
    picks (red team round 12: a broken front matter ran a whole loop without a word). Checked before a run starts;
    style rules (``validate_skill``'s others) are not run stoppers."""
    problems: list[str] = []
    for skill in skills.values():
        where = str(skill.path)
        problems += skill.problems_on_load or (_check_name(skill, where) + _check_description(skill, where))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SkillError(f"{one_line(problems[0])}{more}")


def validate_skills(skills: dict[str, Skill]) -> list[str]:
    """Problems of every skill, plus names used twice."""
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for skill in skills.values():
        problems += validate_skill(skill)
        if skill.name and skill.name in seen:
            problems.append(f"{skill.path}: name {skill.name!r} is already used by {seen[skill.name]}")
        seen.setdefault(skill.name, skill.path)
    return problems
