"""Paired comparison of two methods on shared episodes (a FewTrans Table VIII report)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.results.load import RunResults, find_runs, load_run
from fewtrans_board.stats.bootstrap import average_ci
from fewtrans_board.stats.tests import cohens_d_paired, holm, paired_ttest, wilcoxon_signed_rank


def _runs_by_manifest(path: Path) -> dict[str, RunResults]:
    runs = {}
    for folder in find_runs([path]):
        run = load_run(folder)
        runs[run.provenance.manifest.sha256] = run
    return runs


def _by_episode(run: RunResults, aggregation: str) -> dict[int, float]:
    """Per-episode accuracy of an aggregation (``hpe``, ``vote``, ``oracle`` ...)."""
    episodes, _, _ = run.config_matrix()
    values = run.aggregations()[aggregation]
    return {int(e): float(v) for e, v in zip(episodes, values, strict=True)}


def protocol_of(run: RunResults) -> dict[str, Any]:
    """The HPE protocol a run was scored under: name, version and headline aggregation."""
    hpe = run.provenance.hpe
    return {"name": hpe.name, "version": hpe.version, "aggregation": hpe.aggregation}


def _check_same_protocol(
    runs_a: dict[str, RunResults], runs_b: dict[str, RunResults], shared: list[str], allow: bool
) -> bool:
    """Whether A and B were scored under different HPE protocols (refused unless ``allow``)."""
    for sha in shared:
        pa, pb = protocol_of(runs_a[sha]), protocol_of(runs_b[sha])
        if pa != pb:
            if not allow:
                raise FewtransError(
                    f"{runs_a[sha].dataset}: A was scored under HPE protocol {pa['name']} "
                    f"({pa['aggregation']}), B under {pb['name']} ({pb['aggregation']}); their "
                    "accuracies are not comparable (different grids and fusion). Evaluate both "
                    "under one protocol, or pass --allow-protocol-mismatch to compare anyway."
                )
            return True
    return False


def compare_runs(
    a: Path,
    b: Path,
    aggregation: str = "hpe",
    seed: int = 0,
    *,
    allow_protocol_mismatch: bool = False,
) -> dict[str, Any]:
    """Compare A against B on every manifest both were evaluated on.

    Per dataset: both means, the mean difference, the paired t-test's p (``t_p``, the
    p FewTrans Table VIII prints) and the same p Holm-adjusted across datasets
    (``t_p_holm``, which ``significant`` reads), Wilcoxon's p, and paired Cohen's d. Overall: the difference of the
    cross-dataset averages with a seeded bootstrap CI, and tests on all pooled episodes.

    Raises:
        FewtransError: no shared manifest, or A and B were scored under different HPE
            protocols and ``allow_protocol_mismatch`` is false.
    """
    runs_a, runs_b = _runs_by_manifest(a), _runs_by_manifest(b)
    shared = sorted(set(runs_a) & set(runs_b), key=lambda s: runs_a[s].dataset)
    if not shared:
        raise FewtransError(
            f"{a} and {b} share no manifest; paired comparison needs the same episodes"
        )
    mismatch = _check_same_protocol(runs_a, runs_b, shared, allow_protocol_mismatch)
    names = [runs_a[sha].dataset for sha in shared]
    keys = [
        name if names.count(name) == 1 else f"{name}@{runs_a[sha].provenance.manifest.file}"
        for name, sha in zip(names, shared, strict=True)
    ]
    report = compare_values(
        {k: _by_episode(runs_a[sha], aggregation) for k, sha in zip(keys, shared, strict=True)},
        {k: _by_episode(runs_b[sha], aggregation) for k, sha in zip(keys, shared, strict=True)},
        seed=seed,
    )
    return {
        "a": str(runs_a[shared[0]].label),
        "b": str(runs_b[shared[0]].label),
        "protocols": {"a": protocol_of(runs_a[shared[0]]), "b": protocol_of(runs_b[shared[0]])},
        "protocol_mismatch": mismatch,
        "aggregation": aggregation,
        **report,
    }


def _outcomes(xa: np.ndarray, xb: np.ndarray) -> dict[str, int]:
    """Episodes on which A scored higher, the same, and lower than B."""
    return {
        "wins": int((xa > xb).sum()),
        "ties": int((xa == xb).sum()),
        "losses": int((xa < xb).sum()),
    }


def compare_values(
    a: Mapping[str, Mapping[int, float]],
    b: Mapping[str, Mapping[int, float]],
    seed: int = 0,
    resamples: int = 10_000,
) -> dict[str, Any]:
    """Paired comparison of A's and B's per-episode accuracies (what ``compare`` prints).

    Args:
        a: per dataset (or column), A's accuracy by episode index.
        b: the same for B; only the datasets and episodes both have are compared.
        seed: the bootstrap seed of the overall difference's CI.
        resamples: bootstrap resamples of that CI.

    Returns:
        ``{"datasets": [...], "overall": {...}}``: per dataset (in ``a``'s order) both
        means, the difference, the paired t-test's p (``t_p``) and the same p Holm-adjusted
        across datasets (``t_p_holm``, which ``significant`` reads), Wilcoxon's p, paired
        Cohen's d and the episodes A wins, ties and loses; overall the difference of the
        cross-dataset averages with its seeded bootstrap CI and the tests on all pooled
        episodes.

    Raises:
        FewtransError: A and B share no episode.
    """
    rows: list[dict[str, Any]] = []
    diffs: dict[str, np.ndarray] = {}
    pooled_a: list[np.ndarray] = []
    pooled_b: list[np.ndarray] = []
    for dataset in [d for d in a if d in b]:
        common = sorted(set(a[dataset]) & set(b[dataset]))
        if not common:
            continue
        xa = np.array([a[dataset][e] for e in common], dtype=np.float64)
        xb = np.array([b[dataset][e] for e in common], dtype=np.float64)
        t, w = paired_ttest(xa, xb), wilcoxon_signed_rank(xa, xb)
        rows.append(
            {
                "dataset": dataset,
                "episodes": len(common),
                "a": float(xa.mean()),
                "b": float(xb.mean()),
                "difference": float((xa - xb).mean()),
                "t_p": t.pvalue,
                "wilcoxon_p": w.pvalue,
                "cohens_d": cohens_d_paired(xa, xb),
                **_outcomes(xa, xb),
            }
        )
        diffs[dataset] = xa - xb
        pooled_a.append(xa)
        pooled_b.append(xb)
    if not rows:
        raise FewtransError("A and B share no episode; paired comparison needs the same episodes")
    for row, adjusted in zip(rows, holm([r["t_p"] for r in rows]), strict=True):
        row["t_p_holm"] = adjusted
        row["significant"] = adjusted < 0.05
    all_a, all_b = np.concatenate(pooled_a), np.concatenate(pooled_b)
    overall_ci = average_ci(diffs, resamples=resamples, seed=seed)
    return {
        "datasets": rows,
        "overall": {
            "episodes": len(all_a),
            "a": float(np.mean([r["a"] for r in rows])),
            "b": float(np.mean([r["b"] for r in rows])),
            "difference": overall_ci.estimate,
            "difference_ci": [overall_ci.low, overall_ci.high],
            "t_p": paired_ttest(all_a, all_b).pvalue,
            "wilcoxon_p": wilcoxon_signed_rank(all_a, all_b).pvalue,
            "cohens_d": cohens_d_paired(all_a, all_b),
            "bootstrap_seed": seed,
            "bootstrap_resamples": resamples,
            **_outcomes(all_a, all_b),
        },
    }
