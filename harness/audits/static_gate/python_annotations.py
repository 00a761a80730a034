"""String annotations, for the Python scanner.

An annotation written as a string (`def f(x: "Optional[torch.Tensor]")`, every annotation under
`from __future__ import annotations` is kept as one too) is evaluated later by whoever resolves it:
`typing.get_type_hints`, pydantic's models, torch.library's schema inference call `eval` on its text. The scan
reads it as a string literal, so `def f(x: "__import__('os').system('...')")` with `typing.get_type_hints(f)` would
run code the gate never saw. A string annotation must therefore be type syntax (names, attributes, subscripts,
`X | Y`, tuples and lists of those, None, nested strings of the same), and its names are judged as code is
(`"sys.modules"` is sys.modules). Anything else (a call, a lambda, an operator, a comprehension) is dynamic_code.
The strings given to `Literal[...]` and `Annotated`'s metadata are values, never evaluated: they are left alone.
"""

from __future__ import annotations

import ast
_MAX_NESTING = 4  # `"Optional['Optional[\"X\"]']"`: each level is one more eval


def _subscript_of(expr: ast.AST, name: str) -> bool:
    target = expr.value if isinstance(expr, ast.Subscript) else None
    return (isinstance(target, ast.Name) and target.id == name
            or isinstance(target, ast.Attribute) and target.attr == name)


def _literal(expr: ast.AST) -> bool:
    return _subscript_of(expr, "Literal")


def _annotated_type(expr: ast.AST) -> ast.AST | None:
    """`T` of `Annotated[T, *metadata]`: its metadata are values, never evaluated."""
    if not _subscript_of(expr, "Annotated"):
        return None
    return expr.slice.elts[0] if isinstance(expr.slice, ast.Tuple) and expr.slice.elts else expr.slice


def _strings(expr: ast.AST | None) -> list[ast.Constant]:
    """The string constants of an annotation, but the values given to Literal[...] and Annotated's metadata."""
    if expr is None or _literal(expr):
        return []
    if _annotated_type(expr) is not None:
        return _strings(_annotated_type(expr))
    if isinstance(expr, ast.Constant):
        return [expr] if isinstance(expr.value, str) else []
    return [s for child in ast.iter_child_nodes(expr) for s in _strings(child)]


def _type_syntax(node: ast.AST, depth: int) -> bool:
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _type_syntax(node.value, depth)
    if isinstance(node, ast.Subscript):
        return _type_syntax(node.value, depth) and (_literal(node) or _type_syntax(
            _annotated_type(node) or node.slice, depth))
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_type_syntax(e, depth) for e in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_syntax(node.left, depth) and _type_syntax(node.right, depth)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return depth < _MAX_NESTING and _parsed(node.value, depth + 1) is not False
        return node.value is None or node.value is Ellipsis or isinstance(node.value, (int, bool))
    return False


def _parsed(text: str, depth: int = 0) -> ast.expr | None | bool:
    """The annotation's expression; None where it does not parse (evaluating it raises before running anything);
    False where it is not type syntax."""
    try:
        expr = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return expr if _type_syntax(expr, depth) else False


class _AnnotationChecks:
    """Judged where the scan meets them: a parameter's annotation, a function's return annotation (python.py's
    _visit_function calls _check_annotation), a variable's (`x: "T" = ...`, a class field)."""

    def visit_arg(self, node: ast.arg) -> None:
        self._check_annotation(node.annotation)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_annotation(node.annotation)
        super().visit_AnnAssign(node)  # python_references: the value stored

    def _check_annotation(self, annotation: ast.expr | None) -> None:
        for const in _strings(annotation):
            expr = _parsed(const.value)
            if expr is False:
                self._hit("dynamic_code", const, "a string annotation holds code (typing.get_type_hints, pydantic and "
                                                 "torch.library's schema inference evaluate it)")
            elif expr is not None:
                self._judge_names(expr, const, 0)

    def _judge_names(self, expr: ast.expr, const: ast.Constant, depth: int) -> None:
        """Visit the annotation's names as code, at the string's place; and those of the strings nested in it."""
        for node in ast.walk(expr):
            node.lineno, node.col_offset = const.lineno, const.col_offset
        self.visit(expr)
        for inner in _strings(expr):
            nested = _parsed(inner.value, depth + 1) if depth < _MAX_NESTING else None
            if isinstance(nested, ast.expr):
                self._judge_names(nested, const, depth + 1)
