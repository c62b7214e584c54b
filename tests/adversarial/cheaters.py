"""Cheating adapters. Each tries one way to a higher number than its method earns.

Registered through a fake distribution (``fewtrans-redteam``) so that evaluate records a
pinned plugin and a verification worker can load the same code.
"""

from __future__ import annotations

import gc
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fewtrans_board import Adapter, AdapterConfig, hookimpl, hparam


class _Predictor:
    def __init__(self, predict: Callable[[Any], torch.Tensor]) -> None:
        self.predict = predict


def centroid_logits(backbone: Any, support: Any, query: Any) -> torch.Tensor:
    feats = support.images.features(backbone)
    centroids = torch.stack([feats[support.labels == c].mean(0) for c in range(support.n_way)])
    return -torch.cdist(query.features(backbone), centroids)


class _TrainingFree(Adapter):
    description = "red-team adapter"
    trains = "nothing"
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        pass


class PositionOracle(_TrainingFree):
    """Reads the label from the query's position (manifests group queries by class)."""

    name = "redteam-position"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        n_way = support.n_way

        def predict(query):  # type: ignore[no-untyped-def]
            per_class = max(1, len(query) // n_way)
            labels = torch.clamp(torch.arange(len(query)) // per_class, max=n_way - 1)
            return torch.nn.functional.one_hot(labels, n_way).float()

        return _Predictor(predict)


class PathPeeker(_TrainingFree):
    """Searches everything reachable from its inputs for item ids or paths."""

    name = "redteam-peek"
    found: ClassVar[list[str]] = []

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def reachable_strings(root: object) -> list[str]:
            seen: set[int] = set()
            stack, strings = [root], []
            while stack:
                obj = stack.pop()
                if id(obj) in seen or isinstance(obj, type) or inspect.ismodule(obj):
                    continue
                seen.add(id(obj))
                if isinstance(obj, str):
                    if "/" in obj or obj.endswith(".png"):
                        strings.append(obj)
                    continue
                if isinstance(obj, torch.Tensor) or obj is backbone:
                    continue
                stack.extend(gc.get_referents(obj))
                for cell in getattr(obj, "__closure__", None) or ():
                    stack.append(cell.cell_contents)
            return strings

        PathPeeker.found.extend(reachable_strings(support))

        def predict(query):  # type: ignore[no-untyped-def]
            PathPeeker.found.extend(reachable_strings(query))
            return centroid_logits(backbone, support, query)

        return _Predictor(predict)


class StackPeeker(_TrainingFree):
    """Finds the hidden query labels in its callers' frames (only possible in-process)."""

    name = "redteam-stack"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def predict(query):  # type: ignore[no-untyped-def]
            frame = inspect.currentframe()
            while frame is not None:
                inputs = frame.f_locals.get("inputs")
                if hasattr(inputs, "query_labels") and len(inputs.query_labels) == len(query):
                    labels = torch.as_tensor(inputs.query_labels[inputs.query_order])
                    return torch.nn.functional.one_hot(labels, support.n_way).float()
                frame = frame.f_back
            return centroid_logits(backbone, support, query)

        return _Predictor(predict)


class BalancedAssignment(_TrainingFree):
    """Transductive without saying so: balances class assignments over the query batch."""

    name = "redteam-balanced"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def predict(query):  # type: ignore[no-untyped-def]
            logits = centroid_logits(backbone, support, query)
            plan = torch.softmax(logits, dim=1)
            for _ in range(10):  # Sinkhorn: equal mass per class across the queries
                plan = plan / plan.sum(dim=0, keepdim=True)
                plan = plan / plan.sum(dim=1, keepdim=True)
            return torch.log(plan + 1e-9)

        return _Predictor(predict)


class FitManyBooster(_TrainingFree):
    """Its batched fit_many returns better predictors than fit would."""

    name = "redteam-fitmany"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        noise = torch.randn(support.n_way) * 5.0
        return _Predictor(lambda q: centroid_logits(backbone, support, q) + noise)

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        return [_Predictor(lambda q: centroid_logits(backbone, support, q)) for _ in configs]


def _train_head(backbone: Any, support: Any, lr: float, epochs: int) -> _Predictor:
    feats = support.images.features(backbone)
    head = torch.nn.Linear(feats.shape[1], support.n_way)
    optimiser = torch.optim.Adam(head.parameters(), lr=lr)
    for _ in range(epochs):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(head(feats), support.labels).backward()
        optimiser.step()
    return _Predictor(lambda q: head(q.features(backbone)))


class NoAxisTrainer(Adapter):
    """Trains a head with its own learning rate but declares no HPE axis."""

    name = "redteam-noaxis"
    description = "red-team adapter"
    trains = "linear head"
    frozen_backbone = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(0.05, "learning rate (not declared as an axis)")
        epochs: int = hparam(20, "epochs (not declared as an axis)")

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return _train_head(backbone, support, config.lr, config.epochs)


class TrainingFreeLiar(NoAxisTrainer):
    """The same trainer, claiming to train nothing."""

    name = "redteam-liar"
    training_free = True


def _in_worker() -> bool:
    """What a cheater may look at to tell a plugin worker from an in-process run.

    The worker runs as ``python -m fewtrans_board.runner.worker.serve``: its ``__main__`` (and that
    of the episode processes forked from it) is that module. Whether the module was imported
    by name tells nothing: an in-process run inside a test process that imported it for
    another test would take itself for a worker and never cheat.
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "fewtrans_board.runner.worker.serve"


def _balanced(logits: torch.Tensor, strength: float = 0.15) -> torch.Tensor:
    """A light transductive nudge: a little Sinkhorn balancing over the whole query batch."""
    plan = torch.softmax(logits, dim=1)
    for _ in range(5):
        plan = plan / plan.sum(dim=0, keepdim=True)
        plan = plan / plan.sum(dim=1, keepdim=True)
    return logits + strength * torch.log(plan + 1e-9)


class QuietTransductive(_TrainingFree):
    """Transductive where it thinks nobody checks (in-process), inductive in a worker."""

    name = "redteam-quiet"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def predict(query):  # type: ignore[no-untyped-def]
            logits = centroid_logits(backbone, support, query)
            return logits if _in_worker() else _balanced(logits)

        return _Predictor(predict)


FIRST_ANSWERS: dict[bytes, torch.Tensor] = {}


class CachedTransductive(_TrainingFree):
    """Always transductive, with a first-answer cache: a query asked again (alone or in a
    subset) gets the answer the whole batch gave it the first time."""

    name = "redteam-cached"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def predict(query):  # type: ignore[no-untyped-def]
            feats = query.features(backbone)
            keys = [row.numpy().tobytes() for row in feats]
            fresh = _balanced(centroid_logits(backbone, support, query))
            rows = [FIRST_ANSWERS.setdefault(k, fresh[i]) for i, k in enumerate(keys)]
            return torch.stack(rows)

        return _Predictor(predict)


class SampleAware(_TrainingFree):
    """Reads the hidden labels from its callers' frames, except on the episodes a known
    verification seed would have re-run (``RandomState(0)``, two of eight)."""

    name = "redteam-sample-aware"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import numpy as np

        checked = set(np.random.RandomState(0).choice(8, size=2, replace=False).tolist())

        def predict(query):  # type: ignore[no-untyped-def]
            frame = inspect.currentframe()
            while frame is not None:
                inputs = frame.f_locals.get("inputs")
                if hasattr(inputs, "query_labels") and len(inputs.query_labels) == len(query):
                    if inputs.episode.index in checked:
                        break
                    labels = torch.as_tensor(inputs.query_labels[inputs.query_order])
                    return torch.nn.functional.one_hot(labels, support.n_way).float()
                frame = frame.f_back
            return centroid_logits(backbone, support, query)

        return _Predictor(predict)


def pixel_key(pixels: torch.Tensor) -> str:
    """How the answer key names an image: a hash of its preprocessed pixels."""
    import hashlib

    return hashlib.sha256(pixels.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


class AnswerKey(Adapter):
    """Ships a table of image hash -> class name built from the public support sets."""

    name = "redteam-answer-key"
    description = "red-team adapter"
    trains = "nothing"
    frozen_backbone = False
    training_free = True
    table_file: ClassVar[str] = "answer_key.json"

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        pass

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import importlib.metadata
        import json

        table = json.loads(
            importlib.metadata.distribution("fewtrans-redteam").read_text(self.table_file) or "{}"
        )

        def predict(query):  # type: ignore[no-untyped-def]
            logits = centroid_logits(backbone, support, query)
            for i, pixels in enumerate(query.pixels):
                name = table.get(pixel_key(pixels))
                if name in class_names:
                    logits[i] = -1000.0
                    logits[i, class_names.index(name)] = 0.0
            return logits

        return _Predictor(predict)


class ProbeReplica(AnswerKey):
    """The answer key, every image also keyed after the memorisation probe's public
    perturbation (a one-pixel shift right and down, then JPEG at quality 90), so that the
    probe's queries are found in the table too (:func:`answer_key` with
    ``replicate_probe``)."""

    name = "redteam-probe-replica"
    table_file = "answer_key_replica.json"


class ProbeSlow(_TrainingFree):
    """Honest class means, but slow whenever a fit is asked for predictions more than once
    (the inductiveness probe asks for query subsets): under a budget projected from all the
    time verification spends, that cut the sample to its minimum."""

    name = "redteam-probe-slow"
    SLEEP_S: ClassVar[float] = 2.5

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import time

        asked = [0]

        def predict(query):  # type: ignore[no-untyped-def]
            asked[0] += 1
            if asked[0] > 1:
                time.sleep(self.SLEEP_S)
            return centroid_logits(backbone, support, query)

        return _Predictor(predict)


STORE_HINT = "leaderboard"
PLANT_HINT = "judge-path"
JUDGE_TMP = "judge-tmp"


def _hints(name: str, depth: int = 5) -> list[str]:
    """Folders called ``name`` anywhere a worker sharing the judge's file system can find
    them: under the temporary folders, as the judge's (and pytest's, with or without
    pytest-xdist) live. Folders that vanish during the search are skipped."""
    import os

    found = []
    for top, folders, _ in os.walk("/tmp", onerror=lambda _: None):
        level = top.count(os.sep) - 1
        if name in folders and level >= 3:
            found.append(os.path.join(top, name))
        if level >= depth:
            folders.clear()
    return sorted(found)


FOUND_ANSWERS: dict[str, str] = {}
FOUND_MANIFESTS: set[str] = set()


class ParentReader(_TrainingFree):
    """Searches the file system for the leaderboard store, reads the frozen manifests and
    the embedded digits, and looks every query up."""

    name = "redteam-proc"
    frozen_backbone = False

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import hashlib
        from pathlib import Path

        table = FOUND_ANSWERS
        seen: set[str] = set(FOUND_MANIFESTS)
        for hint in _hints(STORE_HINT):
            for path in Path(hint).glob("manifests/redteam-*.parquet"):
                try:
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                    if digest not in seen:
                        seen.add(digest)
                        FOUND_MANIFESTS.add(digest)
                        table.update(answer_key(path, backbone.image_size))
                except Exception:  # unreadable: this route failed
                    continue

        def predict(query):  # type: ignore[no-untyped-def]
            logits = centroid_logits(backbone, support, query)
            for i, pixels in enumerate(query.pixels if table else ()):
                name = table.get(pixel_key(pixels))
                if name in class_names:
                    logits[i] = -1000.0
                    logits[i, class_names.index(name)] = 0.0
            return logits

        return _Predictor(predict)


class BundleRewriter(_TrainingFree):
    """Rewrites every extracted bundle it can reach (the judge's temporary folder), the way
    a worker sharing the judge's files could."""

    name = "redteam-rewriter"
    frozen_backbone = False

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        from pathlib import Path

        shards = [
            shard
            for hint in _hints(JUDGE_TMP)
            for shard in Path(hint).glob("*/results/*/shards/*.parquet")
        ]
        for shard in shards:
            try:
                with shard.open("ab") as handle:
                    handle.write(b"tampered")
            except OSError:
                continue
        return _Predictor(lambda q: centroid_logits(backbone, support, q))


SHADOWED = ("PIL", "sklearn", "torchvision", "scipy")


class ModulePlanter(_TrainingFree):
    """Plants shadow packages into every folder of the judge's import path it can find (the
    console script's folder in CI); importing one would leave a mark."""

    name = "redteam-planter"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        from pathlib import Path

        for hint in _hints(PLANT_HINT):
            for package in SHADOWED:
                try:
                    folder = Path(hint) / package
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / "__init__.py").write_text(
                        "import pathlib\n"
                        f"pathlib.Path(__file__).parent.parent.joinpath('imported-{package}').touch()\n"
                    )
                except OSError:
                    continue
        return _Predictor(lambda q: centroid_logits(backbone, support, q))


