"""What a dataset's verification will cost, from what verification does, printed before it runs.

The claimed seconds of a run are its adapter's fit and predict time only: with cached frozen
features they leave out decoding every image and embedding it at the backbone's
resolution, which dominate at 224 px (an estimate from claimed seconds alone was about
20x low on ChestX). The estimate here counts, per dataset:

- the worker's start (measured by the judge before the estimate is made);
- decoding and resizing each image of the re-run episodes once (the judge's image store);
- embedding each of them once at the backbone's resolution where features are served,
  else sending every episode's pixels with each request (the adapter then embeds them in
  its fit, which the claimed seconds count);
- one request per re-run episode: a fresh episode process plus the claimed fit seconds;
- the probes of the first ``probe_episodes`` episodes: one more request per probe, and for
  the memorisation probe the queries decoded, perturbed and embedded again.

The per-image constants are calibrated with ``benchmarks/verification_cost.py
--real-resolution`` (a random-init timm ResNet-18 at 224 px on a synthetic layout, one
torch thread); ``benchmarks/README.md`` records the estimate-to-measured ratio. Embedding
scales with the pixel count (``(size / 224) ** 2``) and is divided among the worker's
threads; a backbone much larger than ResNet-18 costs more than the estimate says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fewtrans_board.episodes.manifest import ManifestEpisode
from fewtrans_board.leaderboard.verification.sampling import SESSION_OVERHEAD_S
from fewtrans_board.results.load import RunResults
from fewtrans_board.runner.features import chunk_index, embedding_batches

REFERENCE_SIZE = 224
DECODE_S = 0.05
"""Judge seconds to decode and resize one image to 224 px (a 256 px JPEG, one busy core)."""
EMBED_S = 0.25
"""Worker seconds to embed one image at 224 px (random-init ResNet-18, one torch thread).

Measured on the project's 2-core machine shared by several jobs (benchmarks/README.md); an
idle core embeds several times faster, so the estimate errs on the long side there."""
PIXELS_S = 0.002
"""Seconds to send one 224 px image's float pixels to the worker with a request."""


@dataclass(frozen=True)
class EpisodeShapes:
    """How many images the episodes of a dataset's manifest hold.

    Attributes:
        episodes: episodes in the manifest.
        images: distinct items over every episode (each decoded, and embedded, once).
        images_per_episode: mean support plus query items of one episode.
        queries_per_episode: mean query items of one episode.
    """

    episodes: int
    images: int
    images_per_episode: float
    queries_per_episode: float
    embedded: int | None = None

    @property
    def embedded_images(self) -> int:
        """Images decoded and embedded to serve the frozen features (``images`` if unknown)."""
        return self.images if self.embedded is None else self.embedded

    @classmethod
    def of(
        cls, episodes: Sequence[ManifestEpisode], universe: Sequence[str] | None = None
    ) -> EpisodeShapes:
        """Count the images of a manifest's episodes.

        Args:
            episodes: the episodes.
            universe: the sorted items the run chunks its frozen features over; features
                are embedded a whole chunk at a time, so a sample of episodes embeds every
                image of each chunk it touches (``embedded``).
        """
        n = max(len(episodes), 1)
        items = {item for e in episodes for item, _ in (*e.support, *e.query, *e.novel_query)}
        sizes = [len(e.support) + len(e.query) + len(e.novel_query) for e in episodes]
        queries = [len(e.query) + len(e.novel_query) for e in episodes]
        embedded = None
        if universe is not None:
            batches = embedding_batches(sorted(items), universe, chunk_index(universe))
            embedded = sum(map(len, batches))
        return cls(len(episodes), len(items), sum(sizes) / n, sum(queries) / n, embedded)


@dataclass(frozen=True)
class VerificationEstimate:
    """The estimated seconds of re-running every episode of one dataset, by part.

    Attributes:
        episodes: episodes re-run.
        images: distinct images decoded (with frozen features served, every image of the
            chunks the episodes touch).
        image_size: the backbone's input side in pixels.
        start_s: the worker's start.
        decode_s: decoding and resizing every image once.
        embed_s: embedding every image once (frozen features served), else 0.
        pixels_s: sending pixels with every request (pixels served), else 0.
        fit_s: the claimed fit seconds of every re-run request.
        requests_s: a fresh episode process per request.
        probes_s: the probes' extra requests and re-embedded perturbed queries.
    """

    episodes: int
    images: int
    image_size: int
    start_s: float
    decode_s: float
    embed_s: float
    pixels_s: float
    fit_s: float
    requests_s: float
    probes_s: float

    @property
    def total_s(self) -> float:
        """Every part added up."""
        parts = (self.decode_s, self.embed_s, self.pixels_s, self.fit_s, self.requests_s)
        return self.start_s + sum(parts) + self.probes_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form, seconds rounded to 0.1."""
        out: dict[str, Any] = {
            k: round(v, 1) if isinstance(v, float) else v for k, v in asdict(self).items()
        }
        out["total_s"] = round(self.total_s, 1)
        return out

    def line(self, dataset: str) -> str:
        """One line for the log before the dataset's verification starts."""
        return (
            f"verifying {dataset}: estimated {self.total_s:,.0f} s to re-run all {self.episodes} episodes "
            f"({self.images} images at {self.image_size} px: decode {self.decode_s:,.0f} s, "
            f"embed {self.embed_s + self.pixels_s:,.0f} s; fits {self.fit_s + self.requests_s:,.0f}"
            f" s; probes {self.probes_s:,.0f} s; worker start {self.start_s:,.0f} s)"
        )


