"""The oracle verdict beside each unlearned entry of the CLIP-settings page.

The oracle check (:mod:`fewtrans_board.unlearning.oracle`) pairs a method's per-episode
accuracy on the unlearned model with its accuracy on a model trained without the forgotten
classes; ``demo --inductive`` computes it for the miniature and hands the site its rows. An
unlearned entry gets the verdict of the row whose adapter, unlearned model and HPE protocol
are its own, so a verdict measured under another configuration never sits beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fewtrans_board.website.settings_model import SettingsComparison

__all__ = ["oracle_verdicts"]


def oracle_verdicts(
    check: Mapping[str, Any] | None, cmp: SettingsComparison
) -> dict[str, dict[str, Any]]:
    """The verdict row of each inductive entry of ``cmp`` that the check measured.

    Args:
        check: ``{"models": {"unlearned": ..., "scratch": ...}, "rows": [...], "protocol":
            ...}`` as the inductive demo passes it (rows as ``OracleVerdict.to_dict`` plus
            ``adapter``); ``None``: no check was run.
        cmp: the page's comparison.

    Returns:
        ``{entry id: row}``; entries without a matching row are left out.
    """
    if not check:
        return {}
    unlearned = str(check.get("models", {}).get("unlearned", ""))
    protocol = check.get("protocol")
    rows = {str(r.get("adapter")): r for r in check.get("rows", []) if isinstance(r, Mapping)}
    out: dict[str, dict[str, Any]] = {}
    for pair in cmp.pairs:
        method = pair.inductive.method
        models = {run.run.provenance.model.name for run in method.runs.values()}
        row = rows.get(method.meta.adapter)
        if row is None or unlearned not in models:
            continue
        if protocol is not None and protocol != method.protocol:
            continue
        out[method.id] = dict(row)
    return out
