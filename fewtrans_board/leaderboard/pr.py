"""What a submission pull request may change: its own new entry's data, nothing else.

A pull request may add ``submissions/<id>/`` and ``results/<id>/`` for new ids, the blobs
their shards name (a store keeping blobs in its folder) or one ``blob-sources/<id>.txt``
per new entry (a store keeping them at a URL), and an ``index.json`` equal to a rebuild.
Anything else (code, workflows, manifests, ``blobs.toml``, another entry, a ``status.json``,
which is CI's) is refused by name (SECURITY.md). ``leaderboard check-pr`` runs this code
from the base branch's installation and validates the new entries from the pull request's
data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from fewtrans_board.core.errors import SubmissionError

if TYPE_CHECKING:
    from fewtrans_board.leaderboard.verification.options import VerificationOptions

SUBMISSION_FILES = frozenset({"submission.toml", "centre-search.json"})
"""Files a pull request may add to a submission folder (``status.json`` is written by CI)."""

STATUS_FILE = "status.json"
"""An entry's status: written from CI's own check, never carried by a pull request."""


@dataclass
class PullRequestChanges:
    """The entries a pull request adds.

    Attributes:
        ids: the new submission ids, sorted.
        paths: every added path, relative to the repository.
        index_changed: the pull request also updates the derived ``index.json`` (allowed
            only if it equals what the base branch's code derives from the new store).
        blobs: the sha256 of every logits blob it adds to the store's blob folder.
        sources: the new entries that name a staging location for their blobs.
    """

    ids: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    index_changed: bool = False
    blobs: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def classify(
    changes: list[tuple[str, str]],
    leaderboard: str = "leaderboard",
    blob_folder: str | None = "blobs",
) -> PullRequestChanges:
    """Check that a pull request only adds new entries' data.

    Args:
        changes: ``(status, path)`` pairs from :func:`~.git.changed_paths`.
        leaderboard: the store folder, relative to the repository root.
        blob_folder: the store's blob folder relative to it (``None``: blobs live
            elsewhere, at a URL; the pull request adds none, and may add
            ``blob-sources/<id>.txt`` for its new entries instead).

    Raises:
        SubmissionError: a path outside an entry's folders (``pr-touches-code``), an
            entry's ``status.json`` (``status-from-ci``), a change to anything existing
            (``immutable``), or a file an entry may not hold.
    """
    result = PullRequestChanges()
    ids: set[str] = set()
    root = PurePosixPath(leaderboard)
    for status, raw in changes:
        path = PurePosixPath(raw)
        if path == root / "index.json" and status in ("A", "M"):
            result.index_changed = True
            continue
        parts = path.relative_to(root).parts if path.is_relative_to(root) else ()
        if blob_folder is not None and _blob_name(parts, blob_folder):
            if status != "A":
                raise SubmissionError(
                    "immutable",
                    f"{raw} is {'deleted' if status == 'D' else 'modified'}; stored blobs are "
                    "immutable (content-addressed)",
                )
            result.blobs.append(parts[-1])
            continue
        if blob_folder is None and _source_note(parts) is not None and status == "A":
            result.sources.append(str(_source_note(parts)))
            continue
        if len(parts) < 3 or parts[0] not in ("submissions", "results"):
            raise SubmissionError(
                "pr-touches-code",
                f"a submission pull request may only add {leaderboard}/submissions/<id>/ and "
                f"{leaderboard}/results/<id>/; it changes {raw}",
            )
        if parts[0] == "submissions" and parts[2:] == (STATUS_FILE,):
            fix = (
                f"remove it from the pull request (git rm --cached {raw})"
                if status == "A"
                else f"leave it as the base branch has it (git checkout BASE -- {raw})"
            )
            raise SubmissionError(
                "status-from-ci",
                f"{raw}: status.json is written by CI from the check it runs; {fix}",
            )
        if status != "A":
            raise SubmissionError(
                "immutable",
                f"{raw} is {'deleted' if status == 'D' else 'modified'}; stored entries are "
                "immutable (submit a new id with supersedes = ... instead)",
            )
        kind, ident = parts[0], parts[1]
        if kind == "submissions" and (len(parts) != 3 or parts[2] not in SUBMISSION_FILES):
            raise SubmissionError(
                "forbidden-file",
                f"{raw}: a submission folder holds only {', '.join(sorted(SUBMISSION_FILES))}",
            )
        ids.add(ident)
        result.paths.append(raw)
    result.ids = sorted(ids)
    orphans = sorted(set(result.sources) - ids)
    if orphans:
        raise SubmissionError(
            "pr-touches-code",
            f"{leaderboard}/blob-sources/{orphans[0]}.txt names no new entry of this pull request",
        )
    return result


def _source_note(parts: tuple[str, ...]) -> str | None:
    """The entry a store-relative path ``blob-sources/<id>.txt`` names, if it is one."""
    from fewtrans_board.leaderboard.blob_flow import SOURCES_DIR

    if len(parts) == 2 and parts[0] == SOURCES_DIR and parts[1].endswith(".txt"):
        return parts[1].removesuffix(".txt") or None
    return None


def _blob_name(parts: tuple[str, ...], blob_folder: str) -> bool:
    """Whether a store-relative path is ``<blob folder>/<aa>/<sha256>``."""
    import re

    folder = PurePosixPath(blob_folder).parts
    rest = parts[len(folder) :]
    return (
        parts[: len(folder)] == folder
        and len(rest) == 2
        and re.fullmatch(r"[0-9a-f]{64}", rest[1]) is not None
        and rest[0] == rest[1][:2]
    )


def blob_folder_of(store_root: Path) -> str | None:
    """The store's blob folder relative to it, or ``None`` (a URL, or outside the store)."""
    from fewtrans_board.results.blobs import BlobStore
    from fewtrans_board.results.shards import ResultsError

    try:
        blobs = BlobStore.for_store(store_root)
    except ResultsError:  # a pull request that edits blobs.toml is refused by classify
        return None
    if blobs.is_url:
        return None
    try:
        return Path(blobs.location).resolve().relative_to(store_root.resolve()).as_posix()
    except ValueError:
        return None


