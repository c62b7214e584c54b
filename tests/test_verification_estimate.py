"""The cost estimate printed before a verification counts what verification does.

Decoding every image, embedding it at the backbone's resolution (features served) or
sending it with every request (pixels served), one request per episode and the probes:
each part grows with what it counts, and the total is their sum (hand-computed below).
"""

from __future__ import annotations

import dataclasses

import pytest

from fewtrans_board.episodes.manifest import ManifestEpisode
from fewtrans_board.leaderboard.verification import cost
from fewtrans_board.leaderboard.verification.cost import EpisodeShapes, estimate_verification
from fewtrans_board.leaderboard.verification.sampling import SESSION_OVERHEAD_S

SHAPES = EpisodeShapes(episodes=600, images=3000, images_per_episode=100, queries_per_episode=75)
BASE = {
    "image_size": 224,
    "claimed_fit_s": 0.2,
    "serve_features": True,
    "probe_episodes": 8,
    "probe_requests": 3,
}


def _total(**changes: object) -> float:
    shapes = changes.pop("shapes", SHAPES)
    return estimate_verification(shapes, **{**BASE, **changes}).total_s  # type: ignore[arg-type]


def test_hand_computed_at_224_px() -> None:
    estimate = estimate_verification(SHAPES, **BASE, start_s=4.0)  # type: ignore[arg-type]
    request = 0.2 + SESSION_OVERHEAD_S
    perturbed = 75 * (cost.DECODE_S + cost.EMBED_S)
    expected = (
        4.0
        + 3000 * cost.DECODE_S
        + 3000 * cost.EMBED_S
        + 600 * request
        + 8 * (3 * request + perturbed)
    )
    assert estimate.total_s == pytest.approx(expected)
    assert estimate.pixels_s == 0.0 and estimate.images == 3000
    # Far above what the claimed fit seconds alone give (the old estimate's basis).
    assert estimate.total_s > 2 * 600 * 0.2 * 1.5
    assert "3000 images at 224 px" in estimate.line("bscd-chestx")


def test_more_images_or_pixels_cost_more() -> None:
    more = dataclasses.replace(SHAPES, images=6000)
    assert _total(shapes=more) > _total()
    assert _total(image_size=384) > _total() > _total(image_size=84)
    bigger_episodes = dataclasses.replace(SHAPES, images_per_episode=300)
    assert _total(shapes=bigger_episodes, serve_features=False) > _total(serve_features=False)
    assert _total(threads=4) < _total()  # embedding divides among the worker's threads


def test_probes_are_counted() -> None:
    assert _total(probe_episodes=0) < _total() < _total(probe_episodes=20)
    assert _total(probe_requests=2) < _total()
    few = dataclasses.replace(SHAPES, episodes=5)
    # No more probed episodes than episodes.
    assert _total(shapes=few, probe_episodes=8) == _total(shapes=few, probe_episodes=5)


def test_shapes_count_distinct_images() -> None:
    def episode(index: int, items: list[str]) -> ManifestEpisode:
        pairs = tuple((item, 0) for item in items)
        return ManifestEpisode(index, index, (0,), ("a",), pairs[:1], pairs[1:])

    shapes = EpisodeShapes.of([episode(0, ["a", "b", "c"]), episode(1, ["c", "d", "e", "f"])])
    assert (shapes.episodes, shapes.images) == (2, 6)
    assert shapes.images_per_episode == 3.5 and shapes.queries_per_episode == 2.5


def test_served_features_count_every_image_of_the_chunks_the_sample_touches() -> None:
    """Features are embedded 256 sorted items at a time: two episodes touching items 3 and
    300 of a 600-item universe embed chunks 0 and 1 whole (512 images), items outside the
    universe one each; the estimate's decode and embed count those, not the 6 items."""

    def episode(index: int, items: list[str]) -> ManifestEpisode:
        pairs = tuple((item, 0) for item in items)
        return ManifestEpisode(index, index, (0,), ("a",), pairs[:1], pairs[1:])

    universe = [f"img/{i:04d}" for i in range(600)]
    episodes = [
        episode(0, ["img/0003", "img/0004", "img/0300"]),
        episode(1, ["img/0300", "img/0005", "elsewhere/x"]),
    ]
    shapes = EpisodeShapes.of(episodes, universe)
    assert (shapes.images, shapes.embedded_images) == (5, 256 + 256 + 1)
    assert EpisodeShapes.of(episodes).embedded_images == 5  # control: no universe known
    served = estimate_verification(shapes, **BASE)  # type: ignore[arg-type]
    assert served.images == 513
    assert served.embed_s == pytest.approx(513 * cost.EMBED_S)
    assert served.decode_s == pytest.approx(513 * cost.DECODE_S)
    pixels = estimate_verification(shapes, **{**BASE, "serve_features": False})  # type: ignore[arg-type]
    assert pixels.images == 5 and pixels.embed_s == 0.0  # pixels sent: only its own images
