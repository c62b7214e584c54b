"""The row checks on all groups at once never pass what the group-by-group checks refuse.

The oracle is :func:`~fewtrans_board.leaderboard.rows._check_each_group` (the checks as they
were, one (episode, split) group at a time). Random honest runs, with ties among logits and
votes, base-to-novel groups and several way counts, must pass both; every mutation an
attacker could make to a table (a prediction, an accuracy, a grid point, a logit, an
ensemble, a row dropped, doubled or moved) that the group checks refuse must be refused at
once too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.episodes.manifest import ManifestEpisode
from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.leaderboard.row_arrays import RowArrays, all_rows_pass
from fewtrans_board.leaderboard.rows import _check_each_group
from fewtrans_board.results.row_schema import ENSEMBLES

Row = dict[str, Any]


def episodes_of(rng: np.random.Generator) -> list[ManifestEpisode]:
    episodes = []
    for index in range(int(rng.integers(1, 6))):
        ways = int(rng.integers(2, 5))
        query = tuple(
            (f"q{index}-{k}", int(rng.integers(0, ways))) for k in range(rng.integers(1, 6))
        )
        novel_ways = int(rng.integers(2, 4)) if rng.random() < 0.4 else 0
        novel = tuple(
            (f"n{index}-{k}", int(rng.integers(0, novel_ways)))
            for k in range(rng.integers(1, 4) if novel_ways else 0)
        )
        episodes.append(
            ManifestEpisode(
                index=index,
                stream_index=index * 3 + 1,
                classes=tuple(range(ways)),
                class_ids=tuple(f"c{c}" for c in range(ways)),
                support=(),
                query=query,
                novel_classes=tuple(range(10, 10 + novel_ways)),
                novel_class_ids=tuple(f"n{c}" for c in range(novel_ways)),
                novel_query=novel,
            )
        )
    return episodes


def honest_rows(
    rng: np.random.Generator, episodes: list[ManifestEpisode], grid: list[str]
) -> list[Row]:
    """A run's rows as the runner writes them: argmax predictions of float16 logits with
    frequent ties, accuracies on the manifest labels, ensembles fused per group."""
    rows: list[Row] = []
    for episode in episodes:
        for split, pairs, ways in (
            ("base", episode.query, episode.ways),
            ("novel", episode.novel_query, len(episode.novel_classes)),
        ):
            if not pairs:
                continue
            labels = np.array([label for _, label in pairs])
            shared = {"episode": episode.index, "stream_index": episode.stream_index}
            shared |= {"split": split, "n_way": ways, "n_query": len(pairs)}
            logits = rng.integers(-3, 1, (len(grid), len(pairs), ways)).astype(np.float16)
            predictions = logits.argmax(axis=2)
            for c, config in enumerate(grid):
                accuracy = float((predictions[c] == labels).mean() * 100.0)
                rows.append(
                    shared
                    | {"kind": "config", "aggregation": "", "config_index": c, "config": config}
                    | {"accuracy": accuracy, "predictions": predictions[c].tolist()}
                    | {"logits": logits[c].ravel().tolist()}
                )
            for aggregation in ENSEMBLES:
                fused, _ = fuse(aggregation, logits=logits, predictions=predictions, n_way=ways)
                rows.append(
                    shared
                    | {"kind": "ensemble", "aggregation": aggregation, "config_index": -1}
                    | {"config": "", "accuracy": float((fused == labels).mean() * 100.0)}
                    | {"predictions": fused.tolist(), "logits": []}
                )
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def arrays_of(rows: list[Row], with_logits: bool) -> RowArrays:
    def offsets(lists: list[list[Any]]) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([len(v) for v in lists])]).astype(np.int32)

    texts = ("split", "kind", "aggregation", "config")
    columns = {
        name: np.asarray([r[name] for r in rows], dtype=str if name in texts else None)
        for name in (
            "episode",
            "stream_index",
            "config_index",
            "n_way",
            "n_query",
            "accuracy",
            *texts,
        )
    }
    logits = [r["logits"] if with_logits else [] for r in rows]
    return RowArrays(
        rows=columns,
        predictions=np.asarray([p for r in rows for p in r["predictions"]], dtype=np.int16),
        pred_offsets=offsets([r["predictions"] for r in rows]),
        logits=np.asarray([v for values in logits for v in values], dtype=np.float16),
        logit_offsets=offsets(logits),
        logit_valid=np.full(len(rows), with_logits),
    )


def refused(
    rows: list[Row], episodes: list[ManifestEpisode], grid: list[str], with_logits: bool
) -> bool:
    try:
        _check_each_group("d", arrays_of(rows, with_logits), episodes, grid, with_logits)
    except SubmissionError:
        return True
    return False


def pick(rng: np.random.Generator, rows: list[Row], kind: str | None = None) -> Row:
    chosen = [r for r in rows if kind is None or r["kind"] == kind]
    return chosen[int(rng.integers(len(chosen)))]


def _prediction(rng: np.random.Generator, rows: list[Row], kind: str) -> None:
    row = pick(rng, rows, kind)
    j = int(rng.integers(row["n_query"]))
    row["predictions"][j] = (row["predictions"][j] + 1) % row["n_way"]


MUTATIONS: dict[str, Callable[[np.random.Generator, list[Row]], None]] = {
    "prediction-of-a-member": lambda g, r: _prediction(g, r, "config"),
    "prediction-of-an-ensemble": lambda g, r: _prediction(g, r, "ensemble"),
    "out-of-range-prediction": lambda g, r: pick(g, r)["predictions"].__setitem__(0, -1),
    "prediction-equal-to-n-way": lambda g, r: (row := pick(g, r))["predictions"].__setitem__(
        0, row["n_way"]
    ),
    "accuracy-off": lambda g, r: pick(g, r).__setitem__("accuracy", pick(g, r)["accuracy"] + 0.5),
    "accuracy-noise": lambda g, r: (row := pick(g, r)).__setitem__(
        "accuracy", row["accuracy"] + 1e-12
    ),
    "config-text": lambda g, r: pick(g, r, "config").__setitem__("config", '{"lr":9}'),
    "config-index": lambda g, r: (row := pick(g, r, "config")).__setitem__(
        "config_index", (row["config_index"] + 1) % 3
    ),
    "row-dropped": lambda g, r: r.pop(int(g.integers(len(r)))),
    "row-doubled": lambda g, r: r.append(copy.deepcopy(pick(g, r))),
    "n-way": lambda g, r: (row := pick(g, r)).__setitem__("n_way", row["n_way"] + 1),
    "n-query": lambda g, r: (row := pick(g, r)).__setitem__("n_query", row["n_query"] - 1),
    "stream-index": lambda g, r: (row := pick(g, r)).__setitem__(
        "stream_index", row["stream_index"] + 1
    ),
    "split": lambda g, r: pick(g, r).__setitem__("split", "novel"),
    "split-unknown": lambda g, r: pick(g, r).__setitem__("split", "basis"),
    "episode": lambda g, r: (row := pick(g, r)).__setitem__("episode", row["episode"] + 1),
    "kind": lambda g, r: pick(g, r).__setitem__("kind", "configs"),
    "aggregation": lambda g, r: pick(g, r, "ensemble").__setitem__("aggregation", "vote"),
    "aggregation-unknown": lambda g, r: pick(g, r, "ensemble").__setitem__("aggregation", "mean"),
    "logit-nan": lambda g, r: pick(g, r, "config")["logits"].__setitem__(0, float("nan")),
    "logit-raised": lambda g, r: (row := pick(g, r, "config"))["logits"].__setitem__(
        int(g.integers(len(row["logits"]))), 5.0
    ),
    "logit-dropped": lambda g, r: pick(g, r, "config")["logits"].pop(),
    "predictions-dropped": lambda g, r: pick(g, r)["predictions"].pop(),
    "members-swapped": lambda g, r: _swap_members(g, r),
}


def _swap_members(rng: np.random.Generator, rows: list[Row]) -> None:
    """Two grid points of one group exchange their configuration (index and text)."""
    row = pick(rng, rows, "config")
    other = next(
        (
            o
            for o in rows
            if o is not row
            and o["kind"] == "config"
            and (o["episode"], o["split"]) == (row["episode"], row["split"])
        ),
        None,
    )
    if other is not None:
        for name in ("config_index", "config"):
            row[name], other[name] = other[name], row[name]


def _fix_accuracies(rows: list[Row], episodes: list[ManifestEpisode]) -> None:
    """Every accuracy recomputed, so a changed prediction reaches the deeper checks."""
    for row in rows:
        if not 0 <= row["episode"] < len(episodes):
            continue
        episode = episodes[row["episode"]]
        pairs = episode.novel_query if row["split"] == "novel" else episode.query
        predictions = np.array(row["predictions"])
        if len(predictions) == len(pairs):
            labels = np.array([label for _, label in pairs])
            row["accuracy"] = float((predictions == labels).mean() * 100.0)


@pytest.mark.parametrize("seed", range(60))
def test_all_at_once_passes_only_what_each_group_passes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    episodes = episodes_of(rng)
    grid = [json.dumps({"lr": c}) for c in range(int(rng.integers(1, 4)))]
    rows = honest_rows(rng, episodes, grid)
    for with_logits in (True, False):
        # Control: an honest run passes both, and at once (the fast path is taken).
        assert not refused(rows, episodes, grid, with_logits)
        assert all_rows_pass(arrays_of(rows, with_logits), episodes, grid, with_logits)
    caught = 0
    for name, mutate in MUTATIONS.items():
        for fix in (False, True):
            mutated = copy.deepcopy(rows)
            mutate(rng, mutated)
            if fix:
                _fix_accuracies(mutated, episodes)
            for with_logits in (True, False):
                if refused(mutated, episodes, grid, with_logits):
                    caught += 1
                    assert not all_rows_pass(
                        arrays_of(mutated, with_logits), episodes, grid, with_logits
                    ), (name, fix, with_logits)
    assert caught > len(MUTATIONS)  # the mutations are ones the group checks refuse
