"""The build cache of entry summaries: same results as without it, never trusted past its key."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard import entries as entries_module
from fewtrans_board.leaderboard.index import build_index
from fewtrans_board.leaderboard.store import LeaderboardStore, index_text
from fewtrans_board.leaderboard.summary_cache import MAGIC, SummaryCache, entry_key
from tests.conftest import file_digests, shared_folder

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "leaderboard"
ENTRY = "finetune--demo-cnn"


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A copy of the committed store (never written in place)."""
    target = tmp_path / "leaderboard"
    shutil.copytree(ROOT / "leaderboard", target, ignore=shutil.ignore_patterns(".cache"))
    return target


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed store's index built without a cache (``index.json``), and a cache
    warmed by a cached build of it (``cache/``), once per test run: read only."""

    def build(folder: Path) -> None:
        uncached = rebuilt(COMMITTED)
        assert rebuilt(COMMITTED, SummaryCache(folder / "cache")) == uncached
        (folder / "index.json").write_text(uncached)

    return shared_folder(tmp_path_factory, "build-cache", build)


@pytest.fixture
def uncached_index(built: Path) -> str:
    """The committed store's index as a build without the cache gives it."""
    return (built / "index.json").read_text()


@pytest.fixture
def warm_cache(built: Path, tmp_path: Path) -> SummaryCache:
    """A copy of a cache warmed on the committed store (its keys do not depend on where a
    store lives, so it serves every copy of it)."""
    shutil.copytree(built / "cache", tmp_path / "cache")
    return SummaryCache(tmp_path / "cache")


