"""The metadata documents of runs and entries: one pydantic model per JSON document.

Each model holds a document key for key: the runner builds them, shards and bundles store
their :meth:`~Document.to_json`, and readers check them with ``from_json(obj, where)``,
which refuses a document in one line ``[code] where: key.path problem``
(:mod:`~fewtrans_board.results.document_types`). :data:`PUBLISHED` lists those whose JSON
Schemas ``make docs`` writes to ``docs/schemas/`` (CONTRIBUTING.md, "The leaderboard store
and its blobs", names the files each describes).
"""

from __future__ import annotations

import re
import warnings
from typing import Annotated, Any, ClassVar

from pydantic import Field, StrictBool

from fewtrans_board.blocks.lockstep.settings import BATCHING_MODES
from fewtrans_board.results.document_types import (
    AsRecorded,
    Document,
    Number,
    Omittable,
    OneOf,
    Scalar,
    Text,
    checked,
)
from fewtrans_board.results.row_schema import ENSEMBLES, SCHEMA_VERSION

NAME_RULE = r"[A-Za-z0-9][A-Za-z0-9._:+/@-]*"
"""Registry names of datasets, models, adapters and protocols (``model+unlearn:dataset``)."""
NAME_LIMIT = 200
MAX_GRID = 10_000

Hex64 = Annotated[str, Text(64, "[0-9a-f]{64}", "a sha256 hex digest")]
RunId = Annotated[str, Text(16, "[0-9a-f]{16}", "a 16-digit hex run id")]
Name = Annotated[str, Text(NAME_LIMIT, NAME_RULE, "a registered name")]
FieldName = Annotated[str, Text(100, "[A-Za-z_][A-Za-z0-9_]*", "a Python identifier")]
ManifestFile = Annotated[
    str, Text(200, r"[A-Za-z0-9][A-Za-z0-9._-]*\.parquet", "a manifest file name")
]
Distribution = Annotated[str, Text(100, "[A-Za-z0-9][A-Za-z0-9._-]*", "a distribution name")]
Version = Annotated[str, Text(100, "[0-9A-Za-z.+!_-]+", "a version")]
Label = Annotated[str, Text(200)]
JsonObject = dict[Annotated[str, Text(100)], Any]
"""Free JSON under bounded keys (its values bounded by :func:`~.document_types.checked`)."""
Role = Annotated[str, OneOf(("lr", "epochs"))]
Count = Annotated[int, Number(0, 10**13)]
Config = Annotated[dict[FieldName, Scalar], Field(max_length=200)]
"""An adapter configuration: JSON scalars by field name (``AdapterConfig`` fields)."""


def is_name(value: object) -> bool:
    """Whether ``value`` is a registered name (the one rule, for ``submission.toml`` too)."""
    return (
        isinstance(value, str)
        and len(value) <= NAME_LIMIT
        and re.fullmatch(NAME_RULE, value) is not None
    )


class SchemaField(Document):
    """One field of the adapter's ``Config`` dataclass, as ``Adapter.schema()`` records it."""

    name: FieldName
    type: Annotated[str, OneOf(("float", "int", "bool", "str"))]
    default: Scalar
    hpe: Role | None
    """The field's HPE axis (``null``: not an axis)."""
    help: Omittable[Annotated[str, Text(2000)]] = None


class AdapterSchema(Document):
    """An adapter's declarations recorded at evaluate time (re-checked by verification)."""

    name: Name
    fields: Annotated[list[SchemaField], Field(max_length=200)]
    training_free: Omittable[StrictBool] = None
    transductive: Omittable[StrictBool] = None
    frozen_backbone: Omittable[StrictBool] = None
    needs_text: Omittable[StrictBool] = None


class Identity(Document):
    """What makes two runs the same run (``identity``; hashed into the run id).

    What else the runner hashes (``weights_id``, ``device``, ``feature_cache``, ``threads``)
    is kept in ``extra``, so the run id of a read record is the one it was stored under.
    """

    grid: Annotated[list[Config], Field(min_length=1, max_length=MAX_GRID)]
    """Every configuration of the HPE grid, in grid order."""
    limit: Annotated[int, Number(1)] | None
    """``evaluate --limit`` (``null``: every episode; a submission has none)."""
    shards: Annotated[int, Number(1, 99_999)]
    manifest_sha256: Hex64
    model: Name
    adapter: Name
    hpe: Name
    batching: Omittable[Annotated[str, OneOf(BATCHING_MODES)]] = None
    """The ``--batching`` mode, which verification replays (older runs have none)."""

    @property
    def weights_id(self) -> str | None:
        """The model weights the run used (``None`` where not recorded)."""
        value = self.extra.get("weights_id")
        return None if value is None else str(value)

    @property
    def feature_cache(self) -> bool:
        """Whether the run served cached frozen features (on, the default, where not recorded)."""
        return bool(self.extra.get("feature_cache", True))

    @property
    def feature_universe(self) -> str | None:
        """Which items its frozen features were chunked over (``None``: the manifest's)."""
        value = self.extra.get("feature_universe")
        return None if value is None else str(value)


