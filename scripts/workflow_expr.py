"""GitHub Actions expressions (``${{ ... }}``), enough for the leaderboard workflows.

Literals, context paths (``github.event.pull_request.base.sha``, ``steps.pr.outputs.number``),
``==`` ``!=`` ``!`` ``&&`` ``||`` (which return an operand, as GitHub's do), parentheses and
the functions ``always() success() failure() cancelled() fromJSON() hashFiles()``. Anything
else is an error naming the expression, so a workflow using more cannot pass by accident.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!(),])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_*][A-Za-z0-9_-]*)*))"
)


class ExpressionError(ValueError):
    """An expression this evaluator does not understand."""


def tokens(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` of every token of ``text``."""
    out, at = [], 0
    while at < len(text.rstrip()):
        match = TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise ExpressionError(f"cannot read {text!r} at {text[at:]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        at = match.end()
    return out


def truthy(value: Any) -> bool:
    """GitHub's truthiness: ``''``, ``0``, ``false`` and ``null`` are false."""
    return value not in (None, False, 0, "")


def text(value: Any) -> str:
    """A value as GitHub writes it into a string (``null`` as ``''``)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


class Evaluator:
    """Evaluates expressions against ``context`` with the status functions of ``status``.

    Args:
        context: ``{"github": ..., "vars": ..., "secrets": ..., "steps": ..., ...}``.
        status: the job's status so far: ``"success"``, ``"failure"`` or ``"cancelled"``.
        hash_files: what ``hashFiles(...)`` returns.
    """

    def __init__(
        self,
        context: Mapping[str, Any],
        status: str = "success",
        hash_files: Callable[..., str] = lambda *a: "local",
    ) -> None:
        self.context = context
        self.functions: dict[str, Callable[..., Any]] = {
            "always": lambda: True,
            "success": lambda: status == "success",
            "failure": lambda: status == "failure",
            "cancelled": lambda: status == "cancelled",
            "fromjson": json.loads,
            "hashfiles": hash_files,
        }
        self.used_status = False

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` (without ``${{ }}``)."""
        self.items, self.at, self.source = tokens(expression), 0, expression
        value = self._or()
        if self.at != len(self.items):
            raise ExpressionError(f"unexpected {self.items[self.at][1]!r} in {expression!r}")
        return value

    def _peek(self) -> str:
        return self.items[self.at][1] if self.at < len(self.items) else ""

    def _take(self, expected: str) -> None:
        if self._peek() != expected:
            raise ExpressionError(f"expected {expected!r} in {self.source!r}")
        self.at += 1

    def _or(self) -> Any:
        value = self._and()
        while self._peek() == "||":
            self.at += 1
            right = self._and()
            value = value if truthy(value) else right
        return value

    def _and(self) -> Any:
        value = self._not()
        while self._peek() == "&&":
            self.at += 1
            right = self._not()
            value = right if truthy(value) else value
        return value

    def _not(self) -> Any:
        if self._peek() == "!":
            self.at += 1
            return not truthy(self._not())
        left = self._primary()
        if self._peek() in ("==", "!="):
            op = self._peek()
            self.at += 1
            right = self._primary()
            equal = text(left).lower() == text(right).lower()
            return equal if op == "==" else not equal
        return left

    def _primary(self) -> Any:
        if self.at >= len(self.items):
            raise ExpressionError(f"{self.source!r} ends too early")
        kind, token = self.items[self.at]
        self.at += 1
        if token == "(":
            value = self._or()
            self._take(")")
            return value
        if kind == "str":
            return token[1:-1].replace("''", "'")
        if kind == "num":
            return float(token) if "." in token else int(token)
        if kind != "name":
            raise ExpressionError(f"unexpected {token!r} in {self.source!r}")
        if token in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[token]
        if self._peek() == "(":
            return self._call(token)
        return self._path(token)

    def _call(self, name: str) -> Any:
        function = self.functions.get(name.lower())
        if function is None:
            raise ExpressionError(f"function {name}() is not supported ({self.source!r})")
        self._take("(")
        args = []
        while self._peek() != ")":
            args.append(self._or())
            if self._peek() == ",":
                self.at += 1
        self._take(")")
        return function(*args)

    def _path(self, dotted: str) -> Any:
        head, *rest = dotted.split(".")
        if head not in self.context:
            raise ExpressionError(f"unknown context {head!r} in {self.source!r}")
        value: Any = self.context[head]
        for key in rest:
            value = value.get(key) if isinstance(value, Mapping) else None
        return value


def substitute(template: str, evaluator: Evaluator) -> str:
    """``template`` with every ``${{ expression }}`` replaced by its value's text."""
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: text(evaluator.evaluate(m.group(1))), template)


def condition(source: Any, evaluator: Evaluator) -> bool:
    """A step's or job's ``if:``: GitHub adds ``success() &&`` unless a status function is used."""
    if source is None:
        return truthy(evaluator.evaluate("success()"))
    if isinstance(source, bool):
        return source
    expression = str(source).strip()
    if expression.startswith("${{") and expression.endswith("}}"):
        expression = expression[3:-2]
    if not re.search(r"\b(always|success|failure|cancelled)\(", expression):
        expression = f"success() && ({expression})"
    return truthy(evaluator.evaluate(expression))
