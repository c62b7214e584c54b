"""The bundle schema: where each part of a submission bundle is declared, and the centre rule.

One place says what each file of a bundle or store entry must hold, so no reader downstream
(validation, the index, the site) meets a missing key or a value of the wrong type:

- the zip's layout: :mod:`fewtrans_board.leaderboard.layout`;
- ``submission.toml``: :mod:`fewtrans_board.leaderboard.meta`;
- ``run.json``, the shards' provenance, ``centre-search.json`` and ``status.json``: the
  models of :mod:`fewtrans_board.results.documents` (their JSON Schemas in
  ``docs/schemas/``);
- the rows of result shards: :mod:`fewtrans_board.leaderboard.columns` (on top of the exact
  Arrow schema of :func:`fewtrans_board.results.row_schema.arrow_schema`).

:func:`check_centre_values` is the one rule that relates two documents: the recorded centre
against the field types of the recorded adapter schema.
"""

from __future__ import annotations

from typing import Any, cast

from fewtrans_board.core.errors import SubmissionError, shown


def check_centre_values(centre: dict[str, Any], fields: list[dict[str, Any]], where: str) -> None:
    """Each centre value must have its field's declared type (an ``int`` field holds no text).

    Raises:
        SubmissionError: ``bad-results-schema`` naming the field.
    """
    kinds = {"float": (int, float), "int": (int,), "bool": (bool,), "str": (str,)}
    for f in fields:
        name, kind, role = f["name"], f["type"], f.get("hpe")
        value = centre.get(name)
        if (isinstance(value, bool) and kind != "bool") or not isinstance(value, kinds[kind]):
            raise SubmissionError(
                "bad-results-schema",
                f"{where}: centre value {name} = {shown(value)} is not a {kind}",
            )
        if role is not None and kind not in ("float", "int"):
            raise SubmissionError(
                "bad-results-schema",
                f"{where}: the HPE axis {name} is declared {kind}; axes are numbers",
            )
        number = cast(float, value)  # checked a number above
        if (role == "lr" and number <= 0) or (role == "epochs" and number < 0):
            raise SubmissionError(
                "bad-results-schema",
                f"{where}: centre value of the HPE axis {name} is {shown(value)} (learning "
                "rates must be positive, epochs not negative)",
            )
