"""Decode once: the shared decoded-image file, concurrent workers, runs reusing it."""

from __future__ import annotations

import json
import multiprocessing
import zlib
from pathlib import Path

import numpy as np
import pytest

from fewtrans_board.datasets.decoded import DecodedCacheError, DecodedImages, decoded_key
from fewtrans_board.runner.placement import pool_device, ray_device

ITEMS = [f"class{c}/img{i}.png" for c in range(3) for i in range(5)]
SIZE = 8


def fake_decode(item: str) -> np.ndarray:
    """A deterministic 'image' per item (what a real decoder does: same item, same bytes)."""
    seed = zlib.crc32(item.encode())
    return np.random.RandomState(seed).randint(0, 256, (3, SIZE, SIZE)).astype(np.uint8)


def open_cache(folder: Path, items: list[str] = ITEMS) -> DecodedImages:
    return DecodedImages(folder, "a" * 64, "prep", items, SIZE)


def test_rows_are_decoded_once_and_read_back(tmp_path: Path) -> None:
    assert len({fake_decode(i).tobytes() for i in ITEMS}) == len(ITEMS)
    cache = open_cache(tmp_path)
    for item in ITEMS:
        assert np.array_equal(cache.get(item, fake_decode), fake_decode(item))
    assert cache.decoded_here == len(ITEMS)
    again = open_cache(tmp_path)  # another process / run over the same manifest

    def never(item: str) -> np.ndarray:
        raise AssertionError(f"{item} decoded twice")

    for item in reversed(ITEMS):
        assert np.array_equal(again.get(item, never), fake_decode(item))
    assert again.filled() == len(ITEMS)
    assert len(list(tmp_path.iterdir())) == 1  # one content-addressed file, no temporaries


def test_the_name_is_the_content_address(tmp_path: Path) -> None:
    base = open_cache(tmp_path).path.name
    assert open_cache(tmp_path, list(reversed(ITEMS))).path.name == base  # order-free
    assert DecodedImages(tmp_path, "b" * 64, "prep", ITEMS, SIZE).path.name != base
    assert DecodedImages(tmp_path, "a" * 64, "other", ITEMS, SIZE).path.name != base
    assert open_cache(tmp_path, ITEMS[:-1]).path.name != base
    assert decoded_key("m", "p", ["x"]) != decoded_key("m", "p", ["y"])


def test_a_torn_or_corrupted_row_is_decoded_again(tmp_path: Path) -> None:
    cache = open_cache(tmp_path)
    cache.get(ITEMS[0], fake_decode)
    cache.get(ITEMS[1], fake_decode)
    cache.flush()
    raw = bytearray(cache.path.read_bytes())
    offset = raw.index(fake_decode(ITEMS[1]).tobytes())
    raw[offset] ^= 0xFF  # a row whose pixels changed after its checksum was written
    cache.path.write_bytes(bytes(raw))
    reopened = open_cache(tmp_path)
    assert reopened.filled() == 1
    assert np.array_equal(reopened.get(ITEMS[1], fake_decode), fake_decode(ITEMS[1]))
    assert reopened.decoded_here == 1


def test_a_foreign_file_under_the_name_is_refused(tmp_path: Path) -> None:
    path = open_cache(tmp_path).path
    path.write_bytes(b"not a decoded-image file")
    with pytest.raises(DecodedCacheError, match="delete it"):
        open_cache(tmp_path)
    path.write_text(json.dumps({"format": "something else"}).ljust(4096))
    with pytest.raises(DecodedCacheError, match="delete it"):
        open_cache(tmp_path)


def _worker(folder: str, order: int, ready: object, go: object, results: object) -> None:
    items = ITEMS if order == 0 else list(reversed(ITEMS))
    ready.release()  # type: ignore[attr-defined]
    go.wait(60)  # type: ignore[attr-defined]
    cache = open_cache(Path(folder), items)  # both create the file at about the same time
    same = all(np.array_equal(cache.get(i, fake_decode), fake_decode(i)) for i in items)
    results.put((order, same, cache.decoded_here))  # type: ignore[attr-defined]