@pytest.fixture
def summarised(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each entry's runs were loaded and summarised (not read from the cache)."""
    counts: Counter[str] = Counter()
    original = entries_module.summarise_runs

    def counting(store: Any, entry: Any, contents: Any, with_logits: bool) -> Any:
        counts[entry.id] += 1
        return original(store, entry, contents, with_logits)

    monkeypatch.setattr(entries_module, "summarise_runs", counting)
    return counts


def rebuilt(store_dir: Path, cache: SummaryCache | None = None) -> str:
    """The index of the store as ``index.json`` would hold it (a fresh store object)."""
    return index_text(build_index(LeaderboardStore(store_dir), cache=cache))


def first_shard(store_dir: Path, ident: str = ENTRY) -> Path:
    return sorted((store_dir / "results" / ident).rglob("shard-*.parquet"))[0]


def reseal_with_other_seconds(path: Path) -> None:
    """Rewrite a stored shard with its recorded seconds doubled, sealed again (still valid)."""
    import pyarrow as pa

    from fewtrans_board.results.shards import read_shard, seal_table, write_table

    table, meta = read_shard(path)
    index = table.column_names.index("seconds")
    config = np.asarray(table.column("kind").cast(pa.string())) == "config"
    values = np.asarray(table.column("seconds"))
    seconds = pa.array(np.where(config, values * 2 + 1, values), type=table.schema[index].type)
    write_table(path, seal_table(table.set_column(index, "seconds", seconds), meta))


def test_cached_and_uncached_builds_give_the_same_index_and_pages(
    tmp_path: Path, summarised: Counter[str], committed_site: Path
) -> None:
    from fewtrans_board.website.build import build_site

    cache = SummaryCache(tmp_path / "cache")
    uncached = rebuilt(COMMITTED)
    ids = LeaderboardStore(COMMITTED).submission_ids()
    assert summarised == dict.fromkeys(ids, 1)
    assert rebuilt(COMMITTED, cache) == uncached  # cold: computes and writes
    assert summarised == dict.fromkeys(ids, 2)
    assert rebuilt(COMMITTED, cache) == uncached  # warm: reads only
    assert summarised == dict.fromkeys(ids, 2)
    build_site(COMMITTED, tmp_path / "cached", cache=cache)
    assert summarised == dict.fromkeys(ids, 2)  # the site's cached build summarised nothing
    # the site built without a cache
    assert file_digests(committed_site) == file_digests(tmp_path / "cached")


def test_a_resealed_shard_recomputes_its_entry_only(
    store_dir: Path, tmp_path: Path, summarised: Counter[str], warm_cache: SummaryCache
) -> None:
    from fewtrans_board.website.build import build_site

    reseal_with_other_seconds(first_shard(store_dir))
    cached = rebuilt(store_dir, warm_cache)
    assert summarised == {ENTRY: 1}
    assert cached == rebuilt(store_dir)
    summarised.clear()
    build_site(store_dir, tmp_path / "plain")
    build_site(store_dir, tmp_path / "cached", cache=warm_cache)
    page = f"method-{ENTRY}.html"
    assert (tmp_path / "plain" / page).read_bytes() == (tmp_path / "cached" / page).read_bytes()
    assert summarised[ENTRY] == 1  # only the uncached build: the cached one reused it


def test_a_damaged_shard_is_refused_even_with_a_warm_cache(
    store_dir: Path, warm_cache: SummaryCache
) -> None:
    shard = first_shard(store_dir)
    shard.write_bytes(shard.read_bytes()[:-100])  # its footer cut off
    with pytest.raises(SubmissionError) as uncached:
        rebuilt(store_dir)
    with pytest.raises(SubmissionError) as cached:
        rebuilt(store_dir, warm_cache)
    assert ENTRY in str(cached.value)
    assert str(cached.value) == str(uncached.value)


def test_a_changed_manifest_changes_the_key_and_is_refused_like_uncached(
    store_dir: Path, warm_cache: SummaryCache
) -> None:
    runs = [("results/run", first_shard(store_dir).parents[1])]
    assert entry_key(runs, ["a" * 64], 1) != entry_key(runs, ["b" * 64], 1)
    assert entry_key(runs, ["a" * 64], 1) != entry_key(runs, ["a" * 64], 0)
    store = LeaderboardStore(store_dir)
    sha = store.frozen and next(
        s for s, (name, _) in store.frozen.items() if name.endswith("--digits.parquet")
    )
    name = store.frozen[sha][0]
    for path in store.manifests_dir.glob(f"{name}*"):
        path.unlink()  # the frozen manifest is gone: its runs name an unknown manifest
    with pytest.raises(SubmissionError) as uncached:
        rebuilt(store_dir)
    with pytest.raises(SubmissionError) as cached:
        rebuilt(store_dir, warm_cache)
    assert uncached.value.code == "unknown-manifest"
    assert str(cached.value) == str(uncached.value)


def cache_files(cache: SummaryCache) -> list[Path]:
    assert cache.root is not None
    return sorted((cache.root / cache.folder).rglob("*.bin"))


def forged(payload: bytes) -> bytes:
    """The payload with every run's headline mean and per-episode accuracies moved."""
    import io
    import json

    with np.load(io.BytesIO(payload)) as archive:
        arrays = {name: archive[name] for name in archive.files}
    records = json.loads(arrays["records"].tobytes())
    for record in records:
        record["extra"]["aggregations"]["hpe"]["mean"] = 99.0
    arrays["records"] = np.frombuffer(json.dumps(records).encode(), dtype=np.uint8)
    arrays["floats"] = np.full_like(arrays["floats"], 99.0)
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


@pytest.mark.parametrize("damage", ["forged-payload", "truncated", "header", "other-key"])
def test_a_tampered_cache_file_is_detected_and_recomputed(
    tmp_path: Path,
    summarised: Counter[str],
    damage: str,
    warm_cache: SummaryCache,
    uncached_index: str,
    committed_site: Path,
) -> None:
    from fewtrans_board.website.build import build_site

    cache = warm_cache
    ids = LeaderboardStore(COMMITTED).submission_ids()
    files = cache_files(cache)
    assert len(files) == len(ids)
    for i, path in enumerate(files):
        data = path.read_bytes()
        header, _, payload = data[len(MAGIC) :].partition(b"\n")
        if damage == "forged-payload":  # the payload edited, its recorded hash left
            path.write_bytes(MAGIC + header + b"\n" + forged(payload))
        elif damage == "truncated":
            path.write_bytes(data[: len(data) // 2])
        elif damage == "header":
            path.write_bytes(MAGIC + b"{not json\n" + payload)
        else:  # a valid file of another entry under this one's name
            other = files[(i + 1) % len(files)].read_bytes() if i == 0 else data
            path.write_bytes(other)
    assert rebuilt(COMMITTED, cache) == uncached_index
    if damage == "other-key":
        assert sum(summarised.values()) == 1  # the one file replaced
    else:
        assert summarised == dict.fromkeys(ids, 1)
    build_site(COMMITTED, tmp_path / "cached", cache=cache)
    assert file_digests(committed_site) == file_digests(tmp_path / "cached")


def test_adding_one_entry_summarises_only_that_entry(
    store_dir: Path, summarised: Counter[str], warm_cache: SummaryCache
) -> None:
    cache = warm_cache
    clone = "finetune--demo-cnn-again"
    shutil.copytree(store_dir / "submissions" / ENTRY, store_dir / "submissions" / clone)
    toml = store_dir / "submissions" / clone / "submission.toml"
    toml.write_text(toml.read_text().replace(f'id = "{ENTRY}"', f'id = "{clone}"'))
    shutil.copytree(store_dir / "results" / ENTRY, store_dir / "results" / clone)
    cached = rebuilt(store_dir, cache)
    assert summarised == {clone: 1}
    assert cached == rebuilt(store_dir)
    summarised.clear()
    rebuilt(store_dir, cache)
    assert not summarised


def test_without_a_folder_the_cache_reads_and_writes_nothing(tmp_path: Path) -> None:
    cache = SummaryCache(None)
    cache.put("ab" * 32, b"payload")
    assert cache.get("ab" * 32) is None
    assert not cache.enabled
    real = SummaryCache(tmp_path / "c")
    real.put("ab" * 32, b"payload")
    assert real.get("ab" * 32) == b"payload"
    assert real.get("cd" * 32) is None


def test_the_label_index_is_what_the_manifest_says(tmp_path: Path) -> None:
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.leaderboard.label_index import frozen_labels, label_index

    cache = SummaryCache(tmp_path / "cache")
    folder = ROOT / "leaderboard" / "manifests"
    cold = frozen_labels(folder, cache)
    warm = frozen_labels(folder, cache)
    assert cold.keys() == warm.keys() and len(cold) >= 3
    for path in sorted(folder.glob("*.parquet")):
        manifest = Manifest.load(path)
        episodes = manifest.episodes()
        for index in (cold[manifest.sha256][1], warm[manifest.sha256][1], label_index(path)):
            assert index.sha256 == manifest.sha256
            assert index.dataset == manifest.dataset
            assert index.meta == manifest.meta
            assert index.index.tolist() == [e.index for e in episodes]
            assert index.stream_index.tolist() == [e.stream_index for e in episodes]
            assert index.ways.tolist() == [e.ways for e in episodes]
            assert [s.tolist() for s in index.shots()] == [e.shots() for e in episodes]
            assert [q.tolist() for q in index.query_labels()] == [
                [label for _, label in e.query] for e in episodes
            ]


def test_a_tampered_label_index_is_not_used(tmp_path: Path) -> None:
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.leaderboard.label_index import label_index

    cache = SummaryCache(tmp_path / "cache")
    path = sorted((ROOT / "leaderboard" / "manifests").glob("*.parquet"))[0]
    label_index(path, cache)
    (stored,) = cache_files(cache.sibling("labels"))
    data = stored.read_bytes()
    stored.write_bytes(data[:-200] + bytes(200))  # the payload damaged, its hash left
    again = label_index(path, cache)
    assert again.ways.tolist() == [e.ways for e in Manifest.load(path).episodes()]


def test_the_default_cache_is_the_users_not_the_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build must not write into a store (a git checkout a pull request changes only by
    its entry): the default folder is the user's cache, and ``off`` disables it."""
    from fewtrans_board.leaderboard.summary_cache import CACHE_ENV, default_root

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_root() == tmp_path / "xdg" / "fewtrans-board" / "build"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_root() == tmp_path / "home" / ".cache" / "fewtrans-board" / "build"
    monkeypatch.setenv(CACHE_ENV, "off")
    assert default_root() is None
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert default_root() == tmp_path / "elsewhere"
