"""The site's view types: what the templates read and the downloads are made from.

The computing modules (``data``, ``regimes``, ``reporting``, ``clip_settings``,
``downloads`` ...) build them and import them from here, never from each other in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.hpe.protocols import get_hpe_protocol
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.leaderboard.status import UNRANKED, VerificationStatus
from fewtrans_board.leaderboard.sub_benchmarks import SubBenchmark
from fewtrans_board.results.digest import RunDigest
from fewtrans_board.results.per_shot import PerShot, per_shot
from fewtrans_board.stats.bootstrap import BootstrapCI
from fewtrans_board.stats.intervals import MeanCI

FEW_EPISODES = 30
"""A regime table with fewer episodes than this is marked as few (its intervals are wide)."""


@dataclass
class MethodRun:
    """One submission on one frozen manifest.

    Attributes:
        dataset: the dataset (the frozen manifest's, for stored entries).
        manifest: the frozen manifest's file name.
        run: the loaded run's digest (its per-episode arrays and provenance).
        aggregations: per-episode base accuracy of every aggregation.
        summary: the run's summary.
        novel: base-to-novel runs: per-episode novel accuracy of every aggregation.
        pairs: k-shot runs: ``(K, seed)`` of every manifest episode.
    """

    dataset: str
    manifest: str
    run: RunDigest
    aggregations: dict[str, np.ndarray]
    summary: dict[str, Any]
    novel: dict[str, np.ndarray] = field(default_factory=dict)
    pairs: list[tuple[int, int]] | None = None

    @property
    def roles(self) -> dict[str, str]:
        """HPE axis roles of the adapter's Config."""
        return dict(self.run.provenance.hpe.roles)

    def per_shot(self, aggregation: str) -> PerShot | None:
        """Per-K results of an aggregation (k-shot runs), else ``None``."""
        if self.pairs is None:
            return None
        return per_shot(self.run.episodes, self.aggregations[aggregation], self.pairs)


def protocol_description(name: str) -> str:
    """An HPE protocol's description, or ``""`` for a name no protocol has (an old run)."""
    try:
        return get_hpe_protocol(name).description
    except FewtransError:
        return ""


@dataclass
class MethodView:
    """A stored submission; ``runs`` are keyed by column (see :func:`column_keys`)."""

    id: str
    meta: SubmissionMeta
    status: str
    superseded_by: str | None
    centre_search: dict[str, Any] | None
    runs: dict[str, MethodRun] = field(default_factory=dict)
    verification: dict[str, Any] | None = None
    standing: VerificationStatus | None = None
    """A stored entry's status with its re-run's date, sample and mode (``status`` is its
    word: :mod:`~fewtrans_board.leaderboard.status`); ``None`` for a local run."""

    @property
    def ranked(self) -> bool:
        """Whether the entry is ranked: re-run or legacy check, or a local run shown for itself.

        A stored entry that was not verified (added with ``--unsafe-no-verify``) is listed
        apart, never ranked with re-run entries.
        """
        return self.status not in UNRANKED

    @property
    def reruns(self) -> list[dict[str, Any]]:
        """Per dataset, what verification re-ran and found (empty for older reports)."""
        datasets = (self.verification or {}).get("datasets")
        return [d for d in datasets if isinstance(d, dict)] if isinstance(datasets, list) else []

    @property
    def protocol(self) -> str:
        """The HPE protocol the submission ran under (entries are ranked within one)."""
        return self.meta.hpe_protocol

    @property
    def protocol_description(self) -> str:
        """The HPE protocol's one-paragraph description (see :func:`protocol_description`)."""
        return protocol_description(self.protocol)

    @property
    def name(self) -> str:
        """The method and its model, without the protocol (where the context names it)."""
        return f"{self.meta.method} ({self.meta.model})"

    @property
    def label(self) -> str:
        """Human label of the method, naming its HPE protocol: ``CoOp (model) · published``.

        Entries of one method under two protocols are different entries, ranked apart.
        """
        return f"{self.name} · {self.protocol}"

    @property
    def transductive(self) -> bool:
        """Whether the adapter declares transductive inference (ranked apart)."""
        return any(r.summary.get("transductive") for r in self.runs.values())

    @property
    def configuration(self) -> dict[str, Any]:
        """Non-axis values that differ from the adapter's defaults (one for every dataset)."""
        return next((dict(r.summary.get("configuration", {})) for r in self.runs.values()), {})

    def values(self, aggregation: str, split: str = "base") -> dict[str, np.ndarray]:
        """Per-episode accuracies of an aggregation, per column (``split`` base or novel)."""
        if split == "novel":
            return {d: r.novel[aggregation] for d, r in self.runs.items() if r.novel}
        return {d: r.aggregations[aggregation] for d, r in self.runs.items()}

    def per_shot(self, aggregation: str) -> dict[str, PerShot]:
        """Per-K results of an aggregation, per column (k-shot runs only)."""
        results = {dataset: run.per_shot(aggregation) for dataset, run in self.runs.items()}
        return {dataset: result for dataset, result in results.items() if result is not None}


@dataclass
class Comparison:
    """A method against the benchmark's reference baseline (paired, pooled episodes)."""

    difference: float
    p_holm: float
    cohens_d: float

    @property
    def verdict(self) -> str:
        """``better``, ``worse`` or ``n.s.`` at Holm-adjusted 5%."""
        if self.p_holm >= 0.05:
            return "n.s."
        return "better" if self.difference > 0 else "worse"


@dataclass
class TableRow:
    """One method's row of a benchmark table under one aggregation."""

    method: MethodView
    cells: dict[str, MeanCI]
    average: BootstrapCI
    rank: tuple[int, int, int]
    tied_with_best: bool
    versus_reference: Comparison | None


@dataclass
class ReportedTable:
    """Numbers transcribed from a paper (never used in tests)."""

    key: str
    data: dict[str, Any]

    @property
    def columns(self) -> list[str]:
        """Cell keys in the paper's column order."""
        return list(self.data["columns"])

    @property
    def leader(self) -> PaperLeader | None:
        """The row with the best average accuracy, or ``None`` for a table of statistics.

        A row's score is its ``average`` cell, else the mean of its cells.
        """
        best: PaperLeader | None = None
        for row in self.data["rows"]:
            cells = {k: c["mean"] for k, c in row["cells"].items() if "mean" in c}
            if not cells:
                continue
            score = cells.get("average", sum(cells.values()) / len(cells))
            if best is None or score > best.score:
                best = PaperLeader(row["method"], score, "average" not in cells, self)
        return best


@dataclass(frozen=True)
class PaperLeader:
    """The best row of a paper's table: a reported number, never ranked with entries."""

    method: str
    score: float
    averaged_here: bool
    """Whether the score is our mean of its cells (the table prints no average)."""
    table: ReportedTable

    @property
    def where(self) -> str:
        """``FewTrans Table V`` / ``Inductive CLIP, in the text of Sec. 5.2``."""
        data = self.table.data
        label = str(data["table"])
        return f"{data['source']['short']} " + (f"Table {label}" if " " not in label else label)


def paper_leader(tables: list[ReportedTable]) -> PaperLeader | None:
    """The best row over a sub-benchmark's reported tables of methods."""
    leaders = [t.leader for t in tables]
    found = [leader for leader in leaders if leader is not None]
    return max(found, key=lambda leader: leader.score) if found else None


@dataclass(frozen=True)
class BaseNovelCell:
    """One dataset: base, novel and harmonic-mean accuracy, each with a 95% CI."""

    base: MeanCI
    novel: MeanCI
    harmonic: MeanCI


@dataclass
class BaseNovelRow:
    """A method's base-to-novel row: per-dataset cells and the cross-dataset averages."""

    method: Any
    cells: dict[str, BaseNovelCell]
    base: BootstrapCI
    novel: BootstrapCI
    harmonic: BootstrapCI
    rank: int = 0
    tied: bool = False
    """Whether another row has exactly the same score (they share the rank)."""


@dataclass
class ShotRow:
    """A method's per-shot row: each dataset's per-K results and their average."""

    method: Any
    per_dataset: dict[str, PerShot]
    average: PerShot
    rank: int = 0
    tied: bool = False
    """Whether another row has exactly the same score (they share the rank)."""


@dataclass(frozen=True)
class Bucket:
    """A range of ways or shots.

    Attributes:
        id: the regime's id in URLs and HTML ids (``shots-1``, ``ways-11plus``).
        dimension: ``shots`` or ``ways``.
        low: the smallest count in the bucket.
        high: the largest, ``None`` for an open bucket (``11+``).
    """

    id: str
    dimension: str
    low: int
    high: int | None

    @property
    def label(self) -> str:
        """Human label: ``1 shot``, ``2–4 shots``, ``11+ ways``."""
        if self.high == self.low:
            span = str(self.low)
        elif self.high is None:
            span = f"{self.low}+"
        else:
            span = f"{self.low}–{self.high}"
        unit = self.dimension[:-1] if span == "1" else self.dimension
        return f"{span} {unit}"

    def contains(self, counts: np.ndarray) -> np.ndarray:
        """Which of ``counts`` fall in the bucket."""
        inside = counts >= self.low
        return inside if self.high is None else inside & (counts <= self.high)

    def to_json(self) -> dict[str, Any]:
        """JSON-friendly form (the page's embedded data, the downloads' ``about``)."""
        return {
            "id": self.id,
            "dimension": self.dimension,
            "label": self.label,
            "low": self.low,
            "high": self.high,
        }


@dataclass
class RegimeTable:
    """One bucket's table within a protocol section.

    Attributes:
        bucket: the bucket.
        anchor: the section's anchor suffix (``""`` or ``-<protocol>``).
        columns: the page's columns that have episodes in the bucket, in page order.
        episodes: episodes in the bucket per column.
        rows: the entries' rows, ranked as in the headline table.
    """

    bucket: Bucket
    anchor: str
    columns: list[str]
    episodes: dict[str, int]
    rows: list[TableRow]

    @property
    def id(self) -> str:
        """The table's HTML id (also its downloads' table id)."""
        return f"regime-{self.bucket.id}{self.anchor}"

    @property
    def n(self) -> int:
        """Episodes in the bucket, over all columns."""
        return sum(self.episodes.values())

    @property
    def few(self) -> bool:
        """Whether the bucket has fewer than :data:`FEW_EPISODES` episodes."""
        return self.n < FEW_EPISODES

    def share(self, total: int) -> float:
        """The bucket's share of ``total`` episodes, in percent."""
        return 100.0 * self.n / total if total else float("nan")


@dataclass
class RegimeViews:
    """A protocol section's regime tables.

    Attributes:
        tables: one per non-empty bucket, shots then ways, in :data:`BUCKETS` order.
        empty: the buckets left out, having no episode here.
        episodes: the section's episodes over all columns.
        note: why the section has no regime tables (empty when it has some, or no entries).
    """

    tables: list[RegimeTable] = field(default_factory=list)
    empty: list[Bucket] = field(default_factory=list)
    episodes: int = 0
    note: str = ""

    def __bool__(self) -> bool:
        return bool(self.tables or self.note)

    @property
    def dimensions(self) -> list[tuple[str, list[RegimeTable]]]:
        """The tables grouped by dimension (``shots``, ``ways``), those present only."""
        groups = [
            (d, [t for t in self.tables if t.bucket.dimension == d]) for d in ("shots", "ways")
        ]
        return [(dimension, tables) for dimension, tables in groups if tables]


@dataclass
class ProtocolSection:
    """A benchmark's entries under one HPE protocol, ranked only among themselves.

    Results under different HPE protocols are not comparable (``fewtrans-board compare``
    refuses to mix them), so a benchmark page has one section per protocol present, each
    with its own tables, CIs, rank intervals and significance flags against the reference
    adapter's entry under the same protocol (``reference``; ``None`` if it has none).

    ``tables`` summarise each column as a mean ± CI over episodes (base classes);
    base-to-novel benchmarks add ``base_novel`` tables, per-shot (CLIP k-shot) benchmarks
    have ``shots`` tables instead, per aggregation. Methods that declare transductive
    inference are left out of those and ranked apart in ``transductive`` (headline
    aggregation); stored entries that were never verified are listed in ``unverified``
    and ranked with nobody.

    Attributes:
        protocol: the HPE protocol's name.
        description: its description (``HPE_PROTOCOLS[name].description``).
        anchor: suffix of the section's HTML ids: ``""`` for a page's first section (so
            ``#table-hpe`` links keep working), ``-<protocol>`` for the others.
        methods: the ranked (verified or local, inductive) entries.
        regimes: the headline table per shot and way regime
            (:func:`~fewtrans_board.website.regimes.regime_views`).
    """

    protocol: str
    description: str
    anchor: str
    methods: list[MethodView]
    tables: dict[str, list[TableRow]]
    reference: MethodView | None
    base_novel: dict[str, list[BaseNovelRow]] = field(default_factory=dict)
    shots: dict[str, list[ShotRow]] = field(default_factory=dict)
    transductive: list[TableRow] = field(default_factory=list)
    unverified: list[TableRow] = field(default_factory=list)
    regimes: RegimeViews | None = None

    @property
    def leader(self) -> TableRow | None:
        """The top-ranked row under the headline aggregation (mean ± CI tables)."""
        return next(iter(self.tables.get("hpe", [])), None)

    @property
    def entries(self) -> int:
        """How many entries the section lists (ranked, transductive and unverified)."""
        return len(self.methods) + len(self.transductive) + len(self.unverified)


@dataclass
class BenchmarkView:
    """A sub-benchmark page.

    Columns are keyed by :func:`column_keys` (the dataset, or ``dataset@variant`` when the
    benchmark has several manifests of one dataset); ``dataset_of`` maps a key to its
    dataset. Entries are ranked within their HPE protocol only: ``sections`` holds one
    :class:`ProtocolSection` per protocol present, in the benchmark's ``hpe_protocols``
    order (others after, by name).

    Attributes:
        methods: every ranked entry of every protocol (for analyses that rank nothing).
    """

    benchmark: SubBenchmark
    datasets: list[str]
    methods: list[MethodView]
    sections: list[ProtocolSection]
    reported: list[ReportedTable]
    dataset_of: dict[str, str] = field(default_factory=dict)

    @property
    def section(self) -> dict[str, ProtocolSection]:
        """The sections by protocol name."""
        return {s.protocol: s for s in self.sections}


@dataclass
class SiteData:
    """All views of a leaderboard.

    Attributes:
        benchmarks: the sub-benchmark views.
        methods: every entry (stored and local).
        datasets: per dataset, each (benchmark, method, column key) that has a run on it.
    """

    benchmarks: list[BenchmarkView]
    methods: list[MethodView]
    datasets: dict[str, list[tuple[BenchmarkView, MethodView, str]]]


@dataclass(frozen=True)
class Download:
    """One table of a page, written as ``<stem>.csv`` and ``<stem>.json``.

    Attributes:
        stem: the files' name without suffix: ``<page>--<table id>``.
        title: what the table shows.
        columns: the column names.
        rows: the rows, aligned with ``columns`` (``None``: no value).
        about: what the rows are (benchmark, protocol, aggregation, ddof ...).
    """

    stem: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    about: dict[str, Any] = field(default_factory=dict)

    @property
    def csv_name(self) -> str:
        """The CSV file's name."""
        return f"{self.stem}.csv"

    @property
    def json_name(self) -> str:
        """The JSON file's name."""
        return f"{self.stem}.json"