@pytest.mark.slow
def test_two_processes_fill_one_cache_concurrently(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    ready, go, results = context.Semaphore(0), context.Event(), context.Queue()
    workers = [
        context.Process(target=_worker, args=(str(tmp_path), i, ready, go, results))
        for i in range(2)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        assert ready.acquire(timeout=120)
    go.set()
    outcomes = sorted(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert [same for _, same, _ in outcomes] == [True, True]
    assert all(0 < decoded <= len(ITEMS) for _, _, decoded in outcomes)
    files = list(tmp_path.iterdir())
    assert len(files) == 1  # the loser of the creation race shares the winner's file
    cache = open_cache(tmp_path)
    assert cache.filled() == len(ITEMS)
    for item in ITEMS:
        assert np.array_equal(cache.get(item, fake_decode), fake_decode(item))


@pytest.mark.slow
def test_the_runner_decodes_each_image_once_across_runs(
    tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.datasets import digits
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run

    manifest = (
        Path(__file__).resolve().parents[1]
        / "leaderboard/manifests/fewtrans-varied--digits.parquet"
    )
    loads: list[str] = []
    reader = digits.DigitsReader.load_image

    def counting(self, root, item):  # type: ignore[no-untyped-def]
        loads.append(item)
        return reader(self, root, item)

    monkeypatch.setattr(digits.DigitsReader, "load_image", counting)
    shared = tmp_path / "images"

    def evaluate(out: Path, *extra: str) -> None:
        result = invoke(
            [
                "evaluate",
                "--model",
                "demo-cnn.digits",
                "--adapter",
                "finetune",
                "--manifest",
                str(manifest),
                "--out",
                str(out),
                "--limit",
                "2",
                "--config",
                "epochs=1",
                "--protocol",
                "single",
                "--quiet",
                "--device",
                "cpu",
                "--image-cache",
                str(shared),
                *extra,
            ],
            pm=get_plugin_manager(entry_points=False),
        )
        assert result.exit_code == 0, result.output

    evaluate(tmp_path / "a")
    first = len(loads)
    assert first == len(set(loads)) > 0  # each image decoded once
    evaluate(tmp_path / "b")
    assert len(loads) == first  # the second run decodes nothing
    a, b = load_run(tmp_path / "a").table, load_run(tmp_path / "b").table
    assert a.column("logits").to_pylist() == b.column("logits").to_pylist()


def test_decoded_pixels_equal_directly_decoded_pixels(tmp_path: Path) -> None:
    import torch

    from fewtrans_board.api.backbone import Preprocessing
    from fewtrans_board.datasets.digits import DIGITS
    from fewtrans_board.datasets.images import ImageStore

    preprocessing = Preprocessing.fewtrans(32)
    items = DIGITS.reader.list_items(None, DIGITS)[5][:6]
    decoded = DecodedImages(tmp_path, "c" * 64, preprocessing.digest(), items, 32)
    shared = ImageStore(DIGITS, None, preprocessing, decoded=decoded)
    plain = ImageStore(DIGITS, None, preprocessing)
    assert torch.equal(shared.pixels(items), plain.pixels(items))
    assert decoded.decoded_here == len(items)
    assert torch.equal(shared.pixels(items[::-1]), plain.pixels(items[::-1]))
    assert decoded.decoded_here == len(items)


def test_pool_and_ray_workers_get_a_gpu_each() -> None:
    assert [pool_device("cuda", w, 4) for w in range(6)] == [
        "cuda:0",
        "cuda:1",
        "cuda:2",
        "cuda:3",
        "cuda:0",
        "cuda:1",
    ]
    assert pool_device("cuda:2", 5, 4) == "cuda:2"  # an explicit GPU is kept
    assert pool_device("cpu", 1, 4) == "cpu"
    assert pool_device("cuda", 1, 0) == "cuda"
    assert ray_device("cuda", [3], "3") == "cuda:0"  # Ray restricted the visible GPUs
    assert ray_device("cuda", [3], "1,3") == "cuda:1"
    assert ray_device("cuda", [3], None) == "cuda:3"  # no restriction: the GPU id
    assert ray_device("cuda", [], "0") == "cuda"
    assert ray_device("cpu", [1], "1") == "cpu"


@pytest.mark.slow
def test_a_shared_image_cache_never_serves_one_copys_pixels_to_another(
    tmp_path: Path, invoke, datasets_registry
) -> None:  # type: ignore[no-untyped-def]
    """Two local copies with the same item names but other pixels get their own files."""
    from fewtrans_board.datasets.synthetic import write_synthetic_copy
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run

    name = "clip-eurosat"
    copies = {seed: tmp_path / f"copy-{seed}" for seed in (0, 1)}
    for seed, root in copies.items():
        write_synthetic_copy(datasets_registry[name], root, 36, image_size=8, seed=seed)
    manifest = tmp_path / f"clip-kshot--{name}.parquet"
    pm = get_plugin_manager(entry_points=False)
    build = ["manifest", "build", "--protocol", "clip-kshot", "--dataset", name]
    result = invoke([*build, "--root", str(copies[0]), "--out", str(manifest)], pm=pm)
    assert result.exit_code == 0, result.output
    shared = tmp_path / "images"

    def evaluate(seed: int, out: str) -> list[object]:
        result = invoke(
            [
                "evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid",
                "--manifest", str(manifest), "--root", str(copies[seed]), "--limit", "2",
                "--out", str(tmp_path / out), "--image-cache", str(shared), "--quiet",
            ],
            pm=pm,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return load_run(tmp_path / out).table.column("logits").to_pylist()

    first = evaluate(0, "a")
    assert len(list(shared.iterdir())) == 1
    assert evaluate(1, "b") != first  # the other copy's pixels, not copy 0's cached ones
    assert len(list(shared.iterdir())) == 2
    assert evaluate(0, "c") == first  # the same copy shares its file
    assert len(list(shared.iterdir())) == 2
