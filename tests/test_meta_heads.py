"""The faithful BSCD-FSL meta-learner heads against independent oracles.

FWT's hooked layers on timm ResNets (lists written by hand from the reference code), FCE
against ``torch.nn.LSTM`` and a plain-python read-out, the conv relation module against an
``nn.Sequential`` built by hand, the Crammer-Singer SVM against sklearn's liblinear solver
plus ``gradcheck``, MAML's linear head against a hand-written SGD step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fewtrans_board.methods.meta import heads, svm
from fewtrans_board.methods.meta.methods import METHODS


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- FWT placement ---

RESNET10T_FWT = [
    "layer1.0.bn2",
    "layer2.0.bn2",
    "layer2.0.downsample.2",
    "layer3.0.bn2",
    "layer3.0.downsample.2",
    "layer4.0.bn2",
    "layer4.0.downsample.2",
]
RESNET18_FWT = [
    "layer1.0.bn2",
    "layer1.1.bn2",
    "layer2.0.bn2",
    "layer2.0.downsample.1",
    "layer2.1.bn2",
    "layer3.0.bn2",
    "layer3.0.downsample.1",
    "layer3.1.bn2",
    "layer4.0.bn2",
    "layer4.0.downsample.1",
    "layer4.1.bn2",
]


@pytest.mark.parametrize(
    ("arch", "expected"), [("resnet10t", RESNET10T_FWT), ("resnet18", RESNET18_FWT)]
)
def test_fwt_follows_the_residual_branch_end_and_the_projection_shortcut(
    arch: str, expected: list[str]
) -> None:
    """CrossDomainFewShot's SimpleBlock: BN2 and BNshortcut are FWT layers, BN1 and the stem's
    BN are not. Before the fix only ``layerN.0.downsample.*`` was hooked on resnet10t."""
    import timm

    from fewtrans_board.methods.meta.fwt import fwt_hooks, fwt_layers

    encoder = timm.create_model(arch, pretrained=False, num_classes=0)
    names = [name for name, _ in fwt_layers(encoder)]
    assert names == expected
    assert not any(n.endswith("bn1") or n.startswith("conv1") for n in names)
    blocks = [n for n, m in encoder.named_modules() if type(m).__name__ == "BasicBlock"]
    assert {f"{b}.bn2" for b in blocks} <= set(names)  # every residual branch is transformed
    with fwt_hooks(encoder, generator()) as hooked:
        assert hooked == len(expected)


def test_fwt_on_a_vit_transforms_the_pre_mlp_layer_norm_of_each_block() -> None:
    from fewtrans_board.methods.meta.fwt import fwt_layers
    from fewtrans_board.testing.tiny import tiny_vit_backbone

    encoder = tiny_vit_backbone().image_encoder
    assert [n for n, _ in fwt_layers(encoder)] == ["blocks.0.norm2", "blocks.1.norm2"]


# --- feature maps ---


def test_feature_maps_pool_to_the_pooled_features() -> None:
    from fewtrans_board.methods.meta.features import feature_maps, map_shape
    from fewtrans_board.methods.trained.demo_cnn import build_demo_cnn
    from fewtrans_board.testing.tiny import tiny_vit_backbone

    torch.manual_seed(0)
    cnn = build_demo_cnn().eval()
    x = torch.randn(3, 3, 32, 32, generator=generator())
    with torch.no_grad():
        maps = feature_maps(cnn, x)
        assert maps.shape == (3, 64, 8, 8) and map_shape(cnn, 32, "cpu") == (64, 8, 8)
        assert torch.allclose(maps.mean(dim=(2, 3)), cnn(x), atol=1e-6)
        vit = tiny_vit_backbone().image_encoder
        tokens = vit.forward_features(x)
        vit_maps = feature_maps(vit, x)
    assert vit_maps.shape == (3, 32, 4, 4)  # 16 patch tokens on their 4x4 grid, CLS dropped
    assert torch.equal(vit_maps[1, :, 2, 3], tokens[1, vit.num_prefix_tokens + 2 * 4 + 3])


# --- MatchingNet with full-context embeddings ---


def test_fce_support_embedding_equals_torch_bidirectional_lstm() -> None:
    torch.manual_seed(0)
    head = heads.fce_init(5)
    support = torch.randn(4, 5, generator=generator())
    lstm = nn.LSTM(5, 5, batch_first=True, bidirectional=True)
    lstm.load_state_dict({k[2:]: v for k, v in head.items() if k.startswith("g.")})
    out = lstm(support[None])[0][0]
    expected = support + out[:, :5] + out[:, 5:]
    assert torch.allclose(heads.fce_support(head, support), expected, atol=1e-6)


def test_fce_query_read_out_equals_a_plain_python_loop_on_two_supports() -> None:
    torch.manual_seed(1)
    dim = 3
    head = heads.fce_init(dim)
    context = torch.randn(2, dim, generator=generator(1))
    query = torch.randn(1, dim, generator=generator(2))
    cell = nn.LSTMCell(2 * dim, dim)
    cell.load_state_dict({k[2:]: v for k, v in head.items() if k.startswith("f.")})
    f = query[0].tolist()
    g = context.tolist()
    h, c = list(f), [0.0] * dim
    with torch.no_grad():
        for _ in range(2):  # K = number of support items
            logits = [sum(hi * gi for hi, gi in zip(h, row, strict=True)) for row in g]
            top = max(logits)
            weights = [math.exp(v - top) for v in logits]
            a = [w / sum(weights) for w in weights]
            r = [a[0] * g[0][d] + a[1] * g[1][d] for d in range(dim)]
            new_h, new_c = cell(torch.tensor([f + r]), (torch.tensor([h]), torch.tensor([c])))
            h = [x + y for x, y in zip(new_h[0].tolist(), f, strict=True)]
            c = new_c[0].tolist()
        got = heads.fce_query(head, query, context)
    assert got[0].tolist() == pytest.approx(h, abs=1e-6)


def test_matchingnet_fce_gives_log_probabilities_independent_of_the_support_listing() -> None:
    torch.manual_seed(2)
    head = {k: v.requires_grad_(True) for k, v in heads.fce_init(6).items()}
    support = torch.randn(6, 6, generator=generator(3), requires_grad=True)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    query = torch.randn(4, 6, generator=generator(4), requires_grad=True)
    logits = heads.matching_fce_logits(head, support, labels, query, 3)
    assert logits.shape == (4, 3)
    assert torch.allclose(logits.exp().sum(dim=1), torch.ones(4), atol=1e-4)
    # another listing with the same within-class order: the same class-major sequence
    order = torch.tensor([1, 0, 4, 2, 3, 5])  # class 0: 0 before 3, 1: 1 before 4, 2: 2 before 5
    again = heads.matching_fce_logits(head, support[order], labels[order], query, 3)
    assert torch.allclose(again, logits, atol=1e-6)
    # one query's scores do not depend on the others
    alone = heads.matching_fce_logits(head, support, labels, query[2:3], 3)
    assert torch.allclose(alone, logits[2:3], atol=1e-6)
    torch.nn.functional.nll_loss(logits, torch.tensor([0, 1, 2, 0])).backward()
    assert support.grad is not None and query.grad is not None
    assert head["g.weight_ih_l0"].grad is not None and head["f.weight_hh"].grad is not None


# --- RelationNet's conv relation module ---


def closerlook_side(side: int, padding: int) -> int:
    """CloserLook's ``shrink_s`` for the relation module's FC input."""
    return int((int((side - 2 + 2 * padding) / 2) - 2 + 2 * padding) / 2)


@pytest.mark.parametrize(("side", "padding"), [(7, 1), (8, 1), (6, 1), (19, 0), (14, 0)])
def test_relation_module_fc_input_matches_closerlook(side: int, padding: int) -> None:
    head = heads.relation_conv_init((4, side, side))
    assert head["fc1.weight"].shape == (8, 4 * closerlook_side(side, padding) ** 2)
    assert head["layer1.conv.weight"].shape == (4, 8, 3, 3)
    assert head["fc2.weight"].shape == (1, 8)


def sequential_relation_module(head: dict[str, torch.Tensor], padding: int) -> nn.Module:
    channels = head["layer2.conv.weight"].shape[0]
    layers: list[nn.Module] = []
    for name, cin in (("layer1", 2 * channels), ("layer2", channels)):
        conv = nn.Conv2d(cin, channels, 3, padding=padding)
        norm = nn.BatchNorm2d(channels)
        conv.load_state_dict(
            {"weight": head[f"{name}.conv.weight"], "bias": head[f"{name}.conv.bias"]}
        )
        norm.load_state_dict(
            {k: head[f"{name}.bn.{k}"] for k in ("weight", "bias", "running_mean", "running_var")},
            strict=False,
        )
        layers += [conv, norm, nn.ReLU(), nn.MaxPool2d(2)]
    fc1 = nn.Linear(*reversed(head["fc1.weight"].shape))
    fc1.load_state_dict({"weight": head["fc1.weight"], "bias": head["fc1.bias"]})
    fc2 = nn.Linear(8, 1)
    fc2.load_state_dict({"weight": head["fc2.weight"], "bias": head["fc2.bias"]})
    return nn.Sequential(*layers, nn.Flatten(), fc1, nn.ReLU(), fc2, nn.Sigmoid()).eval()


def test_relation_scores_equal_a_hand_built_module_on_class_mean_map_pairs() -> None:
    torch.manual_seed(3)
    head = heads.relation_conv_init((4, 7, 7))
    head["layer1.bn.running_mean"] = torch.randn(4, generator=generator(5))  # non-trivial stats
    head["layer2.bn.running_var"] = torch.rand(4, generator=generator(6)) + 0.5
    support = torch.randn(5, 4, 7, 7, generator=generator(7))
    labels = torch.tensor([0, 1, 1, 2, 0])
    query = torch.randn(3, 4, 7, 7, generator=generator(8))
    scores = heads.relation_conv_scores(head, support, labels, query, 3)
    module = sequential_relation_module(head, padding=1)
    with torch.no_grad():
        for qi in range(3):
            for k in range(3):
                members = [support[j] for j in range(5) if int(labels[j]) == k]
                mean = sum(members) / len(members)  # type: ignore[operator]
                expected = module(torch.cat([mean, query[qi]])[None])[0, 0]
                assert float(scores[qi, k]) == pytest.approx(float(expected), abs=1e-6)
    assert ((scores > 0) & (scores < 1)).all()


def test_relation_module_trains_with_batch_statistics_and_gradients_reach_everything() -> None:
    torch.manual_seed(4)
    head = heads.relation_conv_init((3, 4, 4))
    learned = {
        k: v.requires_grad_(True) for k, v in head.items() if not heads.is_running_statistic(k)
    }
    before = head["layer1.bn.running_mean"].clone()
    support = torch.randn(4, 3, 4, 4, generator=generator(9), requires_grad=True)
    labels = torch.tensor([0, 1, 0, 1])
    query = torch.randn(2, 3, 4, 4, generator=generator(10), requires_grad=True)
    loss = METHODS["relationnet"].loss(head, support, labels, query, torch.tensor([0, 1]), 2)
    loss.backward()
    assert support.grad is not None and query.grad is not None
    assert all(v.grad is not None and v.grad.abs().sum() > 0 for v in learned.values())
    assert not torch.equal(head["layer1.bn.running_mean"], before)  # running stats updated
    frozen = head["layer1.bn.running_mean"].clone()
    METHODS["relationnet"].logits(head, support, labels, query, 2)
    assert torch.equal(head["layer1.bn.running_mean"], frozen)  # eval: untouched


# --- MetaOptNet's Crammer-Singer SVM ---


def svm_problem(
    seed: int, n: int, d: int, m: int, spread: float
) -> tuple[torch.Tensor, torch.Tensor]:
    g = generator(seed)
    labels = torch.arange(n) % m
    centres = spread * torch.randn(m, d, generator=g, dtype=torch.float64)
    return centres[labels] + torch.randn(n, d, generator=g, dtype=torch.float64), labels


@pytest.mark.parametrize(
    ("seed", "n", "d", "m", "spread", "c"),
    [
        (0, 10, 6, 3, 4.0, 0.1),  # separable
        (1, 12, 4, 3, 0.2, 0.1),  # overlapping classes: slack is used
        (2, 25, 16, 5, 0.5, 0.1),
        (3, 9, 2, 3, 0.3, 1.0),  # fewer dimensions than samples, larger C
    ],
)
def test_svm_primal_weights_equal_sklearn_crammer_singer(seed, n, d, m, spread, c) -> None:  # type: ignore[no-untyped-def]
    from sklearn.svm import LinearSVC

    x, labels = svm_problem(seed, n, d, m, spread)
    alpha = svm.svm_dual(x, labels, m, c)
    hot = torch.nn.functional.one_hot(labels, m).double()
    assert (alpha <= c * hot + 1e-12).all() and alpha.sum(dim=1).abs().max() < 1e-12
    weights = svm.svm_weights(x, labels, m, c).numpy()
    oracle = LinearSVC(
        multi_class="crammer_singer", C=c, fit_intercept=False, tol=1e-12, max_iter=1_000_000
    ).fit(x.numpy(), labels.numpy())
    assert np.abs(weights - oracle.coef_).max() < 1e-6 * max(1.0, np.abs(oracle.coef_).max())
    if spread < 1:  # non-separable at this C: some sample sits at its bound with slack
        margins = x.numpy() @ weights.T
        true = margins[np.arange(n), labels.numpy()]
        others = np.where(hot.numpy() > 0, -np.inf, margins).max(axis=1)
        assert (true - others < 1 - 1e-6).any()


def test_svm_logits_are_differentiable_gradcheck() -> None:
    x, labels = svm_problem(4, 6, 5, 3, 1.0)
    x.requires_grad_(True)
    query = torch.randn(3, 5, generator=generator(11), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda s, q: svm.svm_logits(s, labels, q, 3), (x, query), eps=1e-6, atol=1e-6
    )


def test_metaopt_scales_the_svm_scores_and_metaopt_ridge_keeps_the_ridge_head() -> None:
    x, labels = svm_problem(5, 8, 4, 2, 1.0)
    query = torch.randn(3, 4, generator=generator(12), dtype=torch.float64)
    scale = torch.tensor([2.5], dtype=torch.float64)
    got = METHODS["metaopt"].logits({"scale": scale}, x, labels, query, 2)
    assert torch.allclose(got, 2.5 * query @ svm.svm_weights(x, labels, 2).T)
    ridge = METHODS["metaopt-ridge"].logits({"scale": scale}, x, labels, query, 2)
    assert torch.allclose(ridge, heads.ridge_logits(x, labels, query, 2, scale))


# --- MAML's linear head ---


def test_maml_linear_head_step_equals_hand_written_sgd_on_a_linear_model() -> None:
    from fewtrans_board.methods.meta.maml import maml_adapt

    g = generator(13)
    encoder = nn.Linear(4, 3).double()
    x = torch.randn(6, 4, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 1, 0, 1, 1, 0])
    head = {"weight": torch.randn(2, 3, generator=g), "bias": torch.zeros(2)}
    lr = 0.1
    fast, rows = maml_adapt(encoder, x, labels, 2, 1, lr, head)
    a, b = encoder.weight.detach().numpy(), encoder.bias.detach().numpy()
    w, c = head["weight"].double().numpy(), head["bias"].double().numpy()
    xs = x.numpy()
    features = xs @ a.T + b
    logits = features @ w.T + c
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d_logits = (p - np.eye(2)[labels.numpy()]) / len(xs)  # mean cross-entropy
    d_features = d_logits @ w
    assert rows["weight"].detach().numpy() == pytest.approx(
        w - lr * d_logits.T @ features, abs=1e-6
    )
    assert rows["bias"].detach().numpy() == pytest.approx(c - lr * d_logits.sum(0), abs=1e-6)
    assert fast.weight.detach().numpy() == pytest.approx(a - lr * d_features.T @ xs, abs=1e-6)
    assert fast.bias.detach().numpy() == pytest.approx(b - lr * d_features.sum(0), abs=1e-6)
    assert torch.equal(head["bias"], torch.zeros(2))  # the initialisation is not modified


def test_maml_adapter_starts_from_a_zero_head_without_its_checkpoint(registry) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.methods.meta.adapters import MamlAdapter, ProtoMamlAdapter
    from fewtrans_board.testing.tiny import toy_episode

    backbone = registry.model("demo-cnn.random").obj.load()
    episode = toy_episode(image_size=32)
    predictor = MamlAdapter().fit(
        backbone, episode.support, episode.class_names, MamlAdapter.Config(steps=1)
    )
    assert predictor.record is not None
    assert predictor.record["head_init"].startswith("zeros: meta-train --method maml")
    assert predictor.predict(episode.query).shape == (len(episode.query), 3)
    proto = ProtoMamlAdapter().fit(
        backbone, episode.support, episode.class_names, ProtoMamlAdapter.Config(steps=1)
    )
    assert proto.record is None and proto.predict(episode.query).shape == (len(episode.query), 3)


# --- names, registration, old checkpoints ---

DEFAULTS = ("protonet", "matchingnet", "relationnet", "metaopt", "maml")
VARIANTS = ("matchingnet-nofce", "relationnet-mlp", "metaopt-ridge", "proto-maml")


def test_every_method_is_an_adapter_and_a_meta_train_choice(registry) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.cli.meta_cmd import meta_train_command

    names = {e.obj.name for e in registry.adapters}
    assert set(DEFAULTS + VARIANTS) == set(METHODS) and set(METHODS) <= names
    choice = next(p for p in meta_train_command.params if p.name == "method")
    assert set(choice.type.choices) == set(METHODS)  # type: ignore[attr-defined]
    for name in VARIANTS:
        assert "simplified" in METHODS[name].paper or name == "proto-maml"
        assert registry.adapters.get(name).obj.paper == METHODS[name].paper
    assert "Proto-MAML" in METHODS["proto-maml"].paper


def test_checkpoints_without_a_revision_name_the_simplified_variants() -> None:
    from fewtrans_board.methods.meta.model import current_method_name

    assert current_method_name({"method": "relationnet"}) == "relationnet-mlp"
    assert current_method_name({"method": "maml"}) == "proto-maml"
    assert current_method_name({"method": "protonet"}) == "protonet"
    assert current_method_name({"method": "relationnet", "methods_revision": 2}) == "relationnet"


def test_first_order_maml_step_gives_the_head_initialisation_the_adapted_heads_gradient() -> None:
    from fewtrans_board.metatrain.episodes import TrainingEpisode
    from fewtrans_board.metatrain.train import MetaTrainSpec, _maml_step
    from fewtrans_board.methods.meta.maml import maml_adapt

    torch.manual_seed(5)
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(12, 4))
    head = {k: v.requires_grad_(True) for k, v in METHODS["maml"].init_head(4, n_way=2).items()}
    assert torch.equal(head["bias"], torch.zeros(2))
    g = generator(14)
    episode = TrainingEpisode(
        torch.randn(4, 3, 2, 2, generator=g),
        torch.tensor([0, 1, 0, 1]),
        torch.randn(2, 3, 2, 2, generator=g),
        torch.tensor([1, 0]),
    )
    spec = MetaTrainSpec(method="maml", source="digits", model="x", n_way=2, maml_steps=2)
    _maml_step(spec, encoder, [episode], head)
    fast, rows = maml_adapt(encoder, episode.support, episode.support_labels, 2, 2, 0.01, head)
    for row in rows.values():
        row.grad = None  # the inner loop's last gradient
    logits = fast(episode.query) @ rows["weight"].T + rows["bias"]  # no BatchNorm: mode moot
    torch.nn.functional.cross_entropy(logits, episode.query_labels).backward()
    assert head["weight"].grad is not None
    assert torch.allclose(head["weight"].grad, rows["weight"].grad, atol=1e-6)  # type: ignore[arg-type]
