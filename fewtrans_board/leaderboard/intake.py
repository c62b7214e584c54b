"""The submission pipelines: pack, validate, verify, add, check (the CLI only prints).

Every function here runs without third-party plugins: validation reads data only, and
verification drives the plugin in a separate worker process.

Reading and validating untrusted data fails closed: a refusal is a
:class:`~fewtrans_board.leaderboard.errors.SubmissionError` with a code, and an error the
checks did not anticipate is refused as ``unexpected-fault`` (naming the exception) rather
than escaping as a traceback; the store is never touched before validation has passed.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.errors import FewtransError, describe
from fewtrans_board.leaderboard.bundle import (
    BundleContents,
    extract_bundle,
    pack_bundle,
    read_centre_search,
    run_centre_record,
)
from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.leaderboard.index import build_index
from fewtrans_board.leaderboard.meta import read_meta
from fewtrans_board.leaderboard.store import LeaderboardStore, index_text
from fewtrans_board.leaderboard.validate import ValidationReport, validate_contents
from fewtrans_board.leaderboard.verify import verify_contents


@dataclass(frozen=True)
class Verification:
    """How to verify: episodes per dataset, their seed, data roots and the worker.

    Attributes:
        sample: episodes re-run per dataset (``0``: validate only).
        seed: seed choosing the episodes.
        roots: local dataset copies by dataset name.
        python: interpreter of the plugin worker (an environment holding the pins).
    """

    sample: int = 0
    seed: int = 0
    roots: dict[str, Path] | None = None
    python: str | None = None


@dataclass
class CheckResult:
    """A validation report and, when verified, the verification report."""

    validation: ValidationReport
    verification: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        out = self.validation.to_dict()
        if self.verification is not None:
            out["verification"] = self.verification
        return out


@contextlib.contextmanager
def fail_closed(what: str) -> Iterator[None]:
    """Turn an unanticipated error while reading untrusted data into a refusal.

    Args:
        what: the bundle or entry being read, named in the message.

    Raises:
        SubmissionError: unchanged; ``cannot-check`` for another user-facing error (e.g. a
            damaged frozen manifest in the store); ``unexpected-fault`` for anything else.
    """
    try:
        yield
    except SubmissionError:
        raise
    except FewtransError as exc:
        raise SubmissionError("cannot-check", f"{what} cannot be checked: {exc}") from exc
    except Exception as exc:  # fail closed on untrusted input
        raise SubmissionError(
            "unexpected-fault",
            f"{what} is refused: reading it stopped on {describe(exc)} (please report this "
            "with the bundle: the checks should have named the fault)",
        ) from exc


def validate_bundle(bundle: Path, store: LeaderboardStore) -> ValidationReport:
    """Extract a bundle into a temporary folder and validate it (nothing is stored)."""
    with tempfile.TemporaryDirectory() as tmp, fail_closed(bundle.name):
        return validate_contents(extract_bundle(bundle, Path(tmp)), store)


def verify_bundle(bundle: Path, store: LeaderboardStore, **options: Any) -> dict[str, Any]:
    """Extract, validate and verify a bundle (see :func:`~.verify.verify_contents`)."""
    with tempfile.TemporaryDirectory() as tmp:
        with fail_closed(bundle.name):
            contents = extract_bundle(bundle, Path(tmp))
            loaded = validate_contents(contents, store).loaded
        return verify_contents(contents, store, runs=loaded, **options)


def pack_checked(
    runs: list[Path], meta: Path, out: Path, store: LeaderboardStore, centre: Path | None = None
) -> ValidationReport:
    """Validate run folders as the bundle would hold them, then write the bundle zip.

    Refuses (writing nothing) whatever ``submission validate`` would refuse, so no one
    uploads a bundle that cannot be accepted.

    Raises:
        SubmissionError: the first fault validation finds.
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
        contents = BundleContents(
            parsed,
            record,
            list(runs),
            {run: f"results/{run.name}" for run in runs},
        )
        report = validate_contents(contents, store)
    pack_bundle(runs, meta, out, centre)
    return report


def add_bundle(bundle: Path, store: LeaderboardStore, verification: Verification) -> CheckResult:
    """Validate (and optionally verify) a bundle, store it as an immutable entry, reindex.

    Raises:
        SubmissionError: the bundle is refused; the store is left unchanged.
    """
    with tempfile.TemporaryDirectory() as tmp:
        with fail_closed(bundle.name):
            contents = extract_bundle(bundle, Path(tmp))
            report = validate_contents(contents, store)
        result = CheckResult(report, _verify(contents, store, report, verification))
        status: dict[str, Any] = (
            {"status": "validated"}
            if result.verification is None
            else {"status": "verified", "verification": result.verification}
        )
        meta = result.validation.meta
        store.add(Path(tmp), meta.id, status, meta.supersedes)
    try:
        index = build_index(store)
    except SubmissionError:  # another stored entry is unreadable: leave the store as it was
        store.withdraw(meta.id)
        raise
    store.write_index(index)
    return result


def check_entry(ident: str, store: LeaderboardStore, verification: Verification) -> CheckResult:
    """Re-validate (and optionally verify) a stored entry; writes nothing.

    Raises:
        SubmissionError: the entry does not pass.
    """
    with fail_closed(f"stored entry {ident}"):
        contents = store.entry_contents(ident)
        report = validate_contents(contents, store)
    return CheckResult(report, _verify(contents, store, report, verification))


def _verify(
    contents: BundleContents,
    store: LeaderboardStore,
    report: ValidationReport,
    verification: Verification,
) -> dict[str, Any] | None:
    """Verify validated contents in a plugin worker, when a sample is asked for."""
    if not verification.sample:
        return None
    return verify_contents(
        contents,
        store,
        sample=verification.sample,
        seed=verification.seed,
        roots=verification.roots,
        runs=report.loaded,
        python=verification.python,
    )


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


def check_pull_request(
    repo: Path,
    base: str,
    verification: Verification,
    head: str = "HEAD",
    leaderboard: str = "leaderboard",
) -> PullRequestReport:
    """Check that a pull request only adds entries' data, and check each new entry.

    Run it from the base branch's installation: the entries are validated (and verified in
    a plugin worker) by code the pull request cannot change.

    Raises:
        SubmissionError: the pull request changes anything but new entries' data.
    """
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.pr import changed_paths, check_status_claims, classify

    changes = classify(changed_paths(repo, base, head), leaderboard)
    store = LeaderboardStore(repo / leaderboard)
    check_status_claims(store.root, changes.ids, verified_here=verification.sample > 0)
    report = PullRequestReport(changes.ids, {}, {})
    for ident in changes.ids:
        try:
            report.results[ident] = check_entry(ident, store, verification)
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
    return report
