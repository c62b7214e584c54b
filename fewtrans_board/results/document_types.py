"""What the metadata documents are made of: a frozen model base, leaf types, one-line refusals.

Every JSON document a submission or a store holds is one pydantic model
(:mod:`fewtrans_board.results.documents`) built from these parts: the annotated leaf types
:class:`Text`, :class:`Number`, :class:`OneOf` and :data:`Scalar` (strict whatever pydantic's
defaults, their constraints in the published JSON Schema, each wording its own refusal),
:data:`Omittable` keys, the :class:`Document` base, and :func:`checked`, which turns the first
fault of a document into one :class:`~fewtrans_board.core.errors.SubmissionError` line.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self, TypeVar

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError, core_schema

from fewtrans_board.core.errors import SubmissionError, shown
from fewtrans_board.results.strict_json import FORBIDDEN, MAX_INT, json_fault, text_problem

T = TypeVar("T")
SINGLE_LINE = f"[^{FORBIDDEN}]*"
"""The pattern of text without a pattern of its own: one line of printable characters."""


def _refused(problem: str) -> PydanticCustomError:
    return PydanticCustomError("refused", "{problem}", {"problem": problem})


class _Rule:
    """Annotated metadata of a leaf type: its constraints and the words of its refusal."""

    def _constrain(self, schema: Any) -> Any:  # the leaf's core schema, constrained
        return schema

    def _before(self, value: Any) -> str | None:  # a fault the core schema cannot express
        return None

    def _problem(self, value: Any, schema: Any) -> str:  # why the core schema refused value
        raise NotImplementedError

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        schema = self._constrain(handler(source))

        def validate(value: Any, inner: core_schema.ValidatorFunctionWrapHandler) -> Any:
            fault = self._before(value)
            if fault is None:
                try:
                    return inner(value)
                except ValidationError:
                    fault = self._problem(value, schema)
            raise _refused(fault)

        return core_schema.no_info_wrap_validator_function(validate, schema)


@dataclass(frozen=True)
class Text(_Rule):
    """A single line of text: at most ``limit`` characters, no control characters.

    Attributes:
        limit: most characters.
        pattern: a regular expression the whole text must match.
        what: what the pattern means, for the message (``"a sha256 hex digest"``).
    """

    limit: int = 200
    pattern: str | None = None
    what: str = ""

    def _constrain(self, schema: Any) -> Any:
        rule = f"^(?:{self.pattern or SINGLE_LINE})$"
        return core_schema.str_schema(strict=True, max_length=self.limit, pattern=rule)

    def _problem(self, value: Any, schema: Any) -> str:
        meaning = self.what or f"text matching {self.pattern}"
        return text_problem(value, self.limit) or f"must be {meaning}, got {shown(value)}"


@dataclass(frozen=True)
class Number(_Rule):
    """A finite number in ``[low, high]``, never a boolean, of the annotated type.

    ``Annotated[int, Number()]`` holds integers; ``Annotated[int | float, Number()]`` either,
    each kept as given (``1`` is not read as ``1.0``).
    """

    low: float | None = None
    high: float | None = None

    def _constrain(self, schema: Any) -> Any:
        if schema["type"] == "union":
            return {**schema, "choices": [self._constrain(c) for c in schema["choices"]]}
        bounds = {k: v for k, v in (("ge", self.low), ("le", self.high)) if v is not None}
        finite = {"allow_inf_nan": False} if schema["type"] == "float" else {}
        return {**schema, "strict": True, **finite, **bounds}

    def _before(self, value: Any) -> str | None:
        # Integers beyond 64 bits, which no float64 or int64 reader holds.
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            return f"is an integer beyond 64 bits ({len(str(value))} digits)"
        return None

    def _problem(self, value: Any, schema: Any) -> str:
        integer = schema["type"] == "int"
        if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
            kind = "an integer" if integer else "a number"
            return f"must be {kind}, got {type(value).__name__} {shown(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be finite, got {value}"
        return f"must be in [{self.low}, {self.high}], got {shown(value)}"


@dataclass(frozen=True)
class OneOf(_Rule):
    """One of a few literal values, compared with their types (``True`` is not ``1``)."""

    values: tuple[Any, ...]

    def _constrain(self, schema: Any) -> Any:
        return core_schema.literal_schema(list(self.values))

    def _before(self, value: Any) -> str | None:
        # Pydantic's literals take True and 1.0 for 1; these do not.
        if any(type(value) is type(v) and value == v for v in self.values):
            return None
        return self._problem(value, None)

    def _problem(self, value: Any, schema: Any) -> str:
        return f"must be one of {', '.join(map(repr, self.values))}, got {shown(value)}"


@dataclass(frozen=True)
class _Scalar(_Rule):
    """A JSON scalar: text bounded like :attr:`text`, a finite number, a boolean or null."""

    text: Text = Text(500)

    def _constrain(self, schema: Any) -> Any:
        number = Number()._constrain(core_schema.union_schema([{"type": "int"}, {"type": "float"}]))
        kinds = [core_schema.bool_schema(strict=True), *number["choices"]]
        return core_schema.nullable_schema(
            core_schema.union_schema([*kinds, self.text._constrain(None)])
        )

    def _before(self, value: Any) -> str | None:
        return Number()._before(value)

    def _problem(self, value: Any, schema: Any) -> str:
        if isinstance(value, str):
            return self.text._problem(value, schema)
        if isinstance(value, int | float):
            return Number()._problem(value, {"type": "float"})
        return f"must be a number, text, true/false or null, got {shown(value)}"


Scalar = Annotated[bool | int | float | str | None, _Scalar()]
"""An adapter configuration value (``AdapterConfig`` fields hold JSON scalars)."""


class _NotNull:
    """Marks a key that may be left out (read as ``None``) but is never ``null`` where present."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        schema = handler(source)
        inner = schema["schema"] if schema["type"] == "nullable" else schema

        def validate(value: Any, next_: core_schema.ValidatorFunctionWrapHandler) -> Any:
            if value is None:
                raise _refused("must not be null (leave the key out where there is no value)")
            return next_(value)

        return core_schema.no_info_wrap_validator_function(validate, inner)


