"""The blob flow of a store whose logits blobs live at a URL (file:// through fsspec here).

A submitter stages their entry's blobs where they can write (``add --blobs-to``,
``export-blobs``), the pull-request check fetches only the new entry's blobs from there,
and after the merge ``publish-blobs`` copies them into the store. Every path has an honest
control beside its red-team tests; each red-team test names the check it exercises, and
asserts that check's own refusal, so it fails on code without that defence.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard import blob_flow
from fewtrans_board.leaderboard.blob_flow import read_note, staging_store, write_note
from fewtrans_board.leaderboard.intake import Verification, check_pull_request
from fewtrans_board.leaderboard.pr import classify
from fewtrans_board.results.blobs import (
    LOGITS_BLOB_KEY,
    BlobStore,
    check_split,
    join_shard,
    read_record,
)
from fewtrans_board.results.row_schema import METADATA_KEY
from fewtrans_board.results.shards import read_shard, write_table
from tests.test_blob_store import COMMITTED, bundle_of, reseal, shards, use_url

ENTRY = "simpleshot--demo-cnn"  # 12 shards, a built-in adapter
UNVERIFIED = Verification(enabled=False)


def blob_path(folder: Path, sha: str) -> Path:
    return folder / sha[:2] / sha


def entry_shas(store: Path, ident: str = ENTRY) -> list[str]:
    return [read_record(p)["sha256"] for p in shards(store, ident)]


def join_entry(store: Path, ident: str, blobs: BlobStore) -> None:
    """Put an entry's logits back into its shards (what a bundle holds, or a cheat's PR)."""
    for path in shards(store, ident):
        table, meta = read_shard(path)
        record = check_split(table, meta, path)
        assert record is not None
        joined, original = join_shard(table, meta, record, blobs.get(record["sha256"]), path)
        write_table(
            path, joined.replace_schema_metadata({METADATA_KEY: canonical_json(original).encode()})
        )


@dataclass
class Flow:
    """A repository whose main holds a store with blobs at file://bucket; branch ``pr`` adds
    ENTRY (split shards, no blobs in git), whose blobs are staged in ``staging``."""

    repo: Path
    bucket: Path
    staging: Path

    @property
    def store(self) -> Path:
        return self.repo / "leaderboard"

    def git(self, *args: str) -> str:
        command = ["git", "-C", str(self.repo), "-c", "user.name=t", "-c", "user.email=t@t"]
        return subprocess.run([*command, *args], check=True, capture_output=True, text=True).stdout

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def check(self, blobs_from: Path | None = None) -> object:
        source = None if blobs_from is None else BlobStore(blobs_from.as_uri())
        return check_pull_request(self.repo, "main", UNVERIFIED, blobs_from=source)

    def first(self) -> tuple[Path, str]:
        path = shards(self.store, ENTRY)[0]
        return path, read_record(path)["sha256"]


@pytest.fixture
def flow(tmp_path: Path) -> Flow:
    repo, bucket, staging = tmp_path / "repo", tmp_path / "bucket", tmp_path / "staging"
    store = repo / "leaderboard"
    ignore = shutil.ignore_patterns("__pycache__", "blobs", ".cache")
    shutil.copytree(COMMITTED, store, ignore=ignore)
    shutil.copytree(COMMITTED / "blobs", bucket)
    for sha in entry_shas(COMMITTED):
        blob_path(staging, sha).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(blob_path(bucket, sha), blob_path(staging, sha))
    for kind in ("submissions", "results"):
        shutil.rmtree(store / kind / ENTRY)
    use_url(store, bucket.as_uri())
    flow = Flow(repo, bucket, staging)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    flow.commit("base: a store keeping its blobs at a URL")
    flow.git("checkout", "-q", "-b", "pr")
    for kind in ("submissions", "results"):
        shutil.copytree(COMMITTED / kind / ENTRY, store / kind / ENTRY)
    # A pull request carries no status.json (CI writes it from its own check).
    (store / "submissions" / ENTRY / "status.json").unlink()
    return flow


# --- staging notes: one public URL, never the runner's own files -----------------------------


def test_a_staging_note_holds_one_public_url(tmp_path: Path) -> None:
    assert read_note(tmp_path, "x") is None
    write_note(tmp_path, "x", "https://huggingface.co/datasets/me/blobs/resolve/main")
    assert read_note(tmp_path, "x") == "https://huggingface.co/datasets/me/blobs/resolve/main"
    assert staging_store("s3://bucket/prefix/").options == {"anon": True}
    note = tmp_path / "blob-sources" / "x.txt"
    # Red team (staging_store's scheme list): a pull request cannot make the check read the
    # runner's files or chain file systems.
    for url in ("file:///etc", "/etc", "memory://x", "https://a::file:///etc", "zip://a"):
        note.write_text(url + "\n")
        with pytest.raises(SubmissionError, match=r"\[bad-blob-source\] blob-sources/x.txt"):
            read_note(tmp_path, "x")
    note.write_text("https://a.example/b\nhttps://c.example/d\n")
    with pytest.raises(SubmissionError, match="must hold one line"):
        read_note(tmp_path, "x")
    note.unlink()
    note.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SubmissionError, match="symbolic link"):
        read_note(tmp_path, "x")


def test_a_url_store_pull_request_may_name_its_staging_but_add_no_blob() -> None:
    sha = "ab" * 32
    entry = [("A", f"leaderboard/results/{ENTRY}/run/run.json")]
    note = ("A", f"leaderboard/blob-sources/{ENTRY}.txt")
    assert classify([*entry, note], blob_folder=None).sources == [ENTRY]
    with pytest.raises(SubmissionError, match=r"\[pr-touches-code\].*names no new entry"):
        classify([note], blob_folder=None)
    with pytest.raises(SubmissionError, match=r"\[pr-touches-code\]"):  # local store: in git
        classify([*entry, note])
    with pytest.raises(SubmissionError, match=r"\[pr-touches-code\]"):
        classify([*entry, ("A", f"leaderboard/blobs/{sha[:2]}/{sha}")], blob_folder=None)


# --- add, check, export on a file:// store ----------------------------------------------------


def empty_url_store(tmp_path: Path, name: str) -> tuple[Path, Path]:
    store, bucket = tmp_path / name, tmp_path / f"{name}-bucket"
    shutil.copytree(COMMITTED / "manifests", store / "manifests")
    use_url(store, bucket.as_uri())
    return store, bucket


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    for kind in ("submissions", "results"):
        shutil.copytree(COMMITTED / kind / ENTRY, source / kind / ENTRY)
    join_entry(source, ENTRY, BlobStore.for_store(COMMITTED))
    return bundle_of(source, ENTRY, tmp_path / "bundle.zip")


def test_add_to_a_url_store_or_to_a_staging_location(tmp_path: Path, bundle: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    store, bucket = empty_url_store(tmp_path, "store")
    add = ["leaderboard", "add", str(bundle), "--unsafe-no-verify", "--leaderboard", str(store)]
    assert invoke(add).exit_code == 0
    assert all(blob_path(bucket, sha).is_file() for sha in entry_shas(store))
    assert not (store / "blobs").exists()  # nothing beside the shards in the store

    def check(store: Path, *extra: str) -> list[str]:
        return ["leaderboard", "check", ENTRY, "--leaderboard", str(store), *extra]

    result = invoke(check(store, "--with-logits", "--json"))
    assert result.exit_code == 0 and not any(
        "not rechecked" in c for c in json.loads(result.output)["checks"]
    )
    # A submitter without write access stages the blobs; the store's bucket gets none.
    store, bucket = empty_url_store(tmp_path, "fork")
    staging = tmp_path / "staging"
    result = invoke([*add[:-1], str(store), "--blobs-to", str(staging)])
    assert result.exit_code == 0 and f"put that URL in {store}/blob-sources/{ENTRY}.txt" in (
        result.output
    )
    assert not bucket.exists() and len(list(staging.rglob("*/*"))) == 12
    assert invoke(check(store, "--blobs-from", str(staging))).exit_code == 0
    result = invoke(check(store, "--with-logits"))
    (line,) = result.output.strip().splitlines()
    sha = entry_shas(store)[0]
    assert result.exit_code == 1 and line.startswith(f"Error: [missing-blob] stored entry {ENTRY}")
    assert f"shard-00000-of-00012.parquet: logits blob {sha} is missing" in line
    assert line.endswith(f"(looked for at {bucket.as_uri()}/{sha[:2]}/{sha})")
    # Without write access to the store's bucket, add stores nothing and says what to do.
    store, _ = empty_url_store(tmp_path, "no-access")
    (tmp_path / "a-file").write_text("not a bucket")
    use_url(store, (tmp_path / "a-file" / "blobs").as_uri())
    result = invoke([*add[:-1], str(store)])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and line.startswith("Error: [blob-store]")
    assert line.endswith("leaderboard add BUNDLE --blobs-to FOLDER-OR-URL")
    assert not (store / "submissions").exists() or not any((store / "submissions").iterdir())


def test_export_blobs_copies_checked_blobs_idempotently(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "leaderboard"
    shutil.copytree(COMMITTED, store, ignore=shutil.ignore_patterns("__pycache__", ".cache"))
    out = tmp_path / "out"
    export = ["leaderboard", "export-blobs", ENTRY, "--leaderboard", str(store)]
    result = invoke([*export, "--to", out.as_uri()])
    assert result.exit_code == 0 and f"{ENTRY}: 12 blob(s) copied" in result.output
    assert "0 blob(s) copied" in invoke([*export, "--to", out.as_uri()]).output  # idempotent
    # Red team (BlobStore.get's hash check): a damaged source blob is never exported.
    sha = entry_shas(store)[0]
    data = blob_path(store / "blobs", sha).read_bytes()
    blob_path(store / "blobs", sha).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    again = tmp_path / "again"
    result = invoke([*export, "--to", str(again)])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and line.startswith(f"Error: [corrupt-blob] entry {ENTRY}: ")
    assert f"logits blob {sha} is corrupt: its content has sha256" in line
    assert not blob_path(again, sha).exists()


def test_copy_into_a_memory_store_and_one_that_refuses_writes(tmp_path: Path) -> None:
    from fewtrans_board.leaderboard.blob_flow import copy_entry_blobs
    from fewtrans_board.leaderboard.store import LeaderboardStore

    store = LeaderboardStore(COMMITTED)
    target = BlobStore(f"memory://{tmp_path.name}/blobs")
    try:
        assert copy_entry_blobs(store, ENTRY, store.blobs, target).copied == 12
        assert copy_entry_blobs(store, ENTRY, store.blobs, target).present == 12
        assert all(target.get(sha) for sha in entry_shas(COMMITTED))
    finally:
        import fsspec

        fsspec.filesystem("memory").rm(f"/{tmp_path.name}", recursive=True)
    (tmp_path / "file").write_text("not a folder")
    refusing = BlobStore((tmp_path / "file" / "below").as_uri())
    with pytest.raises(SubmissionError) as caught:
        copy_entry_blobs(store, ENTRY, store.blobs, refusing)
    assert str(caught.value).startswith(f"[blob-store] entry {ENTRY}: results/")
    assert "cannot be written" in str(caught.value) and "\n" not in str(caught.value)


def test_the_site_and_the_index_need_no_blob(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    """What the deploy job relies on: rebuild and site build read git alone."""
    store = tmp_path / "leaderboard"
    ignore = shutil.ignore_patterns("__pycache__", ".cache", "blobs")
    shutil.copytree(COMMITTED, store, ignore=ignore)
    use_url(store, (tmp_path / "no-such-bucket").as_uri())
    assert invoke(["leaderboard", "rebuild", "--check", "--leaderboard", str(store)]).exit_code == 0
    site = ["site", "build", "--leaderboard", str(store), "--out", str(tmp_path / "site")]
    result = invoke(site)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "site" / "index.html").is_file()


# --- the pull-request check fetches the new entry's blobs from its staging location ---------


def failure(report: object) -> tuple[str, str]:
    failures = report.failures  # type: ignore[attr-defined]
    assert list(failures) == [ENTRY], failures
    code, message = failures[ENTRY]
    assert "\n" not in message
    return code, message


@pytest.mark.slow  # git
def test_an_honest_pull_request_is_checked_from_its_staging_location(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, invoke
) -> None:  # type: ignore[no-untyped-def]
    flow.commit("add the entry")
    args = ["leaderboard", "check-pr", "--repo", str(flow.repo), "--base", "main", "--json"]
    result = invoke([*args, "--blobs-from", flow.staging.as_uri()])
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["ok"] and report["ids"] == [ENTRY], report
    assert not any("not rechecked" in c for c in report["entries"][ENTRY]["checks"])
    # Named by the pull request itself (file:// allowed for this test only).
    monkeypatch.setitem(blob_flow.STAGING_SCHEMES, "file", {})
    write_note(flow.store, ENTRY, flow.staging.as_uri())
    flow.commit("name the staging location")
    assert flow.check().ok  # type: ignore[attr-defined]
    # Without a staging location the blobs are looked for in the store's bucket: absent.
    flow.git("rm", "-q", f"leaderboard/blob-sources/{ENTRY}.txt")
    flow.commit("no note")
    code, message = failure(flow.check())
    _, sha = flow.first()
    assert code == "missing-blob" and f"logits blob {sha} is missing" in message
    assert message.endswith(f"(looked for at {flow.bucket.as_uri()}/{sha[:2]}/{sha})")


@pytest.mark.slow  # git, sandboxed plugin workers
def test_a_pull_request_is_verified_from_its_staged_blobs(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, invoke
) -> None:  # type: ignore[no-untyped-def]
    """Verification re-runs the entry and compares with what the staged blobs rebuild."""
    from fewtrans_board.registry.manager import get_plugin_manager

    monkeypatch.setenv("VERIFY_SECRET", "test-secret")
    flow.commit("add the entry")
    args = ["leaderboard", "check-pr", "--repo", str(flow.repo), "--base", "main", "--verify"]
    # 4 episodes: on another CPU than the recording's, the paired bound needs more than one
    args += ["--sample", "4", "--secret-env", "VERIFY_SECRET", "--json"]
    args += ["--blobs-from", flow.staging.as_uri()]
    result = invoke(args, pm=get_plugin_manager(entry_points=False))
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["ok"], report
    assert report["entries"][ENTRY]["verification"]["passed"]


@pytest.mark.slow  # git
def test_a_missing_or_swapped_staged_blob_is_refused_in_one_line(flow: Flow) -> None:
    flow.commit("add the entry")
    path, sha = flow.first()
    staged = blob_path(flow.staging, sha)
    data = staged.read_bytes()
    shard = f"results/fewtrans-varied--digits/shards/{path.name}"
    staged.unlink()
    code, message = failure(flow.check(flow.staging))
    assert code == "missing-blob" and message == (
        f"[missing-blob] stored entry {ENTRY}: {shard}: logits blob {sha} is missing (looked for "
        f"at {flow.staging.as_uri()}/{sha[:2]}/{sha})"
    )
    # Red team (BlobStore.get's hash check): other content under the right name and size.
    staged.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    code, message = failure(flow.check(flow.staging))
    assert (
        code == "corrupt-blob" and f"{shard}: logits blob {sha} is corrupt: its content" in message
    )
    # Red team (BlobStore.get's size check): another blob's bytes under this name.
    other = entry_shas(flow.store)[1]
    staged.write_bytes(blob_path(flow.staging, other).read_bytes())
    code, message = failure(flow.check(flow.staging))
    assert code == "corrupt-blob" and f"logits blob {sha} holds" in message


@pytest.mark.slow  # git
def test_a_blob_of_the_right_hash_but_other_logits_is_refused_by_the_seal(flow: Flow) -> None:
    """Red team (join_shard's seal): the shard re-sealed to name another genuine blob."""
    path, _ = flow.first()
    other = entry_shas(flow.store)[1]
    size = blob_path(flow.staging, other).stat().st_size
    reseal(path, lambda rows, meta: meta[LOGITS_BLOB_KEY].update(sha256=other, bytes=size))
    flow.commit("add the entry, shard 0 pointing at shard 1's logits")
    code, message = failure(flow.check(flow.staging))
    assert code == "corrupt-shard" and "not the shard that was validated" in message


@pytest.mark.slow  # git
def test_a_pull_request_cannot_redirect_the_store_or_bring_blobs_into_git(
    flow: Flow, tmp_path: Path
) -> None:
    flow.commit("add the entry")
    assert flow.check(flow.staging).ok  # type: ignore[attr-defined]  # honest control
    # Red team (classify's path rule): blobs.toml pointed at the submitter's own bucket.
    use_url(flow.store, (tmp_path / "mine").as_uri())
    flow.commit("and my bucket")
    with pytest.raises(SubmissionError, match=r"\[pr-touches-code\].*leaderboard/blobs.toml"):
        flow.check(flow.staging)
    flow.git("reset", "-q", "--hard", "HEAD~1")
    # Red team (classify: no blob folder in git for a URL store): blobs committed anyway.
    _, sha = flow.first()
    blob_path(flow.store / "blobs", sha).parent.mkdir(parents=True)
    shutil.copy(blob_path(flow.staging, sha), blob_path(flow.store / "blobs", sha))
    flow.commit("and a blob in git")
    with pytest.raises(SubmissionError, match=rf"\[pr-touches-code\].*blobs/{sha[:2]}/{sha}"):
        flow.check(flow.staging)
    flow.git("reset", "-q", "--hard", "HEAD~1")
    # Red team (check_entries_split): the logits left in the shards, in git.
    join_entry(flow.store, ENTRY, BlobStore(flow.staging))
    flow.commit("unsplit")
    with pytest.raises(SubmissionError, match=r"\[unsplit-shard\] results/simpleshot--demo-cnn/"):
        flow.check(flow.staging)


@pytest.mark.slow  # git
def test_a_note_pointing_at_the_runners_files_is_refused(flow: Flow) -> None:
    """Red team (staging_store's scheme list, applied to the note a pull request commits)."""
    write_note_text = flow.store / "blob-sources" / f"{ENTRY}.txt"
    write_note_text.parent.mkdir()
    write_note_text.write_text(flow.staging.as_uri() + "\n")
    flow.commit("add the entry, staged on the runner")
    code, message = failure(flow.check())
    assert code == "bad-blob-source" and f"blob-sources/{ENTRY}.txt" in message


# --- publish after the merge --------------------------------------------------------------------


@pytest.mark.slow  # git
def test_publish_copies_the_merged_entrys_blobs_into_the_store(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, invoke
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(blob_flow.STAGING_SCHEMES, "file", {})
    write_note(flow.store, ENTRY, flow.staging.as_uri())
    flow.commit("add the entry")
    publish = ["leaderboard", "publish-blobs", "--repo", str(flow.repo), "--since", "main"]
    result = invoke(publish)
    assert result.exit_code == 0 and f"{ENTRY}: 12 blob(s) copied" in result.output, result.output
    assert all(blob_path(flow.bucket, sha).is_file() for sha in entry_shas(flow.store))
    check = ["leaderboard", "check", ENTRY, "--with-logits", "--leaderboard", str(flow.store)]
    assert invoke(check).exit_code == 0
    result = invoke(publish)  # idempotent: every blob checked, none rewritten
    assert result.exit_code == 0 and "0 blob(s) copied (0.00 MB), 12 already" in result.output
    # A store keeping its blobs in git has nothing to publish.
    local = ["leaderboard", "publish-blobs", "--repo", str(COMMITTED.parent), "--entry", ENTRY]
    assert "nothing to publish" in invoke(local).output


@pytest.mark.slow  # git
def test_publish_refuses_a_missing_swapped_or_unsealed_blob_and_writes_none(
    flow: Flow, invoke
) -> None:  # type: ignore[no-untyped-def]
    path, sha = flow.first()
    shard = f"results/fewtrans-varied--digits/shards/{path.name}"
    staged = blob_path(flow.staging, sha)
    data = staged.read_bytes()
    flow.commit("add the entry")
    publish = ["leaderboard", "publish-blobs", "--repo", str(flow.repo), "--since", "main"]
    publish += ["--from", flow.staging.as_uri()]
    staged.unlink()
    result = invoke(publish)
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and line == (
        f"Error: [missing-blob] entry {ENTRY}: {shard}: logits blob {sha} is missing (looked "
        f"for at {flow.staging.as_uri()}/{sha[:2]}/{sha})"
    )
    # Red team (BlobStore.get's hash check): other content under the right name.
    staged.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    result = invoke(publish)
    assert result.exit_code == 1 and "[corrupt-blob]" in result.output
    assert f"logits blob {sha} is corrupt: its content has sha256" in result.output
    assert not blob_path(flow.bucket, sha).exists()
    staged.write_bytes(data)
    # Red team (join_shard's seal in copy_entry_blobs): shard 0 re-sealed on main to name
    # shard 1's genuine blob (its hash matches; its logits are not shard 0's).
    other = entry_shas(flow.store)[1]
    size = blob_path(flow.staging, other).stat().st_size
    reseal(path, lambda rows, meta: meta[LOGITS_BLOB_KEY].update(sha256=other, bytes=size))
    flow.commit("shard 0 names shard 1's blob")
    result = invoke(publish)
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and line.startswith(f"Error: [seal-mismatch] entry {ENTRY}: ")
    assert "not the shard that was validated" in line
    assert not blob_path(flow.bucket, other).exists()
