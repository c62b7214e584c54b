"""Read stored entries for the index and the site: through the schema, or stop naming them.

:func:`load_entries` is the one place a build reads the store: it loads and summarises each
run once, and the index and the site data are both views of the :class:`LoadedEntry`
objects it yields. ``leaderboard rebuild`` and ``site build`` tolerate nothing silently: an
entry outside the layout or the schema, with a damaged run or one on a manifest this store
has not frozen, is refused with one :class:`~fewtrans_board.core.errors.SubmissionError`
naming the entry. What the site shows of a run's dataset and manifest comes from the frozen
manifest, not the run.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import SubmissionError, describe
from fewtrans_board.leaderboard.bundle import BundleContents
from fewtrans_board.leaderboard.columns import check_columns
from fewtrans_board.leaderboard.label_index import LabelIndex, frozen_labels
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.leaderboard.rows import check_rows
from fewtrans_board.leaderboard.runs import GIT_ONLY, fetching, load_checked_run
from fewtrans_board.leaderboard.status import STORED_VERIFIED, VerificationStatus, entry_status
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.leaderboard.summary_cache import SummaryCache, entry_key
from fewtrans_board.results.digest import RunDigest, digest_bytes, digest_of_bytes
from fewtrans_board.results.documents import EntryStatus
from fewtrans_board.results.load import RunResults, RunView
from fewtrans_board.results.strict_json import load_json
from fewtrans_board.results.summary import summarize


@dataclass
class StoredRun:
    """One run of a stored entry, with what its frozen manifest says.

    Attributes:
        run: the loaded, checked run, as builds keep it.
        manifest: the frozen manifest's file name.
        dataset: the frozen manifest's dataset.
        manifest_meta: the frozen manifest's metadata (fixes each k-shot episode's K, seed).
    """

    run: RunDigest
    manifest: str
    dataset: str
    manifest_meta: dict[str, Any]


@dataclass
class StoredEntry:
    """A stored submission, read through the bundle schema."""

    id: str
    meta: SubmissionMeta
    status: str
    centre_search: dict[str, Any] | None
    runs: list[StoredRun] = field(default_factory=list)
    verification: dict[str, Any] | None = None


@contextlib.contextmanager
def entry_errors(ident: str) -> Iterator[None]:
    """Name the entry in every refusal; an unanticipated error while using it becomes one.

    Args:
        ident: the stored entry being read, summarised or rendered.

    Raises:
        SubmissionError: the original code with the entry named, or ``unreadable-entry``.
    """
    prefix = f"stored entry {ident}: "
    try:
        yield
    except SubmissionError as exc:
        if exc.message.startswith(prefix):
            raise
        raise SubmissionError(exc.code, prefix + exc.message) from exc
    except Exception as exc:  # a damaged store must not become a traceback
        raise SubmissionError(
            "unreadable-entry", f"stored entry {ident} cannot be read: {describe(exc)}"
        ) from exc


def read_status_record(store: LeaderboardStore, ident: str) -> dict[str, Any]:
    """The checked ``status.json`` of a stored entry (``validated`` when it has none).

    Raises:
        SubmissionError: ``bad-status``.
    """
    path = store.submissions_dir / ident / "status.json"
    if not path.is_file():
        return {"status": "validated"}
    record = load_json(path.read_bytes(), "status.json", "bad-status")
    return EntryStatus.from_json(record, "status.json", code="bad-status").to_json()


def _entry_shell(store: LeaderboardStore, ident: str) -> tuple[StoredEntry, BundleContents]:
    """A stored entry without its runs, and its contents (files checked against the layout)."""
    contents = store.entry_contents(ident)
    if contents.meta.id != ident:
        raise SubmissionError("bad-store-entry", f"its submission.toml has id {contents.meta.id!r}")
    record = read_status_record(store, ident)
    entry = StoredEntry(
        ident,
        contents.meta,
        str(record["status"]),
        contents.centre_search,
        verification=record.get("verification"),
    )
    return entry, contents


def _frozen_of(
    frozen_manifests: Mapping[str, tuple[str, Any]], run: RunView, where: str
) -> tuple[str, Any]:
    """``(file name, manifest or label index)`` of the frozen manifest ``run`` names, by sha256.

    Refused (``unknown-manifest``, ``dataset-mismatch``) unless frozen and of the run's dataset.
    """
    frozen = frozen_manifests.get(run.provenance.manifest.sha256)
    if frozen is None:
        raise SubmissionError(
            "unknown-manifest",
            f"{where} was evaluated on manifest sha256 "
            f"{run.provenance.manifest.sha256[:16]}..., which this store has not frozen",
        )
    filename, manifest = frozen
    if run.dataset != manifest.dataset:
        raise SubmissionError(
            "dataset-mismatch",
            f"{where} names dataset {run.dataset!r}, its frozen manifest "
            f"{filename} is {manifest.dataset!r}'s",
        )
    return filename, manifest


def _checked_run(
    store: LeaderboardStore, path: Path, where: str, with_logits: bool
) -> tuple[RunResults, StoredRun]:
    """A stored run loaded and checked against its frozen manifest, and what builds keep."""
    run = load_checked_run(
        path, where, intake=False, logits=fetching(store.blobs) if with_logits else GIT_ONLY
    )
    filename, manifest = _frozen_of(store.frozen, run, where)
    check_columns(run, where, manifest.dataset)
    # Every reader recomputes what it shows: accuracies and ensembles from the
    # stored predictions (and, with the blobs, logits) against the frozen labels.
    check_rows(run, manifest, list(run.provenance.identity.grid))
    return run, StoredRun(RunDigest.of(run), filename, manifest.dataset, manifest.meta)


def read_entry(store: LeaderboardStore, ident: str, with_logits: bool = False) -> StoredEntry:
    """Read a stored entry for the index or the site.

    Args:
        store: the store.
        ident: the entry's id.
        with_logits: also fetch the entry's logits blobs (checked against their hashes) and
            recheck its logit-mean fusions; without, the runs' ``logits`` column is null and
            everything else is checked.

    Raises:
        SubmissionError: naming the entry and what is wrong with it.
    """
    with entry_errors(ident):
        entry, contents = _entry_shell(store, ident)
        for path in contents.runs:
            entry.runs.append(_checked_run(store, path, contents.name(path), with_logits)[1])
        return entry


@dataclass
class LoadedEntry:
    """A stored submission with its runs loaded and summarised, once per build.

    Attributes:
        id: the submission id.
        meta: its parsed ``submission.toml``.
        status: the entry's status in the shared vocabulary (``re-run``, ``legacy check``
            or ``not verified``: :mod:`~fewtrans_board.leaderboard.status`).
        stored: the entry as read (runs with their frozen manifests, centre search).
        superseded_by: the id of the submission that supersedes it, if any.
        verification: the stored verification report (``None``: not verified).
        summaries: :func:`~fewtrans_board.results.summary.summarize` of each run (with the
            benchmark's ``ddof``; dataset and manifest from the frozen manifest), aligned
            with ``stored.runs``.
    """

    id: str
    meta: SubmissionMeta
    status: str
    stored: StoredEntry
    superseded_by: str | None = None
    summaries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def verification(self) -> dict[str, Any] | None:
        """The stored verification report (``None``: stored without one)."""
        return self.stored.verification if self.stored.status == STORED_VERIFIED else None

    @property
    def standing(self) -> VerificationStatus:
        """The entry's status with its re-run's date, sample and mode (see :attr:`status`)."""
        return entry_status(self.stored.status, self.stored.verification)


def _superseded(metas: dict[str, SubmissionMeta]) -> dict[str, str]:
    """``{superseded id: superseding id}``; each superseded once, by a stored entry, no cycle."""
    superseded: dict[str, str] = {}
    for ident, meta in metas.items():
        old = meta.supersedes
        if not old:
            continue
        if old not in metas:
            raise SubmissionError(
                "bad-store-entry", f"stored entry {ident} supersedes {old!r}, which is not stored"
            )
        if old in superseded:
            raise SubmissionError(
                "bad-store-entry", f"{old} is superseded by both {superseded[old]} and {ident}"
            )
        superseded[old] = ident
    for start in superseded:
        seen, current = {start}, start
        while current in superseded:
            current = superseded[current]
            if current in seen:
                raise SubmissionError(
                    "bad-store-entry", f"stored entries supersede each other in a cycle ({start})"
                )
            seen.add(current)
    return superseded


def _check_no_foreign_folders(store: LeaderboardStore, idents: list[str]) -> None:
    """Refuse a folder under ``submissions/`` that is not a stored entry (it would be ignored)."""
    foreign = sorted(
        p.name
        for p in (store.submissions_dir.iterdir() if store.submissions_dir.is_dir() else [])
        if not p.name.startswith(".") and p.name not in idents
    )
    if foreign:
        raise SubmissionError(
            "bad-store-entry",
            f"{store.submissions_dir.name}/{foreign[0]} is not a stored entry (no "
            "submission.toml); remove it",
        )


def _run_manifests(paths: list[Path]) -> list[str]:
    """The manifest sha256 each run's ``run.json`` names (``""`` where it names none)."""
    shas = []
    for path in paths:
        identity = json.loads((path / "run.json").read_bytes()).get("identity", {})
        shas.append(str(identity.get("manifest_sha256", "")))
    return shas


def summarise_runs(
    store: LeaderboardStore, entry: StoredEntry, contents: BundleContents, with_logits: bool
) -> list[dict[str, Any]]:
    """Load, check and summarise every run of an entry (appended to ``entry.runs``).

    Returns:
        Each run's :func:`~fewtrans_board.results.summary.summarize` (the benchmark's
        ``ddof``; dataset and manifest not yet set), aligned with ``entry.runs``.
    """
    ddof = SUB_BENCHMARKS[entry.meta.benchmark].statistic_ddof
    summaries = []
    for path in contents.runs:
        run, stored = _checked_run(store, path, contents.name(path), with_logits)
        summaries.append(summarize(run, ddof=ddof, manifest=stored.manifest_meta))
        entry.runs.append(stored)
    return summaries


def _cache_key(entry: StoredEntry, contents: BundleContents) -> str | None:
    """The entry's summary key (:func:`entry_key`); ``None`` if its files cannot be hashed."""
    try:
        return entry_key(
            [(contents.name(path), path) for path in contents.runs],
            _run_manifests(contents.runs),
            SUB_BENCHMARKS[entry.meta.benchmark].statistic_ddof,
            f"entry={entry.id}",
        )
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return None  # the uncached read names what is wrong


def entry_cache_key(store: LeaderboardStore, ident: str) -> str | None:
    """The build cache key of a stored entry's summaries (``None``: its files cannot be hashed).

    Raises:
        SubmissionError: the entry's files are not a stored entry's.
    """
    with entry_errors(ident):
        entry, contents = _entry_shell(store, ident)
        return _cache_key(entry, contents)


def _cached_runs(
    labels: Mapping[str, tuple[str, LabelIndex]],
    entry: StoredEntry,
    contents: BundleContents,
    payload: bytes,
) -> list[dict[str, Any]] | None:
    """The entry's runs and summaries from a cached payload (``None``: unusable, recompute).

    What depends on more than the key (each run's frozen manifest) is checked again.
    """
    try:
        digests, summaries = digest_of_bytes(payload, list(contents.runs))
        for digest, summary in zip(digests, summaries, strict=True):
            if not isinstance(summary, dict) or not isinstance(digest.dataset, str):
                return None
    except Exception:  # whatever a payload holds, it is only ever a miss
        return None
    for path, digest, summary in zip(contents.runs, digests, summaries, strict=True):
        filename, manifest = _frozen_of(labels, digest, contents.name(path))
        summary["path"] = str(path)
        entry.runs.append(StoredRun(digest, filename, manifest.dataset, manifest.meta))
    return summaries


def load_entries(
    store: LeaderboardStore, with_logits: bool = False, cache: SummaryCache | None = None
) -> Iterator[LoadedEntry]:
    """Every stored submission, sorted by id, each run loaded once and summarised once.

    Entries are produced one at a time so a caller that keeps only the summaries never
    holds every run in memory at once; a caller that needs them twice keeps the list.
    ``with_logits`` fetches each entry's logits blobs and rechecks its logit-mean fusions
    (see :func:`read_entry`; never from the cache); the summaries are the same either way.

    Args:
        store: the store.
        with_logits: fetch and check the logits blobs.
        cache: the build cache of summaries (:mod:`~fewtrans_board.leaderboard.summary_cache`;
            the commands pass the store's); ``None`` reads and writes none. A cached entry
            gives exactly what an uncached read gives.

    Raises:
        SubmissionError: a stored entry is unreadable (named; nothing is skipped).
    """
    if cache is None:
        cache = SummaryCache(None)
    idents = store.submission_ids()
    _check_no_foreign_folders(store, idents)
    metas = {}
    for ident in idents:
        with entry_errors(ident):
            metas[ident] = store.meta(ident)
    superseded = _superseded(metas)
    labels: dict[str, tuple[str, LabelIndex]] | None = None
    for ident in idents:
        with entry_errors(ident):
            if labels is None:  # read once, where an uncached read first reads them
                labels = frozen_labels(store.manifests_dir, cache)
            stored, contents = _entry_shell(store, ident)
            key = _cache_key(stored, contents) if cache.enabled and not with_logits else None
            payload = cache.get(key) if key is not None else None
            summaries = (
                _cached_runs(labels, stored, contents, payload) if payload is not None else None
            )
            if summaries is None:
                stored.runs.clear()
                summaries = summarise_runs(store, stored, contents, with_logits)
                if key is not None:
                    cache.put(key, digest_bytes([r.run for r in stored.runs], summaries))
            for item, summary in zip(stored.runs, summaries, strict=True):
                summary.update(dataset=item.dataset, manifest=item.manifest)
        status = entry_status(stored.status, stored.verification).kind
        entry = LoadedEntry(ident, stored.meta, status, stored, superseded_by=superseded.get(ident))
        entry.summaries.extend(summaries)
        yield entry