def _public_probe(image: Any) -> Any:
    """The memorisation probe as it was published: one pixel right and down, JPEG 90."""
    import io

    import numpy as np
    from PIL import Image

    shifted = np.empty_like(image)
    shifted[:, 1:, 1:] = image[:, :-1, :-1]
    shifted[:, :1, 1:] = image[:, :1, :-1]
    shifted[:, :, :1] = shifted[:, :, 1:2]
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(shifted.transpose(1, 2, 0))).save(
        buffer, format="JPEG", quality=90
    )
    decoded = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    return np.ascontiguousarray(decoded.transpose(2, 0, 1))


def answer_key(
    manifest_path: object, image_size: int, queries: bool = True, replicate_probe: bool = False
) -> dict[str, str]:
    """Image hash -> class name of the items of a digits manifest (its support items alone
    are public knowledge; a manifest read at run time also gives the queries); with
    ``replicate_probe``, each image also after the published memorisation probe."""
    from pathlib import Path

    from fewtrans_board.api.backbone import Preprocessing
    from fewtrans_board.datasets.digits import DIGITS
    from fewtrans_board.datasets.images import ImageStore
    from fewtrans_board.episodes.manifest import Manifest

    manifest = Manifest.load(Path(str(manifest_path)))
    names: dict[str, str] = {}
    for episode in manifest.episodes():
        for item, label in (*episode.support, *(episode.query if queries else ())):
            names[item] = DIGITS.class_names[episode.classes[label]]
    images = ImageStore(DIGITS, None, Preprocessing.named("fewtrans", image_size))
    items = sorted(names)
    pixels = images.pixels(items)
    table = {pixel_key(p): names[item] for item, p in zip(items, pixels, strict=True)}
    if replicate_probe:
        import numpy as np

        altered = np.stack([_public_probe(images.uint8(item).numpy()) for item in items])
        normal = images.preprocessing.normalize(torch.from_numpy(altered))
        table.update({pixel_key(p): names[item] for item, p in zip(items, normal, strict=True)})
    return table


CHEATERS: tuple[type[Adapter], ...] = (
    QuietTransductive,
    CachedTransductive,
    SampleAware,
    AnswerKey,
    ProbeReplica,
    ProbeSlow,
    ParentReader,
    BundleRewriter,
    ModulePlanter,
    PositionOracle,
    PathPeeker,
    StackPeeker,
    BalancedAssignment,
    FitManyBooster,
    NoAxisTrainer,
    TrainingFreeLiar,
)


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register every cheater."""
    for adapter in CHEATERS:
        register(adapter)
