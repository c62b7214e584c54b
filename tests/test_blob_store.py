"""Split storage: shards in git, logits in content-addressed blobs (local folder or fsspec URL).

Works on copies of the committed (split) store; ``unsplit`` rebuilds the store as it was
before ``leaderboard migrate-blobs`` (every shard joined with its blob and checked against
its seal), which is what a pre-blob store and a bundle hold.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.entries import read_entry
from fewtrans_board.leaderboard.index import build_index
from fewtrans_board.leaderboard.intake import Verification, add_bundle, check_entry
from fewtrans_board.leaderboard.migrate import migrate_store
from fewtrans_board.leaderboard.pr import check_added_blobs, classify
from fewtrans_board.leaderboard.store import LeaderboardStore, index_text
from fewtrans_board.results.blobs import (
    LOGITS_BLOB_KEY,
    BlobError,
    BlobStore,
    check_split,
    join_shard,
    read_record,
)
from fewtrans_board.results.load import find_runs, load_run
from fewtrans_board.results.row_schema import METADATA_KEY
from fewtrans_board.results.shards import read_shard, rows_to_table, seal_table, write_table
from tests.conftest import REPO, file_digests, shared_folder

COMMITTED = REPO / "leaderboard"
ENTRY = "cosine-classifier--demo-cnn"  # 600 episodes, 9 configurations, both ensembles
RUN = "fewtrans-varied--digits"
UNVERIFIED = Verification(enabled=False)


def copy_store(target: Path) -> Path:
    shutil.copytree(COMMITTED, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def shards(store: Path, ident: str = ENTRY) -> list[Path]:
    return sorted((store / "results" / ident).rglob("shards/shard-*.parquet"))


def unsplit(store: Path) -> None:
    """Join every split shard with its blob in place: the store as it was before the split."""
    blobs = BlobStore.for_store(store)
    for path in sorted(store.rglob("shards/shard-*.parquet")):
        table, meta = read_shard(path)
        record = check_split(table, meta, path)
        if record is None:
            continue
        joined, original = join_shard(table, meta, record, blobs.get(record["sha256"]), path)
        sealed = joined.replace_schema_metadata({METADATA_KEY: canonical_json(original).encode()})
        write_table(path, sealed)
    shutil.rmtree(blobs.location)
    (store / "blobs.toml").unlink()


@pytest.fixture(scope="module")
def unsplit_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed store unsplit (:func:`unsplit`), once per test run: copy it to change it."""

    def build(folder: Path) -> None:
        unsplit(copy_store(folder / "leaderboard"))

    return shared_folder(tmp_path_factory, "unsplit-store", build) / "leaderboard"


@pytest.fixture
def unsplit_copy(unsplit_store: Path) -> Callable[[Path], Path]:
    """Copy the unsplit store to a folder; returns that folder."""

    def copy(target: Path) -> Path:
        shutil.copytree(unsplit_store, target)
        return target

    return copy


def use_url(store: Path, url: str) -> None:
    (store / "blobs.toml").write_text(f'[blobs]\nurl = "{url}"\n')


def first_blob(store: Path, ident: str = ENTRY) -> tuple[Path, str]:
    shard = shards(store, ident)[0]
    return shard, read_record(shard)["sha256"]


def reseal(path: Path, edit: Callable[[list[dict], dict], None]) -> None:
    """Edit a shard's rows and metadata and re-seal it, as a forger would (edit_provenance)."""
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    rows = table.to_pylist()
    edit(rows, meta)
    meta.pop("schema_version")
    write_table(path, rows_to_table(rows, meta))


# --- the blob store itself -------------------------------------------------------------------


