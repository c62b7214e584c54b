"""A strict decoder for untrusted JSON, and the rules every metadata text field follows.

:func:`load_json` refuses what :func:`json.loads` would accept but no reader should trust:
bytes that are not UTF-8, ``NaN`` and infinities, a key repeated in one object (which of
the two would a reader take?) and nesting deep enough to exhaust the stack.
:func:`json_fault` checks an already decoded document the same way; :func:`text_problem`
is the one rule for single-line text (``submission.toml`` and the JSON documents alike).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NoReturn

from fewtrans_board.core.errors import SubmissionError, shown

FORBIDDEN = r"\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
"""Control characters, line and paragraph separators, and the bidirectional overrides that
can make a name display as something else (a regular-expression character range)."""
FORBIDDEN_CHARACTERS = re.compile(f"[{FORBIDDEN}]")
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


def json_fault(value: Any, path: str = "", depth: int = 0) -> tuple[str, str] | None:
    """``(key path, problem)`` of the first value no reader should take, or ``None``.

    Nesting deeper than :data:`MAX_DEPTH`, a non-finite number, or something that is not a
    JSON value (metadata decoded by a laxer reader than :func:`load_json` may hold them).
    """
    if _is_plain(value, depth):
        return None
    where = path or "the document"
    if depth > MAX_DEPTH:
        return where, f"is nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, float) and not math.isfinite(value):
        return where, f"must be finite, got {value}"
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    elif value is None or isinstance(value, str | int | float | bool):
        return None
    else:
        return where, f"is a {type(value).__name__}, not a JSON value"
    for sub, item in items:
        found = json_fault(item, sub, depth + 1)
        if found:
            return found
    return None


def _is_plain(value: Any, depth: int) -> bool:
    """Whether :func:`json_fault` finds nothing (checked without building key paths).

    Status and provenance documents hold long lists of numbers; naming the path of each
    value only matters for the one at fault.
    """
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    elif isinstance(value, float):
        return math.isfinite(value)
    else:
        return value is None or isinstance(value, str | int)
    for item in items:
        if isinstance(item, dict | list):
            if not _is_plain(item, depth + 1):
                return False
        elif isinstance(item, float):
            if not math.isfinite(item) or depth + 1 > MAX_DEPTH:
                return False
        elif not (item is None or isinstance(item, str | int)) or depth + 1 > MAX_DEPTH:
            return False
    return True


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
