"""``fewtrans_board.toolkit``: the public building blocks plugin authors may import."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fewtrans_board import toolkit
from fewtrans_board.api import hookspecs

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "plugins" / "fewtrans-example"
PUBLIC = {"fewtrans_board", "fewtrans_board.toolkit"}
PUBLIC_FOR_TESTS = PUBLIC | {"fewtrans_board.testing"}


def board_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``fewtrans_board`` import, lazy ones inside functions too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "fewtrans_board" and not node.level:
            # ``from fewtrans_board import models`` reaches a submodule all the same.
            modules = [imported_from_root(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m.split(".")[0] == "fewtrans_board"]
    return found


def imported_from_root(name: str) -> str:
    """What ``from fewtrans_board import name`` imports: a submodule, or a root name."""
    submodule = f"fewtrans_board.{name}"
    return submodule if importlib.util.find_spec(submodule) is not None else "fewtrans_board"


def non_public(source: str, allowed: set[str]) -> list[str]:
    return [
        f"line {line}: {module}" for line, module in board_imports(source) if module not in allowed
    ]


# --- (a) the example plugin and the hook docs use only the public API -------------------


def test_example_plugin_imports_only_the_public_api() -> None:
    package = sorted((EXAMPLE / "fewtrans_example").rglob("*.py"))
    tests = sorted((EXAMPLE / "tests").rglob("*.py"))
    assert package and tests
    bad = [
        f"{path.relative_to(EXAMPLE)} {hit}"
        for paths, allowed in ((package, PUBLIC), (tests, PUBLIC_FOR_TESTS))
        for path in paths
        for hit in non_public(path.read_text(encoding="utf-8"), allowed)
    ]
    assert not bad, "the example plugin reaches into internals:\n" + "\n".join(bad)
    uses = {m for path in package for _, m in board_imports(path.read_text(encoding="utf-8"))}
    assert uses == PUBLIC  # it does use the toolkit, so the walk above saw real imports


@pytest.mark.parametrize(
    "source",
    [
        "from fewtrans_board.models.timm_family import load_timm_backbone",
        "def load():\n    import fewtrans_board.blocks.training as t\n",
        "from fewtrans_board import models",
        "from fewtrans_board.toolkit.hidden import x",
    ],
)
def test_the_import_walk_catches_internal_imports(source: str) -> None:
    assert non_public(source, PUBLIC)


def test_the_import_walk_accepts_public_imports() -> None:
    source = "import fewtrans_board\nfrom fewtrans_board import Adapter, toolkit\n"
    source += "def f():\n    from fewtrans_board.toolkit import run_adam\n"
    assert not non_public(source, PUBLIC)
    assert non_public("from fewtrans_board.testing import toy_episode", PUBLIC)


def example_imports(doc: str) -> str:
    """The import lines of a hook docstring's ``Example:`` (the rest elides arguments)."""
    lines = (line.strip().strip("`") for line in doc.split("Example:", 1)[1].splitlines())
    return "\n".join(line for line in lines if line.startswith(("from ", "import ")))


@pytest.mark.parametrize("hook", ["register_datasets", "register_models"])
def test_hook_examples_import_only_public_names_that_exist(hook: str) -> None:
    code = example_imports(getattr(hookspecs, hook).__doc__)
    imports = [n for n in ast.parse(code).body if isinstance(n, ast.ImportFrom)]
    assert imports, f"the {hook} example shows where its names come from"
    assert not non_public(code, PUBLIC)
    for node in imports:
        module = importlib.import_module(node.module or "")
        for alias in node.names:
            assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


# --- (b) every public name resolves, is documented, and is the built-ins' own object ----


def test_every_public_name_resolves_and_has_its_own_docstring() -> None:
    undocumented = []
    for name in toolkit.NAMES:
        obj = getattr(toolkit, name)
        doc = inspect.getdoc(obj) or ""
        # A dataclass without a docstring gets its signature as __doc__.
        if not doc.strip() or doc.startswith(f"{name}("):
            undocumented.append(name)
    assert not undocumented


def test_contributing_lists_exactly_the_public_names() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## The toolkit\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    listed = [name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[2])]
    assert sorted(listed) == sorted(toolkit.__all__)


