"""Re-run one dataset of a submission in a plugin worker: the episodes and the probes.

Every request goes to a fresh episode process of one worker, in a random order only this
process knows, with the queries in a secret presentation order:

- *re-run*: the whole grid on the whole query set, exactly as ``evaluate`` asked it; its
  rows are built by the runner's own code and compared with the stored ones;
- *inductive probe*: the same fit, asked for query subsets only (another episode
  process, so nothing the whole set taught a predictor reaches them);
- *fit probe*: each configuration fitted alone with ``fit`` (adapters with ``fit_many``);
- *memorisation probe*: the re-run with every query image shifted by a pixel and
  re-encoded (:mod:`~fewtrans_board.leaderboard.verification.perturb`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fewtrans_board.episodes.manifest import Manifest, ManifestEpisode
from fewtrans_board.leaderboard.verification.perturb import perturbed_pixels
from fewtrans_board.leaderboard.verification.sampling import SamplePlan
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.schema import CONFIG_KIND, accuracy_percent
from fewtrans_board.runner.episodes import EpisodeInputs, episode_inputs
from fewtrans_board.runner.evaluate import ConfigOutcome, config_seed
from fewtrans_board.runner.features import FeatureCache
from fewtrans_board.runner.images import ImageStore
from fewtrans_board.runner.inductive import inductive_gap, verification_probes
from fewtrans_board.runner.isolated import PluginWorker
from fewtrans_board.runner.remote import WorkerEmbedder, fit_request, outcomes_from_reply
from fewtrans_board.runner.rows import episode_rows
from fewtrans_board.runner.worker_messages import FitReply


@dataclass
class StoredEpisode:
    """The stored base-split rows of one episode that verification compares."""

    configs: dict[int, list[int]] = field(default_factory=dict)
    ensembles: dict[str, list[int]] = field(default_factory=dict)
    hpe_accuracy: float = 0.0
    config_accuracy: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0


def stored_episodes(run: RunResults, aggregation: str) -> dict[int, StoredEpisode]:
    """Stored predictions and accuracies of the base split, by episode (no logits read)."""
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
        if split != "base":
            continue
        stored = grouped.setdefault(episode, StoredEpisode())
        if kind == CONFIG_KIND:
            stored.configs[index] = predictions
            stored.config_accuracy[index] = float(accuracy)
            stored.seconds += float(seconds or 0.0)
        else:
            stored.ensembles[agg] = predictions
            if agg == aggregation:
                stored.hpe_accuracy = float(accuracy)
    return grouped


@dataclass
class EpisodeCheck:
    """What re-running one episode found.

    Attributes:
        episode: the episode index.
        claimed: the stored HPE accuracy.
        rerun: the re-run's HPE accuracy.
        configs_equal: configurations whose predictions equal the stored ones.
        hpe_equal: the fused predictions equal the stored ones.
        agreement: share of (configuration, query) predictions that equal the stored.
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
    probe_gap: float | None = None
    fit_gain: float | None = None
    perturbed: float | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dict(self.__dict__)


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
            self.manifest_spec,
            self.images,
            self.cache(),
            self.manifest.sha256,
            serve="features" if self.serve_features else "pixels",
            memoize_features=self.memoize,
            salt=self.salt,
        )

    @property
    def manifest_spec(self) -> Any:
        """The dataset the episodes come from."""
        return self.images.spec

    def seeds(self, episode: ManifestEpisode) -> list[int]:
        """The recorded torch seed of each configuration."""
        return [config_seed(self.manifest.sha256, episode.index, d) for d in self.digests]

    def ask(self, inputs: EpisodeInputs, seeds: list[int], **options: Any) -> FitReply:
        """One request to a fresh episode process."""
        request = fit_request(inputs, self.configs, seeds, memoize=self.memoize, **options)
        return self.worker.fit(request)

    def perturbed_queries(self, inputs: EpisodeInputs) -> np.ndarray:
        """The presented queries after the memorisation probe's perturbation."""
        episode = inputs.episode
        items = [episode.query[int(i)][0] for i in inputs.query_order]
        pixels = perturbed_pixels(self.images, items)
        if not self.serve_features:
            return pixels.numpy()
        (features,) = self.worker.embed([pixels.numpy()], 256)
        return features


class _Configs:
    """Configuration values as the runner's outcomes expect them (``to_dict``/``digest``)."""

    def __init__(self, values: dict[str, Any], digest: str) -> None:
        self.values = values
        self._digest = digest

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def digest(self) -> str:
        return self._digest


def _rows(
    job: DatasetRerun, inputs: EpisodeInputs, seeds: list[int], reply: FitReply
) -> list[dict[str, Any]]:
    configs = [_Configs(c, d) for c, d in zip(job.configs, job.digests, strict=True)]
    outcomes: list[ConfigOutcome] = outcomes_from_reply(inputs, configs, seeds, reply)  # type: ignore[arg-type]
    return episode_rows("verify", job.run.dataset, job.manifest.sha256, inputs, outcomes)


