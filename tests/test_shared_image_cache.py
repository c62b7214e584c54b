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


@pytest.mark.slow
def test_runs_of_one_manifest_share_frozen_features(
    tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.runner.features import BackboneEmbedder

    embedded: list[int] = []
    embed = BackboneEmbedder.embed_batches

    def counting(self, batches, batch_size, progress):  # type: ignore[no-untyped-def]
        embedded.append(sum(len(b) for b in batches))
        return embed(self, batches, batch_size, progress)

    monkeypatch.setattr(BackboneEmbedder, "embed_batches", counting)
    shared = tmp_path / "features"

    def evaluate(adapter: str, manifest: Path, out: str) -> None:
        result = invoke(
            [
                "evaluate", "--model", "demo-cnn.digits", "--adapter", adapter,
                "--manifest", str(manifest), "--out", str(tmp_path / out), "--limit", "1",
                "--hpe", "single", "--feature-cache-dir", str(shared), "--quiet",
                "--device", "cpu", "--isolation", "inline",
            ],
            pm=get_plugin_manager(entry_points=False),
        )  # fmt: skip
        assert result.exit_code == 0, result.output

    evaluate("mean-centroid", FIXED, "a")
    assert sum(embedded) == len(_items(FIXED))
    evaluate("cosine-classifier", FIXED, "b")  # another adapter, the same features
    assert sum(embedded) == len(_items(FIXED))
    assert len(list(shared.glob("*.npz"))) == 1
    # Another manifest embeds in other chunks (other last bits): its own entry.
    evaluate("mean-centroid", VARIED, "c")
    assert len(list(shared.glob("*.npz"))) == 2
