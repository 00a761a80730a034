"""Load, validate and read Agent Skills (skills/<name>/SKILL.md).

A skill is prose for people and agents plus machine-readable parts the controller obeys: fenced
```yaml blocks in the body (promotion thresholds, kernel-template parameter spaces, tolerances) and
the front-matter `metadata` map. Editing a skill changes the controller's behaviour without code
changes, so everything here is strict about format and loud about what is wrong.

Format rules (the Agent Skills specification's, so a skill written here loads in any agent that reads skills):
- front matter between `---` lines, YAML mapping, only the spec's keys;
- `name`: 1-64 chars of a-z, 0-9 and '-', no leading/trailing/double '-', equal to the folder name;
- `description`: 1-1024 chars, saying what the skill is and when to use it;
- body under 500 lines;
- local links from SKILL.md point at existing files inside the skill folder, and those files link
  to nothing further (references are one level deep).

Loading is lenient (a broken skill still loads, carrying its problems) so that `validate_skill`
can report every problem at once instead of stopping at the first.

- model: ``Skill``, ``SkillError`` and the spec's limits;
- markdown: front matter, fenced blocks, local links, yaml blocks of a body;
- loading: ``load_skill`` / ``load_skills``;
- validation: ``validate_skill`` / ``validate_skills``;
- blocks: ``machine_blocks``, the parsed yaml blocks;
- promotion: ``PromotionThresholds`` from skills/promotion-rules;
- excerpts: ``skill_excerpt`` for generation requests;
- templates: ``KernelTemplate``, placeholders and rendering.
"""

from .blocks import machine_blocks
from .excerpts import skill_excerpt
from .loading import load_skill, load_skills
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
from .promotion import PROMOTION_SKILL, PromotionThresholds, promotion_thresholds
from .templates import (
    PLACEHOLDER_PATTERN,
    KernelTemplate,
    kernel_templates,
    render_skill_template,
    render_template,
    template_placeholders,
)
from .validation import require_indexable, validate_skill, validate_skills

__all__ = [
    "ALLOWED_FRONT_MATTER_KEYS", "MAX_BODY_LINES", "MAX_COMPATIBILITY_CHARS", "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS", "NAME_PATTERN", "PLACEHOLDER_PATTERN", "PROMOTION_SKILL", "SKILL_FILE", "KernelTemplate",
    "PromotionThresholds", "Skill", "SkillError", "kernel_templates", "load_skill", "load_skills", "machine_blocks",
    "promotion_thresholds", "render_skill_template", "render_template", "require_indexable", "skill_excerpt",
    "template_placeholders",
    "validate_skill", "validate_skills",
]