def test_local_folder_and_file_url_stores_put_get_and_check(tmp_path: Path) -> None:
    for blobs in (BlobStore(tmp_path / "local"), BlobStore((tmp_path / "url").as_uri())):
        sha = blobs.put(b"logits")
        assert sha == hashlib.sha256(b"logits").hexdigest() and blobs.has(sha)
        assert blobs.get(sha) == b"logits" and blobs.put(b"logits") == sha  # idempotent
        assert blobs.where(sha).endswith(f"/{sha[:2]}/{sha}")
        with pytest.raises(BlobError, match=f"logits blob {'0' * 64} is missing"):
            blobs.get("0" * 64)
    assert (tmp_path / "url" / sha[:2] / sha).read_bytes() == b"logits"  # file:// via fsspec
    (tmp_path / "local" / sha[:2] / sha).write_bytes(b"logitz")
    with pytest.raises(BlobError, match="is corrupt: its content has sha256"):
        BlobStore(tmp_path / "local").get(sha)
    with pytest.raises(BlobError, match="holds 6 bytes, its shard records 7"):
        BlobStore(tmp_path / "local").get(sha, 7)
    with pytest.raises(BlobError, match="is corrupt"):  # a damaged copy is never kept silently
        BlobStore(tmp_path / "local").put(b"logits")


def test_blobs_toml_chooses_the_location(tmp_path: Path) -> None:
    assert BlobStore.for_store(tmp_path).location == str(tmp_path / "blobs")  # the default
    use_url(tmp_path, "elsewhere")
    assert BlobStore.for_store(tmp_path).location == str(tmp_path / "elsewhere")
    use_url(tmp_path, "s3://bucket/prefix")
    assert BlobStore.for_store(tmp_path).is_url
    (tmp_path / "blobs.toml").write_text('[blobs]\nurl = "x"\ntoken = "secret"\n')
    with pytest.raises(Exception, match="unknown key token"):
        BlobStore.for_store(tmp_path)


# --- what git holds, what blobs hold ---------------------------------------------------------


def test_committed_store_is_split_and_complete() -> None:
    """Every committed shard names a blob that is in the committed blob folder."""
    blobs = BlobStore.for_store(COMMITTED)
    paths = sorted(COMMITTED.rglob("shards/shard-*.parquet"))
    assert paths
    for path in paths:
        record = read_record(path)
        assert record and blobs.has(record["sha256"]), path
        assert pq.read_table(path).column("logits").null_count == pq.read_metadata(path).num_rows


def test_migration_is_identical_idempotent_and_rebuild_check_passes(
    tmp_path: Path, unsplit_copy: Callable[[Path], Path]
) -> None:
    committed_index = (COMMITTED / "index.json").read_text()
    store_dir = unsplit_copy(tmp_path / "leaderboard")
    store = LeaderboardStore(store_dir)
    before = index_text(build_index(store))
    assert before == committed_index  # accuracies, ensembles, ranks of the unsplit store
    assert all(r.report.shards > 0 for r in migrate_store(store))
    assert all(read_record(p) for p in store_dir.rglob("shards/shard-*.parquet"))
    assert index_text(build_index(LeaderboardStore(store_dir))) == before
    assert index_text(build_index(LeaderboardStore(store_dir), with_logits=True)) == before
    again = file_digests(store_dir)
    assert all(r.report.shards == 0 for r in migrate_store(LeaderboardStore(store_dir)))
    assert file_digests(store_dir) == again  # idempotent: nothing rewritten
    # The git side of a split shard is a fraction of the shard.
    git = sum(p.stat().st_size for p in store_dir.rglob("shards/*.parquet"))
    blob = sum(p.stat().st_size for p in (store_dir / "blobs").rglob("*") if p.is_file())
    assert git < blob


@pytest.mark.slow
def test_migrate_blobs_command_and_rebuild_check(tmp_path: Path, invoke, unsplit_copy) -> None:  # type: ignore[no-untyped-def]
    store_dir = unsplit_copy(tmp_path / "leaderboard")
    result = invoke(["leaderboard", "migrate-blobs", "--leaderboard", str(store_dir)])
    assert result.exit_code == 0, result.output
    assert f"{ENTRY}: 12 shard(s) split" in result.output
    for extra in ([], ["--with-logits"]):
        args = ["leaderboard", "rebuild", "--check", "--leaderboard", str(store_dir), *extra]
        checked = invoke(args)
        assert checked.exit_code == 0, checked.output
    again = invoke(["leaderboard", "migrate-blobs", "--leaderboard", str(store_dir)])
    assert f"{ENTRY}: already split" in again.output and "0 shard(s) split now" in again.output


