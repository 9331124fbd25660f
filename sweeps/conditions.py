"""The ``when`` condition language of study specs: ``tokenizer == 'word' and vocab_size > 1024``.

Parsed with ``ast`` into a closure tree and evaluated against a mapping of field values, so no
code in a spec ever runs (never ``eval``). Names must be ``TrainConfig`` fields.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
from collections.abc import Callable, Mapping
from typing import Any

from lm.config import TrainConfig
from lm.errors import SweepsError, closest

_TRAIN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainConfig))
#: Fields that ``<``, ``<=``, ``>``, ``>=`` may compare (numbers, possibly unset).
_NUMERIC_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(TrainConfig)
    if str(f.type) in ("int", "float", "int | None", "float | None")
)
#: Deeper nesting than this is no condition a person writes (and Python's parser recurses).
MAX_DEPTH = 40
_ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


class Condition:
    """A parsed ``when`` expression: ``tokenizer == 'word' and vocab_size > 1024``.

    The grammar: ``and``, ``or``, ``not``, comparisons (``==``, ``!=``, ``<``, ``<=``, ``>``,
    ``>=``, ``in``, ``not in``, chained), ``TrainConfig`` field names, and literals (strings,
    numbers, ``true``/``false``/``none``, lists of literals). It is evaluated by walking the parsed
    tree against a mapping of field values, so no code in a spec ever runs.
    """

    __slots__ = ("_fn", "fields", "literals", "text")

    def __init__(
        self,
        text: str,
        fn: Callable[[Mapping[str, Any]], Any],
        fields: frozenset[str],
        literals: tuple[tuple[str, tuple[Any, ...]], ...],
    ) -> None:
        self.text = text
        self.fields = fields
        # (field, values) pairs from ``field == value`` / ``field in [...]``: checked against the
        # values the field can take, so ``tokenizer == 'wrod'`` is an error, not a dead parameter.
        self.literals = literals
        self._fn = fn

    def holds(self, values: Mapping[str, Any]) -> bool:
        try:
            return bool(self._fn(values))
        except TypeError as exc:
            seen = {k: values.get(k) for k in sorted(self.fields)}
            raise SweepsError(
                f"condition {self.text!r} cannot be evaluated with {seen}: {exc}; "
                "compare fields with literals of the same type"
            ) from None

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Condition) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_WORD_LITERALS = {"true": True, "false": False, "none": None, "null": None}


def parse_condition(text: object) -> Condition:
    """Parse a ``when`` expression (SweepsError on anything outside the tiny grammar)."""
    if not isinstance(text, str) or not text.strip():
        raise SweepsError(f"a condition must be a non-empty string, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise SweepsError(
            f"condition {_short(text)!r} is not valid syntax ({exc.msg}); "
            "write e.g. \"tokenizer == 'word' and vocab_size > 1024\""
        ) from None
    except (RecursionError, MemoryError):
        tree = None
    if tree is None or _depth(tree.body) > MAX_DEPTH:
        raise SweepsError(
            f"condition {_short(text)!r} is nested more than {MAX_DEPTH} levels "
            "deep; write it more simply"
        )
    fields: set[str] = set()
    literals: list[tuple[str, tuple[Any, ...]]] = []
    fn = _compile(tree.body, text, fields, literals)
    return Condition(text, fn, frozenset(fields), tuple(literals))


def _compile(
    node: ast.AST, text: str, fields: set[str], literals: list[tuple[str, tuple[Any, ...]]]
) -> Callable[[Mapping[str, Any]], Any]:
    def sub(n: ast.AST) -> Callable[[Mapping[str, Any]], Any]:
        return _compile(n, text, fields, literals)

    if isinstance(node, ast.BoolOp):
        parts = [sub(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda env: all(p(env) for p in parts)
        return lambda env: any(p(env) for p in parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = sub(node.operand)
        return lambda env: not inner(env)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal(node)
        if value is not _NOT_LITERAL:
            return lambda env: value
    if isinstance(node, ast.Compare):
        operands = [sub(n) for n in (node.left, *node.comparators)]
        ops = []
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise SweepsError(
                    f"condition {text!r}: operator {type(op).__name__} is not "
                    "allowed; use ==, !=, <, <=, >, >=, in, not in"
                )
            ops.append(_COMPARE[type(op)])
        sides = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, sides, sides[1:], strict=False):
            if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                _note_literal(left, right, op, literals)
            if isinstance(op, _ORDERING):
                _check_ordered(left, text)
                _check_ordered(right, text)

        def compare(env: Mapping[str, Any]) -> bool:
            left_value = operands[0](env)
            for op, right in zip(ops, operands[1:], strict=True):
                right_value = right(env)
                if not op(left_value, right_value):
                    return False
                left_value = right_value
            return True

        return compare
    if isinstance(node, ast.Name):
        if node.id in _TRAIN_FIELDS:
            fields.add(node.id)
            name = node.id
            return lambda env: env[name]
        if node.id.lower() in _WORD_LITERALS:
            value = _WORD_LITERALS[node.id.lower()]
            return lambda env: value
        hint = closest(node.id, _TRAIN_FIELDS)
        raise SweepsError(
            f"condition {text!r}: {node.id!r} is not a TrainConfig field"
            + (f" (did you mean {hint!r}?)" if hint else "")
            + "; quote string values: tokenizer == 'word'"
        )
    value = _literal(node)
    if value is not _NOT_LITERAL:
        return lambda env: value
    raise SweepsError(
        f"condition {text!r}: {type(node).__name__} is not allowed; use field "
        "names, literals, comparisons, and/or/not"
    )


_NOT_LITERAL = object()


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _depth(node: ast.AST) -> int:
    """How deep the expression nests (without recursion: the tree may be very deep)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(n))
    return deepest


