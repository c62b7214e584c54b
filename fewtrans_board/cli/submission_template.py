"""``submission template``: a ``submission.toml`` to fill in, for one sub-benchmark.

The example in :mod:`fewtrans_board.leaderboard.meta` is the base; the keys that depend on
the submission (its id, model, adapter, sub-benchmark and HPE protocol) are filled in here.
The id is a placeholder no entry uses (:data:`~fewtrans_board.leaderboard.intake.PLACEHOLDER_ID`
prefix), which ``submission pack`` and ``leaderboard add`` refuse until it is changed.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from fewtrans_board.hpe.protocols import get_hpe_protocol
from fewtrans_board.leaderboard.intake import PLACEHOLDER_ID


def placeholder_id(model: str) -> str:
    """The template's id for ``model``: ``my-method--`` and the model's name as an id."""
    slug = re.sub(r"[^a-z0-9.-]+", "-", model.lower()).strip("-.") or "model"
    return f"{PLACEHOLDER_ID}{slug}"[:100].rstrip("-.")


def render_template(
    benchmark: str, protocol: str, model: str, adapter: str, protocol_note: str
) -> str:
    """The example ``submission.toml`` with this submission's keys filled in.

    Args:
        benchmark: the sub-benchmark.
        protocol: the HPE protocol the runs were (or will be) evaluated under.
        model: the model name.
        adapter: the adapter name.
        protocol_note: the comment after ``hpe_protocol`` (why this protocol).
    """
    from fewtrans_board.leaderboard.meta import EXAMPLE

    values = {
        "id": (
            f'"{placeholder_id(model)}"',
            "CHANGE ME: your entry's id (lowercase, '-' or '.')",
        ),
        "method": ('"My method (one line: what it is)"', ""),
        "model": (f'"{model}"', ""),
        "adapter": (f'"{adapter}"', ""),
        "benchmark": (f'"{benchmark}"', "see 'fewtrans-board sub-benchmarks'"),
        "hpe_protocol": (f'"{protocol}"', protocol_note),
    }
    lines = []
    for line in EXAMPLE.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in values and not line.startswith("#"):
            value, note = values.pop(key)
            line = f"{key} = {value}"
            if note:
                line = f"{line.ljust(39)}# {note}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@click.command("template")
@click.option(
    "--benchmark",
    default="demo",
    show_default=True,
    metavar="NAME",
    help="The sub-benchmark to submit to ('fewtrans-board sub-benchmarks').",
)
@click.option("--model", default="demo-cnn.digits", show_default=True, help="Model name.")
@click.option("--adapter", default="linear-probe", show_default=True, help="Adapter name.")
@click.option(
    "--hpe",
    default=None,
    metavar="NAME",
    help="The HPE protocol your runs used  [default: the sub-benchmark's leaderboard protocol].",
)
@click.option(
    "--leaderboard",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Store whose entries a warning names (default: $FEWTRANS_BOARD_LEADERBOARD, or "
    "./leaderboard if present).",
)
def submission_template(
    benchmark: str, model: str, adapter: str, hpe: str | None, leaderboard: Path | None
) -> None:
    """Print a submission.toml to fill in (stdout; a warning on stderr for another --hpe).

    Its id is a placeholder that no entry uses: 'submission pack' and 'leaderboard add'
    refuse it until you name your entry. Its hpe_protocol is the sub-benchmark's
    leaderboard protocol unless --hpe says otherwise.
    """
    from fewtrans_board.cli.protocol_choice import default_store, protocol_for_benchmark

    # model and adapter are not looked up: a plugin's names are known to the sandboxed
    # worker only (this process never imports plugin code); pack and validate check them.
    if hpe is not None:
        get_hpe_protocol(hpe)  # an unknown protocol is refused, naming the known ones
    choice = protocol_for_benchmark(hpe, benchmark, default_store(leaderboard))
    if choice.warning:  # the default is said in the file itself, as a comment
        click.echo(choice.line, err=True)
    note = (
        f"the leaderboard protocol of {benchmark}: ranked with its entries"
        if not choice.warning and hpe is None
        else "must be what your runs were evaluated under"
    )
    click.echo(render_template(benchmark, choice.protocol, model, adapter, note), nl=False)
