"""Episodic meta-training (BSCD-FSL's schedule) and the checkpoint it writes.

BSCD-FSL meta-trains every method on 5-way episodes of miniImageNet's base classes for 400
epochs with Adam (lr 0.001); each epoch is 100 episodes (CloserLook's loop) with 16 queries
per class, and images are augmented. FWT variants add the feature-wise transformation during
training. MAML is first-order (FOMAML: the query-loss gradient at the adapted weights updates
the initialisation; second-order terms are dropped, as CloserLook does for ResNets) with 5
inner SGD steps of lr 0.01 and 4 tasks per meta-batch (the meta-gradient is the tasks' mean;
CloserLook sums, which Adam's scale invariance makes nearly the same); ``maml``'s linear head
initialisation is meta-learned with the encoder (CloserLook), ``proto-maml``'s head starts
from the support prototypes in every task (see
:func:`~fewtrans_board.methods.meta.maml.maml_adapt`). RelationNet trains on the encoder's
feature maps (:mod:`fewtrans_board.methods.meta.features`); its relation module's BatchNorm
keeps running statistics (momentum 0.1) for the adapters.

Training runs with BatchNorm in training mode (batch statistics); the adapters evaluate in
eval mode with the running statistics (MAML: the statistics of the episode's support set), so
no query depends on another.
"""

from __future__ import annotations

import contextlib
import copy
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.core.errors import FewtransError, UnknownNameError
from fewtrans_board.core.version import __version__
from fewtrans_board.metatrain.episodes import SourceEpisodes, TrainingEpisode, source_classes
from fewtrans_board.methods.meta.checkpoint import check_checkpoint_path, write_checkpoint
from fewtrans_board.methods.meta.maml import maml_adapt
from fewtrans_board.methods.meta.methods import METHODS, METHODS_REVISION, MetaMethod
from fewtrans_board.registry.lookup import Registry

if TYPE_CHECKING:
    import torch
    from torch import nn

ProgressCallback = Callable[[int, float], None]


@dataclass(frozen=True)
class MetaTrainSpec:
    """Inputs of ``fewtrans-board meta-train``; the defaults are BSCD-FSL's schedule.

    Attributes:
        method: a name of :data:`~fewtrans_board.methods.meta.methods.METHODS`
            (``protonet``, ``matchingnet``, ``relationnet``, ``metaopt``, ``maml`` and the
            simplified variants ``matchingnet-nofce``, ``relationnet-mlp``,
            ``metaopt-ridge``, ``proto-maml``).
        source: the source dataset (its source classes are used).
        model: the backbone to start from (``demo-cnn.random`` trains from scratch).
        weights: a local checkpoint of ``model``.
        root: the source dataset's local copy.
        fwt: add the feature-wise transformation during training.
        n_way: classes per training episode.
        shots: support images per class.
        queries: query images per class.
        epochs: training epochs (0 writes the untrained initialisation: the random twin).
        episodes_per_epoch: episodes per epoch.
        lr: Adam learning rate.
        seed: seeds the initialisation, the episodes, augmentation and FWT draws.
        augment: random resized crop, flip and colour jitter on training images.
        preprocessing: ``fewtrans`` (squash) or ``bscd`` (resize and centre crop).
        maml_steps: MAML inner SGD steps.
        maml_lr: MAML inner learning rate.
        maml_tasks: MAML tasks per meta-batch.
        device: torch device.
    """

    method: str
    source: str
    model: str
    weights: str | None = None
    root: str | None = None
    fwt: bool = False
    n_way: int = 5
    shots: int = 5
    queries: int = 16
    epochs: int = 400
    episodes_per_epoch: int = 100
    lr: float = 1e-3
    seed: int = 0
    augment: bool = True
    preprocessing: str = "fewtrans"
    maml_steps: int = 5
    maml_lr: float = 0.01
    maml_tasks: int = 4
    device: str = "cpu"

    def check(self) -> MetaMethod:
        """The method, after checking the spec.

        Raises:
            FewtransError: unknown method, FWT where BSCD-FSL has no such variant, or a
                non-positive size.
        """
        method = METHODS.get(self.method)
        if method is None:
            raise FewtransError(
                f"unknown meta-learning method {self.method!r}; use one of {', '.join(METHODS)}"
            )
        if self.fwt and not method.fwt:
            with_fwt = ", ".join(m.name for m in METHODS.values() if m.fwt)
            raise FewtransError(
                f"BSCD-FSL has no {method.title}+FWT variant; --fwt applies to {with_fwt}"
            )
        sizes = {"n_way": self.n_way, "shots": self.shots, "queries": self.queries}
        sizes |= {"episodes_per_epoch": self.episodes_per_epoch, "maml_tasks": self.maml_tasks}
        bad = [k for k, v in sizes.items() if v < 1] + (["epochs"] if self.epochs < 0 else [])
        if bad:
            raise FewtransError(f"meta-train: {', '.join(bad)} must be positive")
        return method


