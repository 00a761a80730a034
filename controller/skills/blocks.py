"""The machine-readable parts of a skill: its fenced yaml blocks, parsed."""

from __future__ import annotations

import yaml
from pydantic import ValidationError

from .markdown import one_line, yaml_block_texts
from .model import Skill, SkillError


# libyaml's safe loader where PyYAML was built with it (its wheels are): the same documents, ten times faster (a
# skill's blocks are parsed on every generator a run makes: 80 ms of Python for gqa-decode's, 7 ms here)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str):
    """``yaml.safe_load``, through libyaml where it is there."""
    return yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 (a safe loader)


def machine_blocks(skill: Skill) -> list[dict]:
    """Every fenced ```yaml block of the body, parsed, in order. Raises SkillError naming the block."""
    parsed_blocks = []
    for number, (line, text) in enumerate(yaml_block_texts(skill.body), start=1):
        try:
            parsed = safe_load(text)
        except yaml.YAMLError as error:
            raise SkillError(
                f"{skill.path}: yaml block {number} (body line {line}) does not parse: {one_line(error)}"
            ) from error
        if not isinstance(parsed, dict):
            raise SkillError(
                f"{skill.path}: yaml block {number} (body line {line}) must be a mapping, "
                f"got {type(parsed).__name__}"
            )
        parsed_blocks.append(parsed)
    return parsed_blocks



def pydantic_problems(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(block)"
        message = item["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        if item["type"] == "extra_forbidden":
            message = "unknown key (a typo?)"
        elif item["type"] == "missing":
            message = "missing"
        else:
            message = f"{message} (got {item.get('input')!r})" if "got" not in message else message
        parts.append(f"{field}: {message}")
    return "; ".join(parts)