Omittable = Annotated[T | None, _NotNull()]


@dataclass(frozen=True)
class AsRecorded:
    """A JSON object checked against a document type but kept as the dict it is.

    For records readers compare verbatim with others (the adapter schema recorded at
    evaluate time against the installed plugin's).
    """

    kind: type[Document]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        def validate(value: Any, inner: core_schema.ValidatorFunctionWrapHandler) -> Any:
            inner(value)
            return value

        schema = handler.generate_schema(self.kind)
        kept = core_schema.simple_ser_schema("dict")  # written back as read
        return core_schema.no_info_wrap_validator_function(validate, schema, serialization=kept)


class Document(BaseModel):
    """A metadata document: a JSON object read key for key (frozen).

    A key declared ``Omittable`` or with a default is optional: read as ``None`` where
    absent and written back only where it was present. Keys no field declares are kept
    verbatim (:attr:`extra`), so :meth:`to_json` gives back exactly the document read.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="allow",
        allow_inf_nan=False,
        regex_engine="rust-regex",
        use_attribute_docstrings=True,
    )
    FILE: ClassVar[str] = "the document"
    """How messages name the document when the caller does not."""
    CODE: ClassVar[str] = "bad-metadata"
    """The :class:`SubmissionError` code of a fault when the caller does not give one."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be set")

    @property
    def extra(self) -> dict[str, Any]:
        """The keys no field declares, verbatim."""
        return dict(self.__pydantic_extra__ or {})

    @classmethod
    def from_json(cls, obj: Any, where: str | None = None, *, code: str | None = None) -> Self:
        """Check and read a decoded document.

        Raises:
            SubmissionError: ``[code] where: key.path problem``.
        """
        document: Self = checked(obj, cls, where or cls.FILE, code or cls.CODE)
        return document

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Self:
        """The record of a document already checked (or written by this package): not checked."""
        values: dict[str, Any] = {}
        plan = _plan(cls)
        for key, value in obj.items():
            nested, many, omittable = plan.get(key, (None, False, False))
            if value is None and omittable:
                continue
            if nested is not None and value is not None:
                value = [nested.of(v) for v in value] if many else nested.of(value)
            values[key] = value
        return cls.model_construct(**values)

    def to_json(self) -> dict[str, Any]:
        """The JSON document (what :meth:`of` or :meth:`from_json` read, key for key)."""
        return self.model_dump(exclude_unset=True)


