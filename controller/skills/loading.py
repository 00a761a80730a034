"""Load skills from disk; lenient, so that validation can report every problem at once."""

from __future__ import annotations

from pathlib import Path

from .markdown import local_links, split_front_matter
from .model import SKILL_FILE, Skill, SkillError


def load_skill(path: str | Path) -> Skill:
    """Load one skill from its folder or its SKILL.md. Raises SkillError only if there is no file."""
    path = Path(path)
    skill_file = path / SKILL_FILE if path.is_dir() else path
    if not skill_file.is_file():
        raise SkillError(f"{skill_file}: no such file")
    where = str(skill_file)
    try:
        text = skill_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SkillError(f"{where}: not UTF-8 text ({error})") from error
    front, body, problems = split_front_matter(text, where)
    front = front if front is not None else {}
    name = front.get("name")
    description = front.get("description")
    metadata = front.get("metadata")
    return Skill(
        name=name if isinstance(name, str) else "",
        description=description if isinstance(description, str) else "",
        metadata=metadata if isinstance(metadata, dict) else {},
        body=body,
        path=skill_file,
        references=local_links(body),
        front_matter=front,
        problems_on_load=problems,
    )


def load_skills(root: str | Path = "skills") -> dict[str, Skill]:
    """Every skills/<folder>/SKILL.md under root, keyed by folder name (which must equal `name`)."""
    root = Path(root)
    if not root.is_dir():
        raise SkillError(f"{root}: skills folder not found")
    skills: dict[str, Skill] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (folder / SKILL_FILE).is_file():
            skills[folder.name] = load_skill(folder)
    return skills
