"""The submission pipelines: pack, validate, verify, add, check (the CLI only prints).

Every function here runs without third-party plugins: validation reads data only, and
verification drives the plugin in a separate worker process. Reading untrusted data fails
closed (:mod:`~fewtrans_board.leaderboard.fail_closed`), and the store is never touched
before validation has passed.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.bundle import (
    BundleContents,
    extract_bundle,
    pack_bundle,
    read_centre_search,
    run_centre_record,
)
from fewtrans_board.leaderboard.fail_closed import fail_closed
from fewtrans_board.leaderboard.index import build_index
from fewtrans_board.leaderboard.meta import SubmissionMeta, read_meta
from fewtrans_board.leaderboard.runs import GIT_ONLY, fetching
from fewtrans_board.leaderboard.store import LeaderboardStore, index_text
from fewtrans_board.leaderboard.validate import ValidationReport, validate_contents
from fewtrans_board.leaderboard.verification import VerificationOptions, verify_contents
from fewtrans_board.leaderboard.verify_records import default_root as records_root
from fewtrans_board.leaderboard.verify_records import find_record, record_key, save_record
from fewtrans_board.results.blobs import BlobStore

NOT_VERIFIED = "not verified: added with --unsafe-no-verify"
PLACEHOLDER_ID = "my-method--"
"""How ``submission template``'s id begins: refused until the submitter names the entry."""


@dataclass(frozen=True)
class Verification:
    """Whether and how to verify.

    Attributes:
        enabled: re-run the submission (``False`` only when a maintainer opts out).
        options: how to re-run it.
    """

    enabled: bool = True
    options: VerificationOptions = field(default_factory=VerificationOptions)


@dataclass
class CheckResult:
    """A validation report and, when verified, the verification report.

    ``reused``: the record of this installation's earlier verification of the same bundle
    that was reused instead of re-running it (:mod:`.verify_records`), else ``None``.
    """

    validation: ValidationReport
    verification: dict[str, Any] | None
    reused: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        out = self.validation.to_dict()
        if self.verification is not None:
            out["verification"] = self.verification
        return out


def check_named(meta: SubmissionMeta, where: str) -> None:
    """Refuse the id ``submission template`` proposes until the submitter changes it.

    Raises:
        SubmissionError: ``placeholder-id``.
    """
    if meta.id.startswith(PLACEHOLDER_ID):
        raise SubmissionError(
            "placeholder-id",
            f"{where}: id {meta.id!r} is the template's placeholder; name your entry "
            f"(e.g. {meta.adapter}--{meta.model.lower()}, lowercase, '-' or '.' separated, "
            "an id no stored entry uses)",
        )


def validate_bundle(bundle: Path, store: LeaderboardStore) -> ValidationReport:
    """Extract a bundle into a temporary folder and validate it (nothing is stored)."""
    with tempfile.TemporaryDirectory() as tmp, fail_closed(bundle.name):
        return validate_contents(extract_bundle(bundle, Path(tmp)), store)


def verify_bundle(
    bundle: Path, store: LeaderboardStore, options: VerificationOptions | None = None
) -> dict[str, Any]:
    """Extract, validate and verify a bundle (see :func:`~.verification.verify_contents`).

    A passed verification is recorded for this installation (:mod:`.verify_records`), so
    ``leaderboard add`` of the same bundle with the same options does not re-run it.
    """
    options = options or VerificationOptions()
    with tempfile.TemporaryDirectory() as tmp:
        with fail_closed(bundle.name):
            contents = extract_bundle(bundle, Path(tmp))
            loaded = validate_contents(contents, store).loaded
        key = record_key(contents.digest(), contents.meta.plugins, options)
        report = verify_contents(contents, store, options, runs=loaded)
        if contents.digest() == key["digest"]:  # files a worker changed are no record
            save_record(records_root(), key, report)
    return report


