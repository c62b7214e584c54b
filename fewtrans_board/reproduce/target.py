"""Reproduction targets: one small declarative TOML file per paper table or figure.

A target names what a paper item compares (rows of model x adapter), where (a sub-benchmark's
frozen manifests, or a list of them), under which HPE protocol and recipe, what must be made
first (a meta-trained checkpoint, an unlearned CLIP) and which analyses turn the runs into the
figure; and the reported table in ``leaderboard/reported/`` its cells are compared with. The
files live in ``fewtrans_board/reproduce/targets/``; :mod:`fewtrans_board.reproduce.planner`
is the one reader that turns a target into commands.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fewtrans_board.core.errors import FewtransError

TARGETS_DIR = Path(__file__).with_name("targets")
PAPERS = ("fewtrans", "bscd", "inductive-clip")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Step(_Strict):
    """A command made before the runs (``prepare``) or from them (``analysis``).

    ``command`` is a ``fewtrans-board`` argument list. Placeholders: ``{out}`` (the step's
    output path under the work folder), ``{root:DATASET}`` (the ``--root`` given for a
    dataset), ``{file:NAME}`` (a ``--file``), ``{data_dir}`` (a folder of links named like
    the datasets, to every ``--root``), ``{prepare:NAME}`` (a preparation's output). With
    ``for_each = "dataset"`` the step is made once per dataset of the target and may use
    ``{dataset}`` and ``{root}`` (that dataset's copy). Analyses may also use ``{runs}``
    (every run folder in scope, one argument each), ``{runs:ROW}`` (one row's) and
    ``{manifests}`` (``--manifest FILE`` per manifest in scope) and ``{weights}``
    (``--weights FILE`` when the runs in scope share one checkpoint).
    """

    name: str
    command: list[str]
    output: str = ""
    for_each: Literal["", "dataset"] = ""
    smoke: list[str] = Field(default_factory=list)
    """Arguments appended under ``--limit`` so the step stays a smoke (fewer epochs)."""
    seconds: float = 60.0
    """Estimated device seconds at full scale (the cost table has no entry for it)."""
    serves: str = ""
    """Text in the model names of the rows that use this preparation (``@tkl3``), where they
    do not name ``{prepare:NAME}``. A preparation no chosen row uses is skipped (``--row``
    and smokes choose rows)."""


class Row(_Strict):
    """One row of the paper's table: what is run, and the reported row it is compared with."""

    reported: str = ""
    model: str = ""
    adapter: str = ""
    weights: str = ""
    recipe: str = ""
    hpe: str = ""
    """The row's HPE protocol where it differs from the target's (a meta-learner, which has
    no published recipe, in a table of published recipes)."""
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)
    sweep: dict[str, list[str | int | float | bool]] = Field(default_factory=dict)
    datasets: list[str] = Field(default_factory=list)


class Target(_Strict):
    """A paper's table or figure and how it is reproduced (see the module docstring)."""

    name: str
    paper: Literal["fewtrans", "bscd", "inductive-clip"]
    item: str
    shows: str
    benchmark: str = ""
    manifests: list[str] = Field(default_factory=list)
    datasets: list[str] = Field(default_factory=list)
    hpe: str = "fewtrans-paper"
    recipe: str = ""
    centre_search: bool = False
    model: str = ""
    adapter: str = ""
    rows: list[Row] = Field(default_factory=list)
    prepare: list[Step] = Field(default_factory=list)
    analysis: list[Step] = Field(default_factory=list)
    reported: str = ""
    column: str = "{dataset}"
    aggregation: str = ""
    """Which of a run's aggregations a cell compares (default: the protocol's headline)."""
    measure: Literal["base", "novel", "harmonic_mean", "shots-average"] = "base"
    """What a cell is: base-class accuracy, novel-class accuracy (base-to-novel), their
    harmonic mean, or the average over K of a k-shot run (the CLIP tables)."""
    differs: str = "-"

    @model_validator(mode="after")
    def _complete_rows(self) -> Target:
        if not self.name.startswith(f"{self.paper}:"):
            raise ValueError(f"name {self.name!r} must start with '{self.paper}:'")
        if not (self.benchmark or self.manifests):
            raise ValueError("give 'benchmark' or 'manifests'")
        if not (self.rows or self.analysis):
            raise ValueError("give 'rows' (runs) or 'analysis' (commands)")
        for index, row in enumerate(self.rows):
            if not (row.model or self.model) or not (row.adapter or self.adapter):
                raise ValueError(f"rows[{index}] has no model or adapter (nor a default)")
        return self

    def row_model(self, row: Row) -> str:
        """The model of ``row`` (the target's default where the row names none)."""
        return row.model or self.model

    def row_hpe(self, row: Row) -> str:
        """The HPE protocol of ``row``."""
        return row.hpe or self.hpe

    def row_adapter(self, row: Row) -> str:
        """The adapter of ``row`` (the target's default where the row names none)."""
        return row.adapter or self.adapter


def target_path(name: str) -> Path:
    """The file of target ``name`` (``fewtrans:table-5`` -> ``targets/fewtrans/table-5.toml``)."""
    paper, _, item = name.partition(":")
    return TARGETS_DIR / paper.replace("-", "_") / f"{item}.toml"


def load_target_file(path: Path) -> Target:
    """Read and validate one target file.

    Raises:
        FewtransError: the file is not TOML or breaks the target schema (names the field).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return Target.model_validate(data)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FewtransError(f"cannot read reproduction target {path}: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}" for e in exc.errors()
        )
        raise FewtransError(f"reproduction target {path} is invalid: {problems}") from exc


@cache
def all_targets() -> tuple[Target, ...]:
    """Every shipped target, in paper then file order."""
    found = []
    for paper in PAPERS:
        for path in sorted((TARGETS_DIR / paper.replace("-", "_")).glob("*.toml"), key=_natural):
            target = load_target_file(path)
            if target_path(target.name) != path:
                raise FewtransError(f"{path}: its name {target.name!r} does not match the file")
            found.append(target)
    return tuple(found)


def _natural(path: Path) -> tuple[str, int, str]:
    stem = path.stem
    kind, _, number = stem.partition("-")
    digits = "".join(c for c in number if c.isdigit())
    return kind, int(digits) if digits else 0, stem


def get_target(name: str) -> Target:
    """The shipped target ``name``.

    Raises:
        FewtransError: no such target (lists the known names).
    """
    for target in all_targets():
        if target.name == name:
            return target
    known = ", ".join(t.name for t in all_targets())
    raise FewtransError(
        f"no reproduction target {name!r}; 'fewtrans-board reproduce --list' shows them: {known}"
    )
