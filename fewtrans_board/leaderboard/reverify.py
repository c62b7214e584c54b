"""Re-run stored entries under today's verification rules (``leaderboard reverify``).

An entry's ``status.json`` records the check it passed when it was stored; when the rules
change (the earlier, weaker check of the first entries, or any later tightening) the
record stays, and every surface says which check it was (:mod:`.status`). ``reverify``
re-runs each entry exactly as ``leaderboard check ID --verify`` does
(:func:`~fewtrans_board.leaderboard.intake.check_entry`: validation, then a secret sample
of episodes in a fresh plugin worker) and, when it passes, replaces the entry's
``status.json`` with the new report (temporary file, fsync, rename: a reader sees the old
record or the new one, never a mix). An entry whose re-run fails keeps its old record and
is reported. The index is rebuilt once, at the end; if it cannot be, every record written
is put back. :func:`plan_entries` prints what a run would cost first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.errors import FewtransError, SubmissionError
from fewtrans_board.leaderboard.entries import read_status_record
from fewtrans_board.leaderboard.status import (
    STORED_VERIFIED,
    VerificationStatus,
    entry_status,
)
from fewtrans_board.leaderboard.store import LeaderboardStore, status_text

if TYPE_CHECKING:
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.leaderboard.intake import Verification
    from fewtrans_board.leaderboard.verification import VerificationOptions
    from fewtrans_board.results.load import RunResults


@dataclass(frozen=True)
class DatasetPlan:
    """What verification would re-run of one run of an entry, before anything runs.

    Attributes:
        dataset: the run's dataset.
        episodes: episodes of its frozen manifest.
        rerun: episodes the rule re-runs when the re-runs cost what the run claims (every
            episode within the budget, else the minimum; ``--sample`` fixes it).
        minimum: the fewest that catch a forgery of 5% of the episodes with probability 0.99.
        estimate_s: seconds those re-runs are estimated to take (verification's own
            estimate: worker start, decoding, embedding, fits, probes).
    """

    dataset: str
    episodes: int
    rerun: int
    minimum: int
    estimate_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


@dataclass
class EntryPlan:
    """What re-verifying one entry would do (``reverify --plan``).

    Attributes:
        ident: the entry.
        status: its status now.
        datasets: one plan per run (empty when it cannot be read).
        error: ``(code, message)`` when validation refuses it (it would fail).
        weights: the checkpoint it would re-run with (``""``: the model's default).
    """

    ident: str
    status: VerificationStatus
    datasets: list[DatasetPlan] = field(default_factory=list)
    error: tuple[str, str] | None = None
    weights: str = ""

    @property
    def estimate_s(self) -> float:
        """Estimated seconds of the entry's re-runs, over its datasets."""
        return sum(d.estimate_s for d in self.datasets)

    def line(self) -> str:
        """One line per entry, then one per dataset."""
        head = f"{self.ident} ({self.status.summary})"
        if self.error is not None:
            return f"{head}: cannot be re-run [{self.error[0]}] {self.error[1]}"
        weights = f" with weights {self.weights}" if self.weights else ""
        lines = [f"{head}: about {_duration(self.estimate_s)}{weights}"]
        for d in self.datasets:
            share = (
                "every episode"
                if d.rerun == d.episodes
                else "the fewest that catch a 5% forgery at 0.99"
                if d.rerun == d.minimum
                else "as asked"
            )
            lines.append(
                f"  {d.dataset}: re-runs {d.rerun} of {d.episodes} episodes ({share}), "
                f"about {_duration(d.estimate_s)}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "id": self.ident,
            "status": self.status.to_dict(),
            "estimate_s": round(self.estimate_s, 1),
            "datasets": [d.to_dict() for d in self.datasets],
            "weights": self.weights or None,
            "error": None
            if self.error is None
            else {"code": self.error[0], "error": self.error[1]},
        }


@dataclass
class Outcome:
    """What re-verifying one entry did.

    Attributes:
        ident: the entry.
        before: its status before.
        after: its status now (``None``: the re-run failed and the old record stays).
        error: ``(code, message)`` of the failure.
        seconds: wall-clock seconds it took.
    """

    ident: str
    before: VerificationStatus
    after: VerificationStatus | None = None
    error: tuple[str, str] | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the entry was re-run and its new record stored."""
        return self.after is not None

    def line(self) -> str:
        """One line: the new status, or the failure and the record kept."""
        took = _duration(self.seconds)
        if self.after is not None:
            return f"{self.ident}: {self.after.summary} (was {self.before.summary}; {took})"
        code, message = self.error or ("failed", "")
        return (
            f"{self.ident}: FAILED [{code}] {message} ({took}); its old record "
            f"({self.before.summary}) is kept"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "id": self.ident,
            "ok": self.ok,
            "before": self.before.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
            "error": None
            if self.error is None
            else {"code": self.error[0], "error": self.error[1]},
            "seconds": round(self.seconds, 1),
        }


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def current_status(store: LeaderboardStore, ident: str) -> VerificationStatus:
    """A stored entry's status now (``not verified`` when its record cannot be read)."""
    try:
        record = read_status_record(store, ident)
    except SubmissionError:
        return entry_status("validated", None)
    return entry_status(str(record["status"]), record.get("verification"))


def plan_entry(
    store: LeaderboardStore,
    ident: str,
    options: VerificationOptions,
    weights_dir: Path | None = None,
    datasets: Any = None,
) -> EntryPlan:
    """What re-verifying ``ident`` would re-run and cost; runs no plugin code.

    With ``weights_dir`` (a weights registry), the entry's own checkpoint there replaces
    ``options.weights`` (:func:`~.pr.entry_weights`), as the re-run will. ``datasets``: the
    built-in datasets registry (built here when not given).

    The entry is validated (as the re-run would validate it first); each run's sample is
    planned by verification's own rule (:func:`~.verification.dataset_sample`), and the
    sample's time is verification's own estimate (:func:`~.verification.cost.estimate_run`:
    worker start, decoding, embedding, fits and probes), printed again when it runs.
    """
    from fewtrans_board.leaderboard.intake import Verification, check_entry
    from fewtrans_board.leaderboard.pr import options_with_entry_weights
    from fewtrans_board.leaderboard.verification import dataset_sample
    from fewtrans_board.leaderboard.verification.cost import estimate_run
    from fewtrans_board.leaderboard.verification.rerun import stored_episodes
    from fewtrans_board.leaderboard.verification.weights import check_weights

    plan = EntryPlan(ident, current_status(store, ident))
    datasets = datasets if datasets is not None else builtin_datasets()
    try:
        options = options_with_entry_weights(options, store.root, ident, weights_dir)
        plan.weights = "" if options.weights is None else str(options.weights)
        validation = check_entry(ident, store, Verification(enabled=False)).validation
        runs = validation.loaded
        check_weights(validation.meta, runs, options.weights)  # refused up front, as it will be
    except SubmissionError as exc:
        plan.error = (exc.code, exc.message)
        return plan
    for run in runs:
        _, manifest = store.frozen[run.provenance.manifest.sha256]
        episodes = manifest.episodes()
        sample = dataset_sample(run, len(episodes), options, np.random.default_rng(0))
        # Every planned episode while the claimed cost fits the budget, else the minimum.
        within = sample.explicit or sample.estimate_s <= sample.budget_s
        rerun = len(sample.order) if within else sample.minimum
        stored = stored_episodes(run)
        root = (options.roots or {}).get(run.dataset)
        estimate = estimate_run(
            run,
            [episodes[i] for i in sample.order[:rerun]],
            claimed_fit_s=float(np.mean([e.seconds for e in stored.values()])) if stored else 0.0,
            probe_episodes=options.probe_episodes,
            threads=options.threads,
            universe=_chunked_over(run, manifest, datasets, root),
        )
        plan.datasets.append(
            DatasetPlan(run.dataset, len(episodes), rerun, sample.minimum, estimate.total_s)
        )
    return plan


def _chunked_over(
    run: RunResults, manifest: Manifest, datasets: Any, root: Path | None
) -> list[str] | None:
    """The items a re-run chunks ``run``'s frozen features over (``None``: unknown here).

    A dataset only a plugin registers is not known to this process.
    """
    from fewtrans_board.leaderboard.verification.cost import serves_features
    from fewtrans_board.leaderboard.verification.rerun import rerun_universe

    if not serves_features(run):  # pixels are sent: no chunks, no listing of the copy
        return None
    try:
        spec = datasets.get(manifest.dataset).obj
    except FewtransError:
        return None
    return rerun_universe(run.provenance.identity.feature_universe, spec, root, manifest)


def plan_entries(
    store: LeaderboardStore,
    idents: Sequence[str],
    options: VerificationOptions,
    weights_dir: Path | None = None,
) -> list[EntryPlan]:
    """:func:`plan_entry` of every entry, in order."""
    datasets = builtin_datasets()
    return [plan_entry(store, ident, options, weights_dir, datasets) for ident in idents]


def builtin_datasets() -> Any:
    """The datasets this process knows (the built-ins: plugin code is never imported here)."""
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    return Registry.from_plugin_manager(get_plugin_manager(entry_points=False)).datasets


def checked_record(report: dict[str, Any]) -> dict[str, Any]:
    """The ``status.json`` record of a passed report, as every reader will decode it.

    Raises:
        SubmissionError: ``bad-status`` when the stored entry could not be read back with it.
    """
    from fewtrans_board.results.documents import EntryStatus
    from fewtrans_board.results.strict_json import load_json

    text = status_text({"status": STORED_VERIFIED, "verification": report})
    decoded = load_json(text.encode(), "status.json", "bad-status")
    return EntryStatus.from_json(decoded, "status.json", code="bad-status").to_json()


def reverify_entry(
    store: LeaderboardStore, ident: str, verification: Verification
) -> VerificationStatus:
    """Re-run one stored entry and, when it passes, store its new record atomically.

    Raises:
        SubmissionError: the entry is refused (validation or verification); its
            ``status.json`` is unchanged.
    """
    from fewtrans_board.leaderboard.intake import check_entry

    result = check_entry(ident, store, verification)
    report = result.verification
    if report is None or report.get("passed") is not True:
        raise SubmissionError("not-verified", f"{ident} was not re-run (verification is off)")
    record = checked_record(report)
    standing = entry_status(STORED_VERIFIED, report)
    write_bytes_atomic(store.submissions_dir / ident / "status.json", status_text(record).encode())
    return standing


def reverify_entries(
    store: LeaderboardStore,
    idents: Sequence[str],
    verification: Verification,
    progress: Callable[[str], None] = lambda line: None,
    weights_dir: Path | None = None,
) -> list[Outcome]:
    """Re-run entries one after the other, store each passed record, then rebuild the index.

    Args:
        store: the store.
        idents: the entries, in order.
        verification: how to re-run them (``leaderboard check --verify``'s options).
        progress: called with a line before and after each entry.
        weights_dir: a weights registry: each entry re-runs with its own checkpoint there
            (:func:`~.intake.with_entry_weights`), else with ``verification``'s.

    Returns:
        One outcome per entry.

    Raises:
        SubmissionError: the index cannot be rebuilt (another entry is unreadable); every
            record this call wrote is put back first.
    """
    from fewtrans_board.leaderboard.intake import with_entry_weights

    outcomes: list[Outcome] = []
    previous: dict[str, bytes | None] = {}
    for number, ident in enumerate(idents, 1):
        outcome = Outcome(ident, current_status(store, ident))
        progress(f"[{number}/{len(idents)}] {ident}: re-running ({outcome.before.summary})")
        path = store.submissions_dir / ident / "status.json"
        old = path.read_bytes() if path.is_file() else None
        started = time.perf_counter()
        try:
            entry_verification = with_entry_weights(verification, store.root, ident, weights_dir)
            outcome.after = reverify_entry(store, ident, entry_verification)
            previous.setdefault(ident, old)
        except SubmissionError as exc:
            outcome.error = (exc.code, exc.message)
        outcome.seconds = time.perf_counter() - started
        outcomes.append(outcome)
        progress(f"[{number}/{len(idents)}] {outcome.line()}")
    if previous:
        _rebuild_index(store, previous)
    return outcomes


def _rebuild_index(store: LeaderboardStore, previous: dict[str, bytes | None]) -> None:
    """Rebuild the index from the records now stored; on failure put the old records back."""
    from fewtrans_board.leaderboard.index import build_index
    from fewtrans_board.leaderboard.summary_cache import SummaryCache, default_root

    try:
        index = build_index(store, cache=SummaryCache(default_root()))
    except SubmissionError:
        for ident, data in previous.items():
            target = store.submissions_dir / ident / "status.json"
            if data is None:
                target.unlink(missing_ok=True)
            else:
                write_bytes_atomic(target, data)
        raise
    store.write_index(index)