def pack_checked(
    runs: list[Path], meta: Path, out: Path, store: LeaderboardStore, centre: Path | None = None
) -> ValidationReport:
    """Validate run folders as the bundle would hold them, then write the bundle zip.

    Refuses (writing nothing) whatever ``submission validate`` would refuse, so no one
    uploads a bundle that cannot be accepted.

    Raises:
        SubmissionError: every fault validation finds in one message (each run folder
            named as given), with the first one's code.
    """
    with fail_closed(str(meta)):
        record: dict[str, Any] | None
        if centre is not None:
            record = read_centre_search(centre.read_bytes(), str(centre))
        else:
            embedded = run_centre_record(runs)
            record = None if embedded is None else read_centre_search(json.dumps(embedded).encode())
        try:
            parsed = read_meta(meta.read_bytes())
        except SubmissionError as exc:  # name the file the user gave, not "submission.toml"
            raise SubmissionError(exc.code, f"--meta {meta}: {exc.message}") from exc
        contents = BundleContents(parsed, record, list(runs), {run: str(run) for run in runs})
        try:
            report = validate_contents(contents, store)
        except SubmissionError as exc:
            raise _every_problem(contents, store, exc) from exc
        check_named(parsed, f"--meta {meta}")  # last: the runs' problems matter more
    pack_bundle(runs, meta, out, centre)
    return report


def _every_problem(
    contents: BundleContents, store: LeaderboardStore, first: SubmissionError
) -> SubmissionError:
    """Every run folder's own fault (named by its path), and ``first`` if none of them.

    A folder's own fault is found by validating it as if it were the only one; faults
    between folders (a manifest covered twice or not at all) are only ``first``'s.
    """
    found: dict[tuple[str, str], list[Path]] = {}  # (code, message): the folders with it
    for run in contents.runs:
        alone = dataclasses.replace(contents, runs=[run])
        try:
            with fail_closed(contents.name(run)):
                validate_contents(alone, store)
        except SubmissionError as exc:
            if exc.code not in ("missing-manifest", "duplicate-episode"):
                found.setdefault((exc.code, exc.message), []).append(run)
    problems: list[tuple[str, str]] = []  # (code, message naming the folder)
    for (code, message), runs in found.items():
        if len(runs) == len(contents.runs) > 1:  # every folder's: the metadata's fault
            problems.append((code, message))
        else:
            problems += [(code, message if str(r) in message else f"{r}: {message}") for r in runs]
    if not any(first.message in message for _, message in problems):
        problems.insert(0, (first.code, first.message))
    if len(problems) == 1:
        return SubmissionError(*problems[0])
    listed = "; ".join(f"({i}) [{c}] {m}" for i, (c, m) in enumerate(problems, 1))
    return SubmissionError(problems[0][0], f"{len(problems)} problems: {listed}")


def add_bundle(
    bundle: Path,
    store: LeaderboardStore,
    verification: Verification,
    blobs_to: BlobStore | None = None,
) -> CheckResult:
    """Validate and verify a bundle, store exactly the validated bytes, reindex.

    The files' hashes are taken as soon as the bundle is extracted; the store receives a
    copy only if every file still has them right before, and the copy itself is checked
    again, so nothing a plugin worker could have changed is ever stored.

    Args:
        bundle: the bundle zip.
        store: the store.
        verification: whether and how to re-run it.
        blobs_to: write the entry's logits blobs here instead of the store's blob
            location (a submitter's staging location, see :mod:`.blob_flow`).

    Raises:
        SubmissionError: the bundle is refused; the store is left unchanged.
    """
    if blobs_to is not None:
        from fewtrans_board.leaderboard.blob_flow import storing_blobs_at

        store = storing_blobs_at(store, blobs_to)
    with tempfile.TemporaryDirectory() as tmp:
        with fail_closed(bundle.name):
            contents = extract_bundle(bundle, Path(tmp))
            validated = contents.file_hashes()
            report = validate_contents(contents, store)
            check_named(contents.meta, f"{bundle.name}: submission.toml")
        result = _verify_once(contents, store, report, verification)
        status: dict[str, Any] = (
            {"status": "validated", "verification": {"skipped": NOT_VERIFIED}}
            if result.verification is None
            else {"status": "verified", "verification": result.verification}
        )
        meta = result.validation.meta
        if contents.file_hashes() != validated:
            raise SubmissionError(
                "changed-during-check",
                f"{bundle.name}: the extracted files changed while they were being checked; "
                "nothing was stored",
            )
        try:
            store.add(Path(tmp), meta.id, status, meta.supersedes, expected=validated)
        except SubmissionError as exc:
            if exc.code != "blob-store" or blobs_to is not None or not store.blobs.is_url:
                raise
            raise SubmissionError(
                exc.code,
                f"{exc.message}; without write access to the store's blobs, stage them where "
                "you can write: fewtrans-board leaderboard add BUNDLE --blobs-to FOLDER-OR-URL",
            ) from exc
    from fewtrans_board.leaderboard.summary_cache import SummaryCache, default_root

    try:
        # The other entries' cached summaries (keyed by their files' hashes) are reused, so
        # adding one entry to a large store summarises that one entry.
        index = build_index(store, cache=SummaryCache(default_root()))
    except SubmissionError:  # another stored entry is unreadable: leave the store as it was
        store.withdraw(meta.id)
        raise
    store.write_index(index)
    return result


