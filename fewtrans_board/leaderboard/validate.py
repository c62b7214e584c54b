"""Validate a submission without running its plugin code.

Everything is checked against data: the frozen manifests (episode labels and hashes),
the HPE protocol definition (the grid recomputed from the stored centre and axis roles),
the stored logits and predictions (accuracies and ensembles recomputed), and the pinned
plugin versions recorded in the results' provenance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.api.adapter import typed_values
from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import FewtransError, SubmissionError, shown
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.hpe.protocols import (
    HpeProtocol,
    check_schema_fits,
    get_hpe_protocol,
    schema_roles,
)
from fewtrans_board.leaderboard.bundle import BundleContents
from fewtrans_board.leaderboard.bundle_schema import check_centre_values
from fewtrans_board.leaderboard.columns import check_columns
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.leaderboard.recipe_rule import check_recipe
from fewtrans_board.leaderboard.rows import check_rows
from fewtrans_board.leaderboard.runs import BUNDLE, LogitSource, check_consistent, load_checked_run
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.summary import adapter_configuration
from fewtrans_board.stats.intervals import mean_ci


@dataclass
class ValidationReport:
    """What a valid submission contains.

    Attributes:
        meta: the parsed ``submission.toml``.
        runs: per-dataset summaries of the validated runs.
        checks: what was checked, for the report.
        configuration: non-axis hyperparameters that differ from the adapter's defaults
            (the one configuration the submission uses on every dataset).
        transductive: whether the adapter declares transductive inference.
        loaded: the validated runs, in ``contents.runs`` order (kept so verification does
            not read the Parquet files again; not part of :meth:`to_dict`).
        logits_checked: whether the logits were checked (``False``: a stored entry whose
            logits blobs were not fetched; its logit-mean fusions were not recomputed).
    """

    meta: SubmissionMeta
    runs: list[dict[str, Any]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    configuration: dict[str, Any] = field(default_factory=dict)
    transductive: bool = False
    loaded: list[RunResults] = field(default_factory=list, repr=False)
    logits_checked: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "submission": self.meta.to_dict(),
            "runs": self.runs,
            "checks": self.checks,
            "configuration": self.configuration,
            "transductive": self.transductive,
        }


def _check_unlearning(run: RunResults, record: object) -> None:
    """The recorded unlearning must follow the benchmark's recipe for this target."""
    from fewtrans_board.unlearning.sets import ALPHA, IMPORTANCE_BATCH, LAMBDA, default_retain

    if not isinstance(record, dict) or not record:
        raise SubmissionError(
            "unlearning-record-missing",
            f"{run.dataset}: the model carries no unlearning record; create it with "
            "'fewtrans-board unlearn' and evaluate MODEL+unlearn:DATASET",
        )
    expected = {
        "forget": run.dataset,
        "retain": list(default_retain(run.dataset)),
        "alpha": ALPHA,
        "lambda": LAMBDA,
        "importance_batch_size": IMPORTANCE_BATCH,
    }
    wrong = {k: record.get(k) for k, v in expected.items() if record.get(k) != v}
    if wrong:
        raise SubmissionError(
            "unlearning-recipe",
            f"{run.dataset}: the model was unlearned with {wrong}; the benchmark requires "
            f"{ {k: expected[k] for k in wrong} }",
        )


