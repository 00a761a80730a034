"""The deterministic generator: new parameter sets for the parametric reference kernels of a skill.

No model, no network, no randomness: the same request gives the same candidates. It starts from the
incumbent's template parameters (or the skill's starting point for the regime), lists one-step
neighbours in the template's allowed values, plus a switch of template and the regime's starting
point, rotates that list by the round, and proposes the first ones not tried yet. When the request
carries an ncu diagnosis, the skill's `tactic_moves` for its limiter come first (each move alone, then
together), so the profile steers the search; ncu's classification then also picks the starting point.
A repair request gets the template's known-good defaults. It is the default provider when no API key
is set, and the loop's end-to-end tests run on it.

Which skill, which of its templates (with which allowed values) and which fixed values a definition gets is data,
not code, read by ``controller.providers.offered``: the skill is the one the definition's operator family names
(``OperatorFamily.skill``); the skill's machine-readable `definitions:` entry for it may name the template(s) meant
for it (`template:`), lay its own `starting_points:` over the regime's, and narrow a placeholder's allowed values
(`narrow:`), and gives the values of the placeholders a template fixes by definition (`PAGE_SIZE` from
`page_size`); its `naive:` entry is the first incumbent. Any family whose skill ships a template is served the same
way.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Optional, Union

from harness.data.names import NAME_MAX, bounded
from harness.data.generation_request import GenerationRequest, GenerationResponse, Proposal
from harness.data.schema import Definition, Solution, dump_json

from ..dispatch import DISPATCH, dispatch_origin, dispatcher_source, splice, worth_dispatching
from ..search import (SearchSettings, configuration_on, design_switches, interleave, moved_parameter, population,
                      stalled)
from ..skills import KernelTemplate, Skill, SkillError, kernel_templates, machine_blocks, render_skill_template
from .offered import (definition_starting_points, fixed_values, naive_entry, narrowed_templates,  # noqa: F401
                      offered_templates, skill_for)

Origin = dict[str, Any]


def config_key(origin: dict[str, Any]) -> str:
    return json.dumps({"template": origin.get("template"), "params": origin.get("params", {})}, sort_keys=True)


# Names are readable up to here; beyond, the rest of the parameters is a digest of them (prefixes such as `r12_` or
# `sweep3_` and `.json` must still fit a file name).
SLUG_MAX = NAME_MAX


def abbreviated(placeholder: str) -> str:
    """A placeholder's name in a configuration's name: lower case, and of three words or more their initials
    (`PROGRAMS_PER_SM` -> `pps`, `CHUNK_BLOCKS` -> `chunk_blocks`)."""
    words = placeholder.lower().split("_")
    return "".join(w[0] for w in words if w) if len(words) >= 3 else placeholder.lower()


def slug(origin: dict[str, Any]) -> str:
    if origin.get("template") == DISPATCH:  # its variants are in its description; a short stable name here
        return "dispatch_" + hashlib.sha256(config_key(origin).encode()).hexdigest()[:8]
    short = {"BLOCK_N": "bn", "NUM_WARPS": "w", "NUM_STAGES": "s", "USE_DOT": "dot", "SPLIT_KV": "split"}
    params = origin.get("params", {})
    name = str(origin.get("template", "kernel")).replace("triton-", "")
    name += "".join(f"_{short.get(k, abbreviated(k))}{v}" for k, v in params.items())
    return bounded(name, SLUG_MAX, config_key(origin))  # a sweep's solution file, an export: one file name


# -- the generator ------------------------------------------------------------------------------------------


class OfflineGenerator:
    """Pure parts: the skill's templates and the parameter space they allow. With ``definition``, only the
    templates meant for it (so a switch of template, a starting point or a tactic never leaves them)."""

    def __init__(self, skill: Skill, definition: Optional[str] = None):
        self.skill = skill
        block = next((b for b in machine_blocks(skill) if "templates" in b), {})
        self.definitions: dict[str, dict[str, Any]] = block.get("definitions") or {}
        self.starting_points: dict[str, dict[str, Any]] = block.get("starting_points") or {}
        self.tactic_moves: dict[str, dict[str, Any]] = block.get("tactic_moves") or {}
        self.naive_entry = block.get("naive")
        # dispatch: {regime_module: FILE, regimes: [...], default: REGIME, seed: BOOL}: per-regime winners in one
        # solution; seed (default true): the starting points as one in a run's first round
        self.dispatch: Optional[dict[str, Any]] = block.get("dispatch")
        try:
            self.search = SearchSettings.from_block(block.get("search"))
        except (TypeError, ValueError) as err:
            raise SkillError(f"skill {skill.name!r}: `search:` {err}") from None
        self.templates: dict[str, KernelTemplate] = kernel_templates(skill)
        if definition is not None:
            self.templates = narrowed_templates(offered_templates(self.templates, self.data(definition),
                                                                  self.where(definition)),
                                                self.data(definition), self.where(definition))
            for template in self.templates.values():  # a value the skill lacks is said now, not at round 1
                fixed_values(template, self.data(definition), self.where(definition))
            self.starting_points = definition_starting_points(self.starting_points, self.data(definition),
                                                              self.where(definition), self.templates)

    def where(self, definition: str) -> str:
        return f"skill {self.skill.name!r}, definition {definition!r}"

    def data(self, definition: str) -> dict[str, Any]:
        """The skill's `definitions:` entry for ``definition`` ({} for one it does not list)."""
        return self.definitions.get(definition) or {}

    def fixed(self, template: KernelTemplate, definition: str) -> dict[str, Any]:
        return fixed_values(template, self.data(definition), self.where(definition))

    def naive(self) -> Origin:
        """The first incumbent: the skill's `naive:` entry, else the first template's known-good defaults."""
        found = naive_entry(self.naive_entry, self.templates)
        name = found["template"] if found else next(iter(self.templates))
        return {"template": name, "params": self.complete(name, found["params"] if found else {})}

    def free_params(self, template: KernelTemplate) -> list[str]:
        return [n for n in template.placeholders if n not in template.fixed_by_definition]

    def complete(self, template_name: str, params: dict[str, Any]) -> dict[str, Any]:
        """Params restricted to the template's free placeholders, missing ones from its defaults."""
        template = self.templates[template_name]
        out = {}
        for name in self.free_params(template):
            value = params.get(name, template.defaults.get(name))
            if value not in template.placeholders[name]:
                value = template.defaults.get(name, template.placeholders[name][0])
            out[name] = value
        return out

    def disallowed(self, template_name: str, values: dict[str, Any]) -> list[str]:
        """The values ``complete`` would replace by the default (not allowed for this definition: out of the
        template's range, or narrowed away by the definition's `narrow:`), each said as NAME=VALUE (allowed: [...])."""
        allowed = self.templates[template_name].placeholders
        return [f"{name}={values[name]!r} (allowed: {allowed[name]})"
                for name in self.free_params(self.templates[template_name])
                if name in values and values[name] not in allowed[name]]

    def in_template_order(self, origin: dict[str, Any]) -> dict[str, Any]:
        """``origin`` with its params (a dispatch: each variant's) in its template's order, values unchanged: an
        origin read back from the archive has its keys sorted, and names (``slug``) follow the order."""
        if origin.get("template") == DISPATCH:
            params = origin.get("params") or {}
            variants = {r: self.in_template_order(v) for r, v in (params.get("variants") or {}).items()}
            return {**origin, "params": {**params, "variants": variants}}
        template = self.templates.get(origin.get("template"))
        if template is None:
            return origin
        params = origin.get("params") or {}
        order = [k for k in self.free_params(template) if k in params]
        return {**origin, "params": {**{k: params[k] for k in order}, **{k: v for k, v in params.items()
                                                                        if k not in order}}}

    def starting_point(self, regime: str) -> Optional[dict[str, Any]]:
        point = self.starting_points.get(regime)
        if not point or point.get("template") not in self.templates:  # another definition's template
            return None
        params = {k: v for k, v in point.items() if k != "template"}
        return {"template": point["template"], "params": self.complete(point["template"], params)}

    def neighbours(self, base: dict[str, Any], regime: str, rotation: int) -> list[dict[str, Any]]:
        """One-step moves of each free parameter, then a template switch and the regime's starting point,
        rotated by ``rotation`` (the round) so successive rounds lead with different moves; the moves of the
        parameters the skill's search names first for ``regime`` (``first_moves``) lead, in its order."""
        template = self.templates[base["template"]]
        params = self.complete(base["template"], base.get("params", {}))
        moves: list[dict[str, Any]] = []
        for name in self.free_params(template):
            choices = template.placeholders[name]
            i = choices.index(params[name])
            for j in (i + 1, i - 1):
                if 0 <= j < len(choices):
                    moves.append({"template": base["template"], "params": {**params, name: choices[j]}})
        for other in self.templates:
            if other != base["template"]:
                moves.append({"template": other, "params": self.complete(other, params)})
        moves += [start] if (start := self.starting_point(regime)) is not None else []
        if moves:
            k = rotation % len(moves)
            moves = moves[k:] + moves[:k]
        lead = [m for name in self.search.first_moves.get(regime, []) for m in moves
                if moved_parameter(m, base["template"], params) == name]
        return lead + [m for m in moves if m not in lead]

    def far_moves(self, base: dict[str, Any]) -> list[dict[str, Any]]:
        """Two parameters moved at once (each one step): jumps the one-step neighbourhood never makes, for a
        regime whose search has stalled."""
        template = self.templates[base["template"]]
        params = self.complete(base["template"], base.get("params", {}))
        names = self.free_params(template)
        out: list[dict[str, Any]] = []
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                for da in (1, -1):
                    for db in (1, -1):
                        moved = dict(params)
                        for name, d in ((names[a], da), (names[b], db)):
                            choices = template.placeholders[name]
                            j = choices.index(params[name]) + d
                            if not 0 <= j < len(choices):
                                break
                            moved[name] = choices[j]
                        else:
                            out.append({"template": base["template"], "params": moved})
        return out

    def escape(self, members: list[dict[str, Any]], regime: str) -> list[dict[str, Any]]:
        """A stalled regime's next tries: designs (templates) the population does not use, from their starting
        point for the regime (else their defaults), then two-step jumps from the best member."""
        point = self.starting_point(regime)
        start = {name: point if point and point["template"] == name else {"template": name,
                                                                          "params": self.complete(name, {})}
                 for name in self.templates}
        switches = design_switches({m["template"] for m in members}, list(self.templates), start)
        return switches + (self.far_moves(members[0]) if members else [])

    def _moved(self, base: dict[str, Any], moves: dict[str, Any]) -> Optional[dict[str, Any]]:
        """``base`` with ``moves`` applied (see the skill's `tactic_moves`); None if the template is unknown."""
        name = moves.get("template", base["template"])
        if name not in self.templates:
            return None
        template = self.templates[name]
        had = self.complete(base["template"], base.get("params", {}))
        params = self.complete(name, had)
        for param, move in moves.items():
            if param == "template" or param not in params:
                continue  # a move on a placeholder this template does not have does not apply
            choices = template.placeholders[param]
            if move in ("up", "down"):
                if param in had:  # a placeholder new with a template switch keeps the skill's default
                    i = choices.index(params[param]) + (1 if move == "up" else -1)
                    params[param] = choices[min(max(i, 0), len(choices) - 1)]
            elif move in choices:
                params[param] = move
        return {"template": name, "params": params}

    def tactic_options(self, base: dict[str, Any], limiter: Optional[str]) -> list[dict[str, Any]]:
        """The limiter's moves on ``base``: each one alone (with any template switch), then all together;
        moves that change nothing are dropped."""
        moves = self.tactic_moves.get(limiter or "") or {}
        switch = {"template": moves["template"]} if "template" in moves else {}
        singles = [{**switch, k: v} for k, v in moves.items() if k != "template"] or ([switch] if switch else [])
        options = [self._moved(base, m) for m in [*singles, moves] if m]
        unchanged = config_key({"template": base["template"],
                                "params": self.complete(base["template"], base.get("params", {}))})
        out: list[dict[str, Any]] = []
        for o in options:
            if o is not None and config_key(o) != unchanged and o not in out:
                out.append(o)
        return out

    def dispatch_option(self, history: list[Any]) -> Optional[dict[str, Any]]:
        """A solution made of each regime's best configuration so far, where regimes disagree (else None)."""
        if not self.dispatch:
            return None
        winners = {}
        for regime in self.dispatch.get("regimes") or []:
            best = [o for o in population(history, regime, 3) if o["template"] in self.templates]
            if best:
                winners[regime] = best[0]
        if not worth_dispatching(winners):
            return None
        return dispatch_origin(winners, self.dispatch.get("default") or next(iter(winners)))

    def seed_dispatch(self, history: list[Any], incumbent: dict[str, Any]) -> Optional[dict[str, Any]]:
        """In a run's first round (the incumbent the skill's naive kernel, no candidate judged yet), the skill's
        starting points as one dispatching solution, where they disagree (else None). They are the skill's reading
        of which design each regime wants (a split-KV plan for batch 1, one program per KV head for large batches):
        judged in round 1, they reach a dispatching solution without first waiting for a round per regime."""
        if not self.dispatch or not self.dispatch.get("seed", True) or any(h.round >= 1 for h in history):
            return None
        name = incumbent.get("template")
        if name not in self.templates:
            return None
        if config_key({"template": name, "params": self.complete(name, incumbent.get("params", {}))}) \
                != config_key(self.naive()):
            return None
        winners = {r: point for r in self.dispatch.get("regimes") or [] if (point := self.starting_point(r))}
        if not worth_dispatching(winners):
            return None
        return dispatch_origin(winners, self.dispatch.get("default") or next(iter(winners)))

    def render_dispatch(self, origin: dict[str, Any], definition: str, name: str, author: str,
                        target_hardware: str) -> dict[str, Any]:
        """One module per distinct variant, the skill's regime function, and the dispatcher (controller/dispatch)."""
        variants: dict[str, dict[str, Any]] = origin["params"]["variants"]
        distinct = sorted({config_key(v) for v in variants.values()})
        module = {key: f"kernel_{i}" for i, key in enumerate(distinct)}
        sources = []
        for key in distinct:
            variant = json.loads(key)
            template = self.templates[variant["template"]]
            params = {**self.complete(variant["template"], variant["params"]), **self.fixed(template, definition)}
            text = render_skill_template(self.skill, template, params)
            sources.append({"path": f"{module[key]}.py", "content": text})
        regime_file = self.skill.folder / self.dispatch["regime_module"]
        sources.append({"path": "regime.py", "content": regime_file.read_text()})
        table = {regime: module[config_key(v)] for regime, v in variants.items()}
        planned = frozenset(module[key] for key in distinct if self.templates[json.loads(key)["template"]].setup)
        sources.append({"path": "dispatch.py",
                        "content": dispatcher_source(table, origin["params"]["default"], planned)})
        language = self.templates[json.loads(distinct[0])["template"]].language
        solution = Solution.model_validate({
            "name": name, "definition": definition, "author": author,
            "spec": {"language": language, "target_hardware": [target_hardware], "entry_point": "dispatch.py::run",
                     "setup": "dispatch.py::plan", "dependencies": [], "destination_passing_style": True},
            "sources": sources,
            "description": "dispatch by regime: " + json.dumps({r: slug(v) for r, v in variants.items()})})
        return dump_json(solution)

    def render(self, origin: dict[str, Any], definition: str, name: str, author: str,
               target_hardware: str) -> dict[str, Any]:
        if origin["template"] == DISPATCH:
            return self.render_dispatch(origin, definition, name, author, target_hardware)
        template = self.templates[origin["template"]]
        params = {**origin["params"], **self.fixed(template, definition)}
        source = render_skill_template(self.skill, template, params)
        solution = Solution.model_validate({
            "name": name, "definition": definition, "author": author,
            "spec": {"language": template.language, "target_hardware": [target_hardware],
                     "entry_point": f"kernel.py::{template.entry_point}", "dependencies": [],
                     "setup": f"kernel.py::{template.setup}" if template.setup else None,
                     "destination_passing_style": True},
            "sources": [{"path": "kernel.py", "content": source}],
            "description": f"{template.name} {json.dumps(origin['params'], sort_keys=True)}"})
        return dump_json(solution)