def check_entry(
    ident: str,
    store: LeaderboardStore,
    verification: Verification,
    with_logits: bool = False,
    blobs: BlobStore | None = None,
) -> CheckResult:
    """Re-validate (and, unless switched off, verify) a stored entry; writes nothing.

    Args:
        ident: the entry.
        store: the store.
        verification: whether and how to re-run it.
        with_logits: fetch the entry's logits blobs (checked against their hashes) and
            recheck its logit-mean fusions; verification always does.
        blobs: fetch them from here (a staging location) instead of the store's.

    Raises:
        SubmissionError: the entry does not pass (``missing-blob``/``corrupt-blob`` naming
            the shard, the blob and where it was looked for).
    """
    source = store.blobs if blobs is None else blobs
    fetch = with_logits or verification.enabled or blobs is not None
    logits = fetching(source) if fetch else GIT_ONLY
    with fail_closed(f"stored entry {ident}"):
        contents = store.entry_contents(ident)
        try:
            report = validate_contents(contents, store, logits)
        except SubmissionError as exc:
            if exc.code not in ("missing-blob", "corrupt-blob"):
                raise
            raise SubmissionError(exc.code, f"stored entry {ident}: {exc.message}") from exc
    return CheckResult(report, _verify(contents, store, report, verification))


def _verify_once(
    contents: BundleContents,
    store: LeaderboardStore,
    report: ValidationReport,
    verification: Verification,
) -> CheckResult:
    """Verify validated contents, or reuse this installation's passed verification of them.

    Only a record this installation wrote is read (:mod:`.verify_records`), found by the
    digest of the extracted files, never anything the bundle carries.
    """
    if not verification.enabled:
        return CheckResult(report, None)
    root = records_root()
    key = record_key(contents.digest(), contents.meta.plugins, verification.options)
    found = find_record(root, key)
    if found is not None:
        return CheckResult(report, found[0], reused=found[1])
    result = CheckResult(report, _verify(contents, store, report, verification))
    # A verification during which the extracted files changed (a worker reaching them)
    # is refused by the caller; it must not be remembered as one of these files either.
    if contents.digest() == key["digest"]:
        save_record(root, key, result.verification or {})
    return result


def _verify(
    contents: BundleContents,
    store: LeaderboardStore,
    report: ValidationReport,
    verification: Verification,
) -> dict[str, Any] | None:
    """Verify validated contents in plugin workers, unless verification is switched off."""
    if not verification.enabled:
        return None
    return verify_contents(contents, store, verification.options, runs=report.loaded)


