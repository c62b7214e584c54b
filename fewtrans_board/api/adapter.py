"""``Adapter``: a transfer algorithm, its ``Config`` and the ``Predictor`` it returns.

An adapter is registered as a class. Its nested ``Config`` dataclass declares the
hyperparameters with help text (and, for the ones the HPE protocol varies, their role:
a learning rate or the epoch count). ``fit`` adapts a backbone to a support set and
returns a predictor that maps query images to logits; the core, not the adapter,
computes accuracy, and query labels are never passed to adapters.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

from fewtrans_board.api.ranges import (
    ROLE_RANGES,
    Range,
    bound_problem,
    out_of_range,
)
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.core.errors import ConfigError, RegistrationError

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet
    from fewtrans_board.api.fit_options import FitOptions

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

    @property
    def valid(self) -> Range:
        """The range as a :class:`Range`."""
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
        hints = typing.get_type_hints(cls)
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
        fields = {f.name: f for f in cls.fields_info()}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ConfigError(
                f"{cls.__qualname__}: unknown option(s) {', '.join(unknown)}; "
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
def _declared_fields(cls: type[AdapterConfig]) -> tuple[ConfigField, ...]:
    # Resolving type hints per instance would dominate building the HPE grid's configs.
    return tuple(cls.fields_info())


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


@runtime_checkable
class Predictor(Protocol):
    """What ``Adapter.fit`` returns: maps query images to logits."""

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Return logits ``[len(query), n_way]`` (finite floats) for the query images."""
        ...


