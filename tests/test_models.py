"""Model families: local checkpoints equal in-memory models, preprocessing, demo weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.weights import read_state_dict
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.testing import check_model
from fewtrans_board.testing.tiny import register_tiny_clip_config


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_plugin_manager(get_plugin_manager(entry_points=False))


def save_safetensors(model: torch.nn.Module, path: Path) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def test_timm_checkpoint_gives_the_in_memory_features(registry: Registry, tmp_path: Path) -> None:
    import timm

    torch.manual_seed(0)
    model = timm.create_model("resnet10t", pretrained=False).eval()
    path = save_safetensors(model, tmp_path / "resnet10t.safetensors")
    backbone = registry.model("timm:resnet10t").obj.load(weights=path)
    pixels = torch.randn(2, 3, 64, 64)
    model.reset_classifier(0)
    with torch.no_grad():
        expected = model(pixels)
    assert torch.equal(backbone.embed(pixels), expected)
    assert backbone.weights_id.startswith("sha256:") and backbone.name == "timm:resnet10t"


def test_timm_torch_checkpoint_is_loaded_weights_only(registry: Registry, tmp_path: Path) -> None:
    import timm

    torch.manual_seed(1)
    model = timm.create_model("resnet10t", pretrained=False, num_classes=0).eval()
    path = tmp_path / "ckpt.pt"
    torch.save({"state_dict": model.state_dict()}, path)  # a headless checkpoint, wrapped
    backbone = registry.model("timm:resnet10t").obj.load(weights=path)
    pixels = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(backbone.embed(pixels), model(pixels))


def test_pickled_objects_are_refused(registry: Registry, tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"x": torch.zeros(1)}, "payload": Path("/etc")}, path)
    with pytest.raises(FewtransError, match="cannot read weights file"):
        registry.model("timm:resnet10t").obj.load(weights=path)


def test_mismatched_checkpoint_names_the_keys(registry: Registry, tmp_path: Path) -> None:
    import timm

    path = save_safetensors(
        timm.create_model("resnet18", pretrained=False), tmp_path / "r18.safetensors"
    )
    with pytest.raises(FewtransError, match=r"does not fit timm 'resnet10t'.*missing"):
        registry.model("timm:resnet10t").obj.load(weights=path)


def test_offline_hub_failure_says_how_to_fix(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    import timm

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("network is unreachable")

    monkeypatch.setattr(timm, "create_model", offline)
    with pytest.raises(FewtransError, match="--weights FILE"):
        registry.model("vit-b16.augreg-in21k").obj.load()


def test_open_clip_checkpoint_gives_the_in_memory_features(
    registry: Registry, tmp_path: Path
) -> None:
    import open_clip

    name = register_tiny_clip_config()
    torch.manual_seed(0)
    model = open_clip.create_model(name, pretrained=None).eval()
    path = save_safetensors(model, tmp_path / "clip.safetensors")
    spec = registry.model(f"open-clip:{name}").obj
    backbone = spec.load(weights=path)
    pixels = torch.randn(2, 3, 32, 32)
    tokens = open_clip.get_tokenizer(name)(["a photo of a cat."])
    with torch.no_grad():
        assert torch.equal(backbone.embed(pixels), model.encode_image(pixels))
        assert torch.equal(
            backbone.text.encode(backbone.text.tokenize(["a photo of a cat."])),
            model.encode_text(tokens),
        )
    assert backbone.text.logit_scale == pytest.approx(float(model.logit_scale.detach().exp()))
    assert check_model(spec, weights=path).passed[-1] == "text features"


def test_an_architectures_tokenizer_is_built_once_and_each_model_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import open_clip

    from fewtrans_board.models.open_clip_family import tokenizer_for

    name = register_tiny_clip_config()
    built: list[str] = []
    real_get_tokenizer = open_clip.get_tokenizer

    def counting(arch: str) -> object:
        built.append(arch)
        return real_get_tokenizer(arch)

    monkeypatch.setattr(open_clip, "get_tokenizer", counting)
    first, second = tokenizer_for(name), tokenizer_for(name)
    assert built == [name]  # the vocabulary was read once
    texts = ["a photo of a cat.", "a photo of a dog."]
    assert torch.equal(first(texts), real_get_tokenizer(name)(texts))
    assert torch.equal(second(texts), real_get_tokenizer(name)(texts))
    second.context_length = 5  # one model's setting stays its own
    assert first(texts).shape[1] == real_get_tokenizer(name).context_length
    assert second(texts).shape[1] == 5
    monkeypatch.undo()
    assert tokenizer_for(name) is not first and built == [name]  # the real factory's own entry


def test_open_clip_needs_a_tag_or_weights(registry: Registry) -> None:
    with pytest.raises(FewtransError, match="give a pretrained tag"):
        registry.model("open-clip:ViT-B-16").obj.load()
    with pytest.raises(FewtransError, match="no architecture"):
        registry.model("open-clip:NoSuchNet/openai").obj.load()


def test_open_clip_weights_of_a_tag_are_built_like_the_tag(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenAI checkpoints need QuickGELU; a local file named by its tag must get it."""
    import open_clip

    name = register_tiny_clip_config()
    tiny = open_clip.create_model(name, pretrained=None).eval()
    path = save_safetensors(tiny, tmp_path / "clip.safetensors")
    calls: list[dict[str, object]] = []
    real_create_model = open_clip.create_model

    def fake_create_model(arch: str, **kwargs: object) -> object:
        calls.append({"arch": arch, **kwargs})
        return real_create_model(name, pretrained=None)

    monkeypatch.setattr(open_clip, "create_model", fake_create_model)
    monkeypatch.setattr(open_clip, "get_tokenizer", lambda arch: open_clip.tokenizer.tokenize)
    registry.model("open-clip:ViT-B-16/openai").obj.load(weights=path)
    registry.model("open-clip:ViT-B-16/laion2b_s34b_b88k").obj.load(weights=path)
    assert [(c["pretrained"], c["force_quick_gelu"]) for c in calls] == [
        (None, True),
        (None, False),
    ]
    with pytest.raises(FewtransError, match=r"no pretrained tag 'nosuchtag'.*openai"):
        registry.model("open-clip:ViT-B-16/nosuchtag").obj.load(weights=path)


