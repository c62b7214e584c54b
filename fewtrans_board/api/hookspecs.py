"""Hook specifications: the only places where plugins extend fewtrans-board.

Plugins contribute *contestants* (datasets readers, models, adapters) and CLI commands.
The rules they are scored by (manifests, metrics, the HPE aggregation, the result schema,
statistics) are deliberately not hookable.

Every ``register_*`` hook receives a ``register`` callback. Call it once per object you
contribute; the host validates the name, refuses duplicates (naming both plugins) and
records your plugin, distribution and version on the object. Implementations may accept
a subset of a hook's arguments (pluggy's opt-in arguments), so new arguments can be added
later without breaking existing plugins.

The docstrings below are the hook reference; ``CONTRIBUTING.md`` is generated from them
(``python -m fewtrans_board.jobs.docs``) and a test keeps the two in sync.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from fewtrans_board.api.adapter import Adapter
    from fewtrans_board.api.dataset_spec import DatasetSpec
    from fewtrans_board.api.model_spec import ModelSpec

PROJECT_NAME = "fewtrans_board"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --- Contestant hooks -------------------------------------------------------------------


@hookspec
def register_datasets(register: Callable[[DatasetSpec], None]) -> None:
    """Register dataset specifications (readers of a user's local copy of a dataset).

    Called once per process, the first time the registry is built (listing, checking,
    building manifests). All implementations are called; the order does not matter.

    Args:
        register: call ``register(spec)`` with a :class:`fewtrans_board.DatasetSpec` for
            each dataset you provide. The name must be lowercase letters, digits and single
            ``-``/``_`` separators (``"cifar100"``, ``"bscd-eurosat"``) and unique across
            all installed plugins.

    Implementations must not read the dataset from disk here: a spec is metadata plus a
    reader that runs only when a command is given ``--root``.

    Example:
        ``from fewtrans_board import DatasetSpec``
        ``from fewtrans_board.toolkit import FolderReader``
        ``register(DatasetSpec(name="my-birds", ..., reader=FolderReader(subdir="images")))``
    """


@hookspec
def register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register pretrained backbones.

    Called once per process, when the registry is built. All implementations are called.

    Args:
        register: call ``register(spec)`` with a :class:`fewtrans_board.ModelSpec` for each
            backbone. Names are lowercase ``arch.tag`` strings (``"vit-b16.openai"``,
            ``"resnet10t.c3_in1k"``) and must be unique across plugins.

    ``ModelSpec.load`` is called only when a model is actually used; import torch, timm or
    open_clip inside it, never at module import time, so that ``fewtrans-board --help``
    and listings stay fast.

    Example:
        ``from fewtrans_board import ModelSpec``
        ``from fewtrans_board.toolkit import load_timm_backbone``
        ``def load(weights, device):``
        ``    return load_timm_backbone("resnet50.a1_in1k", weights, device, name="resnet50.a1")``
        ``register(ModelSpec(name="resnet50.a1", loader=load, family="timm", ...))``
    """


@hookspec
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register adapters: transfer algorithms that turn a support set into a predictor.

    Called once per process, when the registry is built. All implementations are called.

    Args:
        register: call ``register(AdapterClass)`` with a subclass of
            :class:`fewtrans_board.Adapter` (the class, not an instance), so that its
            nested ``Config`` dataclass can be listed without running anything. The class
            attribute ``name`` must be lowercase letters, digits and single ``-``/``_``
            separators and unique across plugins.

    An adapter never sees query labels: ``fit`` gets the support set, the class names and
    a config; the returned predictor maps query images to logits, and the core computes
    accuracy.

    Example:
        ``register(SimpleShotAdapter)``
    """


# --- Command-line hooks -----------------------------------------------------------------


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands or command groups to the ``fewtrans-board`` command line.

    Called once, when the CLI is built by :func:`fewtrans_board.cli.make_cli`. All
    implementations are called, after the built-in commands exist.

    Args:
        cli: the root click group. Use ``@cli.command()`` / ``@cli.group()`` or
            ``cli.add_command(...)``. Adding a command whose name is already taken is an
            error naming both plugins.

    Keep imports inside the command function; the CLI module is imported for ``--help``.

    Example:
        ``@cli.command() def hello(): click.echo("hi")``
    """
