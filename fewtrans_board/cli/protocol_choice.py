"""Which HPE protocol a run uses when ``--hpe`` is not given, and who it will be ranked with.

Each sub-benchmark names the protocol its leaderboard ranks entries under
(``SubBenchmark.leaderboard_protocol``); entries are ranked only with entries of the same
protocol, so a run made under another one ranks apart. Commands that take ``--hpe`` default
to the protocol of the sub-benchmark(s) the manifest belongs to, say so in one line, and warn
once when another protocol is chosen, naming the entries the run will be ranked with.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from fewtrans_board.cli.store_options import LEADERBOARD_ENV
from fewtrans_board.leaderboard.sub_benchmarks import (
    SUB_BENCHMARKS,
    SubBenchmark,
    benchmarks_of_manifest,
)

FALLBACK_PROTOCOL = "fewtrans-paper"
"""The protocol of a run whose manifest belongs to no sub-benchmark (FewTrans's definition)."""
NAMED = 6
"""Entries named in a warning before the rest are counted."""


@dataclass(frozen=True)
class ProtocolChoice:
    """The HPE protocol of a run and the line that says why.

    Attributes:
        protocol: the HPE protocol the run uses.
        line: what to print (``HPE protocol: ...`` for a default, a ``Warning: ...`` for
            another protocol than the leaderboard's; empty for an explicit choice that
            needs no word).
        warning: whether ``line`` warns (another protocol than the leaderboard's).
    """

    protocol: str
    line: str
    warning: bool = False


def entries_by_protocol(
    store: Path | None, benchmarks: Sequence[str] | None = None
) -> dict[str, dict[str, list[str]]]:
    """Stored entry ids per sub-benchmark and HPE protocol, from each ``submission.toml``.

    Args:
        store: the leaderboard folder (``None`` or a folder without submissions: none).
        benchmarks: only these sub-benchmarks (default: all).

    Returns:
        ``{benchmark: {protocol: [ids]}}``; an unreadable entry is left out (``leaderboard
        check`` names it).
    """
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.store import LeaderboardStore

    out: dict[str, dict[str, list[str]]] = {}
    if store is None or not (store / "submissions").is_dir():
        return out
    board = LeaderboardStore(store)
    for ident in board.submission_ids():
        try:
            meta = board.meta(ident)
        except (SubmissionError, OSError):
            continue
        if benchmarks is None or meta.benchmark in benchmarks:
            out.setdefault(meta.benchmark, {}).setdefault(meta.hpe_protocol, []).append(ident)
    return out


def default_store(given: Path | None = None) -> Path | None:
    """``given``, else ``$FEWTRANS_BOARD_LEADERBOARD``, else ``./leaderboard`` when it exists."""
    if given is not None:
        return given
    folder = Path(os.environ.get(LEADERBOARD_ENV, "leaderboard"))
    return folder if folder.is_dir() else None


def _names(ids: list[str]) -> str:
    if not ids:
        return "no entry yet"
    shown = ", ".join(sorted(ids)[:NAMED])
    more = f" and {len(ids) - NAMED} more" if len(ids) > NAMED else ""
    return f"{len(ids)} entr{'y' if len(ids) == 1 else 'ies'}: {shown}{more}"


def _known(hpe: str) -> bool:
    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.hpe.protocols import get_hpe_protocol

    try:
        get_hpe_protocol(hpe)
    except (FewtransError, KeyError, ValueError):
        return False
    return True


def choose_protocol(
    hpe: str | None,
    benchmarks: Sequence[SubBenchmark],
    where: str,
    store: Path | None = None,
) -> ProtocolChoice:
    """The HPE protocol of a run on a sub-benchmark's manifest, and the line to print.

    Args:
        hpe: the ``--hpe`` value (``None``: not given).
        benchmarks: the sub-benchmarks the run's manifest belongs to (empty: none).
        where: what the run is on, for the line (a manifest file name or a benchmark).
        store: the leaderboard folder whose entries the warning names.

    Returns:
        The protocol and one line: which protocol is used and why, or a warning naming the
        entries a run under another protocol will be ranked with.
    """
    protocols = sorted({b.leaderboard_protocol for b in benchmarks})
    names = ", ".join(b.name for b in benchmarks)
    if hpe is None:
        if len(protocols) == 1:
            line = (
                f"HPE protocol: {protocols[0]}, the leaderboard protocol of sub-benchmark "
                f"{names} (--hpe chooses another)"
            )
            return ProtocolChoice(protocols[0], line)
        reason = (
            f"{where} belongs to no sub-benchmark"
            if not benchmarks
            else f"the sub-benchmarks of {where} ({names}) rank under {', '.join(protocols)}"
        )
        return ProtocolChoice(
            FALLBACK_PROTOCOL, f"HPE protocol: {FALLBACK_PROTOCOL} (default; {reason})"
        )
    if not benchmarks or hpe in protocols or not _known(hpe):
        return ProtocolChoice(hpe, "")  # chosen, nothing to add (an unknown name fails later)
    ranked = entries_by_protocol(store, [b.name for b in benchmarks])
    same = [i for b in benchmarks for i in ranked.get(b.name, {}).get(hpe, [])]
    board = [i for b in benchmarks for p in protocols for i in ranked.get(b.name, {}).get(p, [])]
    line = (
        f"Warning: --hpe {hpe}: sub-benchmark {names} ranks its leaderboard under "
        f"{' / '.join(protocols)} ({_names(board)}); this run will be ranked only with the "
        f"{hpe} entries ({_names(same)})"
    )
    return ProtocolChoice(hpe, line, warning=True)


def protocol_for_manifest(
    hpe: str | None, manifest: Path | str | None, store: Path | None = None
) -> ProtocolChoice:
    """:func:`choose_protocol` for a run on ``manifest`` (matched by its file name)."""
    name = Path(str(manifest)).name if manifest else ""
    return choose_protocol(hpe, benchmarks_of_manifest(name), name or "the run", store)


def protocol_for_benchmark(
    hpe: str | None, benchmark: str | None, store: Path | None = None
) -> ProtocolChoice:
    """:func:`choose_protocol` for a run meant for sub-benchmark ``benchmark`` (if any).

    Raises:
        click.BadParameter: ``benchmark`` names no sub-benchmark.
    """
    if benchmark is None:
        if hpe is not None:
            return ProtocolChoice(hpe, "")
        return ProtocolChoice(
            FALLBACK_PROTOCOL,
            f"HPE protocol: {FALLBACK_PROTOCOL} (default without --benchmark; --benchmark NAME "
            "uses the protocol that sub-benchmark ranks under)",
        )
    if benchmark not in SUB_BENCHMARKS:
        raise click.BadParameter(
            f"no sub-benchmark {benchmark!r}; 'fewtrans-board sub-benchmarks' lists "
            f"{', '.join(SUB_BENCHMARKS)}",
            param_hint="--benchmark",
        )
    return choose_protocol(hpe, [SUB_BENCHMARKS[benchmark]], benchmark, store)


def announce(choice: ProtocolChoice) -> None:
    """Print the choice's line on stderr, if it has one."""
    if choice.line:
        click.echo(choice.line, err=True)
