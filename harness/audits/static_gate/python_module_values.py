"""Modules handed on as values, names imported more than once, and attributes read by class patterns: where a
module's name stops showing, nothing read of it afterwards can be judged.

- `def held(m): return m._sys` then `held(collections).modules`: a module passed as an argument, returned, put in a
  container, given as a default, yielded, made a lambda's or a decorator's result, or matched is handed on; each of
  its attributes is then read where no name says which module it is (red team round 6, ten ways). A module handed
  on is `dynamic_code`, except as the object of `getattr`/`hasattr` (judged there, with their literal name).
- `import json as S` then `import sys as S`: a use of `S` is judged as every module the name is bound to by an
  import (`try: import a as m` / `except ImportError: import b as m` is the honest form: both are judged), not as
  one of them.
- `case object(f_back=caller)`, `case object(environ=env)`: a class pattern reads each keyword as an attribute of the
  subject; the names are judged as a getattr's literal would be.
"""

from __future__ import annotations

import ast

from .common import _longest_prefix
from .python_held_modules import is_live_module
from .python_modules import canonical
from .python_banned import _PY_BANNED

_LOOKUP_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})


class _ModuleValueChecks:
    """Mixed into the Python scanner (see the module docstring)."""

    tree: ast.Module
    handed_over: set[int]
    aliases: dict[str, str]
    assignments: dict[str, list[ast.AST]]

    def _module_facts(self) -> tuple[set[str], dict[str, set[str]], set[int]]:
        """(module names bound by `import` statements; name -> every import target bound to it; ids of the object
        arguments of getattr/hasattr), computed once."""
        facts = getattr(self, "_module_value_facts", None)
        if facts is None:
            imported: set[str] = set()
            targets: dict[str, set[str]] = {}
            lookups: set[int] = set()
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        imported.add(a.name)
                        bound = a.asname or a.name.split(".")[0]
                        targets.setdefault(bound, set()).add(a.name if a.asname else bound)
                elif isinstance(node, ast.ImportFrom):
                    base = self._from_base(node)
                    for a in node.names:
                        if a.name != "*":
                            targets.setdefault(a.asname or a.name, set()).add(self._join(base, a.name))
                elif isinstance(node, ast.Call) and node.args:
                    # the object of getattr/hasattr/setattr/delattr is judged there, with the name; an argument of a
                    # call that is a finding of its own (`inspect.getmembers(torch)`) is said there
                    func = node.func
                    resolved = self._resolve(func)
                    if (isinstance(func, ast.Name) and func.id in _LOOKUP_FUNCTIONS and func.id not in self.aliases
                            and func.id not in self.assignments):
                        lookups.add(id(node.args[0]))
                        first = node.args[0]
                        if isinstance(first, ast.Starred) and isinstance(first.value, (ast.Tuple, ast.List)):
                            lookups.update(id(e) for e in first.value.elts)
                    elif resolved is not None and _longest_prefix(_PY_BANNED, resolved) is not None:
                        lookups.update(id(a.value if isinstance(a, ast.Starred) else a) for a in node.args)
            facts = self._module_value_facts = (imported, targets, lookups)
        return facts

    def _is_module_value(self, resolved: str) -> bool:
        imported = self._module_facts()[0]
        return resolved in imported or is_live_module(resolved)

    def _check_module_handed_on(self, resolved: str, node: ast.AST) -> None:
        if id(node) not in self.handed_over or id(node) in self._module_facts()[2]:
            return
        if _longest_prefix(_PY_BANNED, resolved) is None and self._is_module_value(resolved):  # else said already
            self._hit("dynamic_code", node, f"hands the module `{resolved}` on as a value: what is read of it "
                                            "elsewhere is out of this gate's sight")

    def _check_alternative_bindings(self, parts: list[str], node: ast.AST) -> None:
        """Judge `parts` under every other import binding of its first name."""
        bound = self._module_facts()[1].get(parts[0], set())
        if len(bound) < 2:
            return
        primary = self.aliases.get(parts[0])
        for target in sorted(bound - {primary}):
            name = ".".join([target, *parts[1:]])
            self._check_reference(canonical(name, self.package, self.own), node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:
            self._check_getattr([ast.Name(id="_", ctx=ast.Load()), ast.Constant(value=attr)], node)
            if attr.startswith("__") and attr.endswith("__"):
                self._hit("harness_internals", node, f"a class pattern reads attribute `{attr}`")
        self.generic_visit(node)
