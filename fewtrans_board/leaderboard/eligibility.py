"""Whether an evaluation can become a valid submission, checked before it starts.

``submission validate`` refuses limited runs, unfrozen manifests, protocols a
sub-benchmark does not accept and runs without a held-out centre search; finding that out
after hours of evaluation is expensive. ``evaluate`` calls :func:`submission_problems`
first and warns (it still runs: a quick or exploratory run is legitimate).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.hpe.protocols import get_hpe_protocol
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark


def submission_problems(
    manifest_path: Path,
    manifest: Manifest,
    hpe: str,
    *,
    roles: Mapping[str, str],
    centre: Mapping[str, Any],
    centre_record: Mapping[str, Any] | None,
    limit: int | None,
    store: LeaderboardStore | None,
) -> list[str]:
    """Reasons a run's results could not be accepted by any sub-benchmark (empty: none).

    Args:
        manifest_path: the manifest file the run evaluates.
        manifest: that manifest, loaded.
        hpe: the HPE protocol name.
        roles: the adapter's HPE axes (``{field: "lr" | "epochs"}``).
        centre: the configuration the run will use as the grid's centre.
        centre_record: the ``hpe search`` record given with ``--centre``, if any.
        limit: ``--limit``, if given.
        store: the local leaderboard store, when there is one, to compare hashes.
    """
    problems = []
    if limit is not None:
        problems.append(
            f"--limit {limit} evaluates part of the manifest; submissions need every episode"
        )
    benchmarks, manifest_problem = _benchmarks_of(manifest_path, manifest, store)
    if manifest_problem is not None:
        problems.append(manifest_problem)
        return problems
    accepting = [b for b in benchmarks if hpe in b.hpe_protocols]
    if not accepting:
        accepted = sorted({p for b in benchmarks for p in b.hpe_protocols})
        problems.append(
            f"sub-benchmark(s) {', '.join(b.name for b in benchmarks)} accept the HPE "
            f"protocols {', '.join(accepted)}, not {hpe!r} (--hpe)"
        )
        return problems
    protocol = get_hpe_protocol(hpe)
    if not protocol.leaderboard or not roles or protocol.centre_rule == "recipe":
        return problems
    problems.extend(_centre_problems(accepting, roles, centre, centre_record))
    return problems


def _benchmarks_of(
    path: Path, manifest: Manifest, store: LeaderboardStore | None
) -> tuple[list[SubBenchmark], str | None]:
    """Sub-benchmarks listing the manifest, or why it is not one of theirs."""
    name = path.name
    if store is not None and not (store.manifests_dir / name).is_file():
        frozen = {sha: filename for sha, (filename, _) in store.frozen.items()}
        name = frozen.get(manifest.sha256, name)
    benchmarks = [b for b in SUB_BENCHMARKS.values() if name in b.manifests]
    if not benchmarks:
        return [], (
            f"manifest {path.name} is not a frozen manifest of any sub-benchmark "
            "(see 'fewtrans-board sub-benchmarks')"
        )
    frozen_copy = store.manifests_dir / name if store is not None else None
    if frozen_copy is not None and frozen_copy.is_file():
        reference = Manifest.load(frozen_copy)
        if reference.sha256 != manifest.sha256:
            return [], (
                f"manifest {path} differs from the frozen {frozen_copy} (sha256 "
                f"{manifest.sha256[:12]}... vs {reference.sha256[:12]}...); evaluate the "
                "frozen one"
            )
    return benchmarks, None


def _centre_problems(
    benchmarks: list[SubBenchmark],
    roles: Mapping[str, str],
    centre: Mapping[str, Any],
    record: Mapping[str, Any] | None,
) -> list[str]:
    held_out = sorted({d for b in benchmarks for d in b.held_out})
    if record is None:
        return [
            f"no centre search: an adapter with HPE axes ({', '.join(roles)}) is submitted "
            "with the centre found by 'fewtrans-board hpe search' on held-out tasks "
            f"({', '.join(held_out)}); run it, then evaluate with --centre FILE"
        ]
    problems = []
    if record.get("dataset") not in held_out:
        problems.append(
            f"the centre was searched on {record.get('dataset')!r}; these sub-benchmarks "
            f"accept searches on {', '.join(held_out)} only"
        )
    searched = record.get("centre")
    if isinstance(searched, Mapping):
        moved = [
            name
            for name in centre
            if name in searched and canonical_json(centre[name]) != canonical_json(searched[name])
        ]
        if moved:
            problems.append(
                f"--config moves {', '.join(moved)} away from the searched centre; the "
                "submitted centre must be the searched one (search with the same --config)"
            )
    return problems
