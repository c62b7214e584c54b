"""Decode once per dataset copy: every manifest of a copy reads and fills one decoded file.

Two runs on two manifests of the embedded digits (the fixed 5-way 1-shot and the varied
one) share ``--image-cache``: the second decodes exactly the items of its episodes that the
first did not (hand-computed from the manifests). That rows read from the file equal
directly decoded pixels is ``tests/test_decoded.py``'s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.runner.plan import episode_items

MANIFESTS = Path(__file__).resolve().parents[1] / "leaderboard/manifests"
FIXED = MANIFESTS / "fewtrans-fixed-5w1s--digits.parquet"
VARIED = MANIFESTS / "fewtrans-varied--digits.parquet"


def _items(manifest: Path) -> set[str]:
    return set(episode_items(Manifest.load(manifest).episodes()[:1]))


@pytest.mark.slow
def test_manifests_of_one_copy_share_its_decoded_file(
    tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.datasets import digits
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run

    loads: list[str] = []
    reader = digits.DigitsReader.load_image

    def counting(self, root, item):  # type: ignore[no-untyped-def]
        loads.append(item)
        return reader(self, root, item)

    monkeypatch.setattr(digits.DigitsReader, "load_image", counting)
    shared = tmp_path / "images"

    def evaluate(manifest: Path, out: str, cache: Path) -> None:
        result = invoke(
            [
                "evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid",
                "--manifest", str(manifest), "--out", str(tmp_path / out), "--limit", "1",
                "--hpe", "single", "--image-cache", str(cache), "--quiet", "--device", "cpu",
            ],
            pm=get_plugin_manager(entry_points=False),
        )  # fmt: skip
        assert result.exit_code == 0, result.output

    evaluate(FIXED, "fixed", shared)
    assert set(loads) == _items(FIXED) and len(loads) == len(set(loads))
    # The run of a fixed 1-shot manifest is labelled with its shots in the summary table.
    table = invoke(["results", "summary", str(tmp_path / "fixed")]).output
    assert "digits (1-shot)" in table
    loads.clear()
    evaluate(VARIED, "varied", shared)
    assert set(loads) == _items(VARIED) - _items(FIXED)  # the rest came from the shared file
    assert len(list(shared.glob("*.u8img"))) == 1  # one file for the copy, not per manifest
    # A --limit run chunks its own episodes' features (it decoded no more than those).
    assert load_run(tmp_path / "varied").provenance.identity.feature_universe is None


def _chunks(items: set[str], universe: list[str], size: int = 256) -> set[int]:
    position = {item: i for i, item in enumerate(universe)}
    return {position[item] // size for item in items}


def count_embedded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of images of each in-process embedding call, appended as they happen."""
    from fewtrans_board.runner.features import BackboneEmbedder

    embedded: list[int] = []
    embed = BackboneEmbedder.embed_batches

    def counting(self, batches, batch_size, progress):  # type: ignore[no-untyped-def]
        embedded.append(sum(len(b) for b in batches))
        return embed(self, batches, batch_size, progress)

    monkeypatch.setattr(BackboneEmbedder, "embed_batches", counting)
    return embedded


