"""Which skill, which of its templates (with which allowed values) and which fixed values a definition gets: data
of the skill, read by pure functions (the offline generator's inputs).

The skill is the one the definition's operator family names (``OperatorFamily.skill``); the skill's machine-readable
`definitions:` entry for it may name the template(s) meant for it (`template:`), narrow a placeholder's allowed values
(`narrow:`), and gives the values of the placeholders a template fixes by definition (`PAGE_SIZE` from `page_size`);
its `naive:` entry is the first incumbent.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from harness.families import FamilyError, family_for
from harness.data.schema import Definition

from ..skills import KernelTemplate, Skill, SkillError, kernel_templates

Origin = dict[str, Any]


def skill_for(skills: dict[str, Skill], definition: Union[Definition, str]) -> Skill:
    """The skill whose templates serve ``definition``: the one its operator family names. Given only a name (no
    op_type at hand), the skill that lists that name in its front matter's `definitions`. SkillError, on one
    line, when there is none or it ships no kernel template."""
    if isinstance(definition, str):
        name = definition
        owners = [s for s, skill in skills.items() if name in str(skill.metadata.get("definitions", "")).split()]
        if not owners:
            raise SkillError(f"no skill lists definition {name!r}; the offline provider serves only definitions "
                             "whose skill ships a kernel template")
        wanted, why = owners[0], f"skill {owners[0]!r} (it lists {name!r})"
    else:
        name = definition.name
        try:
            wanted = family_for(definition.op_type).skill
        except FamilyError as err:
            raise SkillError(f"definition {name!r}: {' '.join(str(err).split())}") from err
        if not wanted:
            raise SkillError(f"definition {name!r}: op_type {definition.op_type!r} has no skill (its operator family "
                             "names none), so the offline provider has no kernel template for it")
        why = f"skill {wanted!r} (of op_type {definition.op_type!r})"
    if wanted not in skills:
        raise SkillError(f"definition {name!r}: {why} is not in the skills folder")
    if not kernel_templates(skills[wanted]):
        raise SkillError(f"definition {name!r}: {why} ships no kernel template, so the offline provider cannot "
                         "write a kernel for it")
    return skills[wanted]


def offered_templates(templates: dict[str, KernelTemplate], data: dict[str, Any], where: str
                      ) -> dict[str, KernelTemplate]:
    """The templates meant for a definition: those its data names under `template:` (one name or a list), else
    all of them (a skill whose templates all compute the same operator)."""
    named = data.get("template")
    if named is None:
        return dict(templates)
    names = [named] if isinstance(named, str) else list(named)
    unknown = [n for n in names if n not in templates]
    if unknown or not names:
        raise SkillError(f"{where}: `template:` names {unknown or names!r}, not templates of the skill "
                         f"({', '.join(templates)})")
    return {n: templates[n] for n in names}


def narrowed_templates(templates: dict[str, KernelTemplate], data: dict[str, Any], where: str
                       ) -> dict[str, KernelTemplate]:
    """The templates with the allowed values the definition's `narrow:` entry keeps ({PLACEHOLDER: [values]})."""
    keep = data.get("narrow") or {}
    unknown = sorted(set(keep) - {n for t in templates.values() for n in t.placeholders})
    if not isinstance(keep, dict) or unknown:
        raise SkillError(f"{where}: `narrow:` must map placeholders of its templates to values (unknown: {unknown})")
    try:
        return {name: t.narrowed(keep) for name, t in templates.items()}
    except SkillError as err:
        raise SkillError(f"{where}: {err}") from None


def fixed_values(template: KernelTemplate, data: dict[str, Any], where: str) -> dict[str, Any]:
    """The placeholders ``template`` fixes by definition, valued from the definition's data: `PAGE_SIZE` is its
    `page_size` (the placeholder's name in lower case)."""
    values: dict[str, Any] = {}
    for name in template.fixed_by_definition:
        if name.lower() not in data:
            raise SkillError(f"{where}: template {template.name!r} fixes {name} by definition, but the skill's "
                             f"`definitions:` entry gives no {name.lower()!r}")
        values[name] = data[name.lower()]
    return values


def naive_entry(entry: Any, templates: dict[str, KernelTemplate]) -> Optional[Origin]:
    """The skill's `naive:` origin (one mapping, or a list, of which the first whose template is offered wins),
    as {template, params}; None when it names no offered template."""
    points = entry if isinstance(entry, list) else [entry] if entry else []
    for point in points:
        if isinstance(point, dict) and point.get("template") in templates:
            return {"template": point["template"], "params": {k: v for k, v in point.items() if k != "template"}}
    return None


def definition_starting_points(points: dict[str, dict[str, Any]], data: dict[str, Any], where: str,
                               templates: dict[str, KernelTemplate]) -> dict[str, dict[str, Any]]:
    """The skill's `starting_points` ({regime: {template, PARAM: VALUE}}) with the definition's own
    `starting_points:` laid over them: where a shape was measured to want other values (kv4 and kv8 at page 64
    are not best served by one kernel), the definition's entry changes only what it names; one that names
    another template replaces the regime's start (the template's defaults fill the rest)."""
    own = data.get("starting_points") or {}
    if not isinstance(own, dict) or not all(isinstance(v, dict) for v in own.values()):
        raise SkillError(f"{where}: `starting_points:` must map regimes to {{PARAM: VALUE}} mappings")
    merged = dict(points)
    for regime, change in own.items():
        base = points.get(regime) or {}
        template = change.get("template", base.get("template"))
        if template not in templates:
            raise SkillError(f"{where}: `starting_points:` of {regime!r} names template {template!r}, not one "
                             f"meant for it ({', '.join(templates)})")
        unknown = sorted(set(change) - {"template"} - set(templates[template].placeholders))
        if unknown:
            raise SkillError(f"{where}: `starting_points:` of {regime!r} sets {unknown}, not placeholders of "
                             f"template {template!r}")
        merged[regime] = {**(base if template == base.get("template") else {}), **change, "template": template}
    return merged
