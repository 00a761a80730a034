"""Dispatch by shape: one solution made of a run's per-regime winners, choosing its kernel per call.

FlashInfer plans per batch; so may a solution. When the search's best configuration differs between regimes
(a split-KV kernel for batch 1, one program per KV head for large batches), the offline provider proposes a
solution holding each winner as its own module, the skill's regime function (``dispatch: regime_module:``) and a
small dispatcher: its ``setup`` classifies the batch once (outside the kernel figure, as FlashInfer's plan() is)
and returns the winner's ``run``; its ``run`` calls it. The result is judged like any candidate, on every
workload, so a dispatcher that picks badly loses on the workloads it picks badly for. Pure: builds source text.
"""

from __future__ import annotations

import ast
import json
from typing import Any, Optional

DISPATCH = "dispatch"  # the origin's template name for a dispatching solution


def worth_dispatching(winners: dict[str, dict[str, Any]]) -> bool:
    """Only when at least two regimes want different configurations."""
    keys = {json.dumps(o, sort_keys=True) for o in winners.values()}
    return len(keys) >= 2


def dispatch_origin(winners: dict[str, dict[str, Any]], default_regime: str) -> dict[str, Any]:
    return {"template": DISPATCH, "params": {"variants": dict(sorted(winners.items())), "default": default_regime}}


def splice(incumbent: dict[str, Any], regime: str, variant: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The incumbent dispatching solution with ``regime``'s kernel replaced by ``variant`` (a single kernel's
    origin); None where the incumbent does not dispatch, has no such regime, or ``variant`` dispatches itself.

    Once a dispatch is the incumbent, a round on one regime must be judged as that change alone: a single kernel
    tuned for memory-bound batches, judged on all workloads against a dispatch, loses on every other regime and
    can never be promoted (H200 run 14: two rounds of per-KV-head kernels at 0.56-0.61x of the dispatch)."""
    if incumbent.get("template") != DISPATCH or variant.get("template") in (None, DISPATCH):
        return None
    params = incumbent.get("params") or {}
    variants = dict(params.get("variants") or {})
    if regime not in variants:
        return None
    variants[regime] = variant
    return dispatch_origin(variants, params.get("default") or regime)


def dispatcher_source(variants: dict[str, str], default: str, planned: frozenset[str] = frozenset()) -> str:
    """dispatch.py: ``variants`` maps a regime to the module (file stem) holding its kernel; ``planned``: the
    modules whose kernel has a setup of its own (``plan``), run in the dispatcher's setup."""
    modules = sorted(set(variants.values()))
    table = ", ".join(f"{regime!r}: {module}" for regime, module in sorted(variants.items()))
    plans = ", ".join(f"{module}: {module}.plan" for module in modules if module in planned)
    fallback = variants.get(default, modules[0])
    return f'''"""Dispatch by regime: each regime's best kernel of a controller run, chosen once per batch in setup.

setup (outside the kernel figure, as FlashInfer's plan() is) classifies the batch with the skill's regime
function and returns that regime's kernel; run calls it. Variants: {json.dumps(variants, sort_keys=True)}.
"""

from . import {", ".join(modules)}
from .regime import regime

MODULES = {{{table}}}
PLANS = {{{plans}}}  # variants with a setup of their own, run here (outside the kernel figure too)


def plan(*inputs):
    module = MODULES.get(regime(*inputs), {fallback})
    own = PLANS.get(module)
    return module.run, (own(*inputs),) if own is not None else ()


def run(*args):
    *call, (kernel, state) = args
    kernel(*call, *state)
'''


def regime_code(spec: dict[str, Any], files: dict[str, str]) -> Optional[dict[str, str]]:
    """Per regime, all the code its calls run (the regime function and the regime's kernel module), for a solution
    that is exactly a dispatcher this module renders (its dispatch.py re-rendered from its own tables is the same
    text, and it holds no file besides the dispatcher, the regime function and the kernel modules); else None.
    ``spec``: the solution's spec (entry point, setup, language, dependencies), ``files``: path -> content."""
    source, regime = files.get("dispatch.py"), files.get("regime.py")
    if source is None or regime is None or spec.get("entry_point") != "dispatch.py::run":
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    tables: dict[str, ast.Dict] = {node.targets[0].id: node.value for node in tree.body
                                   if isinstance(node, ast.Assign) and len(node.targets) == 1
                                   and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Dict)}
    if "MODULES" not in tables or "PLANS" not in tables:
        return None
    pairs = zip(tables["MODULES"].keys, tables["MODULES"].values)
    variants = {k.value: v.id for k, v in pairs
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Name)}
    planned = frozenset(k.id for k in tables["PLANS"].keys if isinstance(k, ast.Name))
    if not variants or not any(dispatcher_source(variants, default, planned) == source for default in [*variants, ""]):
        return None
    if set(files) != {"dispatch.py", "regime.py", *(f"{m}.py" for m in variants.values())}:
        return None  # a helper module the kernels may import would be code this comparison does not see
    siblings = {"dispatch", "regime", *variants.values()}
    if not all(self_contained(files[f"{m}.py"], siblings) for m in {"regime", *variants.values()}):
        return None  # a kernel that may run a sibling's code: its regime's code is more than its own file
    frame = json.dumps(spec, sort_keys=True, default=str)  # entry point, setup, language, dependencies, binding
    return {r: "\0".join((frame, regime, files[f"{m}.py"])) for r, m in variants.items()}


# What lets a module reach code outside its own text at run time: then its file alone is not the code it runs.
DYNAMIC_NAMES = frozenset({"__import__", "importlib", "sys", "builtins", "globals", "vars", "eval", "exec", "compile",
                           "open", "__file__", "__spec__", "__loader__", "__package__", "runpy", "pkgutil"})


def self_contained(source: str, siblings: set[str]) -> bool:
    """Whether a module's behaviour is its own text: no relative import, no import of a sibling module, nothing that
    loads or reads code at run time (``DYNAMIC_NAMES``). Conservative: what cannot be parsed is not."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] in siblings | DYNAMIC_NAMES:
                return False
        elif isinstance(node, ast.Import):
            if any(a.name.split(".")[0] in siblings | DYNAMIC_NAMES for a in node.names):
                return False
        elif isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES:
            return False
        elif isinstance(node, ast.Attribute) and node.attr in {"__import__", "__dict__", "__globals__"}:
            return False
    return True


def unchanged_regimes(a: tuple[dict[str, Any], dict[str, str]], b: tuple[dict[str, Any], dict[str, str]]) -> set[str]:
    """The regimes whose calls run byte-identical code in two dispatching solutions ((spec, files) each): a paired
    measurement has nothing to learn there (skills/promotion-rules `pair_changed_only`). Empty unless both are
    dispatchers this module renders."""
    code_a, code_b = regime_code(*a), regime_code(*b)
    if code_a is None or code_b is None:
        return set()
    return {r for r in code_a.keys() & code_b.keys() if code_a[r] == code_b[r]}
