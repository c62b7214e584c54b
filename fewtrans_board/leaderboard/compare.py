"""Paired comparison of two methods on shared episodes (a FewTrans Table VIII report)."""

from __future__ import annotations

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
    rows: list[dict[str, Any]] = []
    diffs: dict[str, np.ndarray] = {}
    pooled_a: list[np.ndarray] = []
    pooled_b: list[np.ndarray] = []
    for sha in shared:
        ra, rb = runs_a[sha], runs_b[sha]
        ea, eb = _by_episode(ra, aggregation), _by_episode(rb, aggregation)
        common = sorted(set(ea) & set(eb))
        xa, xb = np.array([ea[e] for e in common]), np.array([eb[e] for e in common])
        t, w = paired_ttest(xa, xb), wilcoxon_signed_rank(xa, xb)
        rows.append(
            {
                "dataset": ra.dataset,
                "episodes": len(common),
                "a": float(xa.mean()),
                "b": float(xb.mean()),
                "difference": float((xa - xb).mean()),
                "t_p": t.pvalue,
                "wilcoxon_p": w.pvalue,
                "cohens_d": cohens_d_paired(xa, xb),
            }
        )
        diffs[ra.dataset] = xa - xb
        pooled_a.append(xa)
        pooled_b.append(xb)
    for row, adjusted in zip(rows, holm([r["t_p"] for r in rows]), strict=True):
        row["t_p_holm"] = adjusted
        row["significant"] = adjusted < 0.05
    all_a, all_b = np.concatenate(pooled_a), np.concatenate(pooled_b)
    overall_ci = average_ci(diffs, resamples=10_000, seed=seed)
    return {
        "a": str(runs_a[shared[0]].label),
        "b": str(runs_b[shared[0]].label),
        "protocols": {"a": protocol_of(runs_a[shared[0]]), "b": protocol_of(runs_b[shared[0]])},
        "protocol_mismatch": mismatch,
        "aggregation": aggregation,
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
        },
    }