def _check_provenance(meta: SubmissionMeta, run: RunResults, benchmark: SubBenchmark) -> None:
    record = run.provenance
    try:
        expected = benchmark.expected_model(meta.model, run.dataset)
    except ValueError as exc:
        raise SubmissionError("model-rule", str(exc)) from exc
    if record.model.name != expected:
        raise SubmissionError(
            "model-mismatch",
            f"{run.dataset}: results are for model {record.model.name!r}; benchmark "
            f"{benchmark.name!r} with model {meta.model!r} requires {expected!r}",
        )
    if benchmark.model_rule == "unlearned-target":
        _check_unlearning(run, (record.model.info or {}).get("unlearning"))
    if record.adapter.name != meta.adapter:
        raise SubmissionError(
            "adapter-mismatch",
            f"{run.dataset}: results are for adapter {record.adapter.name!r}, submission.toml says {meta.adapter!r}",
        )
    if record.hpe.name != meta.hpe_protocol:
        raise SubmissionError(
            "protocol-mismatch",
            f"{run.dataset}: results use HPE protocol {record.hpe.name!r}, submission.toml says {meta.hpe_protocol!r}",
        )
    for role, ref in (("model", record.model), ("adapter", record.adapter)):
        distribution, version = ref.distribution, ref.version
        if not distribution:
            raise SubmissionError(
                "unpinned-plugin",
                f"the {role} came from an unpackaged plugin ({ref.extra.get('plugin')}); "
                "publish it as a distribution and pin it",
            )
        pinned = meta.plugins.get(distribution.lower().replace("_", "-"))
        if pinned is None:
            raise SubmissionError(
                "unpinned-plugin",
                f"the {role}'s distribution {distribution} is not pinned in submission.plugins",
            )
        if pinned != version:
            raise SubmissionError(
                "plugin-version-mismatch",
                f"results were produced with {distribution} {version}, submission pins {pinned}",
            )


def _check_complete(run: RunResults) -> None:
    """Refuse a limited or unfinished run, saying which it is and what to do."""
    limit = run.provenance.identity.limit
    if limit is not None:
        raise SubmissionError(
            "incomplete",
            f"{run.dataset}: the run evaluated only the first {limit} episodes (evaluate "
            "--limit); evaluate every episode of the manifest, without --limit",
        )
    if not run.complete:
        missing = sorted(set(range(run.shards_total)) - set(run.shards_present))
        raise SubmissionError(
            "incomplete",
            f"{run.dataset}: {len(run.shards_present)} of {run.shards_total} shards are finished, "
            f"shard(s) {', '.join(map(str, missing[:10]))} missing; run the same evaluate "
            "command again to finish them (finished shards are kept)",
        )


def _check_grid(
    run: RunResults, protocol: str, expected: list[dict[str, Any]], evaluated: list[dict[str, Any]]
) -> None:
    """Refuse an evaluated grid that differs from the protocol's, naming the first difference."""
    for index, (want, got) in enumerate(zip(expected, evaluated, strict=False)):
        if canonical_json(want) != canonical_json(got):
            raise SubmissionError(
                "grid-mismatch",
                f"{run.dataset}: configuration {index} of the evaluated grid is {canonical_json(got)}; "
                f"the {protocol} grid around the stored centre has {canonical_json(want)} there",
            )
    if len(expected) != len(evaluated):
        raise SubmissionError(
            "grid-mismatch",
            f"{run.dataset}: the evaluated grid has {len(evaluated)} configurations; the "
            f"{protocol} grid around the stored centre has {len(expected)}",
        )