@pytest.mark.slow
def test_manifests_of_one_copy_share_frozen_features(
    tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Frozen features of a full run (one shard of one episode here; a ``--limit`` run
    chunks its own items) are embedded in fixed 256-item chunks of the copy's sorted items,
    whichever manifest asks: the fixed manifest's first episode embeds its chunks; another
    adapter embeds nothing; the varied manifest embeds only the chunks not embedded yet, into
    the same entry, and its features equal those of a run with a cache of its own."""
    import numpy as np

    from fewtrans_board.datasets.digits import DIGITS
    from fewtrans_board.leaderboard.verification.rerun import rerun_universe
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run

    embedded = count_embedded(monkeypatch)
    shared = tmp_path / "features"
    listing = DIGITS.list_items(None, "all")
    universe = sorted({item for items in listing for item in items})

    def evaluate(adapter: str, manifest: Path, out: str, cache: Path = shared) -> None:
        result = invoke(
            [
                "evaluate", "--model", "demo-cnn.digits", "--adapter", adapter,
                "--manifest", str(manifest), "--out", str(tmp_path / out),
                "--shards", "600", "--shard", "0/600",  # one episode of a full run
                "--hpe", "single", "--feature-cache-dir", str(cache), "--quiet",
                "--device", "cpu", "--isolation", "inline",
            ],
            pm=get_plugin_manager(entry_points=False),
        )  # fmt: skip
        assert result.exit_code == 0, result.output

    def chunk_items(chunks: set[int]) -> int:
        return sum(len(universe[c * 256 : (c + 1) * 256]) for c in chunks)

    fixed = _chunks(_items(FIXED), universe)
    evaluate("mean-centroid", FIXED, "a")
    assert sum(embedded) == chunk_items(fixed)
    evaluate("cosine-classifier", FIXED, "b")  # another adapter, the same features
    assert sum(embedded) == chunk_items(fixed)
    evaluate("mean-centroid", VARIED, "c")  # another manifest of the copy: the same entry
    assert sum(embedded) == chunk_items(fixed | _chunks(_items(VARIED), universe))
    [entry] = shared.glob("*.npz")
    # The run records its chunking; verification re-chunks over the same items.
    identity = load_run(tmp_path / "a").provenance.identity
    assert identity.feature_universe == "dataset"
    manifest = Manifest.load(FIXED)
    assert rerun_universe(identity.feature_universe, DIGITS, None, manifest) == universe
    older = sorted(set(episode_items(manifest.episodes())))  # runs that record none
    assert rerun_universe(None, DIGITS, None, manifest) == older != universe
    evaluate("mean-centroid", VARIED, "d", tmp_path / "own")  # a cache of its own
    [own] = (tmp_path / "own").glob("*.npz")
    with np.load(entry) as a, np.load(own) as b:
        rows = {str(item): i for i, item in enumerate(a["items"])}
        for i, item in enumerate(b["items"]):
            assert np.array_equal(a["features"][rows[str(item)]], b["features"][i])


@pytest.mark.slow
def test_a_manifest_too_small_for_its_copy_embeds_only_its_own_items(
    tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Eight 5-way 1-shot episodes show 471 digits spread over every 256-item chunk of the
    copy: chunking over the copy would embed all 1,797 (more than 3 times what they show),
    so the run chunks its own items, embeds each once and records no universe;
    verification re-chunks over the same items. Control: a shard of the full 600-episode
    manifest, in the test above, records ``dataset``."""
    from fewtrans_board.datasets.digits import DIGITS
    from fewtrans_board.leaderboard.verification.rerun import rerun_universe
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.image_scope import CHUNK_WASTE_LIMIT

    embedded = count_embedded(monkeypatch)
    pm = get_plugin_manager(entry_points=False)
    small = tmp_path / "small.parquet"
    built = invoke(
        [
            "manifest", "build", "--protocol", "fewtrans-fixed", "--dataset", "digits",
            "--ways", "5", "--shots", "1", "--episodes", "8", "--out", str(small),
        ],
        pm=pm,
    )  # fmt: skip
    assert built.exit_code == 0, built.output
    manifest = Manifest.load(small)
    shown = set(episode_items(manifest.episodes()))
    listing = DIGITS.list_items(None, "all")
    universe = sorted({item for items in listing for item in items})
    touched = _chunks(shown, universe)
    assert sum(len(universe[c * 256 : (c + 1) * 256]) for c in touched) > CHUNK_WASTE_LIMIT * len(
        shown
    )
    result = invoke(
        [
            "evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid",
            "--manifest", str(small), "--out", str(tmp_path / "run"), "--hpe", "single",
            "--feature-cache-dir", str(tmp_path / "features"), "--quiet", "--device", "cpu",
            "--isolation", "inline",
        ],
        pm=pm,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sum(embedded) == len(shown)
    identity = load_run(tmp_path / "run").provenance.identity
    assert identity.feature_universe is None
    assert rerun_universe(identity.feature_universe, DIGITS, None, manifest) == sorted(shown)
