"""Declarative shapes of untrusted metadata, and a strict JSON decoder for it.

A shape says what the code reading bundle metadata relies on: the keys of a record and
their types, the length and characters of text, the range of numbers, the length of lists.
:func:`check` walks a decoded value against a shape and raises one
:class:`~fewtrans_board.core.errors.SubmissionError` naming the member and the key
path (``results/x/run.json: identity.grid[2] must be an object, got 'oops'``), so nothing
downstream meets a missing key or a string where it expects a number.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, cast

from fewtrans_board.core.errors import SubmissionError, shown

# Control characters, line and paragraph separators, and the bidirectional overrides that
# can make a name display as something else.
FORBIDDEN_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
MAX_INT = 2**63
"""Largest integer magnitude in metadata (what a float64 or int64 reader can hold)."""
MAX_DEPTH = 32
"""Deepest nesting of any metadata document (pathological nesting is refused early)."""


def text_problem(value: object, limit: int, *, empty: bool = True) -> str | None:
    """Why ``value`` is not an acceptable single-line text field, or ``None`` if it is."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__} {shown(value)}"
    if len(value) > limit:
        return f"is {len(value)} characters long (at most {limit})"
    bad = FORBIDDEN_CHARACTERS.search(value)
    if bad:
        return (
            f"contains the control character U+{ord(bad.group()):04X} at position "
            f"{bad.start()} (text fields are single lines of printable characters)"
        )
    if not empty and not value.strip():
        return "must not be empty"
    return None


class Shape(Protocol):
    """Something :func:`check` can test a value against."""

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """``(path, problem)`` of the first fault in ``value``, or ``None``."""


@dataclass(frozen=True)
class Text:
    """A single-line string: bounded length, no control characters, optional pattern.

    Attributes:
        limit: most characters.
        pattern: a regular expression the whole text must match.
        what: what the pattern means, for the message (``"a sha256 hex digest"``).
        empty: whether the empty string is allowed.
    """

    limit: int = 200
    pattern: str | None = None
    what: str = ""
    empty: bool = True

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        problem = text_problem(value, self.limit, empty=self.empty)
        if problem is None and self.pattern and not re.fullmatch(self.pattern, value):
            problem = f"must be {self.what or 'text matching ' + self.pattern}, got {shown(value)}"
        return None if problem is None else (path, problem)


@dataclass(frozen=True)
class String:
    """Any string: the type a reader relies on, without the length and character rules.

    The provenance records use it to read local runs, whose names and file names were
    never submitted (a manifest may be called anything on a user's disk).
    """

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        if not isinstance(value, str):
            return path, f"must be a string, got {type(value).__name__} {shown(value)}"
        return None


@dataclass(frozen=True)
class Number:
    """A finite number (never a boolean); ``integer`` refuses floats."""

    integer: bool = False
    low: float | None = None
    high: float | None = None

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        kinds: tuple[type, ...] = (int,) if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            kind = "an integer" if self.integer else "a number"
            return path, f"must be {kind}, got {type(value).__name__} {shown(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return path, f"must be finite, got {value}"
        if isinstance(value, int) and abs(value) > MAX_INT:
            return path, f"is an integer beyond 64 bits ({len(str(value))} digits)"
        number = cast(float, value)  # int or float; never float() a huge int
        if (self.low is not None and number < self.low) or (
            self.high is not None and number > self.high
        ):
            return path, f"must be in [{self.low}, {self.high}], got {shown(value)}"
        return None


@dataclass(frozen=True)
class Flag:
    """A boolean."""

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        if not isinstance(value, bool):
            return path, f"must be true or false, got {shown(value)}"
        return None


@dataclass(frozen=True)
class OneOf:
    """One of a few literal values."""

    values: tuple[Any, ...]

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        # Compare type too: True == 1 and 1 == 1.0 must not pass for each other.
        if any(type(value) is type(v) and value == v for v in self.values):
            return None
        return path, f"must be one of {', '.join(map(repr, self.values))}, got {shown(value)}"


@dataclass(frozen=True)
class Nullable:
    """``null`` or the inner shape."""

    inner: Shape

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        return None if value is None else self.inner.problem(value, path, depth)


@dataclass(frozen=True)
class Items:
    """A list of values of one shape."""

    item: Shape
    max_items: int = 10_000
    min_items: int = 0

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        if not isinstance(value, list):
            return path, f"must be a list, got {type(value).__name__} {shown(value)}"
        if not self.min_items <= len(value) <= self.max_items:
            return path, (
                f"has {len(value)} items (between {self.min_items} and {self.max_items} allowed)"
            )
        for i, item in enumerate(value):
            found = self.item.problem(item, f"{path}[{i}]", depth + 1)
            if found:
                return found
        return None


