"""``unlearn`` and ``tkl``: build inductive CLIP models and measure what they lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    FiniteFloatRange,
    OutputPath,
    device_option,
    echo_json,
    echo_table,
    model_option,
    resolve_device,
    weights_option,
)
from fewtrans_board.core.errors import FewtransError

F = TypeVar("F", bound=Callable[..., Any])


def data_options(func: F) -> F:
    """``--data-dir DIR`` and repeatable ``--root NAME=PATH``."""
    func = click.option(
        "--root",
        "roots",
        multiple=True,
        metavar="DATASET=PATH",
        help="Local copy of one dataset (repeatable; wins over --data-dir).",
    )(func)
    return click.option(
        "--data-dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="Folder holding one local copy per dataset, named like the dataset (DIR/clip-cub).",
    )(func)


def parse_roots(values: tuple[str, ...]) -> dict[str, Path]:
    """``NAME=PATH`` pairs as a dict."""
    roots = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise FewtransError(f"--root expects DATASET=PATH, got {value!r}")
        roots[name] = Path(path)
    return roots


def split_list(value: str) -> list[str]:
    """Comma-separated names (blanks dropped: ``''`` and ``','`` name nothing)."""
    return [v.strip() for v in value.split(",") if v.strip()]


def _ci(stats: dict[str, Any]) -> str:
    return f"{stats['mean']:.2f} ± {stats['ci95']:.2f}"


@click.command("unlearn")
@model_option("Base CLIP model, e.g. open-clip:ViT-B-16/openai or demo-clip.digits.")
@click.option("--forget", required=True, help="Dataset to unlearn, e.g. clip-stanford-dogs.")
@click.option(
    "--retain",
    default=None,
    help="Comma-separated retain datasets (default: the paper's set for --forget).",
)
@click.option(
    "--out",
    required=True,
    type=OutputPath(dir_okay=False),
    help="Unlearned weights (.safetensors); the record is written next to it as .json.",
)
@weights_option("Local checkpoint of the base model (offline).")
@data_options
@click.option(
    "--alpha",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="SSD selection weighting (default 30).",
)
@click.option(
    "--lambda",
    "lam",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="SSD dampening (default 1).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Importance batch size (default 64).",
)
@click.option(
    "--cache-dir",
    type=OutputPath(file_okay=False),
    default=None,
    help="Importance cache (default $FEWTRANS_BOARD_CACHE/importances).",
)
@device_option()
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@pass_app
def unlearn_command(
    app: App,
    model: str,
    forget: str,
    retain: str | None,
    out: Path,
    weights: Path | None,
    data_dir: Path | None,
    roots: tuple[str, ...],
    alpha: float | None,
    lam: float | None,
    batch_size: int | None,
    cache_dir: Path | None,
    device: str | None,
    as_json: bool,
) -> None:
    """Unlearn a dataset from a CLIP model with SSD (selective synaptic dampening).

    Writes the weights and a record (forget/retain sets, alpha, lambda, importance hashes,
    zero-shot accuracy before/after) and registers the result as the model
    MODEL+unlearn:DATASET, usable wherever a model name is.
    """
    from fewtrans_board.unlearning.importance import ImportanceCache
    from fewtrans_board.unlearning.run import UnlearnRequest, unlearn
    from fewtrans_board.unlearning.sets import default_retain

    request = UnlearnRequest(
        model=model,
        forget=forget,
        retain=list(default_retain(forget)) if retain is None else split_list(retain),
        out=out,
        weights=weights,
        data_dir=data_dir,
        roots=parse_roots(roots),
        device=resolve_device(device),
    )
    for key, value in (("alpha", alpha), ("lam", lam), ("batch_size", batch_size)):
        if value is not None:
            setattr(request, key, value)
    say = (lambda _m: None) if as_json else (lambda m: click.echo(m, err=True))
    record = unlearn(app.registry, request, cache=ImportanceCache(cache_dir), report=say)
    if as_json:
        echo_json(record)
        return
    damp = record["dampening"]
    click.echo(
        f"{record['name']}: dampened {damp['selected']} of {damp['total']} parameters "
        f"({100 * damp['selected_fraction']:.2f}%), alpha={record['alpha']}, "
        f"lambda={record['lambda']}"
    )
    echo_table(
        ["zero-shot (test)", "before", "after", "chance"],
        [
            [name, _ci(z["before"]), _ci(z["after"]), f"{z['before']['chance']:.1f}"]
            for name, z in record["zero_shot"].items()
        ],
    )
    click.echo(f"weights: {out}\nrecord: {out.with_suffix('.json')}")


@click.command("tkl")
@model_option("The original (base) CLIP model.")
@click.option("--forget", required=True, help="The unlearned dataset.")
@click.option(
    "--unlearned",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Unlearned weights file (default: MODEL+unlearn:FORGET from the store).",
)
@click.option(
    "--validation",
    default=None,
    help="Comma-separated validation datasets (default: the paper's five).",
)
@weights_option("Local checkpoint of the base model (offline).")
@data_options
@click.option(
    "--wordnet",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="WordNet database folder for the WordNet weighting (needs nltk).",
)
@device_option()
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def tkl_command(
    app: App,
    model: str,
    forget: str,
    unlearned: Path | None,
    validation: str | None,
    weights: Path | None,
    data_dir: Path | None,
    roots: tuple[str, ...],
    wordnet: Path | None,
    device: str | None,
    as_json: bool,
) -> None:
    """Total knowledge loss of MODEL+unlearn:FORGET under the MMD, WordNet, PAD and uniform weightings.

    TKL is the weighted zero-shot accuracy drop on the validation datasets (percentage
    points, 95% CI); weights grow with the dataset's distance to the forget set.
    """
    from fewtrans_board.unlearning.sets import VALIDATION_DATASETS
    from fewtrans_board.unlearning.tkl_run import TklRequest, run_tkl

    request = TklRequest(
        model=model,
        forget=forget,
        unlearned_weights=unlearned,
        validation=list(VALIDATION_DATASETS) if validation is None else split_list(validation),
        weights=weights,
        data_dir=data_dir,
        roots=parse_roots(roots),
        wordnet=wordnet,
        device=resolve_device(device),
    )
    say = (lambda _m: None) if as_json else (lambda m: click.echo(m, err=True))
    result = run_tkl(app.registry, request, report=say)
    if as_json:
        echo_json(result)
    else:
        _print_tkl(result)


def _print_tkl(result: dict[str, Any]) -> None:
    """The per-dataset drops, TKL under every weighting, and the forget set's zero-shot."""
    echo_table(
        ["validation", "before", "after", "drop (points)"],
        [
            [x["dataset"], f"{x['before']:.2f}", f"{x['after']:.2f}", f"{x['drop']:+.2f}"]
            for x in result["losses"]
        ],
    )
    click.echo("")
    echo_table(
        ["weighting", "TKL (points, 95% CI)", "weights"],
        [
            [
                t["weighting"],
                f"{t['value']:.2f} ± {t['ci95']:.2f}" if t["value"] is not None else "n/a",
                ", ".join(f"{k}={v:.2f}" for k, v in t["weights"].items()),
            ]
            for t in result["tkl"]
        ],
    )
    for t in result["tkl"]:
        if t["value"] is None:
            click.echo(f"{t['weighting']}: {t['note']}")
    z = result["forget_zero_shot"]
    click.echo(f"\n{result['forget']} zero-shot: {_ci(z['before'])} -> {_ci(z['after'])}")
