"""Bounded excerpts of skills for generation requests."""

from __future__ import annotations

import re

from .model import Skill


def skill_excerpt(skill: Skill, max_chars: int) -> str:
    """A bounded excerpt of a skill (name, description, then the body) for a generation request.

    Cuts at the last blank line (or line end) that fits, says where the full text is, and never
    returns more than max_chars characters.
    """
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    full = f"# skill: {skill.name}\n{skill.description.strip()}\n\n{skill.body.strip()}\n"
    if len(full) <= max_chars:
        return full
    marker = f"\n[... cut to {max_chars} characters; full text in {skill.path}]\n"
    room = max_chars - len(marker)
    if room <= 0:
        return full[:max_chars]
    head = full[:room]
    for separator in ("\n\n", "\n"):
        cut = head.rfind(separator)
        if cut >= room // 2:  # keep at least half the room; else a hard cut loses less
            head = head[:cut]
            break
    # A cut inside a fenced block would leave it open and swallow the marker; close it.
    open_fence = len(re.findall(r"^ {0,3}(?:`{3,}|~{3,})", head, flags=re.M)) % 2 == 1
    if open_fence:
        closing = "\n```"
        head = head[: room - len(closing)] + closing if len(head) + len(closing) > room else head + closing
    return head + marker
