"""Run every configuration of the grid on one episode and check what adapters return.

Two layers: :func:`fit_predictors` and :func:`predict_logits` are all that touches adapter
code (they see presented tensors only, and run in a verification worker too);
:func:`evaluate_episode` is the core side that seeds each configuration and puts the logits
back into manifest order for scoring.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.plugin_calls import PluginCallError, accepts_keyword, plugin_code
from fewtrans_board.runner.presentation import EpisodeInputs, in_manifest_order

if TYPE_CHECKING:
    from fewtrans_board.api.episode_data import ImageSet, SupportSet
    from fewtrans_board.api.fit_options import FitOptions

Observer = Callable[[int, AdapterConfig, Any], None]
"""``observe(config index, config, predictor)``: an opt-in look at each fitted predictor, for
analyses that need adapted weights (``analyze delta-w``, ``analyze cka``)."""


class EvaluationError(FewtransError):
    """An adapter misbehaved on an episode; the message names episode and configuration."""


@dataclass
class ConfigOutcome:
    """Logits of one configuration on one episode, in manifest order.

    Attributes:
        probe_logits: logits of the query subsets of an inductiveness probe (manifest
            query indices given to :func:`evaluate_episode`), each in the subset's order.
    """

    index: int
    config: AdapterConfig
    seed: int
    logits: np.ndarray
    seconds: float
    novel_logits: np.ndarray | None = None
    probe_logits: list[np.ndarray] = field(default_factory=list)
    record: dict[str, Any] | None = None
    trainable: int | None = None
    """Trainable parameters of the fit (display only; ``None``: not counted)."""


def predictor_record(predictor: Any) -> dict[str, Any] | None:
    """What a predictor asks to keep in the results' provenance (its ``record`` dict).

    Adapters whose fit makes data-dependent choices (IMS-f's layer selection) expose them as
    a JSON-friendly ``record`` attribute; the runner stores it per episode and configuration.
    """
    record = getattr(predictor, "record", None)
    return dict(record) if isinstance(record, dict) else None


def config_seed(manifest_sha256: str, episode: int, config_digest: str) -> int:
    """Deterministic torch seed of an (episode, configuration) pair.

    Args:
        manifest_sha256: the manifest hash.
        episode: the episode index.
        config_digest: ``AdapterConfig.digest()`` of the configuration.
    """
    text = f"{manifest_sha256}:{episode}:{config_digest}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def _checked(logits: Any, expected: tuple[int, int], where: str) -> np.ndarray:
    import torch

    if not isinstance(logits, torch.Tensor):
        raise EvaluationError(
            f"{where}: predict returned {type(logits).__name__}, expected a torch.Tensor "
            f"of shape {expected} (queries x ways)"
        )
    if tuple(logits.shape) != expected:
        raise EvaluationError(
            f"{where}: adapter returned logits of shape {tuple(logits.shape)}, expected {expected} "
            "(queries x ways)"
        )
    array = logits.detach().float().cpu().numpy()
    if not np.isfinite(array).all():
        bad = int((~np.isfinite(array)).any(axis=1).sum())
        raise EvaluationError(
            f"{where}: adapter returned non-finite logits (NaN or inf) for {bad} queries"
        )
    return array


def predict_logits(
    predictor: Any,
    query: ImageSet,
    n_way: int,
    where: str,
    class_names: Sequence[str] | None = None,
) -> np.ndarray:
    """Checked ``[len(query), n_way]`` logits of a predictor, in the order of ``query``.

    Args:
        predictor: what ``fit`` returned.
        query: the query images.
        n_way: number of classes.
        where: names episode and configuration in errors.
        class_names: score these (unseen) classes by name with ``predict_names``
            (base-to-novel); ``None`` calls ``predict``.

    Raises:
        EvaluationError: wrong type, shape or non-finite logits, or no ``predict_names``.
    """
    import torch

    subject = f"the predictor of {type(predictor).__name__}"
    with torch.no_grad():
        if class_names is None:
            with plugin_code(subject, "predict", where, owner=type(predictor)):
                logits = predictor.predict(query)
            return _checked(logits, (len(query), n_way), where)
        if not hasattr(predictor, "predict_names"):
            raise EvaluationError(
                f"{where}: base-to-novel episodes need a predictor with predict_names(query, "
                "class_names) that scores unseen classes by name (CLIP-style adapters)"
            )
        with plugin_code(subject, "predict_names", where, owner=type(predictor)):
            logits = predictor.predict_names(query, list(class_names))
        return _checked(logits, (len(query), len(class_names)), f"{where} (novel classes)")


def fit_predictors(
    adapter: Adapter,
    backbone: Backbone,
    support: SupportSet,
    class_names: Sequence[str],
    configs: Sequence[AdapterConfig],
    seeds: Sequence[int],
    where: Any,
    *,
    loop: bool = False,
    options: FitOptions | None = None,
    trainable: list[int | None] | None = None,
) -> Iterator[tuple[int, Any, float]]:
    """Fit every configuration; yield ``(index, predictor, fit seconds)`` in grid order.

    Adapters that batch configurations (``fit_many``) fit all at once; otherwise (or with
    ``loop``) each configuration is seeded and fitted in turn, and its predictor is dropped
    before the next one is fitted.

    Args:
        adapter: the adapter instance.
        backbone: the loaded backbone.
        support: the presented support set.
        class_names: class names in label order.
        configs: the configurations.
        seeds: one torch seed per configuration.
        where: ``where(i)`` names configuration ``i`` in errors.
        loop: call ``fit`` per configuration even if the adapter batches with
            ``fit_many`` (whose results must equal the loop's).
        options: the run's batching settings, for a ``fit_many`` that declares ``options``
            (one written before ``options`` existed is called with its five arguments).
        trainable: a list as long as ``configs``, filled with each configuration's trainable
            parameter count before it is yielded (:mod:`.worker.trainable`; ``None``: none).

    Raises:
        EvaluationError: the adapter raised a :class:`FewtransError`.
        PluginCallError: the adapter raised any other exception.
    """
    fit = _Fit(adapter, backbone, support, class_names, where, trainable)
    if adapter.overrides_fit_many() and not loop:
        yield from fit.together(configs, seeds, options)
    else:
        yield from fit.one_by_one(configs, seeds)


@dataclass
class _Fit:
    """One episode's fitting: the adapter, what it is fitted on, and what is counted."""

    adapter: Adapter
    backbone: Backbone
    support: SupportSet
    class_names: Sequence[str]
    where: Any
    trainable: list[int | None] | None

    @property
    def subject(self) -> str:
        """Names the adapter in errors."""
        return f"adapter {getattr(self.adapter, 'name', type(self.adapter).__name__)!r}"

    @contextlib.contextmanager
    def calling(self, method: str, where: str, suffix: str = "") -> Iterator[Any]:
        """Run adapter code: count trainable parameters where asked to, name failures.

        A :class:`FewtransError` becomes an :class:`EvaluationError` naming ``where``.
        """
        from fewtrans_board.runner.worker.trainable import counting

        count = counting() if self.trainable is not None else contextlib.nullcontext()
        try:
            with (
                count as counter,
                plugin_code(self.subject, method, where, owner=type(self.adapter)),
            ):
                yield counter
        except (EvaluationError, PluginCallError):
            raise
        except FewtransError as exc:
            raise EvaluationError(f"{where}{suffix}: {exc}") from exc

    def together(
        self, configs: Sequence[AdapterConfig], seeds: Sequence[int], options: FitOptions | None
    ) -> Iterator[tuple[int, Any, float]]:
        """Every configuration in one ``fit_many`` call; each gets an equal share of time."""
        where = self.where
        start = time.perf_counter()
        fit_many, args = self.adapter.fit_many, (self.backbone, self.support, self.class_names)
        with self.calling("fit_many", where(0), " (fit_many)") as counter:
            if options is not None and accepts_keyword(fit_many, "options"):
                predictors = fit_many(*args, configs, seeds, options=options)
            else:
                predictors = fit_many(*args, configs, seeds)
        if len(predictors) != len(configs):
            raise EvaluationError(
                f"{where(0)}: fit_many returned {len(predictors)} predictors for "
                f"{len(configs)} configurations"
            )
        seconds = (time.perf_counter() - start) / max(len(configs), 1)
        if self.trainable is not None:  # measured as a whole: an equal share each
            self.trainable[:] = [round(counter.total / max(len(configs), 1))] * len(configs)
        for i, predictor in enumerate(predictors):
            yield i, predictor, seconds

    def one_by_one(
        self, configs: Sequence[AdapterConfig], seeds: Sequence[int]
    ) -> Iterator[tuple[int, Any, float]]:
        """Each configuration seeded and fitted with ``fit``; its predictor dropped after."""
        import torch

        for i, (config, seed) in enumerate(zip(configs, seeds, strict=True)):
            start = time.perf_counter()
            torch.manual_seed(seed)
            with self.calling("fit", self.where(i)) as counter:
                predictor = self.adapter.fit(self.backbone, self.support, self.class_names, config)
            if self.trainable is not None:
                self.trainable[i] = counter.total
            yield i, predictor, time.perf_counter() - start
            del predictor


def evaluate_episode(
    adapter: Adapter,
    backbone: Backbone,
    inputs: EpisodeInputs,
    configs: Sequence[AdapterConfig],
    manifest_sha256: str,
    *,
    probes: Sequence[np.ndarray] = (),
    loop: bool = False,
    observe: Observer | None = None,
    options: FitOptions | None = None,
) -> list[ConfigOutcome]:
    """Fit and predict every configuration on one episode.

    Each configuration is seeded from (manifest, episode, configuration), so results do
    not depend on order, sharding or resumption.

    Args:
        adapter: the adapter instance.
        backbone: the loaded backbone.
        inputs: the presented episode.
        configs: the grid.
        manifest_sha256: the manifest hash (seeds).
        probes: manifest query indices of subsets to predict on as well, each on its own
            and before the whole set (the inductiveness check of an inline ``preflight``).
        loop: fit with ``fit`` per configuration, never ``fit_many``.
        observe: called with each fitted predictor after it predicted (opt-in; it does not
            change what is computed).
        options: the run's batching settings, passed to a ``fit_many`` that declares them.

    Raises:
        EvaluationError: wrong shape, wrong type or non-finite logits, naming the episode
            and configuration.
    """
    episode = inputs.episode
    seeds = [config_seed(manifest_sha256, episode.index, c.digest()) for c in configs]

    def where(i: int) -> str:
        return (
            f"adapter {adapter.name!r}, episode {episode.index} (stream {episode.stream_index}), "
            f"configuration {i} {configs[i].to_dict()}"
        )

    outcomes = []
    trainable: list[int | None] = [None] * len(configs)
    fitted = fit_predictors(
        adapter,
        backbone,
        inputs.support,
        inputs.class_names,
        configs,
        seeds,
        where,
        loop=loop,
        options=options,
        trainable=trainable,
    )
    for i, predictor, fit_seconds in fitted:
        start = time.perf_counter()
        probe_logits, logits, novel = _predict_episode(predictor, inputs, probes, where(i))
        outcomes.append(
            ConfigOutcome(
                i,
                configs[i],
                seeds[i],
                logits,
                fit_seconds + time.perf_counter() - start,
                novel,
                probe_logits,
                predictor_record(predictor),
                trainable[i],
            )
        )
        if observe is not None:
            observe(i, configs[i], predictor)
    return outcomes


def _predict_episode(
    predictor: Any, inputs: EpisodeInputs, probes: Sequence[np.ndarray], where: str
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray | None]:
    """A fitted predictor's logits: probe subsets (each in its order), queries, novel queries.

    Subsets first, so a predictor cannot replay the whole set's answers for the parts; query
    and novel logits come back in manifest order.
    """
    import torch

    episode = inputs.episode
    position = np.argsort(inputs.query_order)  # manifest query -> presented position
    probe_logits = [
        predict_logits(
            predictor,
            inputs.query.subset(torch.as_tensor(position[probe], dtype=torch.long)),
            episode.ways,
            f"{where} (query subset)",
        )
        for probe in probes
    ]
    logits = predict_logits(predictor, inputs.query, episode.ways, where)
    novel = None
    if inputs.novel_query is not None and inputs.novel_class_names is not None:
        assert inputs.novel_order is not None
        novel = in_manifest_order(
            predict_logits(
                predictor,
                inputs.novel_query,
                len(inputs.novel_class_names),
                where,
                inputs.novel_class_names,
            ),
            inputs.novel_order,
        )
    return probe_logits, in_manifest_order(logits, inputs.query_order), novel
