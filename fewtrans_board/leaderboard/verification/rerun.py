"""Re-run one dataset of a submission in a plugin worker: the episodes and the probes.

Every request goes to a fresh episode process, in a random order only the judge knows, with
the queries in a secret presentation order: the *re-run* (the whole grid, exactly as
``evaluate`` asked it, its rows built by the runner's code and compared with every stored
split), the *inductive probe* (the same fit asked for query subsets only), the *fit probe*
(each configuration alone with ``fit``) and the *memorisation probe* (every query perturbed:
:mod:`~fewtrans_board.leaderboard.verification.perturb`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.datasets.images import ImageStore
from fewtrans_board.episodes.manifest import Manifest, ManifestEpisode
from fewtrans_board.leaderboard.verification.perturb import perturbed_pixels
from fewtrans_board.leaderboard.verification.sampling import SamplePlan
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.row_schema import CONFIG_KIND, accuracy_percent
from fewtrans_board.runner.episode_rows import episode_rows
from fewtrans_board.runner.evaluate import ConfigOutcome, config_seed
from fewtrans_board.runner.features import FeatureCache
from fewtrans_board.runner.image_scope import FEATURE_UNIVERSE, copy_scope
from fewtrans_board.runner.inductive import inductive_gap, verification_probes
from fewtrans_board.runner.plan import episode_items
from fewtrans_board.runner.presentation import EpisodeInputs, episode_inputs, in_manifest_order
from fewtrans_board.runner.worker.isolated import PluginWorker
from fewtrans_board.runner.worker.messages import FitReply
from fewtrans_board.runner.worker.remote import WorkerEmbedder, fit_request, outcomes_from_reply

if TYPE_CHECKING:
    from fewtrans_board.api.dataset_spec import DatasetSpec


@dataclass
class StoredSplit:
    """The stored rows of one split of one episode (``base``, or ``novel`` classes).

    Attributes:
        configs: each configuration's predictions, by configuration index.
        config_accuracy: each configuration's accuracy.
        ensembles: each fusion's predictions (``logit-mean``, ``vote``).
        ensemble_accuracy: each fusion's accuracy.
    """

    configs: dict[int, list[int]] = field(default_factory=dict)
    config_accuracy: dict[int, float] = field(default_factory=dict)
    ensembles: dict[str, list[int]] = field(default_factory=dict)
    ensemble_accuracy: dict[str, float] = field(default_factory=dict)


@dataclass
class StoredEpisode:
    """The stored rows of one episode that verification compares, every split.

    Attributes:
        splits: the rows of each split the manifest defines.
        seconds: claimed fit seconds of the episode (all configurations, base rows).
    """

    splits: dict[str, StoredSplit] = field(default_factory=dict)
    seconds: float = 0.0


def stored_episodes(run: RunResults) -> dict[int, StoredEpisode]:
    """Stored predictions and accuracies of every split, by episode (no logits read)."""
    names = [
        "episode",
        "kind",
        "aggregation",
        "config_index",
        "predictions",
        "accuracy",
        "seconds",
        "split",
    ]
    columns = run.table.select(names).to_pydict()
    grouped: dict[int, StoredEpisode] = {}
    for episode, kind, agg, index, predictions, accuracy, seconds, split in zip(
        *(columns[n] for n in names), strict=True
    ):
        stored = grouped.setdefault(episode, StoredEpisode())
        rows = stored.splits.setdefault(split, StoredSplit())
        if kind == CONFIG_KIND:
            rows.configs[index] = predictions
            rows.config_accuracy[index] = float(accuracy)
            if split == "base":
                stored.seconds += float(seconds or 0.0)
        else:
            rows.ensembles[agg] = predictions
            rows.ensemble_accuracy[agg] = float(accuracy)
    return grouped


def quantity(split: str, name: str) -> str:
    """The key of one compared accuracy: ``base:vote``, ``novel:config:3``, ``base:mean-single``."""
    return f"{split}:{name}"


def config_quantity(split: str, index: int) -> str:
    """The key of one configuration's accuracy."""
    return quantity(split, f"config:{index}")


