"""The site's view objects: a method's runs, benchmark tables, comparisons, the whole site."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.hpe.protocols import get_hpe_protocol
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.leaderboard.sub_benchmarks import SubBenchmark
from fewtrans_board.results.digest import RunDigest
from fewtrans_board.results.per_shot import PerShot, per_shot, shot_seed_pairs
from fewtrans_board.stats.bootstrap import BootstrapCI
from fewtrans_board.stats.intervals import MeanCI
from fewtrans_board.website.reporting import BaseNovelRow, ShotRow

if TYPE_CHECKING:
    from fewtrans_board.website.regimes import RegimeViews


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

    @classmethod
    def of(
        cls,
        run: RunDigest,
        manifest: str,
        summary: dict[str, Any],
        manifest_meta: dict[str, Any] | None = None,
        dataset: str | None = None,
    ) -> MethodRun:
        """Derive a run's views; ``manifest_meta`` (the frozen manifest's) fixes (K, seed).

        ``dataset`` is the frozen manifest's (default: the run's own record, for local runs).
        """
        return cls(
            dataset or run.dataset,
            manifest,
            run,
            run.aggregations(),
            summary,
            run.aggregations("novel") if run.has_novel else {},
            shot_seed_pairs(manifest_meta or run.provenance.manifest.to_json()),
        )

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

    @property
    def ranked(self) -> bool:
        """Whether the entry is ranked: verified, or a local run shown for itself.

        A stored entry that was only validated (added with ``--unsafe-no-verify``) is
        listed apart, never ranked with re-run entries.
        """
        return self.status != "validated"

    @property
    def reruns(self) -> list[dict[str, Any]]:
        """Per dataset, what verification re-ran and found (empty for older reports)."""
        report = self.verification or {}
        datasets = report.get("datasets")
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
        out = {}
        for dataset, run in self.runs.items():
            result = run.per_shot(aggregation)
            if result is not None:
                out[dataset] = result
        return out


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
        rows = self.tables.get("hpe", [])
        return rows[0] if rows else None

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