@dataclass
class PullRequestReport:
    """The outcome of checking a submission pull request.

    Attributes:
        ids: the entries it adds.
        results: the check of each entry that passed.
        failures: ``{id: (code, message)}`` of each entry that did not.
    """

    ids: list[str]
    results: dict[str, CheckResult]
    failures: dict[str, tuple[str, str]]

    @property
    def ok(self) -> bool:
        """Whether every entry passed."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "ok": self.ok,
            "ids": self.ids,
            "entries": {i: r.to_dict() for i, r in self.results.items()},
            "failures": {i: {"code": c, "error": m} for i, (c, m) in self.failures.items()},
        }


def fetch_pull_request_plugins(
    repo: Path,
    base: str,
    into: Path,
    head: str = "HEAD",
    leaderboard: str = "leaderboard",
    pip_options: tuple[str, ...] = (),
) -> dict[str, Path]:
    """Install each new entry's pinned plugins (wheels only, hashes checked) into ``into/<id>``.

    Raises:
        SubmissionError: the pull request changes more than new entries' data, a pin has
            no wheel hash, or pip refused a pin.
    """
    from fewtrans_board.leaderboard.git import changed_paths
    from fewtrans_board.leaderboard.pr import blob_folder_of, classify
    from fewtrans_board.leaderboard.wheels import install_pins

    store = LeaderboardStore(repo / leaderboard)
    changes = classify(changed_paths(repo, base, head), leaderboard, blob_folder_of(store.root))
    installed = {}
    for ident in changes.ids:
        with fail_closed(f"entry {ident}"):
            meta = store.meta(ident)
        installed[ident] = install_pins(meta, into / ident, pip_options)
    return installed


def with_entry_weights(
    verification: Verification, store_root: Path, ident: str, folder: Path | None
) -> Verification:
    """``verification`` re-running ``ident`` with the checkpoint ``folder`` holds for it.

    Unchanged where no folder is given, verification is off, or the folder holds nothing
    for the entry (the given ``--weights``, or the model's default, is then checked as ever).
    """
    if not verification.enabled:
        return verification
    from fewtrans_board.leaderboard.pr import options_with_entry_weights

    options = options_with_entry_weights(verification.options, store_root, ident, folder)
    return dataclasses.replace(verification, options=options)


def check_pull_request(
    repo: Path,
    base: str,
    verification: Verification,
    head: str = "HEAD",
    leaderboard: str = "leaderboard",
    plugins_root: Path | None = None,
    blobs_from: BlobStore | None = None,
    status_out: Path | None = None,
    weights_dir: Path | None = None,
) -> PullRequestReport:
    """Check that a pull request only adds entries' data, and check each new entry.

    Run it from the base branch's installation: the entries are validated (and verified in
    a plugin worker) by code the pull request cannot change; ``plugins_root/<id>`` holds the
    entry's pins as installed by :func:`fetch_pull_request_plugins`.

    Only the new entries' blobs are fetched, each checked against its hash and its shard's
    seal: from ``blobs_from`` when given, else (a store keeping its blobs at a URL) from the
    staging location ``blob-sources/<id>.txt`` names, else from the store's blob location
    (for a local store, the blobs the pull request adds to its folder).

    A pull request carries no ``status.json``: with ``status_out``, the status this check
    established is written there instead, ``<id>.json`` for every entry it verified, for
    the maintainers to record after the merge (:mod:`.ci_status`). With ``weights_dir``
    (the runners' weights registry), each verified entry re-runs with the checkpoint it
    holds for that entry (:func:`~.pr.weights_in`), else with ``verification``'s.

    Raises:
        SubmissionError: the pull request changes anything but new entries' data.
    """
    from fewtrans_board.leaderboard.blob_flow import source_of
    from fewtrans_board.leaderboard.git import changed_paths
    from fewtrans_board.leaderboard.pr import (
        blob_folder_of,
        check_added_blobs,
        check_entries_split,
        classify,
    )

    blob_folder = blob_folder_of(repo / leaderboard)
    changes = classify(changed_paths(repo, base, head), leaderboard, blob_folder)
    store = LeaderboardStore(repo / leaderboard)
    check_added_blobs(store.root, changes.ids, changes.blobs)
    if blob_folder is None:  # blobs at a URL: none may enter git
        check_entries_split(store.root, changes.ids)
    report = PullRequestReport(changes.ids, {}, {})
    for ident in changes.ids:
        entry_verification = verification
        if plugins_root is not None and (plugins_root / ident).is_dir():
            dirs = (*verification.options.plugin_dirs, plugins_root / ident)
            options = dataclasses.replace(verification.options, plugin_dirs=dirs)
            entry_verification = dataclasses.replace(verification, options=options)
        try:
            entry_verification = with_entry_weights(
                entry_verification, store.root, ident, weights_dir
            )
            source = blobs_from if blob_folder is not None else source_of(store, ident, blobs_from)
            report.results[ident] = check_entry(
                ident, store, entry_verification, with_logits=True, blobs=source
            )
        except SubmissionError as exc:
            report.failures[ident] = (exc.code, str(exc))
    if changes.index_changed and not report.failures:
        current = store.index_path.read_text(encoding="utf-8") if store.index_path.is_file() else ""
        if current != index_text(build_index(store)):
            raise SubmissionError(
                "index-stale",
                f"{leaderboard}/index.json is not what 'fewtrans-board leaderboard rebuild' "
                "derives from the store; rebuild it or leave it out of the pull request",
            )
    if status_out is not None:
        from fewtrans_board.leaderboard.ci_status import write_ci_statuses

        write_ci_statuses({i: r.verification for i, r in report.results.items()}, status_out)
    return report
