"""``meta-train``: episodic meta-training of the BSCD-FSL meta-learners."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    SEED,
    F,
    FiniteFloatRange,
    OutputPath,
    device_option,
    echo_json,
    optional_str,
    resolve_device,
    root_option,
    show_progress,
    weights_option,
)
from fewtrans_board.methods.meta.methods import METHODS


def _count(*names: str, min: int, default: int, help: str) -> Callable[[F], F]:
    """An integer option of at least ``min``, its default shown."""
    kind = click.IntRange(min=min)
    return click.option(*names, type=kind, default=default, show_default=True, help=help)


@click.command("meta-train")
@click.option(
    "--method",
    required=True,
    type=click.Choice(list(METHODS)),
    help="The meta-learner (the paper's version, or a simplified variant named as such).",
)
@click.option("--source", required=True, help="Source dataset (its source classes are used).")
@root_option("Local copy of the source dataset (omit for embedded datasets).")
@click.option(
    "--model",
    default="demo-cnn.random",
    show_default=True,
    help="Backbone to start from (a random-init model trains from scratch, as BSCD-FSL).",
)
@weights_option("Local checkpoint of --model.")
@click.option("--fwt", is_flag=True, help="Feature-wise transformation during training (+FWT).")
@_count("--ways", "n_way", min=2, default=5, help="Classes per episode.")
@_count("--shots", min=1, default=5, help="Support images per class.")
@_count("--queries", min=1, default=16, help="Queries per class.")
@_count("--epochs", min=0, default=400, help="Training epochs (0: the untrained initialisation).")
@_count("--episodes-per-epoch", min=1, default=100, help="Episodes per epoch.")
@click.option(
    "--lr",
    type=FiniteFloatRange(min=0, min_open=True),
    default=1e-3,
    show_default=True,
    help="Adam learning rate.",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Training seed.")
@click.option(
    "--augment/--no-augment",
    default=True,
    show_default=True,
    help="Random resized crop, flip and colour jitter on training images.",
)
@click.option(
    "--preprocessing",
    type=click.Choice(["fewtrans", "bscd"]),
    default="fewtrans",
    show_default=True,
    help="Resize rule at the backbone's input size.",
)
@device_option()
@click.option(
    "--out",
    type=OutputPath(dir_okay=False),
    required=True,
    help="The checkpoint to write (.safetensors).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the training record as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@pass_app
def meta_train_command(
    app: App,
    /,
    root: Path | None,
    weights: Path | None,
    device: str | None,
    out: Path,
    as_json: bool,
    quiet: bool,
    **options: Any,
) -> None:
    """Meta-train METHOD on episodes of a source dataset and write a checkpoint.

    Defaults are BSCD-FSL's schedule (5-way, 400 epochs of 100 episodes, Adam 1e-3,
    augmentation). Evaluate the result as an ordinary model + adapter pair:
    fewtrans-board evaluate --model meta-trained --weights OUT --adapter METHOD ...
    (--epochs 0 writes the untrained initialisation: the random-init twin).
    """
    from fewtrans_board.metatrain.train import MetaTrainSpec, epoch_progress, meta_train

    spec = MetaTrainSpec(
        **options,
        weights=optional_str(weights),
        root=optional_str(root),
        device=resolve_device(device),
    )
    with epoch_progress(spec, show_progress(not (quiet or as_json))) as progress:
        record = meta_train(spec, app.registry, out, progress)
    if as_json:
        echo_json(record)
        return
    final = f", final loss {record['losses'][-1]:.4f}" if record["losses"] else " (untrained)"
    click.echo(
        f"wrote {out}: {record['method_title']} on {spec.source}, {spec.epochs} epochs{final}"
    )
    click.echo(
        f"evaluate it: fewtrans-board evaluate --model meta-trained --weights {out} "
        f"--adapter {spec.method} ..."
    )
