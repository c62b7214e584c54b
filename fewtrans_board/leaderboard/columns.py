"""Rules for the rows of result shards beyond their exact Arrow types.

:func:`fewtrans_board.results.shards.read_shard` already refuses a shard whose columns or
types differ from :func:`~fewtrans_board.results.row_schema.arrow_schema`. A submitted run
must also have no nulls except the logits of vote rows (which store none), only the known
labels in its label columns, finite numbers, and the run id, manifest hash and dataset of
its provenance and frozen manifest on every row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fewtrans_board.core.errors import SubmissionError, shown
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.row_schema import COLUMNS, CONFIG_KIND, ENSEMBLE_KIND, ENSEMBLES, SPLITS

NULLABLE = frozenset({"logits"})
"""Columns that may hold nulls (vote rows store no logits; validation checks the rest)."""
FINITE = ("accuracy", "seconds")


def _values(column: Any) -> list[Any]:
    """Distinct values of a (possibly dictionary-encoded) column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return list(pc.unique(column).to_pylist())


def _refuse(where: str, message: str) -> SubmissionError:
    return SubmissionError("bad-rows", f"{where}: {message}")


def check_columns(run: RunResults, where: str, dataset: str) -> None:
    """Check a loaded run's rows against its provenance and its frozen manifest's dataset.

    Args:
        run: the loaded run (its shards already match the Arrow schema).
        where: the run's folder as the bundle names it (``results/<run>``).
        dataset: the frozen manifest's dataset.

    Raises:
        SubmissionError: ``bad-rows`` naming the column and the offending value.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    table = run.table
    for name in COLUMNS:
        column = table.column(name).combine_chunks()
        if name not in NULLABLE and column.null_count:
            raise _refuse(where, f"column {name} has {column.null_count} null values")
        if pa.types.is_list(column.type) and pc.list_flatten(column).null_count:
            raise _refuse(where, f"column {name} has lists holding null values")
    for name in FINITE:
        values = np.asarray(table.column(name).to_numpy(), dtype=np.float64)
        if not np.isfinite(values).all():
            raise _refuse(where, f"column {name} holds NaN or infinite values")
    expected = {
        "run_id": [run.provenance.run_id],
        "manifest_sha256": [run.provenance.manifest.sha256],
        "dataset": [dataset],
        "split": list(SPLITS),
        "kind": [CONFIG_KIND, ENSEMBLE_KIND],
        "aggregation": ["", *ENSEMBLES],
    }
    for name, allowed in expected.items():
        unknown = sorted(set(_values(table.column(name))) - set(allowed))
        if unknown:
            raise _refuse(
                where,
                f"column {name} holds {shown(unknown[0])}; its rows may only hold "
                f"{', '.join(map(repr, allowed))}",
            )
    kind = run.column("kind")
    aggregation, config = run.column("aggregation"), run.column("config")
    config_index = run.column("config_index")
    is_config = kind == CONFIG_KIND
    if (aggregation[is_config] != "").any() or (aggregation[~is_config] == "").any():
        raise _refuse(where, "configuration rows must have no aggregation, ensemble rows one")
    if (config[~is_config] != "").any() or (config_index[~is_config] != -1).any():
        raise _refuse(where, "ensemble rows must have no configuration (config '' and index -1)")
    seconds, seed = run.column("seconds"), run.column("seed")
    if (seconds < 0).any() or (seconds[~is_config] != 0).any() or (seed[~is_config] != 0).any():
        raise _refuse(
            where, "seconds must not be negative, and ensemble rows record no seconds or seed"
        )