def estimate_verification(
    shapes: EpisodeShapes,
    *,
    image_size: int,
    claimed_fit_s: float,
    serve_features: bool,
    probe_episodes: int,
    probe_requests: int,
    threads: int = 1,
    start_s: float = 0.0,
) -> VerificationEstimate:
    """Estimate re-running every episode of a dataset and probing the first few.

    Args:
        shapes: the manifest's episode and image counts.
        image_size: the backbone's input side (pixels).
        claimed_fit_s: mean claimed fit seconds of one episode (all configurations).
        serve_features: frozen features are embedded once and served (else pixels).
        probe_episodes: episodes that also get the probes.
        probe_requests: probe requests per probed episode (inductive, fit, perturbed).
        threads: the worker's torch threads (embedding divides among them).
        start_s: the worker's measured start.
    """
    scale = (image_size / REFERENCE_SIZE) ** 2
    embed_one = EMBED_S * scale / max(threads, 1)
    decoded = shapes.embedded_images if serve_features else shapes.images
    decode = decoded * DECODE_S * max(scale, 1.0) ** 0.5
    probed = min(probe_episodes, shapes.episodes)
    per_request_pixels = shapes.images_per_episode * PIXELS_S * scale
    # The memorisation probe decodes and perturbs the queries again, then embeds them
    # (features served) or sends them (pixels); the other probes repeat the request.
    perturbed = shapes.queries_per_episode * (DECODE_S + (embed_one if serve_features else 0.0))
    request = max(claimed_fit_s, 0.0) + SESSION_OVERHEAD_S
    pixels = 0.0 if serve_features else per_request_pixels
    return VerificationEstimate(
        episodes=shapes.episodes,
        images=decoded,
        image_size=image_size,
        start_s=start_s,
        decode_s=decode,
        embed_s=shapes.embedded_images * embed_one if serve_features else 0.0,
        pixels_s=shapes.episodes * pixels,
        fit_s=shapes.episodes * max(claimed_fit_s, 0.0),
        requests_s=shapes.episodes * SESSION_OVERHEAD_S,
        probes_s=probed * (probe_requests * (request + pixels) + perturbed),
    )


WORKER_START_S = 5.0
"""The worker's start where it has not been measured yet (loading torch and the model)."""


def serves_features(run: RunResults) -> bool:
    """Whether a re-run of ``run`` serves cached frozen features (as the run recorded)."""
    schema = run.provenance.adapter.schema
    frozen = isinstance(schema, dict) and bool(schema.get("frozen_backbone"))
    return bool(run.provenance.identity.feature_cache and frozen)


def estimate_run(
    run: RunResults,
    episodes: Sequence[ManifestEpisode],
    *,
    claimed_fit_s: float,
    probe_episodes: int,
    threads: int | None = None,
    start_s: float = WORKER_START_S,
    universe: Sequence[str] | None = None,
) -> VerificationEstimate:
    """The estimate of verifying ``run`` on its manifest's ``episodes``, from its records.

    The resolution is the recorded preprocessing's, features are served where the run
    cached them for a frozen-backbone adapter, and the probes are the ones verification
    asks of this adapter (inductive unless transductive; fit where it batches, assumed).

    Args:
        run: the run to verify.
        episodes: its frozen manifest's episodes.
        claimed_fit_s: mean claimed fit seconds of one episode.
        probe_episodes: episodes that get the probes.
        threads: the worker's torch threads (default: the recorded count).
        start_s: the worker's start, measured where known.
        universe: the items the re-run chunks frozen features over (whole chunks are
            embedded; ``None``: only the episodes' images).
    """
    provenance = run.provenance
    schema = provenance.adapter.schema if isinstance(provenance.adapter.schema, dict) else {}
    serve = serves_features(run)
    probes = 2 + (0 if schema.get("transductive") else 1)  # perturbed, fit, inductive
    return estimate_verification(
        EpisodeShapes.of(episodes, universe if serve else None),
        image_size=int(provenance.preprocessing.image_size),
        claimed_fit_s=claimed_fit_s,
        serve_features=serve,
        probe_episodes=probe_episodes,
        probe_requests=probes,
        threads=threads or int(provenance.environment.torch_threads or 1),
        start_s=start_s,
    )
