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

import re
from dataclasses import dataclass, field
from typing import Any

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


# --- the records -------------------------------------------------------------------------
#
# Each record reads its declared keys into attributes and keeps the others in ``extra``;
# ``to_json`` writes them back. ``from_json`` of the top-level records checks the document
# against its shape first; the parts' ``of`` trust a document already checked.


def _rest(obj: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in known}


def _checked(obj: Any, shape: Shape | None, where: str, code: str) -> dict[str, Any]:
    if shape is not None:
        check(obj, shape, where, code)
    out: dict[str, Any] = obj
    return out


@dataclass(frozen=True)
class Identity:
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

    _KEYS = ("grid", "limit", "shards", "manifest_sha256", "model", "adapter", "hpe", "batching")

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Identity:
        """The identity of a checked document."""
        return cls(
            grid=tuple(obj["grid"]),
            limit=obj["limit"],
            shards=obj["shards"],
            manifest_sha256=obj["manifest_sha256"],
            model=obj["model"],
            adapter=obj["adapter"],
            hpe=obj["hpe"],
            batching=obj.get("batching"),
            extra=_rest(obj, cls._KEYS),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        out: dict[str, Any] = {
            "grid": [dict(c) for c in self.grid],
            "limit": self.limit,
            "shards": self.shards,
            "manifest_sha256": self.manifest_sha256,
            "model": self.model,
            "adapter": self.adapter,
            "hpe": self.hpe,
            **self.extra,
        }
        if self.batching is not None:
            out["batching"] = self.batching
        return out


@dataclass(frozen=True)
class ManifestRef:
    """The frozen manifest a run evaluated (``manifest``)."""

    sha256: str
    file: str
    dataset: str
    extra: dict[str, Any] = field(default_factory=dict)
    """``protocol`` (the manifest's protocol record) and ``episodes`` where recorded."""

    _KEYS = ("sha256", "file", "dataset")

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ManifestRef:
        """The manifest reference of a checked document."""
        return cls(obj["sha256"], obj["file"], obj["dataset"], _rest(obj, cls._KEYS))

    @property
    def protocol(self) -> dict[str, Any]:
        """The manifest's protocol record (``{}`` where not recorded)."""
        protocol = self.extra.get("protocol")
        return dict(protocol) if isinstance(protocol, dict) else {}

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        return {"sha256": self.sha256, "file": self.file, "dataset": self.dataset, **self.extra}


@dataclass(frozen=True)
class ModelRef:
    """The model of a run (``model``)."""

    name: str
    distribution: str | None
    version: str | None
    weights_id: str | None
    info: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """``family`` and whatever the loader's provenance adds."""

    _KEYS = ("name", "distribution", "version", "weights_id", "info")

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ModelRef:
        """The model reference of a checked document."""
        return cls(
            name=obj["name"],
            distribution=obj["distribution"],
            version=obj["version"],
            weights_id=obj["weights_id"],
            info=obj.get("info"),
            extra=_rest(obj, cls._KEYS),
        )

    @property
    def family(self) -> str | None:
        """The model family (``None`` where not recorded)."""
        family = self.extra.get("family")
        return None if family is None else str(family)

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        out: dict[str, Any] = {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "weights_id": self.weights_id,
            **self.extra,
        }
        if self.info is not None:
            out["info"] = self.info
        return out


@dataclass(frozen=True)
class AdapterRef:
    """The adapter of a run and its centre configuration (``adapter``)."""

    name: str
    centre: dict[str, Any]
    distribution: str | None
    version: str | None
    schema: dict[str, Any] | None = None
    """The adapter schema recorded at evaluate time (stored entries may predate it)."""
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("name", "centre", "distribution", "version", "schema")

    @classmethod
    def of(cls, obj: dict[str, Any]) -> AdapterRef:
        """The adapter reference of a checked document."""
        return cls(
            name=obj["name"],
            centre=obj["centre"],
            distribution=obj["distribution"],
            version=obj["version"],
            schema=obj.get("schema"),
            extra=_rest(obj, cls._KEYS),
        )

    @property
    def transductive(self) -> bool:
        """Whether the recorded schema declares the adapter transductive."""
        return bool((self.schema or {}).get("transductive"))

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        out: dict[str, Any] = {
            "name": self.name,
            "centre": self.centre,
            "distribution": self.distribution,
            "version": self.version,
            **self.extra,
        }
        if self.schema is not None:
            out["schema"] = self.schema
        return out


@dataclass(frozen=True)
class HpeRef:
    """The HPE protocol a run followed (``hpe``)."""

    name: str
    version: int
    aggregation: str
    hash: str
    grid_size: int
    roles: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("name", "version", "aggregation", "hash", "grid_size", "roles")

    @classmethod
    def of(cls, obj: dict[str, Any]) -> HpeRef:
        """The HPE reference of a checked document."""
        return cls(
            name=obj["name"],
            version=obj["version"],
            aggregation=obj["aggregation"],
            hash=obj["hash"],
            grid_size=obj["grid_size"],
            roles=obj["roles"],
            extra=_rest(obj, cls._KEYS),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "name": self.name,
            "version": self.version,
            "aggregation": self.aggregation,
            "hash": self.hash,
            "grid_size": self.grid_size,
            "roles": self.roles,
            **self.extra,
        }


@dataclass(frozen=True)
class Preprocessing:
    """How images were prepared (``preprocessing``)."""

    name: str
    image_size: int
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("name", "image_size")

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Preprocessing:
        """The preprocessing of a checked document."""
        return cls(obj["name"], obj["image_size"], _rest(obj, cls._KEYS))

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        return {"name": self.name, "image_size": self.image_size, **self.extra}


@dataclass(frozen=True)
class Environment:
    """Where a shard ran (``environment``); the rest of the numeric environment in ``extra``."""

    torch: str
    device: str
    device_name: str
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("torch", "device", "device_name")

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Environment:
        """The environment of a checked document."""
        return cls(obj["torch"], obj["device"], obj["device_name"], _rest(obj, cls._KEYS))

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "torch": self.torch,
            "device": self.device,
            "device_name": self.device_name,
            **self.extra,
        }


