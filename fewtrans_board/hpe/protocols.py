"""Named, versioned HPE protocols and the grids they build around an adapter's centre.

Each protocol's ``description`` below says its grid and fusion (README.md, "HPE protocols",
tabulates them). Readings of the paper pinned here: an adapter with one learning rate gets
the 3-point rule extended one step each way ("the other rules remain unchanged"); E = centre
epochs + 10 is rounded half up, at least 1; ``fewtrans-reference``'s vote breaks ties to the
lowest class index (what ``torch.mode`` returns on CPU); ``published`` runs each method's
cited recipe, as the inductive-CLIP paper runs every method (a training-free adapter
too: it declares its one published configuration as a recipe, e.g. mean-centroid's
``bscd``, so the recipe a run evaluated is recorded and checked like any other). A spaced
variant ``NAME@xS`` (:meth:`HpeProtocol.spaced`; the released code's commented "x3" and
"x10" grids) and ``sweep`` (explicit axes, :meth:`HpeProtocol.with_axes`) are analysis
protocols that no leaderboard accepts.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.core.canonical import canonical_json, sha256_text
from fewtrans_board.core.errors import ConfigError, FewtransError

Aggregation = Literal["logit-mean", "vote"]


@dataclass(frozen=True, kw_only=True)
class HpeProtocol:
    """How the configuration grid is built and how member predictions are fused.

    Attributes:
        name: protocol name.
        version: bumped whenever the grid or the fusion rule changes (from 1).
        description: one paragraph.
        lr_multipliers: multipliers of each learning-rate axis when an adapter has two
            or more learning rates (default: the centre alone).
        single_lr_multipliers: multipliers when it has exactly one.
        epoch_rule: ``"paper"`` ({E/3, 2E/3, E}, E = centre + 10), ``"fixed"`` (centre),
            ``"centre-only"`` (no grid at all) or ``"explicit"`` (a sweep: the grid is
            ``axes``, not built around the centre).
        aggregation: ``"logit-mean"`` or ``"vote"`` (the headline aggregation).
        leaderboard: whether leaderboards accept it; such a protocol requires every
            adapter that trains to declare its learning-rate and epoch axes.
        centre_rule: where the centre comes from: ``"searched"`` (defaults, a held-out
            centre search, ``--config``) or ``"recipe"`` (an adapter's published recipe on
            the run's dataset, nothing else).
        base: the protocol a spaced variant spreads differently (``None``: a named one).
        sweep_axes: a sweep's explicit axes, ``((field, values), ...)`` in grid order.
    """

    name: str
    version: int = 1
    description: str
    lr_multipliers: tuple[Fraction, ...] = (Fraction(1),)
    single_lr_multipliers: tuple[Fraction, ...] = (Fraction(1),)
    epoch_rule: Literal["paper", "fixed", "centre-only", "explicit"]
    aggregation: Aggregation
    leaderboard: bool = True
    centre_rule: Literal["searched", "recipe"] = "searched"
    base: str | None = None
    sweep_axes: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def spacing(self) -> int | None:
        """The factor between neighbouring learning rates (``None``: no learning-rate axis)."""
        if self.epoch_rule in ("centre-only", "explicit") or len(self.lr_multipliers) < 2:
            return None
        top = self.lr_multipliers[-1]
        return int(top) if top.denominator == 1 else None

    def spaced(self, spacing: int) -> HpeProtocol:
        """This protocol with learning-rate axes spread by ``spacing`` instead.

        Every other rule (points per axis, epochs, fusion, version) is kept. The spacing of
        a named protocol gives that protocol itself; any other gives ``NAME@xSPACING``, an
        analysis protocol no leaderboard accepts.

        Args:
            spacing: the factor between neighbouring learning rates, at least 2.

        Raises:
            FewtransError: the protocol has no learning-rate grid, or ``spacing`` < 2.
        """
        root = HPE_PROTOCOLS.get(self.base or self.name, self)
        if root.spacing is None:
            raise FewtransError(
                f"the {root.name} protocol has no learning-rate grid whose spacing could change"
            )
        if isinstance(spacing, bool) or not isinstance(spacing, int) or spacing < 2:
            raise FewtransError(f"a grid spacing is a whole factor of at least 2, got {spacing!r}")
        if spacing == root.spacing:
            return root
        return dataclasses.replace(
            root,
            name=f"{root.name}@x{spacing}",
            description=f"{root.name} with learning-rate axes spaced x{spacing} "
            f"(instead of x{root.spacing}); an analysis protocol (FewTrans Fig. 4, right).",
            lr_multipliers=spaced_multipliers(spacing, len(root.lr_multipliers)),
            single_lr_multipliers=spaced_multipliers(spacing, len(root.single_lr_multipliers)),
            leaderboard=False,
            base=root.name,
        )

    def with_axes(self, axes: Mapping[str, Sequence[Any]]) -> HpeProtocol:
        """The sweep over ``axes`` (``{field: values}``, in grid order).

        Raises:
            FewtransError: not the sweep protocol, no axis, an empty axis, a repeated value
                or a value that is not a JSON scalar.
        """
        if self.epoch_rule != "explicit":
            raise FewtransError(f"explicit axes make a sweep, not a {self.name} run")
        if not axes:
            raise FewtransError("a sweep needs at least one axis (--grid FIELD=V1,V2,...)")
        clean: list[tuple[str, tuple[Any, ...]]] = []
        for name, values in axes.items():
            values = tuple(values)
            if not values:
                raise FewtransError(f"sweep axis {name!r} has no values")
            if any(not isinstance(v, str | int | float | bool) for v in values):
                raise FewtransError(f"sweep axis {name!r}: values must be numbers, text or bools")
            if len(set(map(canonical_json, values))) != len(values):
                raise FewtransError(f"sweep axis {name!r} repeats a value: {list(values)}")
            clean.append((str(name), values))
        return dataclasses.replace(self, sweep_axes=tuple(clean))

    def axes_for(self, centre: dict[str, Any], roles: dict[str, str]) -> dict[str, list[Any]]:
        """Values of every varied axis, from plain data (no plugin code needed).

        Args:
            centre: the centre configuration values.
            roles: ``{field: "lr" | "epochs"}`` in Config field order.
        """
        axes: dict[str, list[Any]] = {}
        if self.epoch_rule == "explicit":
            return {name: list(values) for name, values in self.sweep_axes}
        if self.epoch_rule == "centre-only":
            return axes
        ordered = canonical_roles(roles)
        lr_fields = [name for name, role in ordered.items() if role == "lr"]
        multipliers = self.single_lr_multipliers if len(lr_fields) == 1 else self.lr_multipliers
        for name, role in ordered.items():
            if role == "lr":
                axes[name] = [_scale(centre[name], m) for m in multipliers]
            elif role == "epochs" and self.epoch_rule == "paper":
                top = int(centre[name]) + 10
                axes[name] = sorted(
                    {max(1, int(Fraction(top * j, 3) + Fraction(1, 2))) for j in (1, 2, 3)}
                )
        return axes

    def grid_for(self, centre: dict[str, Any], roles: dict[str, str]) -> list[dict[str, Any]]:
        """All configurations as dicts, in the Cartesian-product order of the axes.

        The axes come in :func:`canonical_roles` order, so the grid (and its configuration
        indices) does not depend on the order in which ``roles`` lists them.
        """
        axes = self.axes_for(centre, roles)
        names = list(axes)
        return [
            {**centre, **dict(zip(names, combo, strict=True))}
            for combo in itertools.product(*(axes[n] for n in names))
        ]

    def axes(self, adapter: type[Adapter], centre: AdapterConfig) -> dict[str, list[Any]]:
        """Values of every axis the protocol varies, keyed by Config field name."""
        return self.axes_for(centre.to_dict(), hpe_roles(adapter))

    def grid(self, adapter: type[Adapter], centre: AdapterConfig) -> list[AdapterConfig]:
        """All configurations, in the order of the Config fields' Cartesian product.

        Raises:
            ConfigError: a grid point leaves a field's declared range.
        """
        configs = []
        for values in self.grid_for(centre.to_dict(), hpe_roles(adapter)):
            try:
                configs.append(adapter.Config.from_dict(values))
            except ConfigError as exc:
                if self.epoch_rule == "explicit":
                    raise ConfigError(
                        f"a point of the sweep grid of adapter {adapter.name!r} is not a valid "
                        f"configuration: {exc}"
                    ) from exc
                raise ConfigError(
                    f"the {self.name} grid around the centre {centre.to_dict()} of adapter "
                    f"{adapter.name!r} leaves a declared range: {exc}; move the centre"
                ) from exc
        if self.epoch_rule == "explicit" and len({c.digest() for c in configs}) != len(configs):
            raise ConfigError(
                f"the {self.name} grid of adapter {adapter.name!r} holds one configuration "
                "twice (a value repeated in another spelling?)"
            )
        return configs

    def describe(self) -> dict[str, Any]:
        """JSON-friendly definition (a sweep adds its ``axes`` as ``[field, values]`` pairs)."""
        described: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "lr_multipliers": [str(m) for m in self.lr_multipliers],
            "single_lr_multipliers": [str(m) for m in self.single_lr_multipliers],
            "epoch_rule": self.epoch_rule,
            "aggregation": self.aggregation,
        }
        if self.epoch_rule == "explicit":
            described["axes"] = [[name, list(values)] for name, values in self.sweep_axes]
        return described

    def digest(self, adapter: type[Adapter], centre: AdapterConfig) -> str:
        """Hash of the protocol definition and the concrete grid (recorded on results)."""
        return self.digest_for(centre.to_dict(), hpe_roles(adapter))

    def digest_for(self, centre: dict[str, Any], roles: dict[str, str]) -> str:
        """:meth:`digest` from plain data (used by submission validation)."""
        grid = self.grid_for(centre, roles)
        return sha256_text(canonical_json({"protocol": self.describe(), "grid": grid}))


def canonical_roles(roles: dict[str, str]) -> dict[str, str]:
    """``roles`` ordered learning rates first, then epochs, each by field name.

    Roles read back from stored JSON come out alphabetically while an adapter declares them
    in field order; both must build the same grid.
    """
    return dict(sorted(roles.items(), key=lambda item: (("lr", "epochs").index(item[1]), item[0])))


def schema_roles(schema: dict[str, Any]) -> dict[str, str]:
    """``{field: "lr" | "epochs"}`` from a recorded adapter schema (see ``Adapter.schema``)."""
    return canonical_roles(
        {f["name"]: f["hpe"] for f in schema["fields"] if f.get("hpe") is not None}
    )


def check_schema_fits(protocol: HpeProtocol, schema: dict[str, Any]) -> None:
    """Refuse an adapter whose declarations let it escape a leaderboard protocol's grid.

    Under a leaderboard protocol an adapter that trains anything declares at least one
    learning-rate axis and exactly one epoch axis, so the protocol (not the method author)
    decides the grid it is ensembled over. Only a ``training_free`` adapter has no axis.

    Args:
        protocol: the HPE protocol of the run.
        schema: the adapter's declarations (``Adapter.schema()`` or a recorded copy).

    Raises:
        FewtransError: naming the adapter and what it must declare.
    """
    if not protocol.leaderboard:
        return
    roles = list(schema_roles(schema).values())
    name = schema.get("name", "?")
    if schema.get("training_free"):
        if roles:
            raise FewtransError(
                f"adapter {name!r} declares training_free but has HPE axes; drop one or the other"
            )
        return
    if roles.count("lr") < 1 or roles.count("epochs") != 1:
        raise FewtransError(
            f"adapter {name!r} trains (it does not declare training_free = True) but declares "
            f"{roles.count('lr')} learning-rate and {roles.count('epochs')} epoch axes; under "
            f"the {protocol.name} protocol an adapter that trains must declare every learning "
            "rate with hparam(..., hpe='lr') and its epoch count with hparam(..., hpe='epochs'), "
            "so that the protocol builds the grid. A method that trains nothing declares "
            "training_free = True."
        )


def hpe_roles(adapter: type[Adapter]) -> dict[str, str]:
    """``{field: "lr" | "epochs"}`` of an adapter's Config, in :func:`canonical_roles` order."""
    return canonical_roles(
        {f.name: f.hpe for f in adapter.Config.fields_info() if f.hpe is not None}
    )


def _scale(value: float, multiplier: Fraction) -> float:
    # Round to 12 significant digits so 1e-5/5 is 2e-06, not 2.0000000000000003e-06.
    return float(f"{float(value) * multiplier.numerator / multiplier.denominator:.12g}")


def spaced_multipliers(spacing: int, points: int) -> tuple[Fraction, ...]:
    """``points`` multipliers of a learning-rate axis spaced by ``spacing``, centre in the middle.

    ``spaced_multipliers(5, 3)`` is {1/5, 1, 5}; ``spaced_multipliers(3, 5)`` is
    {1/9, 1/3, 1, 3, 9}.
    """
    half = points // 2
    return tuple(Fraction(spacing) ** k for k in range(-half, points - half))


THREE = spaced_multipliers(5, 3)
FIVE = spaced_multipliers(5, 5)

HPE_PROTOCOLS: dict[str, HpeProtocol] = {
    p.name: p
    for p in (
        HpeProtocol(
            name="fewtrans-paper",
            description=(
                "FewTrans paper: learning rates x{1/5, 1, 5} (5-point x{1/25..25} for one-LR "
                "methods), epochs {E/3, 2E/3, E} with E = centre + 10; logit averaging."
            ),
            lr_multipliers=THREE,
            single_lr_multipliers=FIVE,
            epoch_rule="paper",
            aggregation="logit-mean",
        ),
        HpeProtocol(
            name="fewtrans-reference",
            description=(
                "FewTrans released code: learning rates x{1/5, 1, 5}, epochs fixed at the "
                "centre; majority vote, ties to the lowest class index."
            ),
            lr_multipliers=THREE,
            single_lr_multipliers=THREE,
            epoch_rule="fixed",
            aggregation="vote",
        ),
        HpeProtocol(
            name="single",
            description="The centre configuration alone (no ensemble); a baseline for comparisons.",
            epoch_rule="centre-only",
            aggregation="logit-mean",
            leaderboard=False,
        ),
        HpeProtocol(
            name="published",
            description=(
                "Each method as published: the adapter's cited recipe on each dataset "
                "(optimiser, learning rate, epochs, batch size, templates), one configuration, "
                "no centre search and no ensemble."
            ),
            epoch_rule="centre-only",
            aggregation="logit-mean",
            centre_rule="recipe",
        ),
    )
}


SWEEP = HpeProtocol(
    name="sweep",
    description=(
        "A hyperparameter sweep (FewTrans Table I, Fig. 2): the Cartesian product of explicit "
        "axes, every configuration scored on its own; no ensemble is reported and no "
        "leaderboard accepts it."
    ),
    epoch_rule="explicit",
    aggregation="logit-mean",
    leaderboard=False,
)
"""The sweep protocol without axes (a run gets its own with :meth:`HpeProtocol.with_axes`)."""


def get_hpe_protocol(name: str) -> HpeProtocol:
    """Look up an HPE protocol by name: a named one, ``NAME@xS`` (spaced) or ``sweep``.

    Raises:
        FewtransError: an unknown name, or ``NAME@xS`` with the named protocol's own spacing.
    """
    if name in HPE_PROTOCOLS:
        return HPE_PROTOCOLS[name]
    if name == SWEEP.name:
        return SWEEP
    base, sep, factor = name.partition("@x")
    if sep and base in HPE_PROTOCOLS and factor.isdigit() and not factor.startswith("0"):
        protocol = HPE_PROTOCOLS[base].spaced(int(factor))
        if protocol.name != name:
            raise FewtransError(f"{name!r} is the {base} protocol itself: name it {base!r}")
        return protocol
    raise FewtransError(
        f"unknown HPE protocol {name!r}; known: {', '.join(HPE_PROTOCOLS)}, a spaced variant "
        "NAME@xS (e.g. fewtrans-paper@x3) or sweep"
    )
