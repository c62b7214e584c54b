"""What a reproduction plan is: its options, its steps, and the helpers that fill them in.

One plan lists, in order: the manifests to build (frozen store copies are used as they are),
the centre searches, the preparations (meta-training, unlearning), one run per row and
manifest, and the analyses. Each step knows its output path under the work folder, whether
that output is already there (resume), and an estimated device time from the cost table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.frozen import FROZEN, FrozenManifest
from fewtrans_board.reproduce.costs import Estimate
from fewtrans_board.reproduce.target import Row, Target

StepKind = Literal["manifest", "centre", "prepare", "run", "analysis"]
TYPICAL_SUPPORT = {"fewtrans-varied": 100.0, "fewtrans-base2novel": 100.0, "clip-kshot": 60.0}
"""Mean support size assumed before a manifest exists (an estimate: FewTrans's variable
way/shot sampler and a 1-16-shot CLIP episode); built manifests give the real mean."""


@dataclass(frozen=True)
class PlanOptions:
    """What the command line adds to a target.

    Attributes:
        work: the work folder (manifests, centres, runs, analyses, report).
        roots: ``dataset -> local copy``.
        files: ``name -> local file`` for the target's ``{file:NAME}`` placeholders
            (checkpoints no hub serves, e.g. BSCD-FSL's ResNet-10 library).
        limit: evaluate only the first N episodes of each manifest (a smoke run).
        device: torch device of every step.
        executor: ``evaluate``'s executor (``inline``, ``process`` or ``ray``).
        workers: parallel shard workers (one per device on a multi-GPU node).
        store: a leaderboard store whose frozen manifests are used when present.
        swap_models: ``model -> replacement`` (a smoke with tiny backbones).
        estimate_device: the cost table's device the estimates are for.
        search: run the target's centre searches (off: the adapters' default centres,
            for smoke runs; such runs are not submittable).
        quick: a ``--smoke``: one epoch per configuration, the paper grid's nine-point
            sibling and the defaults in place of a published recipe, two values per swept
            axis, one round of any centre search, each dataset's fewest-shot manifest.
        rows: run only these rows (reported names or adapters; empty: every row).
        datasets: run only on these datasets (empty: every manifest of the target).
    """

    work: Path
    roots: Mapping[str, Path] = field(default_factory=dict)
    files: Mapping[str, Path] = field(default_factory=dict)
    limit: int | None = None
    device: str | None = None
    executor: str = "inline"
    workers: int = 1
    store: Path | None = None
    swap_models: Mapping[str, str] = field(default_factory=dict)
    estimate_device: str = "nvidia-h200"
    search: bool = True
    quick: bool = False
    rows: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()

    @property
    def smoke(self) -> bool:
        """Whether these runs can never be submitted (limited or with swapped models)."""
        return self.limit is not None or bool(self.swap_models) or not self.search or self.quick


@dataclass(frozen=True)
class PlannedStep:
    """One command of a plan.

    Attributes:
        kind: what the step makes.
        label: a short description for the plan table.
        argv: the ``fewtrans-board`` arguments.
        out: its output path.
        done: whether the output is already complete (resume skips it).
        estimate: estimated device seconds (``None``: negligible).
        missing: why it cannot run yet (a ``--root`` not given), empty if it can.
        row: the target row a run belongs to (its reported name or index).
        manifest: the manifest file of a run.
        column: the reported table's column a run's cell fills.
    """

    kind: StepKind
    label: str
    argv: tuple[str, ...]
    out: Path
    done: bool = False
    estimate: Estimate | None = None
    missing: str = ""
    row: str = ""
    manifest: str = ""
    column: str = ""


@dataclass(frozen=True)
class ReproductionPlan:
    """Every step of a target's reproduction, in the order they run."""

    target: Target
    options: PlanOptions
    steps: tuple[PlannedStep, ...]

    @property
    def runs(self) -> list[PlannedStep]:
        """The evaluation steps (one per row and manifest)."""
        return [s for s in self.steps if s.kind == "run"]

    @property
    def missing(self) -> list[str]:
        """Distinct reasons some step cannot run."""
        return sorted({s.missing for s in self.steps if s.missing})

    @property
    def seconds(self) -> float:
        """Estimated device seconds of the steps not yet done."""
        return sum(s.estimate.seconds for s in self.steps if s.estimate and not s.done)


def manifests_of(target: Target, row: Row | None = None) -> list[FrozenManifest]:
    """The frozen manifests a target (or one of its rows) runs on, in benchmark order."""
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

    by_file = {m.filename: m for m in FROZEN}
    if target.manifests:
        files = list(target.manifests)
    else:
        if target.benchmark not in SUB_BENCHMARKS:
            raise FewtransError(f"target {target.name}: no sub-benchmark {target.benchmark!r}")
        files = list(SUB_BENCHMARKS[target.benchmark].manifests)
    chosen = [by_file.get(f) or parse_manifest_name(f, target.name) for f in files]
    wanted = (row.datasets if row is not None and row.datasets else None) or target.datasets
    if wanted:
        chosen = [m for m in chosen if m.dataset in wanted]
    return chosen


MANIFEST_NAME = re.compile(
    r"(?P<protocol>[a-z0-9-]+?)(?:-(?P<ways>\d+)w(?P<shots>\d+)s)?--(?P<dataset>[a-z0-9-]+)\.parquet"
)