def _check_centre_search(
    meta: SubmissionMeta,
    benchmark: SubBenchmark,
    centre_search: dict[str, Any] | None,
    run: RunResults,
    roles: dict[str, str],
    store: LeaderboardStore,
) -> None:
    """The centre must come from a held-out search that moved every axis the grid varies.

    The record's shape is checked when the bundle is read
    (:class:`~fewtrans_board.results.documents.CentreSearch`); when its search manifest is
    frozen in this store, its dataset and protocol must be that manifest's.
    """
    if not roles:
        return
    if centre_search is None:
        raise SubmissionError(
            "centre-search-missing",
            "the adapter has HPE axes, so the bundle must contain centre-search.json from "
            "'fewtrans-board hpe search' on a held-out dataset",
        )
    if centre_search.get("adapter") != meta.adapter:
        raise SubmissionError(
            "centre-mismatch",
            f"centre-search.json is for adapter {centre_search.get('adapter')!r}, not {meta.adapter!r}",
        )
    centre = run.provenance.adapter.centre
    searched = centre_search.get("centre")
    if not isinstance(searched, dict):
        raise SubmissionError("bad-centre-search", "centre-search.json has no 'centre' object")
    differing = [name for name in centre if searched.get(name) != centre.get(name)]
    if differing:
        raise SubmissionError(
            "centre-mismatch",
            f"{run.dataset}: the results' configuration differs from the searched centre in "
            f"{', '.join(differing)}: {[centre.get(n) for n in differing]} vs "
            f"{[searched.get(n) for n in differing]} (the search must run with the submitted "
            "non-axis values, and its centre is the grid's centre)",
        )
    log = centre_search.get("log")
    first = (
        log[0].get("grid") if isinstance(log, list) and log and isinstance(log[0], dict) else None
    )
    tried: dict[str, set[str]] = {name: set() for name in roles}
    for point in first if isinstance(first, list) else []:
        config = point.get("config") if isinstance(point, dict) else None
        for name in roles:
            if isinstance(config, dict) and name in config:
                tried[name].add(canonical_json(config[name]))
    unsearched = [name for name, values in tried.items() if len(values) < 2]
    if unsearched:
        raise SubmissionError(
            "centre-search-incomplete",
            f"the centre search log does not vary {', '.join(unsearched)}; every axis of the "
            f"grid ({', '.join(roles)}) must be searched on the held-out tasks",
        )
    if (
        centre_search.get("dataset") not in benchmark.held_out
        or centre_search.get("manifest_protocol") != "fewtrans-search"
    ):
        raise SubmissionError(
            "centre-not-held-out",
            f"the centre search ran on {shown(centre_search.get('dataset'))} with "
            f"{shown(centre_search.get('manifest_protocol'))} tasks; benchmark "
            f"{benchmark.name!r} requires the fewtrans-search tasks of "
            f"{', '.join(benchmark.held_out)}",
        )
    frozen = store.frozen.get(str(centre_search.get("manifest_sha256")))
    if frozen is not None and (
        frozen[1].dataset != centre_search["dataset"]
        or frozen[1].protocol != centre_search["manifest_protocol"]
    ):
        raise SubmissionError(
            "centre-not-held-out",
            f"centre-search.json names {centre_search['dataset']!r} tasks, but its manifest "
            f"sha256 is the frozen {frozen[0]}",
        )


def _recorded_schema(run: RunResults, meta: SubmissionMeta) -> dict[str, Any]:
    """The adapter schema recorded at evaluate time, checked for shape (not trusted further)."""
    schema = run.provenance.adapter.schema
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if (
        schema is None
        or not isinstance(fields, list)
        or not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields)
    ):
        raise SubmissionError(
            "bad-results-schema",
            f"{run.dataset}: the results record no adapter schema; re-run with this fewtrans-board",
        )
    if schema.get("name") != meta.adapter:
        raise SubmissionError(
            "adapter-mismatch",
            f"{run.dataset}: the recorded adapter schema is {schema.get('name')!r}'s, not "
            f"{meta.adapter!r}'s",
        )
    centre = run.provenance.adapter.centre
    names = [f["name"] for f in fields]
    if not isinstance(centre, dict) or sorted(centre) != sorted(names):
        raise SubmissionError(
            "bad-results-schema",
            f"{run.dataset}: the centre's fields {sorted(centre) if isinstance(centre, dict) else centre} "
            f"are not the adapter's {sorted(names)}",
        )
    return dict(schema)