def check_added_blobs(store_root: Path, ids: list[str], added: list[str]) -> None:
    """Every blob a pull request adds is named by a shard of one of its new entries.

    Raises:
        SubmissionError: ``unreferenced-blob`` naming the first blob no new entry names.
    """
    from fewtrans_board.results.blobs import read_record

    named = {
        read_record(shard).get("sha256")
        for ident in ids
        for shard in (store_root / "results" / ident).rglob("shards/shard-*.parquet")
    }
    extra = sorted(set(added) - named)
    if extra:
        raise SubmissionError(
            "unreferenced-blob",
            f"blob {extra[0]} is named by no shard of the new entries ({', '.join(ids)}); a "
            "pull request adds only its entries' logits blobs",
        )


def check_entries_split(store_root: Path, ids: list[str]) -> None:
    """Every shard of the new entries keeps its logits in a blob, not in git.

    Raises:
        SubmissionError: ``unsplit-shard`` naming the first shard that carries its logits.
    """
    for ident in ids:
        unsplit = unsplit_shards(store_root, ident)
        if unsplit:
            raise SubmissionError(
                "unsplit-shard",
                f"results/{ident}/{unsplit[0]} carries its logits in git, but this store keeps "
                "logits in blobs at a URL; add the bundle with 'fewtrans-board leaderboard add "
                "BUNDLE --blobs-to FOLDER-OR-URL' and commit what it stores",
            )


def unsplit_shards(store_root: Path, ident: str) -> list[str]:
    """The shard files of ``ident`` that still carry their logits (their names in results/)."""
    from fewtrans_board.results.blobs import read_record

    folder = store_root / "results" / ident
    return [
        path.relative_to(folder).as_posix()
        for path in sorted(folder.rglob("shards/shard-*.parquet"))
        if not read_record(path).get("sha256")
    ]


CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".pth")
"""Suffixes of a checkpoint in a maintainers' weights folder (safetensors first)."""


def weights_in(folder: Path, model: str, *digests: str) -> Path | None:
    """The checkpoint a maintainers' weights folder holds for an entry, if any.

    The folder is the runners' read-only weights registry (the workflow's
    ``vars.FEWTRANS_WEIGHTS_DIR``). A file named by a digest the entry records
    (``<hex>.safetensors``: content-addressed, so two entries of one model with different
    weights, such as a CLIP and its unlearned copy, cannot collide) wins over one named by
    the model (``<model>.safetensors``). Names come from the pull request's data: only plain
    file names are tried, never a path.

    Args:
        folder: the weights folder.
        model: the entry's model name (``arch.tag``).
        *digests: the entry's recorded ``sha256:<hex>`` checkpoint digests, first wins.

    Returns:
        The checkpoint file, or ``None`` where the folder holds none for the entry.
    """
    import re

    stems = [d.removeprefix("sha256:") for d in digests if re.fullmatch(r"sha256:[0-9a-f]{64}", d)]
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", model) and ".." not in model:
        stems.append(model)
    for stem in stems:
        for suffix in CHECKPOINT_SUFFIXES:
            path = folder / f"{stem}{suffix}"
            if path.is_file():
                return path
    return None


def recorded_digests(store_root: Path, ident: str) -> list[str]:
    """The checkpoint digests (``weights_id``) the stored entry's runs record, in run order.

    Only a lookup key: a run whose ``run.json`` cannot be read adds nothing here, and
    validation refuses it later.
    """
    from fewtrans_board.results.load import read_run_record
    from fewtrans_board.results.shards import ResultsError

    digests: list[str] = []
    for run in sorted((store_root / "results" / ident).glob("*/run.json")):
        try:
            weights_id = read_run_record(run.parent)["identity"].get("weights_id")
        except ResultsError:
            continue
        if isinstance(weights_id, str) and weights_id not in digests:
            digests.append(weights_id)
    return digests


def entry_weights(store_root: Path, ident: str, folder: Path) -> Path | None:
    """:func:`weights_in` for the stored entry ``ident``.

    Its keys: the ``weights_sha256`` of its ``submission.toml``, then the ``weights_id`` its
    runs record, then its model name.

    Raises:
        SubmissionError: the entry's ``submission.toml`` is unreadable (its own code).
    """
    from fewtrans_board.leaderboard.fail_closed import fail_closed
    from fewtrans_board.leaderboard.store import LeaderboardStore

    with fail_closed(f"entry {ident}"):
        meta = LeaderboardStore(store_root).meta(ident)
    declared = [meta.weights_sha256] if meta.weights_sha256 else []
    return weights_in(folder, meta.model, *declared, *recorded_digests(store_root, ident))


def options_with_entry_weights(
    options: VerificationOptions, store_root: Path, ident: str, folder: Path | None
) -> VerificationOptions:
    """``options`` with the checkpoint ``folder`` holds for ``ident`` (:func:`entry_weights`).

    Unchanged where no folder is given or it holds nothing for the entry (the given
    ``--weights``, or the model's default, is then checked as ever).

    Raises:
        SubmissionError: the entry's ``submission.toml`` is unreadable (its own code).
    """
    found = None if folder is None else entry_weights(store_root, ident, folder)
    return options if found is None else dataclasses.replace(options, weights=str(found))