@dataclass(frozen=True)
class ShardRef:
    """Which shard of the run this is (``shard``)."""

    index: int
    count: int
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ShardRef:
        """The shard reference of a checked document."""
        return cls(obj["index"], obj["count"], _rest(obj, ("index", "count")))

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        return {"index": self.index, "count": self.count, **self.extra}


@dataclass(frozen=True)
class RunProvenance:
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

    _KEYS = (
        "run_id",
        "schema_version",
        "created_at",
        "manifest",
        "model",
        "adapter",
        "hpe",
        "identity",
        "preprocessing",
        "environment",
        "shard",
    )

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

    @classmethod
    def of(cls, doc: dict[str, Any]) -> RunProvenance:
        """Read a document already checked against :data:`PROVENANCE`."""
        return cls(
            run_id=doc["run_id"],
            schema_version=doc["schema_version"],
            created_at=doc["created_at"],
            manifest=ManifestRef.of(doc["manifest"]),
            model=ModelRef.of(doc["model"]),
            adapter=AdapterRef.of(doc["adapter"]),
            hpe=HpeRef.of(doc["hpe"]),
            identity=Identity.of(doc["identity"]),
            preprocessing=Preprocessing.of(doc["preprocessing"]),
            environment=Environment.of(doc["environment"]),
            shard=ShardRef.of(doc["shard"]),
            extra=_rest(doc, cls._KEYS),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON document (what :meth:`from_json` read, key for key)."""
        return {
            "run_id": self.run_id,
            "schema_version": self.schema_version,
            "created_at": self.created_at,
            "manifest": self.manifest.to_json(),
            "model": self.model.to_json(),
            "adapter": self.adapter.to_json(),
            "hpe": self.hpe.to_json(),
            "identity": self.identity.to_json(),
            "preprocessing": self.preprocessing.to_json(),
            "environment": self.environment.to_json(),
            "shard": self.shard.to_json(),
            **self.extra,
        }


@dataclass(frozen=True)
class RunRecord:
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
        doc = _checked(obj, RUN_RECORD, where, code)
        return cls(doc["run_id"], Identity.of(doc["identity"]), _rest(doc, ("run_id", "identity")))

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        return {"run_id": self.run_id, "identity": self.identity.to_json(), **self.extra}


@dataclass(frozen=True)
class CentreSearch:
    """``centre-search.json``: how the centre configuration of a submission was found."""

    adapter: str
    centre: dict[str, Any]
    dataset: str
    manifest_protocol: str
    manifest_sha256: str
    episodes: int
    log: tuple[dict[str, Any], ...]
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = (
        "adapter",
        "centre",
        "dataset",
        "manifest_protocol",
        "manifest_sha256",
        "episodes",
        "log",
    )

    @classmethod
    def from_json(
        cls, obj: Any, where: str = "centre-search.json", *, code: str = "bad-centre-search"
    ) -> CentreSearch:
        """Check and read ``centre-search.json``.

        Raises:
            SubmissionError: ``[code] where: key.path problem``.
        """
        doc = _checked(obj, CENTRE_SEARCH, where, code)
        return cls(
            adapter=doc["adapter"],
            centre=doc["centre"],
            dataset=doc["dataset"],
            manifest_protocol=doc["manifest_protocol"],
            manifest_sha256=doc["manifest_sha256"],
            episodes=doc["episodes"],
            log=tuple(doc["log"]),
            extra=_rest(doc, cls._KEYS),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "adapter": self.adapter,
            "centre": self.centre,
            "dataset": self.dataset,
            "manifest_protocol": self.manifest_protocol,
            "manifest_sha256": self.manifest_sha256,
            "episodes": self.episodes,
            "log": list(self.log),
            **self.extra,
        }


@dataclass(frozen=True)
class EntryStatus:
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
        doc = _checked(obj, STATUS, where, code)
        return cls(doc["status"], doc.get("verification"))

    def to_json(self) -> dict[str, Any]:
        """The JSON document."""
        out: dict[str, Any] = {"status": self.status}
        if self.verification is not None:
            out["verification"] = self.verification
        return out
