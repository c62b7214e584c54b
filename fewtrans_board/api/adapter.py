"""``Adapter``: a transfer algorithm, its ``Config`` and the ``Predictor`` it returns.

An adapter is registered as a class. Its nested ``Config`` dataclass declares the
hyperparameters with help text (and, for the ones the HPE protocol varies, their role:
a learning rate or the epoch count). ``fit`` adapts a backbone to a support set and
returns a predictor that maps query images to logits; the core, not the adapter,
computes accuracy, and query labels are never passed to adapters.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from fewtrans_board.api.config import (
    _SCALARS,
    SCHEMA_FIELD_KEYS,
    AdapterConfig,
    ConfigField,
    HpeRole,
    checked_value,
    config_digest,
    hparam,
    type_hints,
    typed_values,
)
from fewtrans_board.api.ranges import bound_problem, out_of_range
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.core.errors import ConfigError, RegistrationError

__all__ = [
    "SCHEMA_FIELD_KEYS",
    "Adapter",
    "AdapterConfig",
    "ConfigField",
    "HpeRole",
    "Predictor",
    "checked_value",
    "config_digest",
    "hparam",
    "typed_values",
]

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet
    from fewtrans_board.api.fit_options import FitOptions


_SUMMARY_KEYS = (
    *("name", "description", "paper", "code", "trains"),
    *("needs_text", "frozen_backbone", "training_free", "transductive"),
)
"""The class attributes :meth:`Adapter.summary` lists, in order."""


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
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
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
        hints = type_hints(config)  # type: ignore[arg-type]  # classes hash by id
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
        return {key: getattr(cls, key) for key in _SUMMARY_KEYS}

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