def test_families_are_listed_but_not_loadable_without_argument(registry: Registry) -> None:
    with pytest.raises(FewtransError, match="use it as 'timm:ARGUMENT'"):
        registry.models.get("timm").obj.load()
    with pytest.raises(FewtransError, match="takes no ':ARGUMENT'"):
        registry.model("demo-cnn.digits:x")


@pytest.mark.parametrize("name", ["demo-cnn.digits", "demo-cnn.random"])
def test_demo_models_pass_the_contract(registry: Registry, name: str) -> None:
    assert check_model(registry.model(name).obj).details["feature_dim"] == 64


def test_shipped_demo_weights_are_small_and_pinned(registry: Registry) -> None:
    from fewtrans_board.methods.trained.demo_cnn import SHIPPED_WEIGHTS_SHA256, weights_path
    from fewtrans_board.models.weights import file_sha256

    assert weights_path().stat().st_size < 2 * 1024 * 1024
    assert file_sha256(weights_path()) == SHIPPED_WEIGHTS_SHA256
    backbone = registry.model("demo-cnn.digits").obj.load()
    assert backbone.weights_id == f"sha256:{SHIPPED_WEIGHTS_SHA256}"


def centroid_accuracy(weights: Path) -> float:
    """Leave-one-out nearest-centroid accuracy (%) on every image of digits classes 5-9."""
    from fewtrans_board.datasets.digits import DIGITS, EVALUATION_CLASSES
    from fewtrans_board.methods.trained.demo_cnn import IMAGE_SIZE, load_pretrained

    listing = DIGITS.list_items(None)
    prep = Preprocessing.fewtrans(IMAGE_SIZE)
    items = [(item, k) for k, c in enumerate(EVALUATION_CLASSES) for item in listing[c]]
    pixels = torch.stack([prep.apply(DIGITS.reader.load_image(None, item)) for item, _ in items])
    features = torch.nn.functional.normalize(load_pretrained(weights, "cpu").embed(pixels), dim=-1)
    x, y = features.double().numpy(), np.array([k for _, k in items])
    sums = np.stack([x[y == k].sum(0) for k in range(len(EVALUATION_CLASSES))])
    counts = np.bincount(y)
    centroids = np.repeat((sums / counts[:, None])[None], len(x), axis=0)
    own = np.arange(len(x))
    centroids[own, y] = (sums[y] - x) / (counts[y, None] - 1)  # leave the query out
    distances = ((x[:, None, :] - centroids) ** 2).sum(-1)
    return float((distances.argmin(1) == y).mean() * 100)


# Retraining on another CPU follows another float trajectory. Measured: an Intel Xeon
# retrain of the shipped file differs by at most 0.15 (relative Frobenius norm, per
# tensor) and by 0.0 points of the accuracy below, an AMD EPYC retrain by 1.23 points;
# other seeds on the same machine differ by 1.4 in weights and by up to 3 points. The
# weight bound is what tells a retrain from another seed; the accuracy bound only says the
# retrained weights are as useful (a CPU's trajectory moves it by more than a point).
MAX_RELATIVE_WEIGHT_CHANGE = 0.5
MAX_ACCURACY_CHANGE = 2.5