def test_an_interrupted_migration_leaves_each_entry_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unsplit_copy: Callable[[Path], Path]
) -> None:
    from fewtrans_board.leaderboard import migrate

    store_dir = unsplit_copy(tmp_path / "leaderboard")
    store = LeaderboardStore(store_dir)
    ids = store.submission_ids()
    before = file_digests(store_dir / "results" / ids[1])
    real = migrate.split_results_folder
    calls = []

    def failing(folder: Path, blobs: BlobStore):  # type: ignore[no-untyped-def]
        calls.append(folder)
        if len(calls) == 2:
            raise BlobError("f" * 64, "the bucket", "cannot be written: disk full")
        return real(folder, blobs)

    monkeypatch.setattr(migrate, "split_results_folder", failing)
    with pytest.raises(SubmissionError, match=rf"\[blob-store\] stored entry {ids[1]} was not"):
        migrate_store(store)
    assert all(read_record(p) for p in shards(store_dir, ids[0]))  # the first is migrated
    assert file_digests(store_dir / "results" / ids[1]) == before  # the second is untouched
    assert not list(store_dir.glob(".migrat*"))
    monkeypatch.setattr(migrate, "split_results_folder", real)
    # A swap cut between its two renames: the next run puts the old folder back first.
    (store_dir / "results" / ids[1]).rename(store_dir / f".migrated-{ids[1]}")
    migrate_store(store)
    assert (
        index_text(build_index(store, with_logits=True)) == (COMMITTED / "index.json").read_text()
    )


# --- add splits what it validated ------------------------------------------------------------


def bundle_of(store: Path, ident: str, out: Path) -> Path:
    """A bundle zip made of a stored (unsplit) entry's files."""
    with zipfile.ZipFile(out, "w") as archive:
        for name in ("submission.toml", "centre-search.json"):
            path = store / "submissions" / ident / name
            if path.is_file():
                archive.write(path, name)
        folder = store / "results" / ident
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, f"results/{path.relative_to(folder).as_posix()}")
    return out


def test_add_validates_the_full_bundle_then_splits_it(tmp_path: Path, unsplit_store: Path) -> None:
    bundle = bundle_of(unsplit_store, ENTRY, tmp_path / "bundle.zip")
    store_dir = tmp_path / "leaderboard"
    shutil.copytree(COMMITTED / "manifests", store_dir / "manifests")
    store = LeaderboardStore(store_dir)
    added = add_bundle(bundle, store, UNVERIFIED)
    assert added.validation.logits_checked
    with zipfile.ZipFile(bundle) as archive:
        members = {
            n: hashlib.sha256(archive.read(n)).hexdigest()
            for n in archive.namelist()
            if n.endswith(".parquet")
        }
        sealed = {
            n: json.loads(pq.read_schema(archive.open(n)).metadata[METADATA_KEY])["checksum"]
            for n in members
        }
    stored = {
        f"results/{p.relative_to(store_dir / 'results' / ENTRY).as_posix()}": p
        for p in shards(store_dir)
    }
    assert set(stored) == set(members)
    for name, path in stored.items():
        record = read_record(path)
        # The git side names its blob and the shard it was split from: the file's bytes and
        # the seal of its content, which the blob and the git side rebuild exactly.
        assert record["source_sha256"] == members[name] and record["content"] == sealed[name]
        assert store.blobs.has(record["sha256"])
    # The stored entry's digest is the bundle's: verification draws the same sample.
    from fewtrans_board.leaderboard.bundle import extract_bundle

    assert store.entry_contents(ENTRY).digest() == extract_bundle(bundle, tmp_path / "x").digest()
    git_only = check_entry(ENTRY, store, UNVERIFIED)
    assert not git_only.validation.logits_checked
    assert any("logit-mean ensembles not rechecked" in c for c in git_only.validation.checks)
    assert check_entry(ENTRY, store, UNVERIFIED, with_logits=True).validation.logits_checked
    assert git_only.validation.runs == added.validation.runs