def _check_ordered(node: ast.AST, text: str) -> None:
    """An operand of ``<``/``<=``/``>``/``>=``: a numeric field or a number."""
    if isinstance(node, ast.Name) and node.id in _TRAIN_FIELDS:
        if node.id not in _NUMERIC_FIELDS:
            raise SweepsError(
                f"condition {_short(text)!r}: {node.id} is not a number, so it "
                "cannot be ordered; compare it with == or in"
            )
        return
    value = _literal(node)
    if value is not _NOT_LITERAL and (
        isinstance(value, bool) or not isinstance(value, (int, float))
    ):
        raise SweepsError(
            f"condition {_short(text)!r}: {value!r} is not a number, so it cannot "
            "be ordered against a field; write a number, e.g. seq_len > 256"
        )


def _literal(node: ast.AST) -> Any:
    """The value of a literal node (constants, lists/tuples/sets of them), else ``_NOT_LITERAL``."""
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, (str, int, float, bool))
    ):
        return node.value
    if (
        isinstance(node, ast.Name)
        and node.id not in _TRAIN_FIELDS
        and node.id.lower() in _WORD_LITERALS
    ):
        return _WORD_LITERALS[node.id.lower()]
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_literal(e) for e in node.elts]
        if all(i is not _NOT_LITERAL for i in items):
            return tuple(items)
    return _NOT_LITERAL


def _note_literal(
    left: ast.AST, right: ast.AST, op: ast.cmpop, literals: list[tuple[str, tuple[Any, ...]]]
) -> None:
    membership = isinstance(op, (ast.In, ast.NotIn))
    for name_node, value_node in ((left, right), (right, left)):
        if isinstance(name_node, ast.Name) and name_node.id in _TRAIN_FIELDS:
            value = _literal(value_node)
            if value is _NOT_LITERAL:
                continue
            if membership and value_node is right and isinstance(value, tuple):
                literals.append((name_node.id, value))
            elif not membership:
                literals.append((name_node.id, (value,)))