def offline_generator(skills: dict[str, Skill], definition: Union[Definition, str]) -> OfflineGenerator:
    """The generator for ``definition``: its skill (``skill_for``) with the templates meant for it."""
    name = definition if isinstance(definition, str) else definition.name
    return OfflineGenerator(skill_for(skills, definition), name)


def naive_incumbent(skills: dict[str, Skill], definition: Union[Definition, str], target_hardware: str = "H200"
                    ) -> Proposal:
    generator = offline_generator(skills, definition)
    name = definition if isinstance(definition, str) else definition.name
    origin = generator.naive()
    solution = generator.render(origin, name, f"naive_{slug(origin)}", "controller/offline", target_hardware)
    return Proposal(solution=solution, origin=origin, notes="naive starting incumbent")


class OfflineProvider:
    """``definition``: the run's definition, whose family names the skill; without it a request's definition is
    looked up by name in the skills' front matter."""

    name = "offline"

    def __init__(self, skills: dict[str, Skill], definition: Optional[Definition] = None):
        self.skills, self.definition = skills, definition
        self._generators: dict[str, OfflineGenerator] = {}
        if definition is not None:
            self.generator_for(definition.name)  # a definition it cannot serve is said before the run starts

    def generator_for(self, definition: str) -> OfflineGenerator:
        if definition not in self._generators:
            known = self.definition if self.definition is not None and self.definition.name == definition else None
            self._generators[definition] = offline_generator(self.skills, known or definition)
        return self._generators[definition]

    def base(self, request: GenerationRequest) -> dict[str, Any]:
        """Where an explore request starts: the incumbent's template and params (a dispatching incumbent's kernel
        for the planned regime), else the regime's start."""
        g = self.generator_for(request.definition)
        own = configuration_on(request.incumbent.origin, request.regime)
        if own is not None and own.get("template") in g.templates:
            return own
        return g.starting_point(self.regime_class(request)) or {"template": next(iter(g.templates)), "params": {}}

    def regime_class(self, request: GenerationRequest) -> str:
        """The key of the skill's starting points: ncu's classification where the request has one (the
        starting points are keyed by it), else the planned regime."""
        found = request.diagnosis.classification if request.diagnosis else ""
        return found if found in self.generator_for(request.definition).starting_points else request.regime

    def search_state(self, request: GenerationRequest) -> tuple[list[dict[str, Any]], bool]:
        """(the population whose neighbours are explored, the base first; whether the regime has stalled)."""
        g = self.generator_for(request.definition)
        base = self.base(request)
        members = [base] + [m for m in population(request.history, request.regime, g.search.population,
                                                  g.search.population_within)
                            if m["template"] in g.templates and config_key(m) != config_key(base)]
        return members[:g.search.population], stalled(request.history, request.regime, g.search)

    def directed(self, request: GenerationRequest) -> list[dict[str, Any]]:
        """The moves the request's ncu diagnosis calls for (none without one)."""
        if request.diagnosis is None or request.repair is not None:
            return []
        return self.generator_for(request.definition).tactic_options(self.base(request), request.diagnosis.limiter)

    def propose(self, request: GenerationRequest) -> list[dict[str, Any]]:
        """The origins (template + params) this request gets, in order. Pure."""
        g = self.generator_for(request.definition)
        tried = {config_key(h.origin) for h in request.history if h.origin.get("template")}
        if request.incumbent.origin.get("template"):
            tried.add(config_key(request.incumbent.origin))
        if request.repair is not None:
            failed = request.repair.origin
            options = []
            if failed.get("template") in g.templates:
                options.append({"template": failed["template"], "params": g.complete(failed["template"], {})})
            start = g.starting_point(request.regime)
            options += [start] if start else []
        else:
            members, stall = self.search_state(request)
            rotation = request.seed + request.round - 1
            around = interleave(*(g.neighbours(m, self.regime_class(request), rotation) for m in members))
            dispatch = g.dispatch_option(request.history)
            seed = g.seed_dispatch(request.history, request.incumbent.origin)
            if seed:  # it stands for the starting points: none of them alone, to tie with it on the screened regime
                inside = {config_key(v) for v in seed["params"]["variants"].values()}
                around = [o for o in around if config_key(o) not in inside]
            escape = g.escape(members, self.regime_class(request)) if stall else []
            options = ([dispatch] if dispatch else []) + escape + self.directed(request) + ([seed] if seed else []) \
                + around
        # A dispatching incumbent: each kernel proposed for the planned regime goes into the incumbent's dispatch in
        # that regime's place (controller.dispatch.splice), so it is judged as that change alone.
        incumbent = g.in_template_order(request.incumbent.origin)
        options = [splice(incumbent, request.regime, o) or o for o in options]
        chosen: list[dict[str, Any]] = []
        for origin in options:
            key = config_key(origin)
            if key in tried:
                continue
            tried.add(key)
            chosen.append(origin)
            if len(chosen) == request.budget.max_candidates:
                break
        return chosen

    def generate(self, request: GenerationRequest) -> GenerationResponse:
        started = time.monotonic()
        origins = self.propose(request)
        directed = self.directed(request)
        generator = self.generator_for(request.definition)
        members, stall = (self.search_state(request) if request.repair is None else ([], False))
        search = {"regime": request.regime, "population": [slug(m) for m in members], "stalled": stall}
        escaped = generator.escape(members, self.regime_class(request)) if stall else []
        seed = generator.seed_dispatch(request.history, request.incumbent.origin) if request.repair is None else None
        incumbent = generator.in_template_order(request.incumbent.origin)
        proposals = []
        for origin in origins:
            name = f"r{request.round}_{slug(origin)}"
            solution = generator.render(origin, request.definition, name, "controller/offline", request.target_hardware)
            kernel = configuration_on(origin, request.regime) or origin
            spliced = kernel is not origin and splice(incumbent, request.regime, kernel) == origin
            why = f" (tactic for ncu limiter {request.diagnosis.limiter})" if kernel in directed else ""
            if kernel in escaped:
                why += f" (design switch: {request.regime} stalled for {generator.search.patience} rounds)"
            if origin == seed:
                why += " (the skill's starting points, one per regime, as one dispatching solution)"
            if spliced:
                why += f" (the incumbent's dispatch with {request.regime} on {slug(kernel)})"
            proposals.append(Proposal(solution=solution, origin=origin,
                                      notes=f"{request.kind}: {origin['template']} {origin['params']}{why}"))
        raw = json.dumps({"origins": origins, "search": search}, sort_keys=True)
        stopped = None if proposals else "offline: every neighbour of the incumbent was already tried"
        return GenerationResponse(provider=self.name, model="offline-templates", proposals=proposals, raw_text=raw,
                                  wall_s=time.monotonic() - started, stopped=stopped)