def test_all_lists_each_name_once_sorted_and_matches_the_lazy_table() -> None:
    assert toolkit.__all__ == sorted(set(toolkit.__all__))
    stable = {n for n, entry in toolkit.NAMES.items() if entry.stability == toolkit.STABLE}
    assert set(toolkit.__all__) == stable
    # The promise is small: the names the docs use, not every building block.
    assert 12 <= len(stable) <= 20 < len(toolkit.NAMES)


def test_type_checking_imports_match_what_runs() -> None:
    """IDEs and mypy read the TYPE_CHECKING imports; at run time the lazy table decides."""
    tree = ast.parse(Path(toolkit.__file__).read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    typed = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == {name: entry.home for name, entry in toolkit.NAMES.items()}


def test_toolkit_names_are_the_objects_the_builtins_use() -> None:
    from fewtrans_board.blocks import (
        bottleneck,
        clip_common,
        deep_prompts,
        finetune,
        prompter,
        training,
    )
    from fewtrans_board.blocks.lockstep import PlannedAdapter, TrainingPlan
    from fewtrans_board.blocks.vit_parts import vit_parts
    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.datasets.readers import FolderReader
    from fewtrans_board.methods.adapters.vision_peft.adapter import SequentialBottleneckAdapter
    from fewtrans_board.models.timm_family import load_timm_backbone

    assert toolkit.load_timm_backbone is load_timm_backbone
    assert toolkit.FolderReader is FolderReader
    assert toolkit.FewtransError is FewtransError
    assert toolkit.vit_parts is vit_parts
    assert toolkit.run_adam is training.run_adam
    assert toolkit.make_head is training.make_head
    assert toolkit.normalized is training.normalized
    assert toolkit.autocast is training.autocast
    assert toolkit.attach_sequential is bottleneck.attach_sequential
    assert toolkit.SequentialAdapter is bottleneck.SequentialAdapter
    assert toolkit.DeepVisualPrompts is deep_prompts.DeepVisualPrompts
    assert toolkit.encode_text_embeddings is clip_common.encode_text_embeddings
    assert toolkit.TextPrompter is prompter.TextPrompter
    assert toolkit.FinetuneAdapter is finetune.FinetuneAdapter
    assert issubclass(SequentialBottleneckAdapter, toolkit.FinetuneAdapter)
    import fewtrans_board

    assert toolkit.PlannedAdapter is PlannedAdapter is fewtrans_board.PlannedAdapter
    assert toolkit.TrainingPlan is TrainingPlan is fewtrans_board.TrainingPlan


def test_unknown_names_fail_like_missing_attributes() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'run_adams'"):
        _ = toolkit.run_adams
    with pytest.raises(ImportError):
        exec("from fewtrans_board.toolkit import Registry", {})
    assert "run_adam" in dir(toolkit) and "FolderReader" in dir(toolkit)


def test_a_deprecated_name_warns_every_time_and_still_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    advice = "use fewtrans_board.toolkit.run_adam"
    target = "fewtrans_board.blocks.training:run_adam"
    monkeypatch.setitem(toolkit._DEPRECATED, "adam_loop", (target, advice))
    for _ in range(2):
        with pytest.warns(DeprecationWarning, match=re.escape(advice)) as caught:
            value = toolkit.adam_loop  # type: ignore[attr-defined]
        assert value is toolkit.run_adam
        assert Path(caught[0].filename) == Path(__file__)  # points at the caller


# --- (c) importing the toolkit stays light ---------------------------------------------


TORCH_MODULES = {
    "Bottleneck",
    "DeepVisualPrompts",
    "ParallelAdapter",
    "SequentialAdapter",
    "attach_parallel",
    "attach_sequential",
}
"""The names CONTRIBUTING.md says to import inside ``fit``; every other name is light."""


@pytest.mark.slow
def test_importing_the_toolkit_and_its_light_names_does_not_import_torch() -> None:
    heavy = "sorted({'torch', 'timm', 'open_clip', 'peft'} & set(sys.modules))"
    code = (
        "import json, sys\n"
        "import fewtrans_board.toolkit as t\n"
        f"after_import = {heavy}\n"
        "names = dir(t) + list(t.NAMES)\n"
        f"light = [getattr(t, name) for name in t.NAMES if name not in {sorted(TORCH_MODULES)}]\n"
        f"after_light_names = {heavy}\n"
        "t.Bottleneck\n"
        f"after_bottleneck = {heavy}\n"
        "print(json.dumps([after_import, after_light_names, after_bottleneck]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    after_import, after_light_names, after_bottleneck = json.loads(out.stdout)
    assert after_import == []
    assert after_light_names == []
    assert "torch" in after_bottleneck  # the lazy import does happen, on first use


def test_contributing_names_the_names_that_import_torch() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## The toolkit\n", 1)[1].split("\n## ", 1)[0]
    sentence = next(p for p in section.split("\n\n") if "import torch" in p)
    assert set(re.findall(r"`(\w+)`", sentence)) >= TORCH_MODULES


# --- (d) a plugin written only against the toolkit registers and fits -------------------

TOOLKIT_PLUGIN = textwrap.dedent(
    '''
    """A third-party plugin that uses only fewtrans_board and fewtrans_board.toolkit."""

    from dataclasses import dataclass

    from fewtrans_board import Adapter, AdapterConfig, hookimpl, hparam
    from fewtrans_board.toolkit import FinetuneAdapter


    class TinyBottleneck(FinetuneAdapter):
        """Sequential bottleneck adapters on a ViT, trained with the FewTrans recipe."""

        name = "toolkit-bottleneck"
        trains = "bottleneck adapters + linear head"
        description = "Bottleneck adapters built from the toolkit."
        paper = "Houlsby et al., 2019"
        code = "https://example.org"

        @dataclass(frozen=True)
        class Config(FinetuneAdapter.Config):
            """Small enough for CPU tests."""

            lr_backbone: float = hparam(1e-2, "Adapters' learning rate.", hpe="lr")
            lr_head: float = hparam(1e-2, "Head learning rate.", hpe="lr")
            epochs: int = hparam(3, "Passes.", hpe="epochs")
            batch_size: int = hparam(4, "Batch.", min=1)
            hidden: int = hparam(4, "Bottleneck width.", min=1)

        def trainable(self, encoder, config):
            from fewtrans_board.toolkit import attach_sequential  # imports torch

            return attach_sequential(encoder, config.hidden, self.name)


    class RecipeProbe(Adapter):
        """A linear probe assembled from the toolkit's FewTrans recipe helpers."""

        name = "toolkit-probe"
        trains = "linear head"
        description = "Linear probe built from the toolkit."
        paper = "FewTrans"
        code = "https://example.org"
        frozen_backbone = True

        @dataclass(frozen=True)
        class Config(AdapterConfig):
            """The built-in linear probe's fields."""

            lr_head: float = hparam(0.2, "Head learning rate.", hpe="lr")
            epochs: int = hparam(5, "Passes.", hpe="epochs")
            batch_size: int = hparam(4, "Batch.", min=1)

        def fit(self, backbone, support, class_names, config):
            import torch
            import torch.nn.functional as F

            from fewtrans_board.toolkit import make_head, normalized, run_adam

            features = normalized(support.images.features(backbone))
            labels = support.labels.to(features.device)
            head = make_head(features.shape[1], support.n_way, str(features.device))

            def loss(batch):
                return F.cross_entropy(head(features[batch]), labels[batch])

            run_adam([(list(head.parameters()), config.lr_head)], loss, len(labels),
                     config.batch_size, config.epochs)

            class Predictor:
                def predict(self, query):
                    with torch.no_grad():
                        return head(normalized(query.features(backbone)))

            return Predictor()


    @hookimpl
    def register_adapters(register):
        register(TinyBottleneck)
        register(RecipeProbe)
    '''
)


@pytest.fixture
def toolkit_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    (tmp_path / "toolkit_plugin.py").write_text(TOOLKIT_PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toolkit_plugin", raising=False)
    return importlib.import_module("toolkit_plugin")


@pytest.mark.slow
def test_the_toolkit_plugin_is_written_against_the_public_api_only(
    toolkit_plugin, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.testing import check_import_is_light

    assert not non_public(TOOLKIT_PLUGIN, PUBLIC)
    plugin_dir = str(Path(toolkit_plugin.__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([plugin_dir, *sys.path]))
    check_import_is_light("toolkit_plugin")


def test_a_toolkit_bottleneck_plugin_registers_and_fits_an_episode(toolkit_plugin) -> None:  # type: ignore[no-untyped-def]
    import torch

    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    pm = get_plugin_manager(entry_points=False, extra_plugins={"toolkit-demo": toolkit_plugin})
    entry = Registry.from_plugin_manager(pm).adapters.get("toolkit-bottleneck")
    assert entry.plugin == "toolkit-demo"
    adapter_cls = entry.obj

    backbone = toolkit.tiny_vit_backbone()
    before = {k: v.clone() for k, v in backbone.image_encoder.state_dict().items()}
    episode = toolkit.toy_episode(seed=1)
    torch.manual_seed(0)
    predictor = adapter_cls().fit(
        backbone, episode.support, episode.class_names, adapter_cls.Config()
    )
    logits = predictor.predict(episode.query)
    assert logits.shape == (len(episode.query_labels), episode.support.n_way)
    assert torch.isfinite(logits).all()

    adapters = [m for m in predictor.encoder.modules() if isinstance(m, toolkit.SequentialAdapter)]
    assert len(adapters) == len(backbone.image_encoder.blocks)
    assert all(a.up.weight.abs().sum() > 0 for a in adapters)  # zero at init: they trained
    after = backbone.image_encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the caller's copy is intact


def recipe_probe_by_hand(backbone, episode, lr: float, epochs: int, batch_size: int):  # type: ignore[no-untyped-def]
    """The FewTrans linear-probe recipe written out in plain torch (the expected side).

    L2-normalised frozen features; a linear head with weight 1 and bias 0; Adam (betas 0.9,
    0.999, eps 1e-8, no weight decay) written out by hand; per-step cosine decay
    ``0.5 * lr * (1 + cos(pi * t / T))`` from t = 0, T = epochs * ceil(n / batch_size); each
    epoch's support order from one ``RandomState(11)``, cut into consecutive batches.
    """
    import math

    import numpy as np
    import torch

    def features(pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            x = backbone.image_encoder.eval()(pixels).float()
        return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)

    x, y = features(episode.support.images.pixels), episode.support.labels
    n, ways = len(y), episode.support.n_way
    weight = torch.ones(ways, x.shape[1], requires_grad=True)
    bias = torch.zeros(ways, requires_grad=True)
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in (weight, bias)]
    total, step = epochs * math.ceil(n / batch_size), 0
    rng = np.random.RandomState(11)
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            batch = torch.as_tensor(order[start : start + batch_size])
            logits = x[batch] @ weight.T + bias
            loss = -torch.log_softmax(logits, dim=1)[torch.arange(len(batch)), y[batch]].mean()
            grads = torch.autograd.grad(loss, [weight, bias])
            rate = 0.5 * lr * (1 + math.cos(math.pi * step / total))
            step += 1
            with torch.no_grad():
                for p, g, (m, v) in zip((weight, bias), grads, moments, strict=True):
                    m.mul_(0.9).add_(0.1 * g)
                    v.mul_(0.999).add_(0.001 * g * g)
                    m_hat, v_hat = m / (1 - 0.9**step), v / (1 - 0.999**step)
                    p -= rate * m_hat / (v_hat.sqrt() + 1e-8)
    with torch.no_grad():
        return features(episode.query.pixels) @ weight.T + bias


def test_a_toolkit_recipe_probe_follows_the_fewtrans_recipe(toolkit_plugin) -> None:  # type: ignore[no-untyped-def]
    """The recipe helpers train what the documented recipe, written out by hand, trains."""
    import torch

    backbone = toolkit.tiny_vit_backbone()
    episode = toolkit.toy_episode(shots=(2, 3, 4), seed=2)
    mine = toolkit_plugin.RecipeProbe()
    config = mine.Config(lr_head=0.05, epochs=4, batch_size=3)
    logits = mine.fit(backbone, episode.support, episode.class_names, config).predict(episode.query)
    expected = recipe_probe_by_hand(backbone, episode, lr=0.05, epochs=4, batch_size=3)
    # The head starts at weight 1, bias 0 (equal logits in every row): it trained.
    assert (expected.max(1).values - expected.min(1).values > 1e-4).all()
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
