"""``unlearn`` and ``tkl``: build inductive CLIP models and measure what they lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    F,
    FiniteFloatRange,
    OutputPath,
    device_option,
    echo_json,
    echo_table,
    model_option,
    resolve_device,
    weights_option,
)
from fewtrans_board.cli.summaries import cell
from fewtrans_board.core.errors import FewtransError


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
@click.option(
    "--knowledge-loss",
    type=click.Choice(["0.03", "0.25", "0.5", "0.9"]),
    default=None,
    help="Search the strength so that the validation datasets lose at most this share of "
    "their zero-shot knowledge (the paper's severities, Fig. 4a); names the model "
    "MODEL+unlearn:DATASET@tklN.",
)
@click.option(
    "--match-oracle",
    metavar="MODEL",
    default=None,
    help="Search the strength so that a linear probe on the unlearned model matches MODEL, "
    "trained without the forget classes, on the forget dataset's train split; names the "
    "model MODEL+unlearn:DATASET@oracle.",
)
@click.option(
    "--oracle-weights",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Local checkpoint of the --match-oracle model.",
)
@click.option(
    "--validation",
    default=None,
    help="Comma-separated datasets where a search measures knowledge loss (default: the "
    "paper's five; the miniature's digits-0-4).",
)
@click.option(
    "--weighting",
    type=click.Choice(["mmd", "uniform"]),
    default="mmd",
    show_default=True,
    help="TKL weighting a --knowledge-loss search targets.",
)
@click.option(
    "--tolerance",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="How close a search must come: a share of knowledge below the target (default "
    "0.02) or probe points either side of the oracle (default 2).",
)
@click.option(
    "--max-evaluations",
    type=click.IntRange(min=1),
    default=None,
    help="At most this many strengths a search evaluates (default 24; each is a zero-shot "
    "pass over the validation datasets or a probe training); stopped short, the search keeps "
    "the closest point and says so.",
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
    knowledge_loss: str | None,
    match_oracle: str | None,
    oracle_weights: Path | None,
    validation: str | None,
    weighting: str,
    tolerance: float | None,
    max_evaluations: int | None,
    device: str | None,
    as_json: bool,
) -> None:
    """Unlearn a dataset from a CLIP model with SSD (selective synaptic dampening).

    Writes the weights and a record (forget/retain sets, alpha, lambda, importance hashes,
    zero-shot accuracy before/after) and registers the result as the model
    MODEL+unlearn:DATASET, usable wherever a model name is.

    The strength is the paper's (alpha 30, lambda 1) unless --alpha/--lambda fix it or
    --knowledge-loss/--match-oracle search it (alpha, with lambda = min(1, alpha), bisected
    in log space); the record keeps every strength tried and what it measured.
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
        knowledge_loss=None if knowledge_loss is None else float(knowledge_loss),
        match_oracle=match_oracle,
        oracle_weights=oracle_weights,
        validation=None if validation is None else split_list(validation),
        weighting=weighting,
        tolerance=tolerance,
        max_evaluations=max_evaluations,
    )
    if oracle_weights is not None and match_oracle is None:
        raise FewtransError("--oracle-weights goes with --match-oracle MODEL")
    for key, value in (("alpha", alpha), ("lam", lam), ("batch_size", batch_size)):
        if value is not None:
            setattr(request, key, value)
    say = (lambda _m: None) if as_json else (lambda m: click.echo(m, err=True))
    record = unlearn(app.registry, request, cache=ImportanceCache(cache_dir), report=say)
    if as_json:
        echo_json(record)
        return
    if "search" in record:
        _print_search(record["search"])
    damp = record["dampening"]
    click.echo(
        f"{record['name']}: dampened {damp['selected']} of {damp['total']} parameters "
        f"({100 * damp['selected_fraction']:.2f}%), alpha={record['alpha']}, "
        f"lambda={record['lambda']}"
    )
    echo_table(
        ["zero-shot (test)", "before", "after", "chance"],
        [
            [name, cell(z["before"]), cell(z["after"]), f"{z['before']['chance']:.1f}"]
            for name, z in record["zero_shot"].items()
        ],
    )
    click.echo(f"weights: {out}\nrecord: {out.with_suffix('.json')}")


def _print_search(search: dict[str, Any]) -> None:
    """Every strength tried, and what the chosen one reached."""
    oracle = search["mode"] == "oracle"
    echo_table(
        ["alpha", "lambda", "probe gap (points)" if oracle else "knowledge lost", "selected"],
        [
            [
                f"{p['alpha']:.4g}",
                f"{p['lambda']:.4g}",
                f"{p['gap']:+.1f}" if oracle else f"{100 * p['value']:.1f}% ({p['tkl']:.2f} pts)",
                f"{100 * p['selected_fraction']:.2f}%",
            ]
            for p in search["points"]
        ],
    )
    chosen = search["chosen"]
    state = "reached" if search["reached"] else "NOT reached (closest kept)"
    if oracle:
        default = search.get("at_default_strength")
        before = f"{default['gap']:+.1f} at alpha 30 -> " if default else ""
        click.echo(
            f"oracle gap ({search['oracle']['adapter']} on the train split, unlearned - "
            f"{search['oracle']['scratch_model']}): {before}{chosen['gap']:+.1f} "
            f"(target 0 ± {search['tolerance']:g}, {state}); {chosen['verdict']['line']}; "
            f"knowledge lost there: {100 * chosen['fraction']:.1f}% ({chosen['tkl']:.2f} points)"
        )
    else:
        click.echo(
            f"knowledge lost: {100 * chosen['value']:.1f}% ({chosen['tkl']:.2f} ± "
            f"{chosen['tkl_ci95']:.2f} TKL points, {search['knowledge']['weighting']}) for a "
            f"target of at most {100 * search['target']:g}% (tolerance "
            f"{100 * search['tolerance']:g}%, {state})"
        )


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
@click.option(
    "--variant",
    default=None,
    metavar="tklN|oracle",
    help="Measure MODEL+unlearn:FORGET@VARIANT (a searched strength) instead.",
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
    variant: str | None,
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
        variant=variant,
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
    click.echo(f"\n{result['forget']} zero-shot: {cell(z['before'])} -> {cell(z['after'])}")