def _check_same_configuration(first: RunResults, run: RunResults, centre: bool) -> None:
    """Every dataset of a submission uses one adapter schema and (``centre``) one centre."""
    a, b = first.provenance.adapter.centre, run.provenance.adapter.centre
    differing = sorted(k for k in a if canonical_json(a.get(k)) != canonical_json(b.get(k)))
    if centre and differing:
        raise SubmissionError(
            "config-varies",
            f"{first.dataset} and {run.dataset} use different values of "
            f"{', '.join(differing)}: {[a.get(k) for k in differing]} vs "
            f"{[b.get(k) for k in differing]}; a submission is one configuration on every "
            "dataset (per-dataset values are tuning on test tasks)",
        )
    if canonical_json(first.provenance.adapter.schema) != canonical_json(
        run.provenance.adapter.schema
    ):
        raise SubmissionError(
            "config-varies",
            f"{first.dataset} and {run.dataset} were produced by adapters with different "
            "schemas; evaluate every dataset with one version of the plugin",
        )


def _frozen_manifest(
    run: RunResults, store: LeaderboardStore, benchmark: SubBenchmark, where: str
) -> tuple[str, Manifest]:
    """The frozen manifest a run claims, which must belong to the benchmark and its dataset."""
    sha = run.provenance.manifest.sha256
    if sha not in store.frozen:
        raise SubmissionError(
            "unknown-manifest",
            f"{where}: manifest sha256 {sha[:16]}... is not a frozen manifest of this leaderboard",
        )
    filename, manifest = store.frozen[sha]
    if filename not in benchmark.manifests:
        raise SubmissionError(
            "wrong-manifest", f"{filename} is not part of benchmark {benchmark.name!r}"
        )
    if run.dataset != manifest.dataset:
        raise SubmissionError(
            "dataset-mismatch",
            f"{where}: the results name dataset {shown(run.dataset)}, the frozen manifest "
            f"{filename} is {manifest.dataset!r}'s",
        )
    return filename, manifest


def _check_protocol(
    run: RunResults, protocol: HpeProtocol, roles: dict[str, str], where: str
) -> None:
    """The run's recorded aggregation, protocol version and axis roles are the protocol's."""
    hpe = run.provenance.hpe
    if hpe.aggregation != protocol.aggregation:
        raise SubmissionError(
            "aggregation-mismatch",
            f"{run.dataset}: the results claim aggregation {hpe.aggregation!r}; the "
            f"{protocol.name} protocol fuses by {protocol.aggregation!r}",
        )
    if hpe.version != protocol.version:
        raise SubmissionError(
            "protocol-mismatch",
            f"{where}: the results were scored under {protocol.name} version {hpe.version}; "
            f"this leaderboard's is version {protocol.version}",
        )
    if canonical_json(hpe.roles) != canonical_json(roles):
        raise SubmissionError(
            "grid-mismatch",
            f"{run.dataset}: the recorded HPE roles {hpe.roles} are not the adapter schema's {roles}",
        )


def _check_run(
    contents: BundleContents,
    store: LeaderboardStore,
    report: ValidationReport,
    run: RunResults,
    where: str,
    manifest: Manifest,
    protocol: HpeProtocol,
) -> list[dict[str, Any]]:
    """Check one run against its frozen manifest; return the grid the protocol derives."""
    meta = contents.meta
    benchmark = SUB_BENCHMARKS[meta.benchmark]
    check_columns(run, where, manifest.dataset)
    _check_provenance(meta, run, benchmark)
    schema = _recorded_schema(run, meta)
    try:
        check_schema_fits(protocol, schema)
    except FewtransError as exc:
        raise SubmissionError("axes-undeclared", f"{run.dataset}: {exc}") from exc
    roles = schema_roles(schema)
    _check_protocol(run, protocol, roles, where)
    _check_complete(run)
    check_centre_values(run.provenance.adapter.centre, schema["fields"], where)
    centre = typed_values(run.provenance.adapter.centre, schema["fields"])
    grid = protocol.grid_for(centre, roles)
    _check_grid(run, protocol.name, grid, list(run.provenance.identity.grid))
    if run.provenance.hpe.hash != protocol.digest_for(centre, roles):
        raise SubmissionError(
            "grid-mismatch",
            f"{run.dataset}: the recorded HPE hash is not the {protocol.name} hash of the "
            "grid around the stored centre",
        )
    if protocol.centre_rule == "recipe":  # one recipe, whose values may vary per dataset
        check_recipe(run, schema, benchmark)
    if report.loaded:
        _check_same_configuration(report.loaded[0], run, protocol.centre_rule != "recipe")
    report.logits_checked &= check_rows(run, manifest, grid)
    if protocol.centre_rule != "recipe":
        _check_centre_search(meta, benchmark, contents.centre_search, run, roles, store)
    check_consistent(run, where)
    return grid