def parse_manifest_name(filename: str, where: str) -> FrozenManifest:
    """A manifest named like the frozen ones (``PROTOCOL[-WwKs]--DATASET.parquet``).

    Raises:
        FewtransError: the name does not follow that form or names no sampling protocol.
    """
    from fewtrans_board.episodes.protocols import get_protocol

    match = MANIFEST_NAME.fullmatch(filename)
    if match is None:
        raise FewtransError(f"target {where}: {filename!r} is not PROTOCOL[-WwKs]--DATASET.parquet")
    get_protocol(match["protocol"])
    overrides = {"ways": int(match["ways"]), "shots": int(match["shots"])} if match["shots"] else {}
    return FrozenManifest(match["protocol"], match["dataset"], overrides)


def chosen_rows(target: Target, options: PlanOptions) -> list[tuple[int, Row]]:
    """``(index, row)`` of the rows ``options`` selects.

    Raises:
        FewtransError: a selected row is not in the target (lists the rows).
    """
    rows = list(enumerate(target.rows))
    if not options.rows:
        return rows
    names = {i: {row_label(target, i), target.row_adapter(r)} for i, r in rows}
    unknown = [n for n in options.rows if not any(n in v for v in names.values())]
    if unknown:
        known = ", ".join(row_label(target, i) for i, _ in rows)
        raise FewtransError(f"{target.name} has no row {unknown[0]!r}; its rows: {known}")
    return [(i, r) for i, r in rows if names[i] & set(options.rows)]


def chosen_manifests(target: Target, row: Row, options: PlanOptions) -> list[FrozenManifest]:
    """The manifests of ``row`` on the datasets ``options`` selects.

    Raises:
        FewtransError: a selected dataset is not among the target's.
    """
    manifests = manifests_of(target, row)
    if options.quick:  # a smoke runs each dataset's fewest-shot manifest only
        fewest: dict[str, FrozenManifest] = {}
        for m in manifests:
            kept = fewest.get(m.dataset)
            if kept is None or m.overrides.get("shots", 0) < kept.overrides.get("shots", 0):
                fewest[m.dataset] = m
        manifests = [m for m in manifests if fewest[m.dataset] is m]
    if not options.datasets:
        return manifests
    known = {m.dataset for m in manifests_of(target)}
    unknown = [d for d in options.datasets if d not in known]
    if unknown:
        raise FewtransError(
            f"{target.name} does not run on {unknown[0]!r}; its datasets: {', '.join(sorted(known))}"
        )
    return [m for m in manifests if m.dataset in options.datasets]


def column_of(target: Target, manifest: FrozenManifest) -> str:
    """The reported table's column a manifest's cell fills (``target.column`` filled in)."""
    return target.column.format(
        dataset=manifest.dataset,
        shots=manifest.overrides.get("shots", ""),
        protocol=manifest.protocol,
    )


def row_label(target: Target, index: int) -> str:
    """A row's name: its reported row, else ``ADAPTER on MODEL``."""
    row = target.rows[index]
    return row.reported or f"{target.row_adapter(row)} on {target.row_model(row)}"


def slug(text: str) -> str:
    """A file-name-safe form of ``text``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "x"


def with_done(step: PlannedStep, done: bool) -> PlannedStep:
    """``step`` with its done flag set."""
    return replace(step, done=done)


def swapped(model: str, swaps: Mapping[str, str]) -> str:
    """``model`` with its base (or each library member) swapped; suffixes kept.

    ``M+unlearn:D`` keeps its suffix; in ``library:A=FILE+B=FILE`` a swapped member drops
    its checkpoint (the smoke backbones are random-init) and a library of swapped members
    keeps at most two copies of each (two still exercise the multi-model path).
    """
    if model.startswith("library:"):
        members: list[str] = []
        for member in model.removeprefix("library:").split("+"):
            name = member.partition("=")[0]
            if name not in swaps:
                members.append(member)
            elif members.count(swaps[name]) < 2:
                members.append(swaps[name])
        return "library:" + "+".join(members)
    base, plus, rest = model.partition("+")
    return swaps.get(base, base) + plus + rest


PLACEHOLDER = re.compile(r"\{([a-z_]+)(?::([^{}]+))?\}")


def fill(arguments: Sequence[str], values: Mapping[str, str | list[str]]) -> list[str]:
    """``arguments`` with placeholders replaced.

    ``{key}`` takes ``values[key]``, ``{key:arg}`` takes ``values["key:arg"]``; an argument
    that is exactly one placeholder whose value is a list expands to that many arguments.

    Raises:
        FewtransError: a placeholder has no value (names it and the argument).
    """
    filled: list[str] = []
    for argument in arguments:
        whole = PLACEHOLDER.fullmatch(argument)
        if whole and isinstance(values.get(_key(whole)), list):
            filled.extend(values[_key(whole)])
            continue

        def one(match: re.Match[str], argument: str = argument) -> str:
            value = values.get(_key(match))
            if value is None or isinstance(value, list):
                raise FewtransError(
                    f"placeholder {match.group(0)} in {argument!r} has no value"
                    + _HINTS.get(match.group(1), "")
                )
            return value

        filled.append(PLACEHOLDER.sub(one, argument))
    return filled


_HINTS = {"root": " (give --root DATASET=PATH)", "file": " (give --file NAME=PATH)"}


def _key(match: re.Match[str]) -> str:
    name, arg = match.group(1), match.group(2)
    return f"{name}:{arg}" if arg else name
