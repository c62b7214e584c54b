"""The bundle schema's one rule across documents: the centre against the declared field types.

Each part of a bundle is declared in one place, so no reader downstream meets a missing key
or a value of the wrong type: the zip's layout in :mod:`~fewtrans_board.leaderboard.layout`,
``submission.toml`` in :mod:`~fewtrans_board.leaderboard.meta`, the JSON documents in
:mod:`~fewtrans_board.results.documents` and the shards' rows in
:mod:`~fewtrans_board.leaderboard.columns`. :func:`check_centre_values` relates two
documents: the recorded centre and the field types of the recorded adapter schema.
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
