"""The environment, for the Python scanner: one variable read or written by its literal name.

The worker's environment is scrubbed and fixed for the whole process, so reading one variable by name cannot tell
a test call from a timed one: a debug flag (`os.environ.get("MYKERNEL_DEBUG", "0")`, `os.getenv(...)`,
`os.environ["X"]`, `"X" in os.environ`) is an env_read warning, which blocks nothing. What can tell the harness
apart stays env_probe (an error): a name that reveals it (common._REVEALING_ENV_NAME_RE: PYTEST*, CRUCIBLE*,
TRITON_INTERPRET, CUDA_VISIBLE_DEVICES, the sandbox's folders), a computed name, and the environment as a whole
(iterated, copied, `.keys()/.items()`, handed to other code), which are never judged here and so reach the
reference check of python_references. Writing a variable is allowed for the build settings on the policy's
`env_writes` list (`os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"` before load_inline), env_probe otherwise.

A mixin of ``_PythonScanner`` (harness/audits/static_gate/python.py); a node it has judged is put in
``judged`` so that the reference check leaves it alone.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Callable, Optional

from .common import _REVEALING_ENV_NAME_RE
from .python_names import _str_const

if TYPE_CHECKING:
    from .policy import _CompiledPolicy

_ENV_READ_FUNCTIONS = frozenset({"os.environ.get", "os.getenv"})
_ENV_WRITE_FUNCTIONS = frozenset({"os.environ.setdefault", "os.environ.pop", "os.environ.update"})


class _EnvChecks:
    """Reads and writes of one environment variable by name (see the module docstring)."""

    judged: set[int]
    policy: _CompiledPolicy
    functions: list[Any]
    _arguments_at_every_call: Callable[[Any, str], Optional[list[ast.AST]]]

    def _judge_env(self, name_node: ast.AST | None, node: ast.AST, write: bool) -> bool:
        """Judge one variable; False (nothing judged) for a computed name, left to the reference check. A parameter
        of a helper that every call hands a literal name (`_env_int("MYKERNEL_BLOCK", 1024)`) is each of those."""
        names = self._literal_arguments(name_node)
        if names is not None:
            for each in names:
                self._judge_env(each, node, write)
            return True
        name = _str_const(name_node)
        if name is None:
            return False
        if _REVEALING_ENV_NAME_RE.search(name):
            verb = "sets" if write else "reads"
            self._hit("env_probe", node, f"{verb} environment variable `{name}`, which can reveal the harness")
        elif write:
            if not self.policy.env_writes(name):
                self._hit("env_probe", node, f"sets environment variable `{name}`, not a build setting of the "
                                             "policy's env_writes list")
        else:
            self._hit("env_read", node, f"reads environment variable `{name}`")
        return True

    def _literal_arguments(self, name_node: ast.AST | None) -> list[ast.AST] | None:
        """The literal strings every call of the enclosing module-level function passes as the parameter `name_node`
        names, or None (not such a parameter, or some call passes anything else)."""
        if not isinstance(name_node, ast.Name) or not self.functions:
            return None
        given = self._arguments_at_every_call(self.functions[-1].node, name_node.id)
        return given if given and all(_str_const(g) is not None for g in given) else None

    def _env_call(self, resolved: str, node: ast.Call) -> None:
        """os.environ.get / os.getenv / os.environ.setdefault / .pop / .update with literal names."""
        if resolved in _ENV_READ_FUNCTIONS:
            key = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "key"), None)
            judged = self._judge_env(key, node, write=False)
        elif resolved in _ENV_WRITE_FUNCTIONS:
            keys: list[ast.AST | None] = []
            if resolved == "os.environ.update":
                for arg in node.args:
                    keys += arg.keys if isinstance(arg, ast.Dict) else [None]  # a mapping of unknown keys
                keys += [None if k.arg is None else ast.Constant(k.arg) for k in node.keywords]
            else:
                keys.append(node.args[0] if node.args else None)
            judged = bool(keys) and all(_str_const(k) is not None for k in keys)
            if judged:
                for key in keys:
                    self._judge_env(key, node, write=True)
        else:
            return
        if judged:
            self.judged.add(id(node.func))

    def _env_subscript(self, node: ast.Subscript) -> None:
        """os.environ["X"] read, assigned or deleted."""
        if self._resolve(node.value) == "os.environ" and self._judge_env(
                node.slice, node, write=not isinstance(node.ctx, ast.Load)):
            self.judged.add(id(node.value))

    def _env_membership(self, left: ast.AST, right: ast.AST, node: ast.AST) -> None:
        """"X" in os.environ."""
        if self._resolve(right) == "os.environ" and self._judge_env(left, node, write=False):
            self.judged.add(id(right))