@dataclass
class EpisodeCheck:
    """What re-running one episode found.

    Attributes:
        episode: the episode index.
        claimed: the stored HPE accuracy (base split).
        rerun: the re-run's HPE accuracy (base split).
        configs_equal: configurations whose predictions equal the stored ones (every
            split).
        configs: configurations compared.
        hpe_equal: the fused predictions equal the stored ones.
        identical: every prediction of every configuration and fusion of every split
            equals the stored one.
        agreement: share of (configuration, query) predictions that equal the stored.
        accuracies: ``{quantity: [claimed, re-run]}`` for every configuration, every
            fusion and the mean over configurations of every split (keys from
            :func:`quantity`).
        claimed_seconds: the stored fit seconds of the episode.
        rerun_seconds: the judge's wall-clock seconds of the re-run request.
        probe_seconds: the judge's wall-clock seconds of each probe request.
        probe_gap: largest relative logit change of a query asked in a subset, if probed.
        fit_gain: accuracy of the batched fit minus fitting each configuration alone
            (mean over configurations), if probed.
        perturbed: HPE accuracy with perturbed query images, if probed.
        seconds: wall-clock seconds of the episode's requests.
    """

    episode: int
    claimed: float
    rerun: float
    configs_equal: int
    configs: int
    hpe_equal: bool
    agreement: float
    identical: bool = False
    accuracies: dict[str, list[float]] = field(default_factory=dict)
    claimed_seconds: float = 0.0
    rerun_seconds: float = 0.0
    probe_seconds: dict[str, float] = field(default_factory=dict)
    probe_gap: float | None = None
    fit_gain: float | None = None
    perturbed: float | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the per-quantity accuracies are summarised per dataset)."""
        return {k: v for k, v in self.__dict__.items() if k != "accuracies"}


@dataclass
class DatasetRerun:
    """Everything one dataset's verification needs from the store and the worker."""

    run: RunResults
    manifest: Manifest
    worker: PluginWorker
    images: ImageStore
    configs: list[Any]
    digests: list[str]
    aggregation: str
    salt: str
    serve_features: bool
    memoize: bool
    transductive: bool
    universe: list[str]
    _cache: FeatureCache | None = None

    def cache(self) -> FeatureCache | None:
        """Frozen features computed by the worker in the chunks ``evaluate`` used."""
        if not self.serve_features:
            return None
        if self._cache is None:
            assert self.worker.info is not None
            threads = int(self.worker.settings.threads or 1)
            self._cache = FeatureCache(
                WorkerEmbedder(self.worker, threads), self.images, None, universe=self.universe
            )
        return self._cache

    def inputs(self, episode: ManifestEpisode) -> EpisodeInputs:
        """The episode as the worker sees it, queries in the secret order."""
        return episode_inputs(
            episode,
            self.images.spec,
            self.images,
            self.cache(),
            self.manifest.sha256,
            serve="features" if self.serve_features else "pixels",
            memoize_features=self.memoize,
            salt=self.salt,
        )

    def seeds(self, episode: ManifestEpisode) -> list[int]:
        """The recorded torch seed of each configuration."""
        return [config_seed(self.manifest.sha256, episode.index, d) for d in self.digests]

    def ask(self, inputs: EpisodeInputs, seeds: list[int], **options: Any) -> FitReply:
        """One request to a fresh episode process."""
        request = fit_request(inputs, self.configs, seeds, memoize=self.memoize, **options)
        return self.worker.fit(request)

    def perturbed_queries(self, inputs: EpisodeInputs, rng: np.random.Generator) -> np.ndarray:
        """The presented queries after the memorisation probe's secret perturbation."""
        episode = inputs.episode
        items = [episode.query[int(i)][0] for i in inputs.query_order]
        pixels = perturbed_pixels(self.images, items, rng)
        if not self.serve_features:
            return pixels.numpy()
        (features,) = self.worker.embed([pixels.numpy()], 256)
        return features