def test_a_split_shard_keeps_its_provenance_once(tmp_path: Path, unsplit_store: Path) -> None:
    """pyarrow writes schema metadata twice (key-value, and inside the serialised Arrow
    schema); on the git side of a split run that repeated provenance is most of the bytes."""
    bundle = bundle_of(unsplit_store, ENTRY, tmp_path / "bundle.zip")
    store_dir = tmp_path / "leaderboard"
    shutil.copytree(COMMITTED / "manifests", store_dir / "manifests")
    add_bundle(bundle, LeaderboardStore(store_dir), UNVERIFIED)
    for path in shards(store_dir):
        table, meta = read_shard(path)
        raw = canonical_json(meta).encode()
        assert path.read_bytes().count(raw) == 1  # not a second copy in ARROW:schema
        assert pq.read_schema(path).metadata is None or METADATA_KEY not in (
            pq.read_schema(path).metadata or {}
        )
        assert json.loads(table.schema.metadata[METADATA_KEY]) == meta
        assert read_record(path)["sha256"] == meta["logits_blob"]["sha256"]
    twice = tmp_path / "twice.parquet"
    write_table(twice, table)  # the default layout: the reader takes both
    assert read_shard(twice)[1] == meta
    assert twice.read_bytes().count(raw) == 1 and twice.stat().st_size > path.stat().st_size


def test_a_bundle_of_split_shards_is_refused(tmp_path: Path) -> None:
    from fewtrans_board.leaderboard.intake import validate_bundle

    bundle = bundle_of(COMMITTED, ENTRY, tmp_path / "split.zip")
    store = LeaderboardStore(copy_store(tmp_path / "leaderboard"))
    with pytest.raises(SubmissionError, match=r"\[split-shard\] results/.*/shards/shard-00000"):
        validate_bundle(bundle, store)


# --- missing, corrupted and swapped blobs ----------------------------------------------------


@pytest.mark.parametrize("where", ["folder", "file-url"])
def test_a_missing_or_corrupted_blob_is_named_in_one_line(
    tmp_path: Path, where: str, invoke
) -> None:  # type: ignore[no-untyped-def]
    store_dir = copy_store(tmp_path / "leaderboard")
    if where == "file-url":
        shutil.move(store_dir / "blobs", tmp_path / "bucket")
        use_url(store_dir, (tmp_path / "bucket").as_uri())
    store = LeaderboardStore(store_dir)
    shard, sha = first_blob(store_dir)
    location = store.blobs.where(sha)
    blob = (tmp_path / "bucket" if where == "file-url" else store_dir / "blobs") / sha[:2] / sha
    data = blob.read_bytes()
    shard_name = f"results/{RUN}/shards/{shard.name}"
    # Without blobs the store reads (and rebuilds) as before.
    rebuild = ["leaderboard", "rebuild", "--check", "--leaderboard", str(store_dir)]
    assert invoke(rebuild).exit_code == 0
    blob.unlink()
    assert invoke(rebuild).exit_code == 0
    result = invoke([*rebuild, "--with-logits"])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line == (
        f"Error: [missing-blob] stored entry {ENTRY}: {shard_name}: logits blob {sha} is "
        f"missing (looked for at {location})"
    )
    blob.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    result = invoke(
        ["leaderboard", "check", ENTRY, "--with-logits", "--leaderboard", str(store_dir)]
    )
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and line.startswith(
        f"Error: [corrupt-blob] stored entry {ENTRY}: {shard_name}: logits blob {sha} is "
        "corrupt: its content has sha256"
    )
    assert line.endswith(f"(looked for at {location})")
    blob.write_bytes(data[:100])
    with pytest.raises(SubmissionError, match="holds 100 bytes, its shard records"):
        read_entry(store, ENTRY, with_logits=True)
    if where != "file-url":  # a blob folder kept with git LFS, cloned without the blobs
        pointer = (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n"
        )
        blob.write_text(pointer)
        with pytest.raises(SubmissionError, match=r"missing-blob.*git LFS pointer.*git lfs pull"):
            read_entry(store, ENTRY, with_logits=True)