def _hpe_accuracy(rows: list[dict[str, Any]], aggregation: str) -> float:
    return float(
        next(
            r["accuracy"] for r in rows if r["split"] == "base" and r["aggregation"] == aggregation
        )
    )


def check_episode(
    job: DatasetRerun,
    episode: ManifestEpisode,
    stored: StoredEpisode,
    probes: set[str],
    rng: np.random.Generator,
) -> EpisodeCheck:
    """Re-run one episode (and the probes named in ``probes``) in random order."""
    started = time.perf_counter()
    inputs = job.inputs(episode)
    seeds = job.seeds(episode)
    requests = ["rerun", *sorted(probes)]
    replies: dict[str, FitReply] = {}
    subsets = verification_probes(len(inputs.query_labels), int(rng.integers(1 << 31)))
    for kind in [requests[i] for i in rng.permutation(len(requests))]:
        if kind == "rerun":
            replies[kind] = job.ask(inputs, seeds)
        elif kind == "inductive":
            replies[kind] = job.ask(inputs, seeds, query_subsets=subsets)
        elif kind == "fit":
            replies[kind] = job.ask(inputs, seeds, loop=True)
        elif kind == "perturbed":
            replies[kind] = job.ask(inputs, seeds, query_override=job.perturbed_queries(inputs))
    rows = _rows(job, inputs, seeds, replies["rerun"])
    base = [r for r in rows if r["split"] == "base"]
    config_rows = sorted(
        (r for r in base if r["kind"] == CONFIG_KIND), key=lambda r: r["config_index"]
    )
    equal = [r["predictions"] == stored.configs.get(r["config_index"]) for r in config_rows]
    matches = [
        np.mean(
            np.asarray(r["predictions"]) == np.asarray(stored.configs.get(r["config_index"], []))
        )
        if len(stored.configs.get(r["config_index"], [])) == len(r["predictions"])
        else 0.0
        for r in config_rows
    ]
    hpe_row = next(r for r in base if r["aggregation"] == job.aggregation)
    check = EpisodeCheck(
        episode=episode.index,
        claimed=stored.hpe_accuracy,
        rerun=float(hpe_row["accuracy"]),
        configs_equal=int(sum(equal)),
        configs=len(equal),
        hpe_equal=hpe_row["predictions"] == stored.ensembles.get(job.aggregation),
        agreement=float(np.mean(matches)) if matches else 0.0,
    )
    full = [np.asarray(reply) for reply in _manifest_logits(inputs, replies["rerun"])]
    if "inductive" in replies:
        check.probe_gap = max(
            inductive_gap(full[c], subsets, replies["inductive"].query[c])
            for c in range(len(job.configs))
        )
    if "fit" in replies:
        looped = _manifest_logits(inputs, replies["fit"])
        labels = inputs.query_labels
        check.fit_gain = float(
            np.mean(
                [
                    accuracy_percent(b.argmax(axis=1), labels)
                    - accuracy_percent(alone.argmax(axis=1), labels)
                    for b, alone in zip(full, looped, strict=True)
                ]
            )
        )
    if "perturbed" in replies:
        check.perturbed = _hpe_accuracy(
            _rows(job, inputs, seeds, replies["perturbed"]), job.aggregation
        )
    check.seconds = time.perf_counter() - started
    return check


def _manifest_logits(inputs: EpisodeInputs, reply: FitReply) -> list[np.ndarray]:
    from fewtrans_board.runner.episodes import in_manifest_order

    return [in_manifest_order(per_config[0], inputs.query_order) for per_config in reply.query]


def rerun_dataset(
    job: DatasetRerun,
    plan: SamplePlan,
    stored: dict[int, StoredEpisode],
    probe_episodes: int,
    rng: np.random.Generator,
) -> tuple[list[EpisodeCheck], bool]:
    """Re-run the planned episodes in order, the first ``probe_episodes`` with probes.

    Stops after the minimum sample when going on would exceed the budget (the order is a
    random permutation, so any prefix is a uniform sample).

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
    if cache is not None:  # one embedding pass over every chunk the sample needs
        needed = [
            item
            for position in plan.order
            for item, _ in (*episodes[position].support, *episodes[position].query)
        ]
        cache.ensure(needed)
    checks: list[EpisodeCheck] = []
    started = time.perf_counter()
    for n, position in enumerate(plan.order):
        episode = episodes[position]
        probes = kinds if n < probe_episodes else set()
        checks.append(check_episode(job, episode, stored[episode.index], probes, rng))
        elapsed = time.perf_counter() - started
        remaining = len(plan.order) - n - 1
        if (
            n + 1 >= plan.minimum
            and remaining
            and elapsed / (n + 1) * len(plan.order) > plan.budget_s
        ):
            return checks, True
    return checks, False