@pytest.mark.slow
def test_retraining_reproduces_the_demo_weights_within_tolerance(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from fewtrans_board.methods.trained.demo_cnn import pretrain, weights_path

    shipped = read_state_dict(weights_path())
    retrained = pretrain()
    assert retrained.keys() == shipped.keys()
    for name, value in shipped.items():
        assert retrained[name].shape == value.shape, name
        if not value.is_floating_point():  # batch counters
            assert torch.equal(retrained[name], value), name
            continue
        change = float((retrained[name] - value).norm() / value.norm())
        assert change < MAX_RELATIVE_WEIGHT_CHANGE, (name, change)
    save_file(retrained, str(tmp_path / "retrained.safetensors"))
    ours, theirs = (
        centroid_accuracy(tmp_path / "retrained.safetensors"),
        centroid_accuracy(weights_path()),
    )
    assert abs(ours - theirs) <= MAX_ACCURACY_CHANGE, (ours, theirs)
    assert ours > 50  # five classes: far above chance


@pytest.mark.slow
def test_retraining_is_bit_identical_on_one_machine() -> None:
    from safetensors.torch import save

    from fewtrans_board.methods.trained.demo_cnn import pretrain

    first, second = pretrain(epochs=2), pretrain(epochs=2)
    assert save(first) == save(second)
    assert save(pretrain(epochs=2, seed=1)) != save(first)  # the check can fail


def test_random_twin_does_not_disturb_the_global_rng(registry: Registry) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    registry.model("demo-cnn.random").obj.load()
    assert torch.equal(torch.rand(3), expected)


def test_fewtrans_and_bscd_transforms() -> None:
    image = Image.new("RGB", (40, 20), (255, 0, 0))
    image.paste((0, 0, 255), (0, 0, 4, 20))  # a blue band on the left edge
    squash = Preprocessing.fewtrans(16)
    crop = Preprocessing.bscd(16)
    assert crop.resize == 18 and squash.resize == 16
    s, c = squash.resize_uint8(image), crop.resize_uint8(image)
    assert s.shape == c.shape == (3, 16, 16)
    assert s[2, 8, 0] > 128  # squashing keeps the blue band at the left edge
    assert c[2, 8, 0] < s[2, 8, 0]  # the centre crop cuts most of it away
    normalized = squash.apply(Image.new("RGB", (5, 5), (124, 116, 104)))
    assert np.allclose(normalized.numpy(), 0.0, atol=0.02)  # ImageNet mean colour maps to ~0


@pytest.mark.parametrize(
    ("mode", "size", "transform"),
    [
        ("RGB", (40, 20), Preprocessing.fewtrans(16)),
        ("RGB", (8, 8), Preprocessing.fewtrans(32)),  # the digits: upsampled
        ("RGB", (16, 16), Preprocessing.fewtrans(16)),  # already the size: no resize
        ("RGB", (97, 61), Preprocessing.bscd(48)),  # a 55 px resize: the crop offset 3.5 rounds
        ("RGB", (30, 30), Preprocessing("bscd", 40, 36)),  # crop larger than the resize: pads
        ("RGBA", (9, 9), Preprocessing("bscd", 13, 8)),  # an odd padding, four bands
        ("L", (5, 5), Preprocessing("bscd", 8, 3)),  # pads 5 px: 2 left and top, 3 right and bottom
        ("L", (33, 21), Preprocessing.bscd(16)),
        ("RGBA", (12, 50), Preprocessing.fewtrans(24)),
    ],
)
def test_resize_and_crop_equal_torchvision_pixel_for_pixel(
    mode: str, size: tuple[int, int], transform: Preprocessing
) -> None:
    import torchvision.transforms.functional as TF

    pixels = np.random.default_rng(sum(size)).integers(0, 256, (size[1], size[0], len(mode)))
    image = Image.fromarray(
        pixels.astype(np.uint8).squeeze(-1) if mode == "L" else pixels.astype(np.uint8), mode
    )
    expected = TF.resize(image, [transform.resize, transform.resize])
    if transform.resize != transform.image_size:
        expected = TF.center_crop(expected, [transform.image_size, transform.image_size])
    got = transform.resize_uint8(image)
    assert got.dtype == torch.uint8
    assert torch.equal(got, TF.pil_to_tensor(expected))