def test_a_swapped_blob_is_refused_by_the_seal(tmp_path: Path) -> None:
    store_dir = copy_store(tmp_path / "leaderboard")
    store = LeaderboardStore(store_dir)
    first, second = shards(store_dir)[:2]
    a, b = read_record(first)["sha256"], read_record(second)["sha256"]
    blob_a, blob_b = (store_dir / "blobs" / s[:2] / s for s in (a, b))
    # 1. Another blob's bytes under this blob's name: its hash gives it away.
    saved = blob_a.read_bytes()
    blob_a.write_bytes(blob_b.read_bytes())
    with pytest.raises(
        SubmissionError, match=rf"\[corrupt-blob\].*{a} (is corrupt|holds \d+ bytes)"
    ):
        read_entry(store, ENTRY, with_logits=True)
    blob_a.write_bytes(saved)
    # 2. The shard pointed at another (intact) blob without re-sealing: the seal breaks.
    raw = first.read_bytes()
    table = pq.read_table(first)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta[LOGITS_BLOB_KEY].update(sha256=b, bytes=blob_b.stat().st_size)
    write_table(first, table.replace_schema_metadata({METADATA_KEY: canonical_json(meta).encode()}))
    with pytest.raises(SubmissionError, match=r"\[corrupt-shard\].*content sha256"):
        read_entry(store, ENTRY)  # without blobs too
    first.write_bytes(raw)
    # 3. Re-sealed as a forger would: git alone cannot tell, the blob rebuilds another shard.
    reseal(first, lambda rows, m: m[LOGITS_BLOB_KEY].update(sha256=b, bytes=blob_b.stat().st_size))
    read_entry(store, ENTRY)
    with pytest.raises(SubmissionError, match="not the shard that was validated"):
        read_entry(store, ENTRY, with_logits=True)


# --- the red team: git-side predictions edited and re-sealed ---------------------------------


def labels_of(episode: int) -> list[int]:
    from fewtrans_board.episodes.manifest import Manifest

    manifest = Manifest.load(COMMITTED / "manifests" / f"{RUN}.parquet")
    return [label for _, label in manifest.episodes()[episode].query]


def forge(kinds: set[str], reseal_content: bool = False) -> Callable[[list[dict], dict], None]:
    """All-correct predictions for the rows of ``kinds`` in the shard's first imperfect
    episode (``config``, ``vote``, ``logit-mean``), accuracies recomputed."""

    def edit(rows: list[dict], meta: dict) -> None:
        episode = next(
            r["episode"] for r in rows if r["aggregation"] == "vote" and r["accuracy"] < 100
        )
        labels = labels_of(episode)
        for row in rows:
            if row["episode"] == episode and (row["aggregation"] or "config") in kinds:
                row["predictions"], row["accuracy"] = list(labels), 100.0

    return edit


