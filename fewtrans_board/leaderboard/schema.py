"""The typed schema of a submission bundle's metadata (everything but ``submission.toml``).

The shapes and their typed records live in :mod:`fewtrans_board.results.provenance` (the
runner builds the records below the leaderboard); this module is their leaderboard name and
adds the centre-value check. One place says what each metadata document must hold, so no reader downstream (validation,
the index, the site) meets a missing key or a value of the wrong type:

- :data:`RUN_RECORD`: ``results/<run>/run.json``;
- :data:`PROVENANCE`: the provenance every result shard carries in its Parquet metadata,
  with the display fields the site shows; :data:`INTAKE_PROVENANCE` adds what validation
  derives the grid from (the adapter schema recorded at evaluate time);
- :data:`CENTRE_SEARCH`: ``centre-search.json``;
- :data:`STATUS`: ``status.json`` of a stored entry.

The layout of the zip is :mod:`fewtrans_board.leaderboard.layout`, ``submission.toml`` is
:mod:`fewtrans_board.leaderboard.meta`, and the rows of result shards are
:mod:`fewtrans_board.leaderboard.columns` (on top of the exact Arrow schema of
:func:`fewtrans_board.results.schema.arrow_schema`).
"""

from __future__ import annotations

from typing import Any, cast

from fewtrans_board.core.errors import SubmissionError, shown
from fewtrans_board.results.provenance import (
    ADAPTER_SCHEMA,
    CENTRE_SEARCH,
    CONFIG,
    DISTRIBUTION,
    FIELD_NAME,
    GRID_POINT,
    HEX64,
    IDENTITY,
    INTAKE_PROVENANCE,
    LABEL,
    MANIFEST_FILE,
    MAX_GRID,
    NAME,
    PROVENANCE,
    ROLE,
    RUN_ID,
    RUN_RECORD,
    SHARED_PROVENANCE,
    STATUS,
    VERSION,
)

__all__ = [
    "ADAPTER_SCHEMA",
    "CENTRE_SEARCH",
    "CONFIG",
    "DISTRIBUTION",
    "FIELD_NAME",
    "GRID_POINT",
    "HEX64",
    "IDENTITY",
    "INTAKE_PROVENANCE",
    "LABEL",
    "MANIFEST_FILE",
    "MAX_GRID",
    "NAME",
    "PROVENANCE",
    "ROLE",
    "RUN_ID",
    "RUN_RECORD",
    "SHARED_PROVENANCE",
    "STATUS",
    "VERSION",
    "check_centre_values",
]


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
