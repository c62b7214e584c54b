"""The typed schema of a submission bundle's metadata (everything but ``submission.toml``).

One place says what each metadata document must hold, so no reader downstream (validation,
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

from fewtrans_board.blocks.lockstep.settings import BATCHING_MODES
from fewtrans_board.leaderboard.errors import SubmissionError, shown
from fewtrans_board.leaderboard.shapes import (
    ANY,
    Flag,
    Items,
    Mapping,
    Nullable,
    Number,
    OneOf,
    Record,
    Scalar,
    Text,
)
from fewtrans_board.results.schema import ENSEMBLES, SCHEMA_VERSION

HEX64 = Text(64, r"[0-9a-f]{64}", "a sha256 hex digest")
RUN_ID = Text(16, r"[0-9a-f]{16}", "a 16-digit hex run id")
NAME = Text(200, r"[A-Za-z0-9][A-Za-z0-9._:+/@-]*", "a registered name", empty=False)
"""Registry names of datasets, models, adapters and protocols (``model+unlearn:dataset``)."""
FIELD_NAME = Text(100, r"[A-Za-z_][A-Za-z0-9_]*", "a Python identifier")
MANIFEST_FILE = Text(200, r"[A-Za-z0-9][A-Za-z0-9._-]*\.parquet", "a manifest file name")
DISTRIBUTION = Text(100, r"[A-Za-z0-9][A-Za-z0-9._-]*", "a distribution name")
VERSION = Text(100, r"[0-9A-Za-z.+!_-]+", "a version")
LABEL = Text(200)
ROLE = OneOf(("lr", "epochs"))
MAX_GRID = 10_000

CONFIG = Mapping(Scalar(Text(500)), key=FIELD_NAME, max_items=200)
"""An adapter configuration: JSON scalars by field name (``AdapterConfig`` fields)."""

ADAPTER_SCHEMA = Record(
    {
        "name": NAME,
        "fields": Items(
            Record(
                {
                    "name": FIELD_NAME,
                    "type": OneOf(("float", "int", "bool", "str")),
                    "default": Scalar(Text(500)),
                    "hpe": Nullable(ROLE),
                },
                {"help": Text(2000)},
            ),
            max_items=200,
        ),
    },
    {
        "training_free": Flag(),
        "transductive": Flag(),
        "frozen_backbone": Flag(),
        "needs_text": Flag(),
    },
)

RUN_RECORD = Record(
    {
        "run_id": RUN_ID,
        "identity": Record(
            {
                "grid": Items(CONFIG, max_items=MAX_GRID, min_items=1),
                "limit": Nullable(Number(integer=True, low=1)),
                "shards": Number(integer=True, low=1, high=99_999),
                "manifest_sha256": HEX64,
                "model": NAME,
                "adapter": NAME,
                "hpe": NAME,
            },
            # Verification replays the recorded --batching mode (older runs have none).
            {"batching": OneOf(BATCHING_MODES)},
        ),
    },
    {"environment": Mapping(ANY, max_items=100)},
)


def _provenance(require_schema: bool) -> Record:
    adapter: dict[str, Any] = {
        "name": NAME,
        "centre": CONFIG,
        "distribution": Nullable(DISTRIBUTION),
        "version": Nullable(VERSION),
    }
    optional: dict[str, Any] = {}
    (adapter if require_schema else optional)["schema"] = ADAPTER_SCHEMA
    return Record(
        {
            "run_id": RUN_ID,
            "schema_version": OneOf((SCHEMA_VERSION,)),
            "created_at": Text(40),
            "manifest": Record({"sha256": HEX64, "file": MANIFEST_FILE, "dataset": NAME}),
            "model": Record(
                {
                    "name": NAME,
                    "distribution": Nullable(DISTRIBUTION),
                    "version": Nullable(VERSION),
                    "weights_id": Nullable(LABEL),
                },
                {"info": Mapping(ANY, max_items=200)},
            ),
            "adapter": Record(adapter, optional),
            "hpe": Record(
                {
                    "name": NAME,
                    "version": Number(integer=True, low=0),
                    "aggregation": OneOf(ENSEMBLES),
                    "hash": HEX64,
                    "grid_size": Number(integer=True, low=1, high=MAX_GRID),
                    "roles": Mapping(ROLE, key=FIELD_NAME),
                }
            ),
            "identity": RUN_RECORD.required["identity"],
            "preprocessing": Record(
                {"name": LABEL, "image_size": Number(integer=True, low=1, high=100_000)}
            ),
            "environment": Record(
                {"torch": LABEL, "device": LABEL, "device_name": LABEL},
                {"torch_threads": Nullable(Number(integer=True, low=1, high=100_000))},
            ),
            "shard": Record(
                {
                    "index": Number(integer=True, low=0),
                    "count": Number(integer=True, low=1, high=99_999),
                }
            ),
        }
    )


PROVENANCE = _provenance(require_schema=False)
"""What the index and the site read from a stored run (entries may predate recorded schemas)."""
INTAKE_PROVENANCE = _provenance(require_schema=True)
"""What a submitted run must carry: the display fields and the recorded adapter schema."""
SHARED_PROVENANCE = (
    "run_id",
    "schema_version",
    "package",
    "manifest",
    "model",
    "adapter",
    "hpe",
    "identity",
    "preprocessing",
)
"""Provenance that every shard of one run must repeat exactly (the rest is per shard)."""

GRID_POINT = Record({"config": CONFIG}, {"accuracy": Nullable(Number())})
CENTRE_SEARCH = Record(
    {
        "adapter": NAME,
        "centre": CONFIG,
        "dataset": NAME,
        "manifest_protocol": NAME,
        "manifest_sha256": HEX64,
        "episodes": Number(integer=True, low=1),
        "log": Items(
            Record({"grid": Items(GRID_POINT, max_items=MAX_GRID)}),
            max_items=1000,
            min_items=1,
        ),
    }
)
"""``centre-search.json`` as ``fewtrans-board hpe search`` writes it (other keys are kept)."""

STATUS = Record(
    {"status": OneOf(("validated", "verified"))},
    {"verification": Mapping(ANY, max_items=100)},
    closed=True,
)


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