def test_edited_predictions_are_refused_without_blobs_or_with_them(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    """What a reader without blobs catches, and what the blobs add."""
    base = copy_store(tmp_path / "base")

    def attempt(kinds: set[str], name: str) -> LeaderboardStore:
        store_dir = tmp_path / name
        shutil.copytree(base, store_dir)
        reseal(shards(store_dir)[0], forge(kinds))
        return LeaderboardStore(store_dir)

    # The headline of these entries is the vote; the members feed vote, oracle, mean-single.
    for kinds in ({"config"}, {"vote"}):
        store = attempt(kinds, "-".join(sorted(kinds)))
        with pytest.raises(
            SubmissionError, match=r"\[ensemble-mismatch\].*vote predictions differ"
        ):
            read_entry(store, ENTRY)
        result = invoke(["leaderboard", "rebuild", "--check", "--leaderboard", str(store.root)])
        assert result.exit_code == 1 and "[ensemble-mismatch]" in result.output
    # Members and their vote forged together agree in git; the blobs refuse them twice over:
    # the rebuilt shard is not the validated one, and re-sealing that too (a forger holding
    # the blobs) leaves predictions that are not the argmax of the logits.
    store = attempt({"config", "vote"}, "members")
    read_entry(store, ENTRY)
    with pytest.raises(SubmissionError, match="not the shard that was validated"):
        read_entry(store, ENTRY, with_logits=True)
    store = attempt({"config", "vote"}, "members-inner")
    path = shards(store.root)[0]
    table, meta = read_shard(path)
    record = check_split(table, meta, path)
    assert record is not None
    blob = store.blobs.get(record["sha256"])
    import io

    logits = pq.read_table(io.BytesIO(blob)).column("logits")
    full = table.set_column(table.schema.get_field_index("logits"), "logits", logits)
    inner = seal_table(
        full, {k: v for k, v in meta.items() if k not in (LOGITS_BLOB_KEY, "schema_version")}
    )
    content = json.loads(inner.schema.metadata[METADATA_KEY])["checksum"]
    reseal(path, lambda rows, m: m[LOGITS_BLOB_KEY].update(content=content))
    read_entry(store, ENTRY)
    with pytest.raises(SubmissionError, match=r"\[prediction-mismatch\].*not the argmax"):
        read_entry(store, ENTRY, with_logits=True)
    # The logit-mean row is checked from the member logits: only with the blobs.
    store = attempt({"logit-mean"}, "logit-mean")
    read_entry(store, ENTRY)
    with pytest.raises(SubmissionError, match="not the shard that was validated"):
        read_entry(store, ENTRY, with_logits=True)


# --- verification and analyses from fetched blobs --------------------------------------------


@pytest.fixture(scope="module")
def loaded_three_ways(
    unsplit_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, BlobStore]:
    """The unsplit store, and a copy of it migrated, its blobs reached through a file://
    URL (built once per test run: read only)."""

    def build(folder: Path) -> None:
        split = folder / "split"
        shutil.copytree(unsplit_store, split)
        migrate_store(LeaderboardStore(split))
        shutil.move(split / "blobs", folder / "bucket")
        use_url(split, (folder / "bucket").as_uri())

    split = shared_folder(tmp_path_factory, "migrated-store", build) / "split"
    return unsplit_store, split, BlobStore.for_store(split)


@pytest.mark.slow  # the report's provenance asks platform for the processor (a process)
def test_an_analysis_reads_fetched_blobs_exactly_as_local_logits(
    loaded_three_ways: tuple[Path, Path, BlobStore],
) -> None:
    from fewtrans_board.analysis.sensitivity import sensitivity_report
    from fewtrans_board.results.load import blobs_for_run

    local, split, blobs = loaded_three_ways
    ids = ["cosine-classifier--demo-cnn", "finetune--demo-cnn", "linear-probe--demo-cnn"]
    folders = {
        name: [find_runs([s / "results" / i])[0] for i in ids]
        for name, s in [("local", local), ("split", split)]
    }
    assert blobs_for_run(folders["split"][0]).location == blobs.location
    runs = {
        "local": [load_run(p) for p in folders["local"]],
        "fetched": [load_run(p, blobs) for p in folders["split"]],
        "git": [load_run(p) for p in folders["split"]],
    }
    for a, b in zip(runs["local"], runs["fetched"], strict=True):
        assert a.table.equals(b.table, check_metadata=True) and a.shard_meta == b.shard_meta
        assert b.logits_present and not b.blobs
    assert all(r.blobs and not r.logits_present for r in runs["git"])

    def points(name: str) -> list[dict]:
        data, _ = sensitivity_report(runs[name])
        return [{k: v for k, v in p.items() if k != "path"} for p in data["points"]]

    assert points("local") == points("fetched") == points("git")


@pytest.mark.slow
def test_verification_from_fetched_blobs_equals_verification_from_local_logits(
    loaded_three_ways: tuple[Path, Path, BlobStore], monkeypatch: pytest.MonkeyPatch, invoke
) -> None:  # type: ignore[no-untyped-def]
    """The same secret seeds both (the split entry's digest is its bundle's): same report."""
    from fewtrans_board.registry.manager import get_plugin_manager

    local, split, _ = loaded_three_ways
    monkeypatch.setenv("VERIFY_SECRET", "test-secret")
    reports = []
    for store in (local, split):
        args = ["leaderboard", "check", "mean-centroid--demo-cnn", "--verify", "--sample", "2"]
        args += ["--secret-env", "VERIFY_SECRET", "--leaderboard", str(store), "--json"]
        result = invoke(args, pm=get_plugin_manager(entry_points=False))
        assert result.exit_code == 0, result.output
        reports.append(json.loads(result.output))

    def stable(value: object) -> object:
        if isinstance(value, dict):
            return {
                k: stable(v)
                for k, v in value.items()
                # when and how fast: the clock, and the estimate (a warm worker starts free)
                if k not in ("date", "estimate")
                and not any(t in k for t in ("seconds", "time", "elapsed", "_at", "environment"))
            }
        if isinstance(value, list):
            return [stable(v) for v in value]
        return value

    def differences(a: object, b: object, path: str = "") -> list[str]:
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(set(a) | set(b))
            return [d for k in keys for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            return [
                d
                for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")
            ]
        return [] if a == b else [f"{path}: {a!r} != {b!r}"[:300]]

    assert reports[0]["verification"]["passed"] and reports[0]["verification"]["digest"]
    assert not differences(stable(reports[0]), stable(reports[1]))


# --- the pull-request flow ---------------------------------------------------------------------


def test_a_pull_request_may_add_only_its_entries_blobs(tmp_path: Path) -> None:
    _shard, sha = first_blob(COMMITTED)
    blob = f"leaderboard/blobs/{sha[:2]}/{sha}"
    changes = classify([("A", f"leaderboard/results/{ENTRY}/{RUN}/run.json"), ("A", blob)])
    assert changes.ids == [ENTRY] and changes.blobs == [sha]
    check_added_blobs(COMMITTED, changes.ids, changes.blobs)
    with pytest.raises(SubmissionError, match=r"\[unreferenced-blob\]"):
        check_added_blobs(COMMITTED, ["finetune--demo-cnn"], changes.blobs)
    with pytest.raises(SubmissionError, match=r"\[immutable\]"):
        classify([("M", blob)])
    with pytest.raises(SubmissionError, match=r"\[pr-touches-code\]"):
        classify([("A", "leaderboard/blobs/zz/not-a-hash")])
    with pytest.raises(SubmissionError, match=r"\[pr-touches-code\]"):
        classify([("A", blob)], blob_folder=None)  # blobs live at a URL: none in the repo
    with pytest.raises(SubmissionError, match=r"\[pr-touches-code\]"):
        classify([("M", "leaderboard/blobs.toml")])


def test_logits_blob_values_are_the_shards_logits() -> None:
    """A blob holds the logits column, row for row: configuration rows and the logit-mean."""
    import io

    shard, sha = first_blob(COMMITTED)
    logits = pq.read_table(io.BytesIO(BlobStore.for_store(COMMITTED).get(sha))).column("logits")
    rows = pq.read_table(shard, columns=["kind", "aggregation"]).to_pylist()
    valid = ~np.asarray(logits.is_null())
    assert [r["aggregation"] != "vote" for r in rows] == valid.tolist()
