"""The leaderboard store on disk.

Its layout (``manifests/`` with ``.sha256`` sidecars, ``submissions/<id>/``,
``results/<id>/``, ``blobs.toml``, the blob folder, ``index.json``) is drawn in
CONTRIBUTING.md, "The leaderboard store and its blobs"; ``reported/*.json`` holds numbers
transcribed from papers. Entries are immutable: a new submission may supersede an old one,
never overwrite it. A stored shard keeps everything but its logits, which go to a
content-addressed blob its sealed metadata names by sha256
(:mod:`fewtrans_board.results.blobs`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.leaderboard.bundle import BundleContents, read_contents
from fewtrans_board.leaderboard.meta import SubmissionMeta, read_meta
from fewtrans_board.results.blobs import BlobError, BlobStore, split_results_folder


def status_text(record: dict[str, Any]) -> str:
    """The text of a ``status.json``, as ``leaderboard add`` and ``record-status`` write it."""
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


class LeaderboardStore:
    """A leaderboard folder.

    Args:
        root: the ``leaderboard/`` folder.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifests_dir = root / "manifests"
        self.submissions_dir = root / "submissions"
        self.results_dir = root / "results"
        self.reported_dir = root / "reported"
        self.index_path = root / "index.json"

    @cached_property
    def blobs(self) -> BlobStore:
        """Where this store's logits blobs live (``blobs.toml``, default ``blobs/``).

        Raises:
            SubmissionError: ``bad-blob-config`` for a malformed ``blobs.toml``.
        """
        from fewtrans_board.results.shards import ResultsError

        try:
            return BlobStore.for_store(self.root)
        except ResultsError as exc:
            raise SubmissionError("bad-blob-config", str(exc)) from exc

    @cached_property
    def frozen(self) -> dict[str, tuple[str, Manifest]]:
        """Frozen manifests by content sha256: ``{sha: (file name, manifest)}``."""
        out: dict[str, tuple[str, Manifest]] = {}
        for path in sorted(self.manifests_dir.glob("*.parquet")):
            manifest = Manifest.load(path)
            out[manifest.sha256] = (path.name, manifest)
        return out

    def submission_ids(self) -> list[str]:
        """Ids of stored submissions."""
        if not self.submissions_dir.is_dir():
            return []
        return sorted(
            p.name for p in self.submissions_dir.iterdir() if (p / "submission.toml").is_file()
        )

    def meta(self, ident: str) -> SubmissionMeta:
        """The checked ``submission.toml`` of a stored entry.

        Raises:
            SubmissionError: it is malformed (its code).
        """
        return read_meta((self.submissions_dir / ident / "submission.toml").read_bytes())

    def entry_contents(self, ident: str) -> BundleContents:
        """Read a stored entry as bundle contents (for re-validation), in place.

        Raises:
            SubmissionError: no such entry, or its files are not a valid bundle's.
        """
        source = self.submissions_dir / ident
        if not (source / "submission.toml").is_file():
            raise SubmissionError(
                "unknown-submission", f"no submission {ident!r} in {self.submissions_dir}"
            )
        return read_contents(source, self.results_dir / ident)

    def add(
        self,
        extracted: Path,
        ident: str,
        status: dict[str, Any],
        supersedes: str = "",
        expected: dict[str, str] | None = None,
    ) -> None:
        """Copy a validated, extracted bundle into the store (atomically visible).

        The staged copy is checked against the validated hashes, then its shards are split:
        each shard's logits go to a blob in :attr:`blobs` (written and read back first), the
        shard keeps the rest and names the blob; only then does the entry appear.

        Args:
            extracted: the extracted bundle folder.
            ident: the submission id.
            status: ``status.json`` to write.
            supersedes: the entry it replaces, if any.
            expected: sha256 of every file by layout name, as validated; the staged copy
                must hold exactly these bytes, or nothing is stored.

        Raises:
            SubmissionError: the id exists, ``supersedes`` names no stored entry, or the
                staged copy differs from what was validated.
        """
        if (self.submissions_dir / ident).exists() or (self.results_dir / ident).exists():
            raise SubmissionError(
                "immutable",
                f"submission {ident!r} already exists and entries are immutable; submit a new id "
                f"with supersedes = {ident!r} to replace it",
            )
        if supersedes and supersedes not in self.submission_ids():
            raise SubmissionError(
                "meta-bad-value", f"supersedes = {supersedes!r} names no stored submission"
            )
        for other in self.submission_ids() if supersedes else []:
            if self.meta(other).supersedes == supersedes:
                raise SubmissionError(
                    "meta-bad-value",
                    f"{supersedes!r} is already superseded by {other!r}; supersede {other!r} "
                    "instead",
                )
        self.submissions_dir.mkdir(parents=True, exist_ok=True)
        self.results_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.root))
        try:
            meta_dir = staging / "meta"
            meta_dir.mkdir()
            for name in ("submission.toml", "centre-search.json"):
                if (extracted / name).is_file():
                    shutil.copy2(extracted / name, meta_dir / name)
            (meta_dir / "status.json").write_text(status_text(status))
            shutil.copytree(extracted / "results", staging / "results")
            if expected is not None:
                _check_staged(staging, expected)
            try:
                split_results_folder(staging / "results", self.blobs)
            except BlobError as exc:
                raise SubmissionError(
                    "blob-store", f"the logits could not be stored, nothing was stored: {exc}"
                ) from exc
            # Results first: an entry is visible only once its submission folder appears.
            (staging / "results").rename(self.results_dir / ident)
            meta_dir.rename(self.submissions_dir / ident)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def withdraw(self, ident: str) -> None:
        """Remove an entry :meth:`add` has just stored, before any index lists it.

        Only for rolling back an add whose index cannot be rebuilt; stored entries are
        otherwise immutable. The submission folder goes first, so the entry disappears
        the way it appeared.
        """
        shutil.rmtree(self.submissions_dir / ident)
        shutil.rmtree(self.results_dir / ident)

    def write_index(self, index: dict[str, Any]) -> None:
        """Write ``index.json`` atomically (see :func:`index_text`)."""
        write_bytes_atomic(self.index_path, index_text(index).encode())


def _check_staged(staging: Path, expected: dict[str, str]) -> None:
    """The staged copy holds exactly the validated files (names and bytes), or is refused."""
    import hashlib

    staged = {}
    for path in sorted(staging.rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(staging).as_posix()
        name = relative.removeprefix("meta/")
        if name == "status.json":
            continue
        staged[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    if staged != expected:
        changed = sorted(set(staged.items()) ^ set(expected.items()))
        raise SubmissionError(
            "changed-during-check",
            f"the copy to store differs from the validated bundle ({changed[0][0]}); nothing "
            "was stored",
        )


def index_text(index: dict[str, Any]) -> str:
    """The text of ``index.json``: sorted keys, no timestamps, so rebuilds are stable."""
    return json.dumps(index, indent=2, sort_keys=True) + "\n"