def _document_in(annotation: Any) -> tuple[type[Document] | None, bool]:
    """The document type a field holds (alone, optional or in a list), and whether in a list."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = inner[0] if len(inner) == 1 else None
    many = typing.get_origin(annotation) is list
    if many:
        annotation = typing.get_args(annotation)[0]
    is_document = isinstance(annotation, type) and issubclass(annotation, Document)
    return (annotation if is_document else None), many


@functools.cache
def _plan(kind: type[Document]) -> dict[str, tuple[type[Document] | None, bool, bool]]:
    """Per field: the document type it holds, whether in a list, and whether null means absent."""
    plan = {}
    for name, info in kind.model_fields.items():
        nested, many = _document_in(info.annotation)
        plan[name] = (nested, many, any(isinstance(m, _NotNull) for m in info.metadata))
    return plan


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def checked(obj: Any, kind: Any, where: str, code: str) -> Any:
    """``obj`` validated as ``kind`` (a :class:`Document` class, or any annotated type).

    Raises:
        SubmissionError: ``[code] where: key.path problem``, the first fault in document order.
    """
    fault = json_fault(obj)
    if fault:  # pathological values are refused before pydantic meets them
        raise SubmissionError(code, f"{where}: {fault[0]} {fault[1]}")
    try:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind.model_validate(obj)
        return _adapter(kind).validate_python(obj)
    except ValidationError as exc:
        raise refusal(exc, obj, where, code, kind) from exc


def _order(document: Any, loc: tuple[Any, ...]) -> tuple[int, ...]:
    """Where a fault is in the document: keys in document order, a missing key first."""
    out = []
    for part in loc:
        if isinstance(document, dict) and part in document:
            out.append(list(document).index(part))
            document = document[part]
        elif isinstance(document, list) and isinstance(part, int) and part < len(document):
            out.append(part)
            document = document[part]
        else:  # a missing key, or a key's own fault (``[key]``)
            out.append(-1)
            break
    return tuple(out)


def _path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or "the document"


def _known(kind: Any, loc: tuple[Any, ...]) -> str:
    """The keys the document at ``loc`` declares (for an unknown key of a closed document)."""
    try:
        for part in loc:
            kind = _document_in(kind.model_fields[part].annotation)[0]
        return ", ".join(sorted(kind.model_fields))
    except (AttributeError, KeyError):  # a closed document inside a list or a mapping
        return "see its JSON Schema"


def _words(error: Any, kind: Any) -> str:
    """The words of one of pydantic's errors (those the leaf types do not word themselves)."""
    value, ctx = error.get("input"), error.get("ctx") or {}
    what = f"{type(value).__name__} {shown(value)}"
    unit = "keys" if isinstance(value, dict) else "items"
    words = {
        "refused": lambda: str(ctx.get("problem")),
        "bool_type": lambda: f"must be true or false, got {shown(value)}",
        "dict_type": lambda: f"must be an object, got {what}",
        "list_type": lambda: f"must be a list, got {what}",
        "extra_forbidden": lambda: f"is not a known key (known: {_known(kind, error['loc'][:-1])})",
        "too_long": lambda: f"has {len(value)} {unit} (at most {ctx.get('max_length')})",
        "too_short": lambda: f"has {len(value)} {unit} (at least {ctx.get('min_length')})",
    }
    words["model_type"] = words["model_attributes_type"] = words["dict_type"]
    return words.get(error["type"], lambda: str(error["msg"]).lower())()


def refusal(exc: ValidationError, obj: Any, where: str, code: str, kind: Any) -> SubmissionError:
    """The one-line refusal of the first fault of ``exc`` in document order.

    Missing keys are named together (``identity lacks shards, hpe``), as a reader meets them
    before the values; an unacceptable key is named before its value.
    """
    errors = exc.errors(include_url=False)
    first = min(errors, key=lambda e: _order(obj, tuple(e["loc"])))
    loc = tuple(first["loc"])
    if first["type"] == "missing":
        lacking = [
            str(e["loc"][-1])
            for e in errors
            if e["type"] == "missing" and e["loc"][:-1] == loc[:-1]
        ]
        return SubmissionError(code, f"{where}: {_path(loc[:-1])} lacks {', '.join(lacking)}")
    problem = _words(first, kind)
    if loc and loc[-1] == "[key]":
        return SubmissionError(
            code, f"{where}: {_path(loc[:-1])} is not an acceptable key: {problem}"
        )
    return SubmissionError(code, f"{where}: {_path(loc)} {problem}")
