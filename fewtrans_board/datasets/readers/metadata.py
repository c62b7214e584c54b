"""Reading a copy's label files (CSV, JSON) with one-line errors naming the file and line.

A malformed label file is the user's copy, not a bug: every fault becomes a
:class:`~fewtrans_board.core.errors.FewtransError` of one line, ``dataset 'NAME':
PATH:LINE: what is wrong; how to fix it``, instead of a traceback.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    from fewtrans_board.api.dataset_spec import DatasetSpec

LOG = logging.getLogger(__name__)
T = TypeVar("T")
_COLLECTED: ContextVar[list[str] | None] = ContextVar("missing_images", default=None)


def metadata_error(spec: DatasetSpec, path: Path, line: int | None, problem: str) -> FewtransError:
    """The one-line error for a fault at ``path:line`` of a dataset's label file."""
    where = f"{path}:{line}" if line is not None else str(path)
    return FewtransError(f"dataset {spec.name!r}: {where}: {problem}")


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def read_text(spec: DatasetSpec, path: Path) -> str:
    """A label file's UTF-8 text (a leading byte-order mark is dropped, as spreadsheets add it).

    Raises:
        FewtransError: the file is not UTF-8 (names the line of the first bad byte).
    """
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise metadata_error(
            spec, path, _line_of(data, exc.start), "is not UTF-8 text; re-save it as UTF-8"
        ) from None


def csv_rows(
    spec: DatasetSpec, path: Path, required: Sequence[str]
) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV label file with their line numbers, its header checked first.

    Args:
        spec: the dataset (named in errors).
        path: the CSV file.
        required: columns the layout needs.

    Yields:
        ``(line, row)`` for every data row.

    Raises:
        FewtransError: not UTF-8, not CSV, a required column missing from the header, or
            a row with fewer fields than the header.
    """
    reader = csv.DictReader(read_text(spec, path).splitlines(keepends=True))
    try:
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise metadata_error(
                spec,
                path,
                1,
                f"the header lacks column(s) {', '.join(map(repr, missing))} (found "
                f"{', '.join(map(repr, header[:8]))}{', ...' if len(header) > 8 else ''}); "
                f"the layout needs {', '.join(map(repr, required))} (see 'fewtrans-board "
                f"datasets list {spec.name} --json' for the expected layout)",
            )
        for row in reader:
            extra = row.pop(None, None)
            fields = sum(v is not None for v in row.values()) + len(extra or ())
            if fields != len(header):
                raise metadata_error(
                    spec,
                    path,
                    reader.line_num,
                    f"has {fields} fields where the header has {len(header)}",
                )
            yield reader.line_num, row
    except csv.Error as exc:
        raise metadata_error(spec, path, reader.line_num, f"is not valid CSV ({exc})") from None


def parse_value(
    spec: DatasetSpec, path: Path, line: int, column: str, value: str, parse: Callable[[str], T]
) -> T:
    """``parse(value)``, or a one-line error naming the file, line, column and value."""
    try:
        return parse(value)
    except (TypeError, ValueError):
        raise metadata_error(
            spec, path, line, f"column {column!r} holds {value!r}, which is not a number"
        ) from None


def read_json(spec: DatasetSpec, path: Path) -> Any:
    """A JSON label file, a syntax error reported at its line."""
    text = read_text(spec, path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise metadata_error(spec, path, exc.lineno, f"is not valid JSON ({exc.msg})") from None


def warn_missing_images(spec: DatasetSpec, path: Path, missing: Sequence[tuple[str, str]]) -> None:
    """Say (never silently) how many rows of a label file name an image the copy lacks.

    ``datasets scan`` lists them (the readers' ``missing_items``) and fails on them; while
    :func:`collecting_missing` runs, they are collected there instead of logged.

    Args:
        spec: the dataset.
        path: the label file.
        missing: ``(where, item)`` of each such row, ``where`` like ``"line 12"``.
    """
    collected = _COLLECTED.get()
    if collected is not None:
        collected.extend(item for _, item in missing)
    elif missing:
        where, item = missing[0]
        LOG.warning(
            "dataset %r: %d row(s) of %s name images missing from the copy (first: %s, "
            "%s); they are left out; 'fewtrans-board datasets scan %s' lists them",
            spec.name,
            len(missing),
            path,
            where,
            item,
            spec.name,
        )


@contextmanager
def collecting_missing() -> Iterator[list[str]]:
    """Collect the items :func:`warn_missing_images` reports while the block runs."""
    found: list[str] = []
    token = _COLLECTED.set(found)
    try:
        yield found
    finally:
        _COLLECTED.reset(token)
