"""The typed provenance record: run provenance, centre search, run record and entry status.

One module says what each metadata document holds, as frozen dataclasses that mirror the
JSON exactly (same keys, same nesting). The runner builds them, shards and bundles store
their :meth:`to_json`, and intake, the index, the site, analyses and verification read them
back with ``from_json(obj, where)``, which checks the document against the declarative
shapes below and raises the same one-line
:class:`~fewtrans_board.core.errors.SubmissionError` codes and key paths intake always did.

- :data:`RUN_RECORD` / :class:`RunRecord`: ``results/<run>/run.json``;
- :data:`PROVENANCE` / :class:`RunProvenance`: the provenance every result shard carries;
  :data:`INTAKE_PROVENANCE` adds the adapter schema recorded at evaluate time;
- :data:`CENTRE_SEARCH` / :class:`CentreSearch`: ``centre-search.json``;
- :data:`STATUS` / :class:`EntryStatus`: ``status.json`` of a stored entry.

Keys a record does not declare are kept verbatim in ``extra``, so ``to_json`` gives back
exactly the document that was read.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Self

from fewtrans_board.blocks.lockstep.settings import BATCHING_MODES
from fewtrans_board.results.schema import ENSEMBLES, SCHEMA_VERSION
from fewtrans_board.results.shapes import (
    ANY,
    Flag,
    Items,
    Mapping,
    Nullable,
    Number,
    OneOf,
    Record,
    Scalar,
    Shape,
    Text,
    check,
)

NAME_RULE = r"[A-Za-z0-9][A-Za-z0-9._:+/@-]*"
"""Registry names of datasets, models, adapters and protocols (``model+unlearn:dataset``)."""
NAME_LIMIT = 200
HEX64 = Text(64, r"[0-9a-f]{64}", "a sha256 hex digest")
RUN_ID = Text(16, r"[0-9a-f]{16}", "a 16-digit hex run id")
NAME = Text(NAME_LIMIT, NAME_RULE, "a registered name", empty=False)
FIELD_NAME = Text(100, r"[A-Za-z_][A-Za-z0-9_]*", "a Python identifier")
MANIFEST_FILE = Text(200, r"[A-Za-z0-9][A-Za-z0-9._-]*\.parquet", "a manifest file name")
DISTRIBUTION = Text(100, r"[A-Za-z0-9][A-Za-z0-9._-]*", "a distribution name")
VERSION = Text(100, r"[0-9A-Za-z.+!_-]+", "a version")
LABEL = Text(200)
ROLE = OneOf(("lr", "epochs"))
MAX_GRID = 10_000


def is_name(value: object) -> bool:
    """Whether ``value`` is a registered name (the one rule, for ``submission.toml`` too)."""
    return (
        isinstance(value, str)
        and len(value) <= NAME_LIMIT
        and re.fullmatch(NAME_RULE, value) is not None
    )


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

IDENTITY = Record(
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
)

RUN_RECORD = Record(
    {"run_id": RUN_ID, "identity": IDENTITY},
    {"environment": Mapping(ANY, max_items=100)},
)


PEAK_MEMORY = Record(
    {"bytes": Number(integer=True, low=0), "measure": Text(100)},
    {"baseline_bytes": Number(integer=True, low=0), "device": LABEL},
)
"""A shard's peak memory (``fewtrans_board.runner.worker.memory`` says what each measure is)."""

_COUNT = Number(integer=True, low=0, high=10**13)
TRAINABLE_PARAMETERS = Record(
    {
        "measure": Text(100),
        "episodes": Number(integer=True, low=1),
        "total": Items(_COUNT, max_items=MAX_GRID, min_items=1),
        "max": Items(_COUNT, max_items=MAX_GRID, min_items=1),
    }
)
"""A shard's trainable parameter counts per configuration (``fewtrans_board.runner.worker.trainable``
says what is counted); display-only provenance."""