def _checks_made(
    report: ValidationReport, protocol: HpeProtocol, benchmark: SubBenchmark
) -> list[str]:
    """What a valid submission's report says was checked, beyond its ``submission.toml``."""
    return [
        "manifest hashes are frozen ones; every episode exactly once",
        f"grid, axes and aggregation derived from the {protocol.name} protocol and the "
        "recorded adapter schema",
        (
            "accuracies and ensembles recomputed from stored predictions and logits"
            if report.logits_checked
            else "accuracies and vote ensembles recomputed from stored predictions; logit-mean "
            "ensembles not rechecked (the logits blobs were not fetched: --with-logits)"
        ),
        (
            f"each dataset runs the adapter's published recipe {benchmark.recipe!r} as declared"
            if protocol.centre_rule == "recipe"
            else "one configuration on every dataset; its centre from a held-out search of "
            "every axis"
        ),
    ]


def validate_contents(
    contents: BundleContents, store: LeaderboardStore, logits: LogitSource = BUNDLE
) -> ValidationReport:
    """Validate extracted bundle contents against the store's frozen manifests.

    The grid, its axes and the headline aggregation are derived from the HPE protocol and
    the adapter schema recorded at evaluate time, never from free metadata.

    Args:
        contents: a bundle's, or a stored entry's.
        store: the store whose frozen manifests judge it.
        logits: where the runs' logits are (a bundle: in its shards, the default; a
            stored entry: in blobs, fetched or not).

    Raises:
        SubmissionError: the first fault found, with its code.
    """
    meta = contents.meta
    report = ValidationReport(meta)
    report.checks.append("submission.toml complete, plugins pinned")
    benchmark = SUB_BENCHMARKS[meta.benchmark]
    if meta.hpe_protocol not in benchmark.hpe_protocols:
        raise SubmissionError(
            "protocol-mismatch",
            f"benchmark {benchmark.name!r} accepts HPE protocols "
            f"{', '.join(benchmark.hpe_protocols)}, not {meta.hpe_protocol!r}",
        )
    protocol = get_hpe_protocol(meta.hpe_protocol)
    covered: set[str] = set()
    for path in contents.runs:
        where = contents.name(path)
        run = load_checked_run(path, where, consistent=False, logits=logits)
        filename, manifest = _frozen_manifest(run, store, benchmark, where)
        if filename in covered:
            raise SubmissionError(
                "duplicate-episode", f"{filename} is covered by two result folders"
            )
        grid = _check_run(contents, store, report, run, where, manifest, protocol)
        covered.add(filename)
        report.loaded.append(run)
        hpe = run.aggregations()["hpe"]
        report.runs.append(
            {
                "dataset": manifest.dataset,
                "manifest": filename,
                "episodes": len(hpe),
                "configurations": len(grid),
                "hpe": mean_ci(hpe, ddof=benchmark.statistic_ddof).to_dict(),
            }
        )
    missing = [m for m in benchmark.manifests if m not in covered]
    if missing:
        raise SubmissionError(
            "missing-manifest",
            f"benchmark {benchmark.name!r} needs results on {', '.join(missing)}",
        )
    first = report.loaded[0]
    report.configuration = adapter_configuration(first.provenance.adapter)
    report.transductive = bool(first.provenance.adapter.transductive)
    report.checks += _checks_made(report, protocol, benchmark)
    return report
