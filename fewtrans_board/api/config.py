"""Adapter configurations: ``hparam`` declarations, the ``AdapterConfig`` base, their checks.

An adapter's nested ``Config`` is a frozen dataclass of JSON scalars declared with
:func:`hparam` (help text, valid range or choices, and for the hyperparameters the HPE
protocol varies their role: a learning rate or the epoch count). Every instance is checked
when it is built; :func:`config_digest` names a configuration in results.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fewtrans_board.api.ranges import ROLE_RANGES, Range, bound_problem, out_of_range
from fewtrans_board.core.errors import ConfigError, close_names

HpeRole = Literal["lr", "epochs"]
C = TypeVar("C", bound="AdapterConfig")

_SCALARS: dict[str, tuple[type, ...]] = {
    "float": (float, int),
    "int": (int,),
    "bool": (bool,),
    "str": (str,),
}


def hparam(
    default: Any,
    help: str,
    *,
    hpe: HpeRole | None = None,
    min: float | None = None,
    max: float | None = None,
    above: float | None = None,
    below: float | None = None,
    choices: Sequence[str] | None = None,
) -> Any:
    """Declare a ``Config`` field with help text and, for numbers, its valid range.

    Args:
        default: the default value (a JSON scalar).
        help: one sentence saying what the hyperparameter does.
        hpe: ``"lr"`` for a learning rate or ``"epochs"`` for the epoch count that the
            Hyperparameter Ensemble protocol varies around its centre; ``None`` otherwise.
            A learning rate must also be above 0 and an epoch count at least 1.
        min: smallest valid value (inclusive).
        max: largest valid value (inclusive).
        above: values must be greater than this (exclusive lower bound).
        below: values must be smaller than this (exclusive upper bound).
        choices: for a string, the values it may take (e.g. an optimiser's name).

    Returns:
        A dataclass field carrying the metadata. Building the ``Config`` (directly, by
        ``replace`` or ``from_dict``) refuses values of another type, values outside the
        range and non-finite floats with a :class:`ConfigError`.
    """
    bounds = {"min": min, "above": above, "max": max, "below": below}
    metadata: dict[str, Any] = {"help": help, "hpe": hpe, "bounds": bounds}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ConfigField:
    """Description of one hyperparameter, for listings and validation."""

    name: str
    type: str
    default: Any
    help: str
    hpe: HpeRole | None
    range: dict[str, float] = dataclasses.field(default_factory=dict)
    """Effective valid range (declared and implied by the HPE role), e.g. ``{"above": 0}``."""
    choices: tuple[str, ...] | None = None
    """The values a string field may take (``None``: any string)."""

    @functools.cached_property
    def valid(self) -> Range:
        """The range as a :class:`Range` (built once: every config built checks each field)."""
        return Range.of(self.range)


SCHEMA_FIELD_KEYS = ("name", "type", "default", "help", "hpe")
"""Keys of a field in ``Adapter.schema()``: what the protocol reads and verification compares."""


@dataclass(frozen=True)
class AdapterConfig:
    """Base class of every adapter's nested ``Config`` dataclass.

    Subclasses are frozen dataclasses whose fields are JSON scalars declared with
    :func:`hparam`. Every instance is checked when it is built (constructor,
    ``dataclasses.replace``, :meth:`replace`, :meth:`from_dict` alike): each field must
    have its declared type and lie in its valid range, and float fields store floats.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Keep the construction check for a subclass that defines its own ``__post_init__``."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is None or getattr(own, "_checks_fields", False):
            return

        @functools.wraps(own)
        def post_init(self: AdapterConfig) -> None:
            AdapterConfig.__post_init__(self)
            own(self)

        setattr(post_init, "_checks_fields", True)  # noqa: B010  (a dataclass slots copy re-enters)
        setattr(cls, "__post_init__", post_init)  # noqa: B010

    def __post_init__(self) -> None:
        """Check every field against its declaration (see :func:`checked_value`).

        Raises:
            ConfigError: on a value of the wrong type, a non-finite float or a number
                outside the field's valid range.
        """
        cls = type(self)
        for info in _declared_fields(cls):  # type: ignore[arg-type]  # classes hash by id
            value = getattr(self, info.name)
            checked = checked_value(cls.__qualname__, info, value)
            if checked is not value:
                object.__setattr__(self, info.name, checked)

    @classmethod
    def fields_info(cls) -> list[ConfigField]:
        """Return the declared hyperparameters in declaration order."""
        return list(_declared_fields(cls))  # type: ignore[arg-type]  # classes hash by id

    @classmethod
    def _resolve_fields(cls) -> list[ConfigField]:
        hints = type_hints(cls)  # type: ignore[arg-type]  # classes hash by id
        info = []
        for f in dataclasses.fields(cls):
            hint = hints.get(f.name, Any)
            type_name = getattr(hint, "__name__", str(hint))
            hpe = f.metadata.get("hpe")
            declared = f.metadata.get("bounds") or {}
            valid = Range()
            if bound_problem(declared, type_name) is None:
                valid = Range.of(declared)
            if hpe in ROLE_RANGES and type_name in ("int", "float"):
                valid = valid.intersect(ROLE_RANGES[hpe])
            info.append(
                ConfigField(
                    name=f.name,
                    type=type_name,
                    default=f.default,
                    help=str(f.metadata.get("help", "")),
                    hpe=hpe,
                    range=valid.to_dict(),
                    choices=f.metadata.get("choices"),
                )
            )
        return info

    @classmethod
    def from_dict(cls: type[C], values: Mapping[str, Any]) -> C:
        """Build a config from a mapping, rejecting unknown keys and wrong types.

        Args:
            values: field values; missing fields keep their defaults.

        Returns:
            The config instance.

        Raises:
            ConfigError: on an unknown key, a value of the wrong type, a non-finite float
                or a number outside the field's valid range.
        """
        fields = {f.name: f for f in _declared_fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ConfigError(
                f"{cls.__qualname__}: unknown option(s) "
                f"{', '.join(_with_suggestion(key, fields) for key in unknown)}; "
                f"valid options: {', '.join(fields) or '(none)'}"
            )
        # Report the first bad value in the caller's order; construction checks the rest.
        clean = {key: checked_value(cls.__qualname__, fields[key], v) for key, v in values.items()}
        return cls(**clean)

    def to_dict(self) -> dict[str, Any]:
        """Return the field values as a plain dict."""
        return dataclasses.asdict(self)

    def replace(self: C, **changes: Any) -> C:
        """Return a copy with some fields changed (validated like ``from_dict``)."""
        merged = {**self.to_dict(), **changes}
        return type(self).from_dict(merged)

    def digest(self) -> str:
        """Short sha256 of the canonical JSON of the values (stable across runs)."""
        return config_digest(self.to_dict())


def _with_suggestion(key: str, fields: Sequence[str] | Mapping[str, Any]) -> str:
    """``key``, and the fields it may be a typo of (``lr_haed (did you mean 'lr_head'?)``)."""
    close = close_names(key, fields)
    return f"{key} (did you mean {', '.join(repr(c) for c in close)}?)" if close else key


def checked_value(owner: str, info: ConfigField, value: Any) -> Any:
    """``value`` as field ``info`` stores it, after checking its type and range.

    The one check of a configuration value: ``bool`` is refused where a number is
    declared, an ``int`` is accepted (and stored as a ``float``) where a ``float`` is,
    floats must be finite, numbers must lie in the declared (and HPE-role) range. Fields
    of a type other than the JSON scalars are left unchecked (registration refuses them).

    Args:
        owner: the config class's qualified name, for the message.
        info: the field's declaration.
        value: the candidate value.

    Returns:
        ``value``, or ``float(value)`` for an ``int`` given to a ``float`` field.

    Raises:
        ConfigError: naming the field, the value and what is allowed.
    """
    expected = _SCALARS.get(info.type)
    numeric = info.type in ("int", "float")
    if expected is not None and (
        not isinstance(value, expected) or (numeric and isinstance(value, bool))
    ):
        raise ConfigError(
            f"{owner}.{info.name}: expected {info.type}, got {value!r} ({type(value).__name__})"
        )
    if numeric:
        problem = out_of_range(value, info.valid)
        if problem is not None:
            raise ConfigError(f"{owner}.{info.name}: {problem}")
    if info.choices is not None and value not in info.choices:
        raise ConfigError(
            f"{owner}.{info.name}: {value!r} is not one of {', '.join(map(repr, info.choices))}"
        )
    return float(value) if info.type == "float" and type(value) is not float else value


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, resolved once per class (a declaration never changes)."""
    return typing.get_type_hints(cls)


@functools.cache
def _declared_fields(cls: type[AdapterConfig]) -> tuple[ConfigField, ...]:
    # Resolving type hints per instance would dominate building the HPE grid's configs, and
    # per call registering the adapters (every episode process registers them all).
    return tuple(cls._resolve_fields())


def config_digest(values: Mapping[str, Any]) -> str:
    """:meth:`AdapterConfig.digest` of plain values (floats as floats, ints as ints)."""
    text = json.dumps(dict(values), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def typed_values(values: Mapping[str, Any], fields: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``values`` with each float field as a float, as ``AdapterConfig.from_dict`` stores it.

    Args:
        values: configuration values (e.g. read back from JSON, where ``1.0`` may be ``1``).
        fields: the field descriptions of a recorded adapter schema (``Adapter.options()``).

    Returns:
        The values keyed as given, float fields converted.
    """
    types = {f["name"]: f["type"] for f in fields}
    return {
        k: float(v) if types.get(k) == "float" and not isinstance(v, bool) else v
        for k, v in values.items()
    }