@dataclass(frozen=True)
class Mapping:
    """An object with free keys (bounded text) and values of one shape."""

    value: Shape
    key: Shape = Text(100)
    max_items: int = 1000

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        if not isinstance(value, dict):
            return path, f"must be an object, got {type(value).__name__} {shown(value)}"
        if len(value) > self.max_items:
            return path, f"has {len(value)} keys (at most {self.max_items})"
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            found = self.key.problem(key, sub, depth + 1)
            if found:
                return sub, f"is not an acceptable key: {found[1]}"
            found = self.value.problem(item, sub, depth + 1)
            if found:
                return found
        return None


@dataclass(frozen=True)
class Record:
    """An object with declared keys.

    Attributes:
        required: keys that must be present, with their shapes.
        optional: keys that may be present.
        closed: whether other keys are refused (else they must merely be JSON).
    """

    required: dict[str, Shape]
    optional: dict[str, Shape] = field(default_factory=dict)
    closed: bool = False

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        if not isinstance(value, dict):
            return path or "the document", (
                f"must be an object, got {type(value).__name__} {shown(value)}"
            )
        missing = [k for k in self.required if k not in value]
        if missing:
            return path or "the document", f"lacks {', '.join(missing)}"
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            shape = self.required.get(key) or self.optional.get(key)
            if shape is None:
                if self.closed:
                    known = sorted([*self.required, *self.optional])
                    return sub, f"is not a known key (known: {', '.join(known)})"
                shape = ANY
            found = shape.problem(item, sub, depth + 1)
            if found:
                return found
        return None


@dataclass(frozen=True)
class AnyJson:
    """Any JSON value no deeper than :data:`MAX_DEPTH`, with finite numbers only."""

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        if depth > MAX_DEPTH:
            return path, f"is nested more than {MAX_DEPTH} levels deep"
        if isinstance(value, float) and not math.isfinite(value):
            return path, f"must be finite, got {value}"
        if isinstance(value, dict):
            for key, item in value.items():
                found = self.problem(item, f"{path}.{key}", depth + 1)
                if found:
                    return found
        elif isinstance(value, list):
            for i, item in enumerate(value):
                found = self.problem(item, f"{path}[{i}]", depth + 1)
                if found:
                    return found
        elif value is not None and not isinstance(value, str | int | float | bool):
            return path, f"is a {type(value).__name__}, not a JSON value"
        return None


ANY = AnyJson()
SCALAR_KINDS = (str, int, float, bool)


@dataclass(frozen=True)
class Scalar:
    """A JSON scalar (text bounded like :class:`Text`, numbers finite) or ``null``."""

    text: Text = Text(200)

    def problem(self, value: Any, path: str, depth: int) -> tuple[str, str] | None:
        """See :class:`Shape`."""
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, str):
            return self.text.problem(value, path, depth)
        if isinstance(value, int | float):
            return Number().problem(value, path, depth)
        return path, f"must be a number, text, true/false or null, got {shown(value)}"


def check(value: Any, shape: Shape, where: str, code: str) -> None:
    """Check a decoded value against a shape.

    Args:
        value: the decoded metadata.
        shape: what it must look like.
        where: the member it came from (``results/x/run.json``), named in the message.
        code: the :class:`SubmissionError` code of a fault.

    Raises:
        SubmissionError: ``[code] where: path problem``.
    """
    found = shape.problem(value, "", 0)
    if found:
        path, problem = found
        raise SubmissionError(code, f"{where}: {path or 'the document'} {problem}")


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} overflows a float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {shown(key)} appears twice in one object")
        out[key] = value
    return out


def load_json(data: bytes, where: str, code: str) -> Any:
    """Decode untrusted JSON strictly: UTF-8, no NaN or infinities, no repeated keys.

    Args:
        data: the member's bytes.
        where: the member, named in the message.
        code: the :class:`SubmissionError` code of a fault.

    Raises:
        SubmissionError: not UTF-8, not JSON, nested too deeply, or ambiguous.
    """
    try:
        text = data.decode("utf-8")
        return json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except UnicodeDecodeError as exc:
        raise SubmissionError(code, f"{where} is not UTF-8 text (byte {exc.start})") from exc
    except RecursionError as exc:
        raise SubmissionError(code, f"{where} is nested too deeply to read") from exc
    except ValueError as exc:  # JSONDecodeError, repeated keys, constants, huge integers
        raise SubmissionError(code, f"{where} is not valid JSON: {exc}") from exc


def is_mapping(value: object) -> bool:
    """Whether ``value`` is a mapping (for readers of already checked metadata)."""
    return isinstance(value, MappingABC)