class Adapter(ABC):
    """Base class of transfer algorithms.

    Class attributes:
        name: registry name (lowercase, ``-``/``_`` separated).
        description: one line for listings.
        paper: citation or URL of the method's paper.
        code: URL of the reference implementation.
        trains: what receives gradients, in a few words (for the method table).
        Config: the nested hyperparameter dataclass (subclass of ``AdapterConfig``).
        needs_text: ``True`` if the adapter needs a CLIP-style text tower.
        frozen_backbone: ``True`` if only frozen features are used, so the runner may
            serve ``ImageSet.features`` from its cache (and hands out no pixels).
        training_free: ``True`` if nothing is trained (no gradient steps, no fitted
            parameters tuned by a learning rate); such an adapter declares no HPE axis.
            Every other adapter must declare its learning-rate and epoch axes
            (``hparam(..., hpe="lr" | "epochs")``) to run under a leaderboard protocol.
        transductive: ``True`` if a query's logits may depend on the other queries
            (e.g. query-batch statistics). Leaderboards rank transductive methods apart;
            an undeclared dependence fails ``validate`` and verification.
        recipes: the method's published configurations, each cited to its paper or code
            (:class:`~fewtrans_board.api.recipe.Recipe`); the ``published`` HPE protocol
            runs one of them instead of a grid around a searched centre. Not inherited:
            a subclass declares its own (see :meth:`own_recipes`).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    code: ClassVar[str] = ""
    trains: ClassVar[str] = ""
    Config: ClassVar[type[AdapterConfig]] = AdapterConfig
    needs_text: ClassVar[bool] = False
    frozen_backbone: ClassVar[bool] = False
    training_free: ClassVar[bool] = False
    transductive: ClassVar[bool] = False
    recipes: ClassVar[tuple[Recipe, ...]] = ()

    @abstractmethod
    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> Predictor:
        """Adapt ``backbone`` to ``support`` and return a predictor for the query images.

        Args:
            backbone: the loaded model; never modify it in place (deep-copy to train).
            support: labeled support images of the episode.
            class_names: natural-language names of the episode's classes, in label order.
            config: an instance of this adapter's ``Config``.

        Returns:
            A predictor mapping query images to ``[n_query, n_way]`` logits.
        """

    def fit_many(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        configs: Sequence[Any],
        seeds: Sequence[int],
        *,
        options: FitOptions | None = None,
    ) -> list[Predictor]:
        """Fit one predictor per configuration (the HPE grid of one episode).

        The default seeds torch's global generator with ``seeds[i]`` and calls
        :meth:`fit` for each configuration. Adapters can override it to share work across
        configurations (one batched run over learning rates, epoch snapshots), provided the
        results equal the loop's; the runner then calls it once per episode instead of
        calling :meth:`fit` per configuration.

        Args:
            backbone: the loaded model (never modified in place).
            support: labeled support images of the episode.
            class_names: the episode's class names, in label order.
            configs: instances of this adapter's ``Config``.
            seeds: one torch seed per configuration.
            options: the run's batching settings and where to record what batched groups
                did (:class:`~fewtrans_board.api.fit_options.FitOptions`). The runner
                passes it only to overrides that declare this keyword, so an override
                without it keeps working; the loop here needs none.
        """
        import torch

        predictors = []
        for config, seed in zip(configs, seeds, strict=True):
            torch.manual_seed(seed)
            predictors.append(self.fit(backbone, support, class_names, config))
        return predictors

    @classmethod
    def overrides_fit_many(cls) -> bool:
        """Whether the class batches configurations itself."""
        return cls.fit_many is not Adapter.fit_many

    @classmethod
    def default_config(cls) -> AdapterConfig:
        """Return the ``Config`` with every default."""
        return cls.Config()

    @classmethod
    def check_class(cls) -> None:
        """Check the class-level declarations (called at registration).

        Raises:
            RegistrationError: if ``name``, ``description`` or ``Config`` is malformed.
        """
        where = f"adapter class {cls.__module__}.{cls.__qualname__}"
        if not isinstance(getattr(cls, "name", None), str):
            raise RegistrationError(f"{where} has no string class attribute 'name'")
        if not cls.description:
            raise RegistrationError(f"{where} has an empty 'description'")
        if not isinstance(cls.trains, str) or not cls.trains.strip():
            raise RegistrationError(
                f"{where} has an empty 'trains': say in a few words what receives gradients "
                "(e.g. 'linear head (backbone frozen)', or 'nothing (class means)')"
            )
        for flag in ("needs_text", "frozen_backbone", "training_free", "transductive"):
            if not isinstance(getattr(cls, flag), bool):
                raise RegistrationError(f"{where}: '{flag}' must be True or False")
        config = cls.Config
        if not (isinstance(config, type) and issubclass(config, AdapterConfig)):
            raise RegistrationError(f"{where}: Config must subclass AdapterConfig")
        if not dataclasses.is_dataclass(config):
            raise RegistrationError(f"{where}: Config must be a @dataclass(frozen=True)")
        hints = typing.get_type_hints(config)
        for field in dataclasses.fields(config):
            type_name = getattr(hints.get(field.name), "__name__", "")
            problem = bound_problem(field.metadata.get("bounds") or {}, type_name)
            if problem is not None:
                raise RegistrationError(f"{where}: Config field {field.name!r}: {problem}")
        for info in config.fields_info():
            if not info.help:
                raise RegistrationError(
                    f"{where}: Config field {info.name!r} has no help text "
                    "(declare it with fewtrans_board.hparam(default, help))"
                )
            if info.type not in _SCALARS:
                raise RegistrationError(
                    f"{where}: Config field {info.name!r} has type {info.type}; "
                    f"use one of {', '.join(_SCALARS)}"
                )
            if info.default is dataclasses.MISSING:
                raise RegistrationError(
                    f"{where}: Config field {info.name!r} needs a default value"
                )
            if info.hpe not in (None, "lr", "epochs"):
                raise RegistrationError(
                    f"{where}: Config field {info.name!r} has hpe={info.hpe!r}; "
                    "use 'lr', 'epochs' or None"
                )
            bad_default = (
                info.type in ("int", "float")
                and isinstance(info.default, (int, float))
                and out_of_range(info.default, info.valid)
            )
            if bad_default:
                raise RegistrationError(
                    f"{where}: Config field {info.name!r}: default {bad_default}"
                )
            if info.choices is not None and (
                info.type != "str" or info.default not in info.choices
            ):
                raise RegistrationError(
                    f"{where}: Config field {info.name!r}: choices are for str fields and "
                    f"must include the default {info.default!r}"
                )
        _check_recipes(cls, where)
        axes = [info.name for info in config.fields_info() if info.hpe is not None]
        if cls.training_free and axes:
            raise RegistrationError(
                f"{where} declares training_free = True but has HPE axes {', '.join(axes)}; "
                "a training-free adapter has no learning rate or epoch count"
            )

    @classmethod
    def summary(cls) -> dict[str, Any]:
        """Return a JSON-friendly summary for listings."""
        return {
            "name": cls.name,
            "description": cls.description,
            "paper": cls.paper,
            "code": cls.code,
            "trains": cls.trains,
            "needs_text": cls.needs_text,
            "frozen_backbone": cls.frozen_backbone,
            "training_free": cls.training_free,
            "transductive": cls.transductive,
        }

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The declarations the protocol reads: hyperparameters with HPE roles, and flags.

        Recorded in every result's provenance at evaluate time; submission validation
        derives the grid from it (never from free metadata) and verification checks that
        the installed plugin still declares the same.
        """
        schema: dict[str, Any] = {
            "name": cls.name,
            "fields": [{k: f[k] for k in SCHEMA_FIELD_KEYS} for f in cls.options()],
            "training_free": cls.training_free,
            "transductive": cls.transductive,
            "frozen_backbone": cls.frozen_backbone,
            "needs_text": cls.needs_text,
        }
        recipes = cls.own_recipes()
        if recipes:  # only where declared, so schemas recorded before recipes still match
            schema["recipes"] = [recipe.describe() for recipe in recipes]
        return schema

    @classmethod
    def own_recipes(cls) -> tuple[Recipe, ...]:
        """The recipes this class declares itself.

        A subclass does not inherit its parent's recipes: a recipe cites how a paper ran
        that method, and a subclass (another plugin's variant) is another method.
        """
        recipes: tuple[Recipe, ...] = cls.__dict__.get("recipes", ())
        return recipes

    @classmethod
    def recipe(cls, name: str | None = None) -> Recipe:
        """The published recipe called ``name`` (the only one, when ``name`` is ``None``).

        Raises:
            ConfigError: the adapter declares no such recipe, naming the ones it has.
        """
        known = {r.name: r for r in cls.own_recipes()}
        if name is None and len(known) == 1:
            return next(iter(known.values()))
        if name in known:
            return known[name]
        have = ", ".join(known) or "none"
        wanted = "a recipe name (--recipe)" if name is None else f"recipe {name!r}"
        raise ConfigError(f"adapter {cls.name!r}: need {wanted}; its published recipes: {have}")

    @classmethod
    def options(cls) -> list[dict[str, Any]]:
        """Return the ``Config`` fields (with their valid ranges) as JSON-friendly dicts."""
        return [dataclasses.asdict(f) for f in cls.Config.fields_info()]


def _check_recipes(cls: type[Adapter], where: str) -> None:
    """Every declared recipe builds a valid ``Config`` on every dataset it names.

    Raises:
        RegistrationError: a recipe that is not a :class:`Recipe`, a repeated name, or
            values the ``Config`` refuses (named with the recipe and dataset).
    """
    names: set[str] = set()
    for recipe in cls.own_recipes():
        if not isinstance(recipe, Recipe):
            raise RegistrationError(f"{where}: recipes must be fewtrans_board Recipe objects")
        if recipe.name in names:
            raise RegistrationError(f"{where}: two recipes are named {recipe.name!r}")
        names.add(recipe.name)
        for dataset in (None, *recipe.per_dataset):
            try:
                cls.Config.from_dict(recipe.values_for(dataset))
            except ConfigError as exc:
                on = f" on {dataset}" if dataset else ""
                raise RegistrationError(
                    f"{where}: recipe {recipe.name!r}{on} is not a valid configuration: {exc}"
                ) from exc