def _episode_features(
    encoder: nn.Module, episode: TrainingEpisode, device: str, maps: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    from fewtrans_board.methods.meta.features import feature_maps

    pixels = torch.cat([episode.support, episode.query]).to(device)
    features = feature_maps(encoder, pixels) if maps else encoder(pixels).float()
    return features[: len(episode.support)], features[len(episode.support) :]


def _maml_step(
    spec: MetaTrainSpec,
    encoder: nn.Module,
    episodes: list[TrainingEpisode],
    head: dict[str, torch.Tensor],
) -> float:
    """Accumulate first-order meta-gradients of a meta-batch into the initial parameters.

    ``head`` (``maml``'s linear head initialisation; empty for ``proto-maml``) receives the
    gradient of the adapted head rows, as the encoder receives its adapted copy's.
    """
    import torch.nn.functional as F

    losses = []
    for episode in episodes:
        support = episode.support.to(spec.device)
        labels = episode.support_labels.to(spec.device)
        fast, rows = maml_adapt(
            encoder, support, labels, spec.n_way, spec.maml_steps, spec.maml_lr, head or None
        )
        fast.zero_grad(set_to_none=True)
        for row in rows.values():
            row.grad = None
        fast.train()  # like the other methods: the training loss sees batch statistics
        logits = fast(episode.query.to(spec.device)).float() @ rows["weight"].T + rows["bias"]
        loss = F.cross_entropy(logits, episode.query_labels.to(spec.device))
        loss.backward()  # type: ignore[no-untyped-call]
        # Each initial tensor gets the gradient of its adapted copy (the encoder, the head).
        encoders = zip(encoder.parameters(), fast.parameters(), strict=True)
        heads = ((init, rows[key]) for key, init in head.items())
        for initial, adapted in [*encoders, *heads]:
            if adapted.grad is not None:
                share = adapted.grad / len(episodes)
                initial.grad = share if initial.grad is None else initial.grad + share
        losses.append(float(loss.detach()))
    return float(np.mean(losses))


def meta_train(
    spec: MetaTrainSpec, registry: Registry, out: Path, progress: ProgressCallback | None = None
) -> dict[str, Any]:
    """Meta-train ``spec.model`` on source episodes and write the checkpoint ``out``.

    Args:
        spec: the training inputs.
        registry: resolves the model and the source dataset.
        out: the ``.safetensors`` checkpoint to write (atomically).
        progress: called with ``(epoch, mean loss)`` after every epoch.

    Returns:
        The training record stored in the checkpoint's metadata.

    Raises:
        FewtransError: a bad spec, unknown names, or a source copy with too few images.
    """
    import torch

    method = spec.check()
    check_checkpoint_path(out)
    try:
        dataset = registry.datasets.get(spec.source)
    except UnknownNameError as exc:
        raise FewtransError(f"--source: {exc}") from None
    started = time.time()
    torch.manual_seed(spec.seed)
    backbone = registry.load_model(spec.model, spec.weights, spec.device)
    encoder = copy.deepcopy(backbone.image_encoder).to(spec.device).train()
    encoder.requires_grad_(True)
    head, learned = _trainable_head(spec, method, backbone, encoder)
    source = SourceEpisodes(
        dataset.obj,
        Path(spec.root) if spec.root else None,
        Preprocessing.named(spec.preprocessing, backbone.image_size),
        n_way=spec.n_way,
        shots=spec.shots,
        queries=spec.queries,
        augment=spec.augment,
    )
    losses = _train_epochs(spec, method, encoder, head, learned, source, progress)
    record = {
        **asdict(spec),
        "base_model": spec.model,
        "methods_revision": METHODS_REVISION,
        "method_paper": method.paper,
        "base_weights_id": backbone.weights_id,
        "method_title": method.title + ("+FWT" if spec.fwt else ""),
        "source_classes": [dataset.obj.class_ids[c] for c in source_classes(dataset.obj)],
        "losses": losses,
        "seconds": round(time.time() - started, 3),
        "package": {"name": "fewtrans-board", "version": __version__},
        "torch": torch.__version__,
        "platform": platform.platform(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_checkpoint(out, encoder.state_dict(), {k: v.detach() for k, v in head.items()}, record)
    return record


def _trainable_head(
    spec: MetaTrainSpec, method: MetaMethod, backbone: Any, encoder: nn.Module
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """The method's initial head on the device, and its tensors that train (not statistics)."""
    from fewtrans_board.methods.meta.heads import is_running_statistic

    shape = None
    if method.maps:
        from fewtrans_board.methods.meta.features import map_shape

        shape = map_shape(encoder, backbone.image_size, spec.device)
    initial = method.init_head(backbone.feature_dim, n_way=spec.n_way, map_shape=shape)
    head = {k: v.to(spec.device) for k, v in initial.items()}
    learned = [v for k, v in head.items() if not is_running_statistic(k)]
    for tensor in learned:
        tensor.requires_grad_(True)
    return head, learned


def _train_epochs(
    spec: MetaTrainSpec,
    method: MetaMethod,
    encoder: nn.Module,
    head: dict[str, torch.Tensor],
    learned: list[torch.Tensor],
    source: SourceEpisodes,
    progress: ProgressCallback | None,
) -> list[float]:
    """Each epoch's mean loss of Adam over ``spec.epochs`` epochs of episodes (FWT hooks on)."""
    import torch

    from fewtrans_board.methods.meta.fwt import fwt_hooks

    rng = np.random.default_rng(spec.seed)
    fwt_generator = torch.Generator().manual_seed(spec.seed + 1)
    optimiser = torch.optim.Adam([*encoder.parameters(), *learned], lr=spec.lr)
    losses: list[float] = []
    hooks = fwt_hooks(encoder, fwt_generator) if spec.fwt else contextlib.nullcontext()
    with hooks:
        for epoch in range(spec.epochs):
            epoch_losses = []
            for _ in range(spec.episodes_per_epoch):
                optimiser.zero_grad(set_to_none=True)
                epoch_losses.append(_episode_step(spec, method, encoder, head, source, rng))
                optimiser.step()
            losses.append(float(np.mean(epoch_losses)))
            if progress is not None:
                progress(epoch, losses[-1])
    return losses


def _episode_step(
    spec: MetaTrainSpec,
    method: MetaMethod,
    encoder: nn.Module,
    head: dict[str, torch.Tensor],
    source: SourceEpisodes,
    rng: np.random.Generator,
) -> float:
    """Sample the next episode (a meta-batch of tasks for MAML), backpropagate its loss."""
    if method.inner_loop:
        batch = [source.sample(rng) for _ in range(spec.maml_tasks)]
        return _maml_step(spec, encoder, batch, head)
    episode = source.sample(rng)
    support, query = _episode_features(encoder, episode, spec.device, method.maps)
    loss = method.loss(
        head,
        support,
        episode.support_labels.to(spec.device),
        query,
        episode.query_labels.to(spec.device),
        spec.n_way,
    )
    loss.backward()  # type: ignore[no-untyped-call]
    return float(loss.detach())


@contextlib.contextmanager
def epoch_progress(spec: MetaTrainSpec, show: bool) -> Iterator[ProgressCallback]:
    """A progress callback for :func:`meta_train` that draws a bar over the epochs.

    Args:
        spec: the training inputs (the bar counts ``spec.epochs``).
        show: draw the bar (``False``: the callback does nothing visible).
    """
    from tqdm import tqdm

    bar = tqdm(total=spec.epochs, desc=f"meta-train {spec.method}", unit="epoch", disable=not show)

    def progress(_epoch: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")

    try:
        yield progress
    finally:
        bar.close()