class _Configs:
    """Configuration values as the runner's result rows read them (``to_dict``)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)


def _rows(
    job: DatasetRerun, inputs: EpisodeInputs, seeds: list[int], reply: FitReply
) -> list[dict[str, Any]]:
    configs = [_Configs(c) for c in job.configs]
    outcomes: list[ConfigOutcome] = outcomes_from_reply(inputs, configs, seeds, reply)  # type: ignore[arg-type]
    return episode_rows("verify", job.run.dataset, job.manifest.sha256, inputs, outcomes)


def _hpe_row(rows: list[dict[str, Any]], aggregation: str) -> dict[str, Any]:
    return next(r for r in rows if r["split"] == "base" and r["aggregation"] == aggregation)


@dataclass
class _Comparison:
    """Re-run rows against the stored ones, over every split."""

    accuracies: dict[str, list[float]] = field(default_factory=dict)
    equal: list[bool] = field(default_factory=list)
    matches: list[float] = field(default_factory=list)
    ensembles_equal: bool = True


def _compare(rows: list[dict[str, Any]], stored: StoredEpisode) -> _Comparison:
    """Every configuration's and fusion's predictions and accuracy, claimed vs re-run."""
    found = _Comparison()
    splits = {r["split"] for r in rows} | set(stored.splits)
    for split in sorted(splits):
        claimed = stored.splits.get(split, StoredSplit())
        mine = [r for r in rows if r["split"] == split]
        config_rows = sorted(
            (r for r in mine if r["kind"] == CONFIG_KIND), key=lambda r: r["config_index"]
        )
        if len(config_rows) != len(claimed.configs):
            found.ensembles_equal = False  # a split or a configuration the other lacks
        for row in config_rows:
            index = row["config_index"]
            before = claimed.configs.get(index)
            found.equal.append(row["predictions"] == before)
            found.matches.append(
                float(np.mean(np.asarray(row["predictions"]) == np.asarray(before)))
                if before is not None and len(before) == len(row["predictions"])
                else 0.0
            )
            found.accuracies[config_quantity(split, index)] = [
                claimed.config_accuracy.get(index, float("nan")),
                float(row["accuracy"]),
            ]
        if config_rows:
            found.accuracies[quantity(split, "mean-single")] = [
                float(np.mean(list(claimed.config_accuracy.values())))
                if claimed.config_accuracy
                else float("nan"),
                float(np.mean([r["accuracy"] for r in config_rows])),
            ]
        for row in (r for r in mine if r["kind"] != CONFIG_KIND):
            name = row["aggregation"]
            found.ensembles_equal &= row["predictions"] == claimed.ensembles.get(name)
            found.accuracies[quantity(split, name)] = [
                claimed.ensemble_accuracy.get(name, float("nan")),
                float(row["accuracy"]),
            ]
    return found


def _timed(ask: Callable[[], FitReply], seconds: dict[str, float], kind: str) -> FitReply:
    started = time.perf_counter()
    reply = ask()
    seconds[kind] = time.perf_counter() - started
    return reply


def check_episode(
    job: DatasetRerun,
    episode: ManifestEpisode,
    stored: StoredEpisode,
    probes: set[str],
    rng: np.random.Generator,
) -> EpisodeCheck:
    """Re-run one episode (and the probes named in ``probes``) in random order.

    Every split's configurations and fusions are compared with the stored rows; the
    judge times each request itself.
    """
    started = time.perf_counter()
    inputs = job.inputs(episode)
    seeds = job.seeds(episode)
    requests = ["rerun", *sorted(probes)]
    replies: dict[str, FitReply] = {}
    seconds: dict[str, float] = {}
    subsets = verification_probes(len(inputs.query_labels), int(rng.integers(1 << 31)))
    options: dict[str, dict[str, Any]] = {
        "rerun": {},
        "inductive": {"query_subsets": subsets},
        "fit": {"loop": True},
    }
    for kind in [requests[i] for i in rng.permutation(len(requests))]:
        if kind == "perturbed":  # drawn from the secret stream when its turn comes
            options[kind] = {"query_override": job.perturbed_queries(inputs, rng)}
        replies[kind] = _timed(partial(job.ask, inputs, seeds, **options[kind]), seconds, kind)
    rows = _rows(job, inputs, seeds, replies["rerun"])
    compared = _compare(rows, stored)
    hpe_row = _hpe_row(rows, job.aggregation)
    base = stored.splits.get("base", StoredSplit())
    check = EpisodeCheck(
        episode=episode.index,
        claimed=base.ensemble_accuracy.get(job.aggregation, float("nan")),
        rerun=float(hpe_row["accuracy"]),
        configs_equal=int(sum(compared.equal)),
        configs=len(compared.equal),
        hpe_equal=hpe_row["predictions"] == base.ensembles.get(job.aggregation),
        agreement=float(np.mean(compared.matches)) if compared.matches else 0.0,
        identical=all(compared.equal) and compared.ensembles_equal,
        accuracies=compared.accuracies,
        claimed_seconds=stored.seconds,
        rerun_seconds=seconds["rerun"],
        probe_seconds={k: v for k, v in seconds.items() if k != "rerun"},
    )
    full = [np.asarray(reply) for reply in _manifest_logits(inputs, replies["rerun"])]
    if "inductive" in replies:
        check.probe_gap = max(
            inductive_gap(full[c], subsets, replies["inductive"].query[c])
            for c in range(len(job.configs))
        )
    if "fit" in replies:
        labels = inputs.query_labels
        gains = [
            accuracy_percent(b.argmax(axis=1), labels) - accuracy_percent(a.argmax(axis=1), labels)
            for b, a in zip(full, _manifest_logits(inputs, replies["fit"]), strict=True)
        ]
        check.fit_gain = float(np.mean(gains))
    if "perturbed" in replies:
        perturbed_rows = _rows(job, inputs, seeds, replies["perturbed"])
        check.perturbed = float(_hpe_row(perturbed_rows, job.aggregation)["accuracy"])
    check.seconds = time.perf_counter() - started
    return check


def _manifest_logits(inputs: EpisodeInputs, reply: FitReply) -> list[np.ndarray]:
    return [in_manifest_order(per_config[0], inputs.query_order) for per_config in reply.query]


def rerun_dataset(
    job: DatasetRerun,
    plan: SamplePlan,
    stored: dict[int, StoredEpisode],
    probe_episodes: int,
    rng: np.random.Generator,
    tick: Callable[[int], Any] | None = None,
) -> tuple[list[EpisodeCheck], bool]:
    """Re-run the planned episodes in order, the first ``probe_episodes`` with probes.

    ``tick(1)`` is called after each episode (a progress meter's ``update``).

    Goes past the plan's minimum while the judge's own measure of a re-run request
    projects every planned episode within the budget (:meth:`SamplePlan.keep_going`);
    the order is a secret random permutation, so any prefix is a uniform sample.

    Returns:
        The checks, and whether the budget cut the plan short.
    """
    assert job.worker.info is not None
    episodes = job.manifest.episodes()
    kinds = {"perturbed"}
    if not job.transductive:
        kinds.add("inductive")
    if job.worker.info.batches:
        kinds.add("fit")
    cache = job.cache()
    if cache is not None:  # one embedding pass over every chunk the minimum needs
        cache.ensure(episode_items(episodes[p] for p in plan.order[: plan.minimum]))
    checks: list[EpisodeCheck] = []
    while plan.keep_going([c.rerun_seconds for c in checks]):
        episode = episodes[plan.order[len(checks)]]
        if cache is not None:
            cache.ensure(episode_items([episode]))
        probes = kinds if len(checks) < probe_episodes else set()
        checks.append(check_episode(job, episode, stored[episode.index], probes, rng))
        if tick is not None:
            tick(1)
    return checks, len(checks) < len(plan.order)


def rerun_universe(
    recorded: str | None, spec: DatasetSpec, root: Path | None, manifest: Manifest
) -> list[str]:
    """The items a re-run chunks frozen features over: those the run chunked over.

    Args:
        recorded: the run's ``feature_universe`` (``"dataset"``: the copy's items, as
            :func:`~fewtrans_board.runner.image_scope.decoded_scope` lists them; ``None``:
            the manifest's, as older runs chunked).
        spec: the dataset.
        root: the verifier's copy.
        manifest: the run's manifest.

    Returns:
        The sorted items; a re-run episode then sees the run's features to the last bit.
    """
    wanted = episode_items(manifest.episodes())
    if recorded == FEATURE_UNIVERSE:
        return copy_scope(spec, root, wanted, manifest.sha256).items
    return sorted(set(wanted))