class ManifestRef(Document):
    """The frozen manifest a run evaluated (``protocol`` and ``episodes`` in ``extra``)."""

    sha256: Hex64
    file: ManifestFile
    dataset: Name

    @property
    def protocol(self) -> dict[str, Any]:
        """The manifest's protocol record (``{}`` where not recorded)."""
        protocol = self.extra.get("protocol")
        return dict(protocol) if isinstance(protocol, dict) else {}


class ModelRef(Document):
    """The model of a run (``family`` and what the loader's provenance adds in ``extra``)."""

    name: Name
    distribution: Distribution | None
    version: Version | None
    weights_id: Label | None
    info: Omittable[Annotated[JsonObject, Field(max_length=200)]] = None
    files_sha256: Omittable[Hex64] = None
    """sha256 of the installed files of ``distribution`` at evaluate time
    (:mod:`fewtrans_board.registry.files`; runs from before it was recorded have none)."""

    @property
    def family(self) -> str | None:
        """The model family (``None`` where not recorded)."""
        family = self.extra.get("family")
        return None if family is None else str(family)


RecordedSchema = Annotated[dict[str, Any], AsRecorded(AdapterSchema)]
"""The adapter schema as recorded: checked, and read as the dict verification compares."""

with warnings.catch_warnings():  # ``schema`` shadows pydantic's deprecated ``BaseModel.schema``
    warnings.simplefilter("ignore", UserWarning)

    class AdapterRef(Document):
        """The adapter of a run and its centre configuration (``adapter``)."""

        name: Name
        centre: Config
        distribution: Distribution | None
        version: Version | None
        schema: Omittable[RecordedSchema] = None  # type: ignore[assignment]
        """The adapter schema recorded at evaluate time (stored entries may predate it)."""
        files_sha256: Omittable[Hex64] = None
        """sha256 of the installed files of ``distribution`` at evaluate time."""

        @property
        def transductive(self) -> bool:
            """Whether the recorded schema declares the adapter transductive."""
            return bool((self.schema or {}).get("transductive"))

    class IntakeAdapterRef(AdapterRef):
        """The adapter of a submitted run: its recorded schema is required."""

        schema: RecordedSchema


class HpeRef(Document):
    """The HPE protocol a run followed (``hpe``; a sweep's ``axes`` in ``extra``)."""

    name: Name
    version: Annotated[int, Number(0)]
    aggregation: Annotated[str, OneOf(ENSEMBLES)]
    hash: Hex64
    grid_size: Annotated[int, Number(1, MAX_GRID)]
    roles: Annotated[dict[FieldName, Role], Field(max_length=1000)]

    @property
    def sweep_axes(self) -> dict[str, list[Any]] | None:
        """A sweep's axes, ``{field: values}`` in grid order (``None``: not a sweep)."""
        axes = self.extra.get("axes")
        if not isinstance(axes, list):
            return None
        return {str(pair[0]): list(pair[1]) for pair in axes}


class Preprocessing(Document):
    """How images were prepared (``preprocessing``)."""

    name: Label
    image_size: Annotated[int, Number(1, 100_000)]


class Environment(Document):
    """Where a shard ran (``environment``); the rest of the numeric environment in ``extra``."""

    torch: Label
    device: Label
    device_name: Label
    torch_threads: Annotated[int, Number(1, 100_000)] | None = None
    """The torch thread count the run used, as recorded (``None`` where not recorded)."""


class PeakMemory(Document):
    """The peak memory of computing one shard (``shard.peak_memory``; FewTrans Table IX).

    ``measure`` says what ``bytes`` counts (see :mod:`fewtrans_board.runner.worker.memory`):
    ``cuda-max-memory-allocated``, ``rss-high-water``, ``rss-high-water-since-start``,
    ``episode-process-cuda-max-memory-allocated`` or ``episode-process-rss-high-water``.
    """

    bytes: Annotated[int, Number(0)]
    measure: Annotated[str, Text(100)]
    baseline_bytes: Omittable[Annotated[int, Number(0)]] = None
    """What the measure counted at the shard's start (in-process measures only)."""
    device: Omittable[Label] = None

    @property
    def growth_bytes(self) -> int | None:
        """``bytes - baseline_bytes``: what the shard added at its peak (``None``: no baseline)."""
        return None if self.baseline_bytes is None else max(0, self.bytes - self.baseline_bytes)


