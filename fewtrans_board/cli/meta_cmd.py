"""``meta-train``: episodic meta-training of the BSCD-FSL meta-learners."""

from __future__ import annotations

from pathlib import Path

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    device_option,
    echo_json,
    optional_str,
    resolve_device,
    root_option,
    weights_option,
)


@click.command("meta-train")
@click.option(
    "--method",
    required=True,
    type=click.Choice(["protonet", "matchingnet", "relationnet", "metaopt", "maml"]),
    help="The meta-learner.",
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
@click.option("--ways", type=int, default=5, show_default=True, help="Classes per episode.")
@click.option("--shots", type=int, default=5, show_default=True, help="Support images per class.")
@click.option("--queries", type=int, default=16, show_default=True, help="Queries per class.")
@click.option("--epochs", type=int, default=400, show_default=True, help="Training epochs.")
@click.option(
    "--episodes-per-epoch", type=int, default=100, show_default=True, help="Episodes per epoch."
)
@click.option("--lr", type=float, default=1e-3, show_default=True, help="Adam learning rate.")
@click.option("--seed", type=int, default=0, show_default=True, help="Training seed.")
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
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The checkpoint to write (.safetensors).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the training record as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@pass_app
def meta_train_command(
    app: App,
    method: str,
    source: str,
    root: Path | None,
    model: str,
    weights: Path | None,
    fwt: bool,
    ways: int,
    shots: int,
    queries: int,
    epochs: int,
    episodes_per_epoch: int,
    lr: float,
    seed: int,
    augment: bool,
    preprocessing: str,
    device: str | None,
    out: Path,
    as_json: bool,
    quiet: bool,
) -> None:
    """Meta-train METHOD on episodes of a source dataset and write a checkpoint.

    Defaults are BSCD-FSL's schedule (5-way, 400 epochs of 100 episodes, Adam 1e-3,
    augmentation). Evaluate the result as an ordinary model + adapter pair:
    fewtrans-board evaluate --model meta-trained --weights OUT --adapter METHOD ...
    (--epochs 0 writes the untrained initialisation: the random-init twin).
    """
    from tqdm import tqdm

    from fewtrans_board.errors import FewtransError
    from fewtrans_board.meta.train import MetaTrainSpec, meta_train

    if out.suffix != ".safetensors":
        raise FewtransError(f"--out {out}: the checkpoint is written as .safetensors")
    spec = MetaTrainSpec(
        method=method,
        source=source,
        model=model,
        weights=optional_str(weights),
        root=optional_str(root),
        fwt=fwt,
        n_way=ways,
        shots=shots,
        queries=queries,
        epochs=epochs,
        episodes_per_epoch=episodes_per_epoch,
        lr=lr,
        seed=seed,
        augment=augment,
        preprocessing=preprocessing,
        device=resolve_device(device),
    )
    spec.check()
    bar = tqdm(total=epochs, desc=f"meta-train {method}", unit="epoch", disable=quiet or as_json)

    def progress(epoch: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")

    try:
        record = meta_train(spec, app.registry, out, progress)
    finally:
        bar.close()
    if as_json:
        echo_json(record)
        return
    final = f", final loss {record['losses'][-1]:.4f}" if record["losses"] else " (untrained)"
    click.echo(f"wrote {out}: {record['method_title']} on {source}, {epochs} epochs{final}")
    click.echo(
        f"evaluate it: fewtrans-board evaluate --model meta-trained --weights {out} --adapter {method} ..."
    )
