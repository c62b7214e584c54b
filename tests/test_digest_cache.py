"""Decoded files kept by their bytes' digest: bounded, and never trusted by path.

``read_shard`` keeps each verified shard by the sha256 of the bytes it read; the red-team
cases change a file at the same path after a first read (a flipped byte, another valid
shard, a folder under the shard's name) and must get what a first read of the new bytes
gives. The controls read the same bytes again and must get an equal table without
decoding it again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fewtrans_board.core.digest_cache import DigestCache
from fewtrans_board.results import shards
from fewtrans_board.results.shards import VERIFIED_SHARDS, CorruptShardError, read_shard

STORE = Path(__file__).resolve().parents[1] / "leaderboard" / "results"
SHARDS = sorted(STORE.glob("*/*/shards/shard-*.parquet"))


def test_the_least_recently_used_goes_first_beyond_either_limit() -> None:
    by_count: DigestCache[str] = DigestCache(max_entries=2)
    by_count.put("a", "A")
    by_count.put("b", "B")
    assert by_count.get("a") == "A"  # now b is the least recently used
    by_count.put("c", "C")
    assert (by_count.get("a"), by_count.get("b"), by_count.get("c")) == ("A", None, "C")

    by_size: DigestCache[str] = DigestCache(max_bytes=10)
    by_size.put("a", "A", 4)
    by_size.put("b", "B", 4)
    by_size.put("c", "C", 4)  # 12 > 10: a goes
    assert (by_size.get("a"), by_size.get("b"), by_size.get("c"), by_size.bytes) == (
        None,
        "B",
        "C",
        8,
    )
    by_size.put("b", "B2", 6)  # replacing counts the new size only: 6 + 4
    assert (by_size.get("b"), by_size.bytes, len(by_size)) == ("B2", 10, 2)
    by_size.put("huge", "H", 11)  # larger than the whole budget: not kept, nothing dropped
    assert (by_size.get("huge"), len(by_size), by_size.bytes) == (None, 2, 10)
    by_size.clear()
    assert (len(by_size), by_size.bytes) == (0, 0)


@pytest.fixture
def counted_decodes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A fresh cache; the paths whose bytes were decoded, in order."""
    monkeypatch.setattr(shards, "VERIFIED_SHARDS", DigestCache(max_bytes=VERIFIED_SHARDS.max_bytes))
    decoded: list[Path] = []
    real = shards._decode_shard

    def counting(data: bytes, path: Path):  # type: ignore[no-untyped-def]
        decoded.append(path)
        return real(data, path)

    monkeypatch.setattr(shards, "_decode_shard", counting)
    return decoded


def test_the_same_bytes_are_decoded_once_and_each_caller_gets_its_own_metadata(
    counted_decodes: list[Path], tmp_path: Path
) -> None:
    copy = tmp_path / SHARDS[0].name
    shutil.copyfile(SHARDS[0], copy)
    _, first_meta = read_shard(SHARDS[0])
    second_table, second_meta = read_shard(copy)  # other path, same bytes
    assert counted_decodes == [SHARDS[0]]
    assert second_table.equals(pq.read_table(SHARDS[0])) and second_meta == first_meta
    first_meta["run_id"] = "changed by a caller"
    assert read_shard(copy)[1]["run_id"] == second_meta["run_id"] != "changed by a caller"


def test_a_file_changed_after_it_was_read_is_read_again(
    counted_decodes: list[Path], tmp_path: Path
) -> None:
    path = tmp_path / "shard-00000-of-00001.parquet"
    shutil.copyfile(SHARDS[0], path)
    _, meta = read_shard(path)
    # Another valid shard at the same path: its own content, not the remembered one.
    other = next(
        s for s in SHARDS if pq.read_metadata(s).num_rows and s.read_bytes() != path.read_bytes()
    )
    shutil.copyfile(other, path)
    table, other_meta = read_shard(path)
    assert table.equals(read_shard(other)[0]) and other_meta["checksum"] != meta["checksum"]
    # One flipped byte in a data page: refused, although the path was verified before.
    data = bytearray(path.read_bytes())
    data[pq.read_metadata(path).row_group(0).column(0).data_page_offset + 16] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError):
        read_shard(path)
    assert len(counted_decodes) == 3


def test_a_folder_under_a_shards_name_is_refused(tmp_path: Path) -> None:
    """Arrow reads a folder of Parquet files as one dataset: a folder named like a shard,
    holding a valid shard, was read as that shard. A shard is one file."""
    folder = tmp_path / "shard-00000-of-00001.parquet"
    folder.mkdir()
    shutil.copyfile(SHARDS[0], folder / "part-0.parquet")
    with pytest.raises(CorruptShardError, match="unreadable Parquet"):
        read_shard(folder)


def test_a_manifest_swapped_after_its_bytes_are_hashed_is_not_what_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team: replace a frozen manifest by another valid one as soon as the first read of
    it closes. Hashed from one read and decoded from a second, the replacement passed the
    original's checksum file and was kept under the original's digest; read once, the
    original is what is decoded. Control: the replacement itself is refused by the
    original's checksum file, and the original loads as it always did."""
    from fewtrans_board.episodes import manifest as manifest_module
    from fewtrans_board.episodes.manifest import Manifest, ManifestError, sidecar_path

    frozen = STORE.parent / "manifests"
    original, other = (
        frozen / f"{n}--digits.parquet" for n in ("fewtrans-fixed-5w1s", "fewtrans-varied")
    )
    path = tmp_path / original.name
    shutil.copyfile(original, path)
    shutil.copyfile(sidecar_path(original), sidecar_path(path))
    expected = Manifest.load(original)  # read alone, before any swap
    monkeypatch.setattr(manifest_module, "DECODED_MANIFESTS", DigestCache(max_entries=16))
    real_open = Path.open
    swapped: list[bool] = []

    def open_then_swap(self: Path, *args, **kwargs):  # type: ignore[no-untyped-def]
        handle = real_open(self, *args, **kwargs)
        if self == path and not swapped:
            real_close = handle.close

            def close() -> None:
                real_close()
                if not swapped:
                    swapped.append(True)
                    shutil.copyfile(other, path)

            handle.close = close  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(Path, "open", open_then_swap)
    loaded = Manifest.load(path)
    assert swapped, "the file was swapped after its first read"
    assert loaded.sha256 == expected.sha256 and loaded.rows == expected.rows
    again = Manifest.load(original)  # the digest the first read kept: the original's content
    assert again.sha256 == expected.sha256 and again.rows == expected.rows
    with pytest.raises(ManifestError, match="do not match"):
        Manifest.load(path)  # now the other manifest, against the original's checksum file