class TrainableParameters(Document):
    """How many parameters each configuration's fit trained, over a shard's episodes.

    ``shard.trainable_parameters``; :mod:`fewtrans_board.runner.worker.trainable` says what is
    counted (``measure``: ``optimised-tensors``). Counted in the process that ran the
    adapter, so display-only: nothing scores, ranks or verifies with it.
    """

    measure: Annotated[str, Text(100)]
    episodes: Annotated[int, Number(1)]
    """The shard's episodes that were counted."""
    total: Annotated[list[Count], Field(min_length=1, max_length=MAX_GRID)]
    """Per configuration (grid order), the sum of its counts over those episodes."""
    max: Annotated[list[Count], Field(min_length=1, max_length=MAX_GRID)]
    """Per configuration, its largest count on one episode."""


class ShardRef(Document):
    """Which shard of the run this is (``shard``), and what computing it cost."""

    index: Annotated[int, Number(0)]
    count: Annotated[int, Number(1, 99_999)]
    peak_memory: Omittable[PeakMemory] = None
    """Where recorded (runs from before it was measured have none)."""
    trainable_parameters: Omittable[TrainableParameters] = None
    """Where recorded (runs from before it was counted have none)."""


class RunProvenance(Document):
    """The provenance every shard of a run carries: what a reader needs to trust a number.

    ``package``, ``centre_search``, ``batching`` and the checksum a sealed shard adds are
    kept in ``extra``.
    """

    FILE: ClassVar[str] = "shard metadata"
    CODE: ClassVar[str] = "bad-run-meta"
    run_id: RunId
    schema_version: Annotated[int, OneOf((SCHEMA_VERSION,))]
    created_at: Annotated[str, Text(40)]
    manifest: ManifestRef
    model: ModelRef
    adapter: AdapterRef
    hpe: HpeRef
    identity: Identity
    preprocessing: Preprocessing
    environment: Environment
    shard: ShardRef

    @classmethod
    def from_json(
        cls, obj: Any, where: str | None = None, *, code: str | None = None, intake: bool = False
    ) -> RunProvenance:
        """Check and read a provenance document.

        Args:
            obj: the decoded metadata of a shard.
            where: the member it came from, named in a message.
            code: the :class:`~fewtrans_board.core.errors.SubmissionError` code of a fault.
            intake: require what a submission must carry (:class:`IntakeProvenance`).

        Raises:
            SubmissionError: ``[code] where: key.path problem``.
        """
        kind = IntakeProvenance if intake else cls
        record: RunProvenance = checked(obj, kind, where or cls.FILE, code or cls.CODE)
        return record

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


class IntakeProvenance(RunProvenance):
    """The provenance a submitted run's shards must carry: the recorded adapter schema too."""

    adapter: IntakeAdapterRef


SHARED_PROVENANCE = (
    *("run_id", "schema_version", "package", "manifest", "model", "adapter", "hpe"),
    *("identity", "preprocessing"),
)
"""Provenance that every shard of one run must repeat exactly (the rest is per shard)."""


class RunRecord(Document):
    """``results/<run>/run.json``: the run id and the identity it hashes."""

    FILE: ClassVar[str] = "run.json"
    CODE: ClassVar[str] = "bad-run-meta"
    run_id: RunId
    identity: Identity
    environment: Omittable[Annotated[JsonObject, Field(max_length=100)]] = None
    """The numeric environment a resumed run must match."""


class GridPoint(Document):
    """One configuration the centre search scored."""

    config: Config
    accuracy: Annotated[int | float, Number()] | None = None


class SearchStep(Document):
    """One round of the centre search: the grid it scored."""

    grid: Annotated[list[GridPoint], Field(max_length=MAX_GRID)]


class CentreSearch(Document):
    """``centre-search.json``: how the centre configuration of a submission was found.

    ``fewtrans-board hpe search`` writes it; other keys are kept.
    """

    FILE: ClassVar[str] = "centre-search.json"
    CODE: ClassVar[str] = "bad-centre-search"
    adapter: Name
    centre: Config
    dataset: Name
    """The held-out dataset the search ran on."""
    manifest_protocol: Name
    manifest_sha256: Hex64
    episodes: Annotated[int, Number(1)]
    log: Annotated[list[SearchStep], Field(min_length=1, max_length=1000)]


class EntryStatus(Document, extra="forbid"):
    """``status.json`` of a stored entry: validated, or verified with the report (CI's)."""

    FILE: ClassVar[str] = "status.json"
    CODE: ClassVar[str] = "bad-status"
    status: Annotated[str, OneOf(("validated", "verified"))]
    verification: Omittable[Annotated[JsonObject, Field(max_length=100)]] = None


PUBLISHED: dict[str, type[Document]] = {
    "run": RunRecord,
    "shard-provenance": IntakeProvenance,
    "centre-search": CentreSearch,
    "status": EntryStatus,
}
"""The documents whose JSON Schemas ``make docs`` writes to ``docs/schemas/<name>.schema.json``."""
