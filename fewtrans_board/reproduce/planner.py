"""Turn a reproduction target into the ``fewtrans-board`` commands that reproduce it.

One plan lists, in order: the manifests to build (a store's frozen copies are used as they
are), the centre searches, the preparations (meta-training, unlearning), one run per row and
manifest, and the analyses. Each step knows its output under the work folder, whether that
output is already there (resume), and an estimated device time from the cost table.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.frozen import EMBEDDED, FrozenManifest, manifest_command
from fewtrans_board.reproduce.costs import Estimate, estimate_run
from fewtrans_board.reproduce.plan import (
    TYPICAL_SUPPORT,
    PlannedStep,
    PlanOptions,
    ReproductionPlan,
    chosen_manifests,
    chosen_rows,
    column_of,
    fill,
    row_label,
    slug,
    swapped,
)
from fewtrans_board.reproduce.target import Row, Step, Target

if TYPE_CHECKING:
    from fewtrans_board.registry.lookup import Registry

SEARCH_EPISODES = 50
SEARCH_ROUNDS = 3
"""A centre search scores the grid on the 50 held-out tasks for a few rounds (an estimate
of the rounds: the local search stops when no neighbour improves)."""


def _root_values(options: PlanOptions, dataset: str = "") -> dict[str, str | list[str]]:
    values: dict[str, str | list[str]] = {f"root:{n}": str(p) for n, p in options.roots.items()}
    values["data_dir"] = str(options.work / "data")
    if dataset:
        values["dataset"] = dataset
        if dataset in options.roots:
            values["root"] = str(options.roots[dataset])
    return values | {f"file:{name}": str(path) for name, path in options.files.items()}


def _device_args(options: PlanOptions) -> list[str]:
    return ["--device", options.device] if options.device else []


def _missing_root(dataset: str, options: PlanOptions) -> str:
    if dataset in EMBEDDED or dataset in options.roots:
        return ""
    return f"needs --root {dataset}=PATH"


def manifest_steps(target: Target, options: PlanOptions) -> dict[str, PlannedStep]:
    """One step per manifest the rows use (a store's frozen copy needs no command)."""
    steps: dict[str, PlannedStep] = {}
    for _, row in chosen_rows(target, options):
        for manifest in chosen_manifests(target, row, options):
            if manifest.filename not in steps:
                steps[manifest.filename] = _manifest_step(manifest, options)
    return steps


def _manifest_step(manifest: FrozenManifest, options: PlanOptions) -> PlannedStep:
    if options.store is not None:
        frozen = options.store / "manifests" / manifest.filename
        if frozen.is_file():
            return PlannedStep("manifest", f"{manifest.filename} (frozen, store)", (), frozen, True)
    out = options.work / "manifests" / manifest.filename
    root = options.roots.get(manifest.dataset)
    argv = manifest_command(
        manifest.protocol,
        manifest.dataset,
        str(out),
        root=str(root) if root is not None else None,
        overrides=manifest.overrides,
    )[1:]
    return PlannedStep(
        "manifest",
        f"build {manifest.filename}",
        tuple(argv),
        out,
        done=out.is_file(),
        missing=_missing_root(manifest.dataset, options),
    )


def centre_steps(target: Target, options: PlanOptions) -> dict[tuple[str, str], PlannedStep]:
    """One held-out centre search per (model, adapter) of a target that asks for them."""
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

    if not (target.centre_search and options.search):
        return {}
    benchmark = SUB_BENCHMARKS.get(target.benchmark)
    held_out = benchmark.held_out[0] if benchmark is not None else "cub"
    steps: dict[tuple[str, str], PlannedStep] = {}
    for _, row in chosen_rows(target, options):
        model = swapped(target.row_model(row), options.swap_models)
        key = (model.partition("+")[0], target.row_adapter(row))
        if key in steps:
            continue
        out = options.work / "centres" / f"{slug(key[0])}--{slug(key[1])}.json"
        argv = ["hpe", "search", "--model", key[0], "--adapter", key[1]]
        argv += ["--dataset", held_out, "--out", str(out), *_device_args(options)]
        if held_out in options.roots:
            argv += ["--root", str(options.roots[held_out])]
        if options.limit is not None:
            argv += ["--limit", str(options.limit)]
        if options.quick:
            argv += ["--max-rounds", "1", *(["--config", "epochs=1"] if _trains(key[1]) else [])]
        episodes = options.limit or SEARCH_EPISODES
        steps[key] = PlannedStep(
            "centre",
            f"centre search {key[1]} on {key[0]} ({held_out})",
            tuple(argv),
            out,
            done=out.is_file(),
            estimate=_run_estimate(
                smoke_hpe(target, options), key[0], key[1], episodes * SEARCH_ROUNDS, 20.0, options
            ),
            missing=_missing_root(held_out, options),
        )
    return steps


def prepare_steps(target: Target, options: PlanOptions) -> dict[str, PlannedStep]:
    """The target's preparations, keyed ``NAME`` or ``NAME:DATASET`` (``for_each``)."""
    steps: dict[str, PlannedStep] = {}
    datasets = _datasets(target, options)
    for step in target.prepare:
        if not _needed(target, step, options):
            continue
        for dataset in datasets if step.for_each == "dataset" else [""]:
            key = f"{step.name}:{dataset}" if dataset else step.name
            folder = options.work / "prepare" / slug(key)
            out = folder / (step.output or step.name)
            steps[key] = _filled_step("prepare", step, options, out, {"dataset": dataset})
    return steps


def _needed(target: Target, step: Step, options: PlanOptions) -> bool:
    """Whether the chosen rows or an analysis use the preparation ``step``.

    A row uses it when its fields name ``{prepare:NAME}`` or, for a step with ``serves``,
    when its model contains that text; a step no row names (and without ``serves``) is
    always made.
    """
    wanted = f"{{prepare:{step.name}}}"
    if any(wanted in argument for a in target.analysis for argument in a.command):
        return True

    def uses(row: Row) -> bool:
        if step.serves and step.serves in target.row_model(row):
            return True
        return wanted in row.model_dump_json()

    if not step.serves and not any(uses(row) for row in target.rows):
        return True
    return any(uses(row) for _, row in chosen_rows(target, options))


def _datasets(target: Target, options: PlanOptions) -> list[str]:
    """The datasets of the target in scope (those of its runs, or all when it has none)."""
    from fewtrans_board.reproduce.plan import manifests_of

    if not target.rows:
        found = [m.dataset for m in manifests_of(target)]
        return [d for d in found if not options.datasets or d in options.datasets]
    chosen = chosen_rows(target, options)
    return list(
        dict.fromkeys(m.dataset for _, r in chosen for m in chosen_manifests(target, r, options))
    )


def _filled_step(
    kind: str, step: Step, options: PlanOptions, out: Path, extra: Mapping[str, str | list[str]]
) -> PlannedStep:
    dataset = str(extra.get("dataset", ""))
    values = {**_root_values(options, dataset), **extra, "out": str(out)}
    missing = ""
    try:
        argv = fill(step.command, values)
    except FewtransError as exc:
        argv, missing = list(step.command), str(exc)
    argv = _swap_model_arguments(argv, options.swap_models)
    if options.smoke:
        argv += step.smoke
    if kind == "prepare" and "--device" not in argv:
        argv += _device_args(options)
    done = out.exists() if kind == "prepare" else (out / "done").is_file()
    estimate = Estimate(step.seconds, "the target file's estimate") if step.seconds else None
    label = f"{step.name} ({extra['dataset']})" if extra.get("dataset") else step.name
    return PlannedStep(kind, label, tuple(argv), out, done, estimate, missing)  # type: ignore[arg-type]


def _swap_model_arguments(argv: list[str], swaps: Mapping[str, str]) -> list[str]:
    return [
        swapped(a, swaps) if i > 0 and argv[i - 1] == "--model" else a for i, a in enumerate(argv)
    ]


def run_steps(
    target: Target,
    options: PlanOptions,
    manifests: Mapping[str, PlannedStep],
    centres: Mapping[tuple[str, str], PlannedStep],
    prepared: Mapping[str, PlannedStep],
) -> list[PlannedStep]:
    """One ``evaluate`` (or ``sweep``) per row and manifest."""
    steps = []
    for index, row in chosen_rows(target, options):
        label = row_label(target, index)
        for manifest in chosen_manifests(target, row, options):
            values = _root_values(options) | {"dataset": manifest.dataset}
            values |= {
                f"prepare:{k.partition(':')[0]}": str(s.out)
                for k, s in prepared.items()
                if k.partition(":")[2] in ("", manifest.dataset)
            }
            missing = manifests[manifest.filename].missing
            template = swapped(target.row_model(row), options.swap_models)
            # a swapped (random-init smoke) model takes no checkpoint
            weights = row.weights if template == target.row_model(row) else ""
            try:
                model, weights = fill([template, weights], values)
            except FewtransError as exc:
                model, weights, missing = template, "", missing or str(exc)
            adapter = target.row_adapter(row)
            out = options.work / "runs" / slug(label) / manifest.filename.removesuffix(".parquet")
            argv = _run_argv(target, row, options, model, adapter, out)
            argv += ["--manifest", str(manifests[manifest.filename].out)]
            if manifest.dataset in options.roots:
                argv += ["--root", str(options.roots[manifest.dataset])]
            if weights:
                argv += ["--weights", weights]
            centre = centres.get((model.partition("+")[0], adapter))
            if centre is not None:
                argv += ["--centre", str(centre.out)]
            estimate = _manifest_estimate(target, row, model, adapter, manifest, manifests, options)
            steps.append(
                PlannedStep(
                    "run",
                    f"{label} on {manifest.filename}",
                    tuple(argv),
                    out,
                    done=_run_complete(out),
                    estimate=estimate,
                    missing=missing,
                    row=label,
                    manifest=manifest.filename,
                    column=column_of(target, manifest),
                )
            )
    return steps


SMOKE_HPE = {"fewtrans-paper": "fewtrans-reference", "published": "single"}
"""A quick smoke (``--smoke``) runs the paper grid's cheaper sibling (nine configurations at
the centre's epochs instead of 27 at E/3, 2E/3 and E, E = centre + 10) and an adapter's
defaults for one epoch in place of its published recipe (BSCD-FSL's fine-tuning recipes
train 100 epochs in batches of 4: minutes per episode even on the smoke backbones)."""


def smoke_hpe(target: Target, options: PlanOptions, row: Row | None = None) -> str:
    """The HPE protocol a run of ``target`` (or of one row) uses under ``options``."""
    hpe = target.row_hpe(row) if row is not None else target.hpe
    return SMOKE_HPE.get(hpe, hpe) if options.quick else hpe


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _run_argv(
    target: Target, row: Row, options: PlanOptions, model: str, adapter: str, out: Path
) -> list[str]:
    config = dict(row.config)
    sweep = {k: list(v) for k, v in row.sweep.items()}
    hpe = smoke_hpe(target, options, row)
    if options.quick and _trains(adapter):
        # a smoke: one epoch per configuration, two values per swept axis
        config = {**config, "epochs": 1}
        sweep = {k: ([1, 2] if k == "epochs" else v[:2]) for k, v in sweep.items()}
        config = {k: v for k, v in config.items() if k not in sweep}
    if sweep:
        argv = ["sweep", "--model", model, "--adapter", adapter, "--out", str(out), "--quiet"]
        for name, values in sweep.items():
            argv += ["--grid", f"{name}={','.join(_text(v) for v in values)}"]
    else:
        argv = [
            "evaluate",
            "--model",
            model,
            "--adapter",
            adapter,
            "--hpe",
            smoke_hpe(target, options),
        ]
        argv += ["--out", str(out), "--quiet", "--executor", options.executor]
        argv += ["--workers", str(options.workers)]
        recipe = row.recipe or target.recipe
        if recipe and hpe == "published":
            argv += ["--recipe", recipe]
    for key, value in config.items():
        argv += ["--config", f"{key}={_text(value)}"]
    if options.limit is not None:
        argv += ["--limit", str(options.limit)]
    return argv + _device_args(options)


def _run_complete(out: Path) -> bool:
    if not (out / "run.json").is_file():
        return False
    from fewtrans_board.results.load import load_run

    try:
        return load_run(out).complete
    except FewtransError:
        return False


def _manifest_estimate(
    target: Target,
    row: Row,
    model: str,
    adapter: str,
    manifest: FrozenManifest,
    manifests: Mapping[str, PlannedStep],
    options: PlanOptions,
) -> Estimate:
    path = manifests[manifest.filename].out
    episodes, support = 600, TYPICAL_SUPPORT.get(manifest.protocol, 100.0)
    if "shots" in manifest.overrides:
        support = float(manifest.overrides.get("ways", 5) * manifest.overrides["shots"])
    if path.is_file():
        episodes, support = _manifest_stats(path)
    if options.limit is not None:
        episodes = min(episodes, options.limit)
    sweep_size = 1
    for values in row.sweep.values():
        sweep_size *= len(values)
    hpe = smoke_hpe(target, options, row)
    return _run_estimate(hpe, model, adapter, episodes * sweep_size, support, options)


def _trains(adapter: str) -> bool:
    """Whether ``adapter`` has an ``epochs`` field (a smoke starts its search at 1 epoch)."""
    try:
        fields = _registry().adapters.get(adapter).obj.Config.fields_info()
    except FewtransError:
        return False
    return any(f.name == "epochs" for f in fields)


@cache
def _manifest_stats(path: Path) -> tuple[int, float]:
    """Episodes of a built manifest and their mean support size."""
    from fewtrans_board.episodes.manifest import Manifest

    loaded = Manifest.load(path).episodes()
    return len(loaded), sum(len(e.support) for e in loaded) / max(1, len(loaded))


def _run_estimate(
    hpe: str, model: str, adapter: str, episodes: int, support: float, options: PlanOptions
) -> Estimate:
    configurations, epochs = _grid_size(hpe, adapter)
    return estimate_run(
        model=model,
        adapter=adapter,
        configurations=configurations,
        epochs_total=epochs,
        episodes=episodes,
        support=support,
        device=options.estimate_device,
    )


@cache
def _registry() -> Registry:
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    return Registry.from_plugin_manager(get_plugin_manager())


@cache
def _grid_size(hpe: str, adapter: str) -> tuple[int, int]:
    """Configurations and epochs summed over the grid ``hpe`` builds around the defaults."""
    from fewtrans_board.hpe.protocols import get_hpe_protocol

    registry = _registry()
    try:
        adapter_cls = registry.adapters.get(adapter).obj
        grid = get_hpe_protocol(hpe).grid(adapter_cls, adapter_cls.Config())
    except FewtransError:  # published recipes depend on the dataset: one configuration
        return 1, 50
    return len(grid), sum(int(c.to_dict().get("epochs", 0) or 0) for c in grid)


def analysis_steps(
    target: Target,
    options: PlanOptions,
    runs: list[PlannedStep],
    manifests: Mapping[str, PlannedStep],
    prepared: Mapping[str, PlannedStep],
) -> list[PlannedStep]:
    """The target's analyses over its run folders (once per dataset with ``for_each``)."""
    steps = []
    for step in target.analysis:
        for dataset in _datasets(target, options) if step.for_each == "dataset" else [""]:
            scope = [r for r in runs if not dataset or r.manifest.endswith(f"--{dataset}.parquet")]
            files = {f: s for f, s in manifests.items() if f.endswith(f"--{dataset}.parquet")}
            values: dict[str, str | list[str]] = {"runs": [str(r.out) for r in scope]}
            for label in dict.fromkeys(r.row for r in scope):
                values[f"runs:{label}"] = [str(r.out) for r in scope if r.row == label]
            values["manifests"] = [
                a for s in (files or manifests).values() for a in ("--manifest", str(s.out))
            ]
            values |= {
                f"prepare:{k.partition(':')[0]}": str(s.out)
                for k, s in prepared.items()
                if k.partition(":")[2] in ("", dataset)
            }
            values["dataset"] = dataset
            values["weights"] = _shared_weights(scope)
            name = f"{step.name}-{dataset}" if dataset else step.name
            out = options.work / "analysis" / slug(name)
            steps.append(_filled_step("analysis", step, options, out, values))
    return steps


def _shared_weights(runs: list[PlannedStep]) -> list[str]:
    """``--weights FILE`` when every run in scope used that one checkpoint, else nothing."""
    found = {r.argv[r.argv.index("--weights") + 1] if "--weights" in r.argv else "" for r in runs}
    return ["--weights", found.pop()] if len(found) == 1 and "" not in found else []


def plan_target(target: Target, options: PlanOptions) -> ReproductionPlan:
    """The plan of ``target`` under ``options`` (nothing is run)."""
    manifests = manifest_steps(target, options)
    centres = centre_steps(target, options)
    prepared = prepare_steps(target, options)
    runs = run_steps(target, options, manifests, centres, prepared)
    analyses = analysis_steps(target, options, runs, manifests, prepared)
    steps = (*manifests.values(), *centres.values(), *prepared.values(), *runs, *analyses)
    return ReproductionPlan(target=target, options=options, steps=tuple(steps))