def _provenance(require_schema: bool) -> Record:
    adapter: dict[str, Any] = {
        "name": NAME,
        "centre": CONFIG,
        "distribution": Nullable(DISTRIBUTION),
        "version": Nullable(VERSION),
    }
    # Runs evaluated before the digest of the plugin's files was recorded have none.
    optional: dict[str, Any] = {"files_sha256": HEX64}
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
                {"info": Mapping(ANY, max_items=200), "files_sha256": HEX64},
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
            "identity": IDENTITY,
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
                },
                {"peak_memory": PEAK_MEMORY, "trainable_parameters": TRAINABLE_PARAMETERS},
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


# --- the records -------------------------------------------------------------------------
#
# Each record reads its declared keys into attributes and keeps the others in ``extra``;
# ``to_json`` writes them back. ``from_json`` of the top-level records checks the document
# against its shape first; the parts' ``of`` trust a document already checked.


def _checked(obj: Any, shape: Shape | None, where: str, code: str) -> dict[str, Any]:
    if shape is not None:
        check(obj, shape, where, code)
    out: dict[str, Any] = obj
    return out


class _Document:
    """A frozen dataclass that mirrors one JSON object key for key.

    Fields without a default are required keys, always written; fields with a default
    (``extra`` aside) are optional keys, read as ``None`` where absent and written only when
    set; a field typed as another document is read and written through it; a tuple field is
    a JSON list; keys no field names are kept verbatim in ``extra`` (where declared).
    """

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Self:
        """The record of a document already checked against its shape."""
        values: dict[str, Any] = {}
        kind: type = cls
        for item, hint in _fields_of(kind):
            if item.name == "extra":
                values["extra"] = {k: v for k, v in obj.items() if k not in _names_of(kind)}
            elif _required(item):
                values[item.name] = _read(hint, obj[item.name])
            else:
                values[item.name] = _read(hint, obj.get(item.name))
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The JSON document (what :meth:`of` read, key for key)."""
        out: dict[str, Any] = {}
        kind: type = type(self)
        for item, _ in _fields_of(kind):
            value = getattr(self, item.name)
            if item.name == "extra":
                out.update(value)
            elif _required(item) or value is not None:
                out[item.name] = _write(value)
        return out


@functools.cache
def _fields_of(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((item, hints[item.name]) for item in dataclasses.fields(cls))


@functools.cache
def _names_of(cls: type) -> frozenset[str]:
    return frozenset(item.name for item, _ in _fields_of(cls) if item.name != "extra")


def _required(item: dataclasses.Field[Any]) -> bool:
    return item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING


def _read(hint: Any, value: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and value is not None:
        # An optional document (``PeakMemory | None``): read the document where present.
        documents = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(documents) == 1:
            hint = documents[0]
    if isinstance(hint, type) and issubclass(hint, _Document):
        return hint.of(value)
    if typing.get_origin(hint) is tuple and value is not None:
        return tuple(value)
    return value


def _write(value: Any) -> Any:
    if isinstance(value, _Document):
        return value.to_json()
    if isinstance(value, tuple):
        return [dict(v) if isinstance(v, dict) else v for v in value]
    return value


@dataclass(frozen=True)
class Identity(_Document):
    """What makes two runs the same run (``identity``; hashed into the run id)."""

    grid: tuple[dict[str, Any], ...]
    limit: int | None
    shards: int
    manifest_sha256: str
    model: str
    adapter: str
    hpe: str
    batching: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """What else the runner hashes (``weights_id``, ``device``, ``feature_cache``,
    ``threads``), kept verbatim so the run id of a read record is the one it was stored under."""

    @property
    def weights_id(self) -> str | None:
        """The model weights the run used (``None`` where not recorded)."""
        value = self.extra.get("weights_id")
        return None if value is None else str(value)

    @property
    def feature_cache(self) -> bool:
        """Whether the run served cached frozen features (on, the default, where not recorded)."""
        return bool(self.extra.get("feature_cache", True))


@dataclass(frozen=True)
class ManifestRef(_Document):
    """The frozen manifest a run evaluated (``manifest``)."""

    sha256: str
    file: str
    dataset: str
    extra: dict[str, Any] = field(default_factory=dict)
    """``protocol`` (the manifest's protocol record) and ``episodes`` where recorded."""

    @property
    def protocol(self) -> dict[str, Any]:
        """The manifest's protocol record (``{}`` where not recorded)."""
        protocol = self.extra.get("protocol")
        return dict(protocol) if isinstance(protocol, dict) else {}


@dataclass(frozen=True)
class ModelRef(_Document):
    """The model of a run (``model``)."""

    name: str
    distribution: str | None
    version: str | None
    weights_id: str | None
    info: dict[str, Any] | None = None
    files_sha256: str | None = None
    """sha256 of the installed files of ``distribution`` at evaluate time
    (:mod:`fewtrans_board.registry.files`; runs from before it was recorded have none)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """``family`` and whatever the loader's provenance adds."""

    @property
    def family(self) -> str | None:
        """The model family (``None`` where not recorded)."""
        family = self.extra.get("family")
        return None if family is None else str(family)


@dataclass(frozen=True)
class AdapterRef(_Document):
    """The adapter of a run and its centre configuration (``adapter``)."""

    name: str
    centre: dict[str, Any]
    distribution: str | None
    version: str | None
    schema: dict[str, Any] | None = None
    """The adapter schema recorded at evaluate time (stored entries may predate it)."""
    files_sha256: str | None = None
    """sha256 of the installed files of ``distribution`` at evaluate time (see ``ModelRef``)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def transductive(self) -> bool:
        """Whether the recorded schema declares the adapter transductive."""
        return bool((self.schema or {}).get("transductive"))


@dataclass(frozen=True)
class HpeRef(_Document):
    """The HPE protocol a run followed (``hpe``)."""

    name: str
    version: int
    aggregation: str
    hash: str
    grid_size: int
    roles: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sweep_axes(self) -> dict[str, list[Any]] | None:
        """A sweep's axes, ``{field: values}`` in grid order (``None``: not a sweep)."""
        axes = self.extra.get("axes")
        if not isinstance(axes, list):
            return None
        return {str(pair[0]): list(pair[1]) for pair in axes}


@dataclass(frozen=True)
class Preprocessing(_Document):
    """How images were prepared (``preprocessing``)."""

    name: str
    image_size: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Environment(_Document):
    """Where a shard ran (``environment``); the rest of the numeric environment in ``extra``."""

    torch: str
    device: str
    device_name: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def torch_threads(self) -> Any:
        """The torch thread count the run used, as recorded (``None`` where not recorded)."""
        return self.extra.get("torch_threads")


@dataclass(frozen=True)
class PeakMemory(_Document):
    """The peak memory of computing one shard (``shard.peak_memory``; FewTrans Table IX).

    ``measure`` says what ``bytes`` counts (see :mod:`fewtrans_board.runner.worker.memory`):
    ``cuda-max-memory-allocated``, ``rss-high-water``, ``rss-high-water-since-start``,
    ``episode-process-cuda-max-memory-allocated`` or ``episode-process-rss-high-water``.
    """

    bytes: int
    measure: str
    baseline_bytes: int | None = None
    """What the measure counted at the shard's start (in-process measures only)."""
    device: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def growth_bytes(self) -> int | None:
        """``bytes - baseline_bytes``: what the shard added at its peak (``None``: no baseline)."""
        return None if self.baseline_bytes is None else max(0, self.bytes - self.baseline_bytes)


@dataclass(frozen=True)
class TrainableParameters(_Document):
    """How many parameters each configuration's fit trained, over a shard's episodes.

    ``shard.trainable_parameters``; :mod:`fewtrans_board.runner.worker.trainable` says what is
    counted (``measure``: ``optimised-tensors``). Counted in the process that ran the
    adapter, so display-only: nothing scores, ranks or verifies with it.
    """

    measure: str
    episodes: int
    """The shard's episodes that were counted."""
    total: tuple[int, ...]
    """Per configuration (grid order), the sum of its counts over those episodes."""
    max: tuple[int, ...]
    """Per configuration, its largest count on one episode."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardRef(_Document):
    """Which shard of the run this is (``shard``), and what computing it cost."""

    index: int
    count: int
    peak_memory: PeakMemory | None = None
    """Where recorded (runs from before it was measured have none)."""
    trainable_parameters: TrainableParameters | None = None
    """Where recorded (runs from before it was counted have none)."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunProvenance(_Document):
    """The provenance every shard of a run carries: what a reader needs to trust a number.

    ``package``, ``centre_search``, ``batching`` and the checksum a sealed shard adds are
    kept in ``extra``.
    """

    run_id: str
    schema_version: int
    created_at: str
    manifest: ManifestRef
    model: ModelRef
    adapter: AdapterRef
    hpe: HpeRef
    identity: Identity
    preprocessing: Preprocessing
    environment: Environment
    shard: ShardRef
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(
        cls,
        obj: Any,
        where: str,
        *,
        intake: bool = False,
        code: str = "bad-run-meta",
    ) -> RunProvenance:
        """Check and read a provenance document.

        Args:
            obj: the decoded metadata of a shard.
            where: the member it came from, named in a message.
            intake: require what a submission must carry (:data:`INTAKE_PROVENANCE`).
            code: the :class:`~fewtrans_board.core.errors.SubmissionError` code of a fault.

        Raises:
            SubmissionError: ``[code] where: key.path problem``.
        """
        doc = _checked(obj, INTAKE_PROVENANCE if intake else PROVENANCE, where, code)
        return cls.of(doc)

    @property
    def batching(self) -> dict[str, Any]:
        """The lockstep settings the run recorded (``{}`` where not recorded)."""
        record = self.extra.get("batching")
        return dict(record) if isinstance(record, dict) else {}

    @property
    def centre_search(self) -> dict[str, Any] | None:
        """The centre search record embedded at evaluate time, if any."""
        record = self.extra.get("centre_search")
        return record if isinstance(record, dict) else None


@dataclass(frozen=True)
class RunRecord(_Document):
    """``results/<run>/run.json``: the run id and the identity it hashes."""

    run_id: str
    identity: Identity
    extra: dict[str, Any] = field(default_factory=dict)
    """``environment`` where recorded."""

    @classmethod
    def from_json(cls, obj: Any, where: str, *, code: str = "bad-run-meta") -> RunRecord:
        """Check and read ``run.json``.

        Raises:
            SubmissionError: ``[code] where: key.path problem``.
        """
        return cls.of(_checked(obj, RUN_RECORD, where, code))


@dataclass(frozen=True)
class CentreSearch(_Document):
    """``centre-search.json``: how the centre configuration of a submission was found."""

    adapter: str
    centre: dict[str, Any]
    dataset: str
    manifest_protocol: str
    manifest_sha256: str
    episodes: int
    log: tuple[dict[str, Any], ...]
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(
        cls, obj: Any, where: str = "centre-search.json", *, code: str = "bad-centre-search"
    ) -> CentreSearch:
        """Check and read ``centre-search.json``.

        Raises:
            SubmissionError: ``[code] where: key.path problem``.
        """
        return cls.of(_checked(obj, CENTRE_SEARCH, where, code))


@dataclass(frozen=True)
class EntryStatus(_Document):
    """``status.json`` of a stored entry: validated, or verified with the report."""

    status: str
    verification: dict[str, Any] | None = None

    @classmethod
    def from_json(
        cls, obj: Any, where: str = "status.json", *, code: str = "bad-status"
    ) -> EntryStatus:
        """Check and read ``status.json``.

        Raises:
            SubmissionError: ``[code] where: key.path problem``.
        """
        return cls.of(_checked(obj, STATUS, where, code))
