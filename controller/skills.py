"""Load, validate and read Agent Skills (skills/<name>/SKILL.md).

A skill is prose for people and agents plus machine-readable parts the controller obeys: fenced
```yaml blocks in the body (promotion thresholds, kernel-template parameter spaces, tolerances) and
the front-matter `metadata` map. Editing a skill changes the controller's behaviour without code
changes, so everything here is strict about format and loud about what is wrong.

Format rules (Agent Skills spec, DESIGN.md section 8):
- front matter between `---` lines, YAML mapping, only the spec's keys;
- `name`: 1-64 chars of a-z, 0-9 and '-', no leading/trailing/double '-', equal to the folder name;
- `description`: 1-1024 chars, saying what the skill is and when to use it;
- body under 500 lines;
- local links from SKILL.md point at existing files inside the skill folder, and those files link
  to nothing further (references are one level deep).

Loading is lenient (a broken skill still loads, carrying its problems) so that `validate_skill`
can report every problem at once instead of stopping at the first.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any, Iterator

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SKILL_FILE = "SKILL.md"
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500
MAX_BODY_LINES = 500  # the body must stay strictly under this many lines
ALLOWED_FRONT_MATTER_KEYS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# Template placeholders are {UPPER_CASE}; Python code in a template never uses that shape
# otherwise (dict literals and f-strings hold lowercase names or expressions), so no escaping
# scheme is needed and a missing value can always be detected.
PLACEHOLDER_PATTERN = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")
# [text](target) and ![alt](target); the target stops at whitespace or ')' (titles are ignored).
LINK_PATTERN = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL_LINK_PREFIXES = ("http://", "https://", "mailto:", "ftp://", "#")
# Only these files are scanned for further links: a template or script is not a document, and
# Python such as `table[i](x)` would read as a link.
DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt")


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


# ----------------------------------------------------------------------------------- loading


def _split_front_matter(text: str, where: str) -> tuple[dict[str, Any] | None, str, list[str]]:
    """Return (front matter or None, body, problems)."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text, [f"{where}: no front matter (the file must start with a '---' line)"]
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            break
    else:
        return None, text, [f"{where}: front matter is not closed by a second '---' line"]
    raw = "".join(lines[1:end])
    body = "".join(lines[end + 1 :])
    try:
        parsed = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        return None, body, [f"{where}: front matter is not valid YAML: {_one_line(error)}"]
    if parsed is None:
        return {}, body, []
    if not isinstance(parsed, dict):
        return None, body, [
            f"{where}: front matter must be a YAML mapping, got {type(parsed).__name__}"
        ]
    return parsed, body, []


def _strip_fenced_code(body: str) -> str:
    """The body with fenced code blocks blanked out (a link inside code is not a link)."""
    kept: list[str] = []
    for kind, _info, chunk in _fenced_chunks(body):
        kept.append("" if kind == "code" else chunk)
    return "".join(kept)


def _fenced_chunks(text: str) -> Iterator[tuple[str, str, str]]:
    """Yield ("text", "", chunk) and ("code", info_string, content) pieces in order.

    A fence is a line starting with at least three backticks or tildes; it is closed by a line of
    the same character at least as long (CommonMark). An unclosed fence runs to the end.
    """
    lines = text.splitlines(keepends=True)
    index = 0
    pending: list[str] = []
    while index < len(lines):
        match = re.match(r"^ {0,3}(`{3,}|~{3,})(.*)$", lines[index].rstrip("\n"))
        if not match:
            pending.append(lines[index])
            index += 1
            continue
        if pending:
            yield "text", "", "".join(pending)
            pending = []
        fence, info = match.group(1), match.group(2).strip()
        content: list[str] = []
        index += 1
        while index < len(lines):
            closing = lines[index].strip()
            if closing.startswith(fence[0] * len(fence)) and set(closing) == {fence[0]}:
                index += 1
                break
            content.append(lines[index])
            index += 1
        yield "code", info, "".join(content)
    if pending:
        yield "text", "", "".join(pending)


def _local_links(markdown: str) -> list[str]:
    targets: list[str] = []
    for match in LINK_PATTERN.finditer(_strip_fenced_code(markdown)):
        target = match.group(1)
        if target.lower().startswith(EXTERNAL_LINK_PREFIXES):
            continue
        target = target.split("#", 1)[0]
        if target and target not in targets:
            targets.append(target)
    return targets


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
    front, body, problems = _split_front_matter(text, where)
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
        references=_local_links(body),
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


# -------------------------------------------------------------------------------- validation


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


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


def _resolve_inside(folder: Path, target: str) -> Path | None:
    """The file a relative link points at, or None if the link leaves the skill folder."""
    if target.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", target):
        return None
    resolved = (folder / target).resolve()
    try:
        resolved.relative_to(folder.resolve())
    except ValueError:
        return None
    return resolved


def _check_references(skill: Skill, where: str) -> list[str]:
    problems = []
    folder = skill.folder
    for target in skill.references:
        resolved = _resolve_inside(folder, target)
        if resolved is None:
            problems.append(f"{where}: link {target!r} points outside the skill folder")
            continue
        if not resolved.is_file():
            problems.append(f"{where}: link {target!r} points at a file that does not exist")
            continue
        if resolved.suffix.lower() not in DOCUMENT_SUFFIXES:
            continue
        try:
            nested = _local_links(resolved.read_text(encoding="utf-8"))
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
    for number, (line, text) in enumerate(_yaml_block_texts(skill.body), start=1):
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as error:
            problems.append(f"{where}: yaml block {number} (body line {line}) does not parse: {_one_line(error)}")
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


# ----------------------------------------------------------------------- machine-readable parts


def _yaml_block_texts(body: str) -> list[tuple[int, str]]:
    """(1-based body line where the fence opens, block text) for every ```yaml / ```yml block."""
    blocks = []
    line = 1
    for kind, info, chunk in _fenced_chunks(body):
        if kind == "code" and info.split()[:1] and info.split()[0].lower() in ("yaml", "yml"):
            blocks.append((line, chunk))
        # a code chunk also spans its two fence lines (an unclosed last fence is off by one, harmless)
        line += chunk.count("\n") + (2 if kind == "code" else 0)
    return blocks


def machine_blocks(skill: Skill) -> list[dict]:
    """Every fenced ```yaml block of the body, parsed, in order. Raises SkillError naming the block."""
    parsed_blocks = []
    for number, (line, text) in enumerate(_yaml_block_texts(skill.body), start=1):
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise SkillError(
                f"{skill.path}: yaml block {number} (body line {line}) does not parse: {_one_line(error)}"
            ) from error
        if not isinstance(parsed, dict):
            raise SkillError(
                f"{skill.path}: yaml block {number} (body line {line}) must be a mapping, "
                f"got {type(parsed).__name__}"
            )
        parsed_blocks.append(parsed)
    return parsed_blocks


class PromotionThresholds(BaseModel):
    """The promotion skill's machine-readable rules (DESIGN.md section 7).

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
                "must be true: DESIGN.md section 5 says a candidate with a failed audit is never promoted"
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


def _pydantic_problems(error: ValidationError) -> str:
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
        raise SkillError(f"{skill.path}: promotion thresholds are wrong: {_pydantic_problems(error)}") from error


# --------------------------------------------------------------------------- excerpts for requests


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


# ------------------------------------------------------------------------------- kernel templates


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
                raise SkillError(f"{skill.path}: template entry {number}: {_pydantic_problems(error)}") from error
            if template.name in templates:
                raise SkillError(f"{skill.path}: template {template.name!r} is listed twice")
            if _resolve_inside(skill.folder, template.path) is None:
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
