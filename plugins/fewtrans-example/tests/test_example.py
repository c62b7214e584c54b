"""The example plugin's own tests: the contract checks any plugin should run."""

from pathlib import Path

import pytest
import torch
from fewtrans_example import RESNET10T, SimpleShotAdapter

from fewtrans_board.testing import check_adapter, check_import_is_light, check_model


def test_adapter_contract() -> None:
    report = check_adapter(SimpleShotAdapter)
    assert "determinism" in report.passed


def test_model_contract_with_local_weights(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    from safetensors.torch import save_file

    model = timm.create_model("resnet10t", pretrained=False)
    path = tmp_path / "resnet10t.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    report = check_model(RESNET10T, weights=path)
    assert report.details["feature_dim"] == 512


def test_import_is_light() -> None:
    check_import_is_light("fewtrans_example")


def test_simpleshot_uses_nearest_centroid() -> None:
    """Queries equal to a class's support image are assigned to that class."""
    from fewtrans_board import ImageSet, SupportSet
    from fewtrans_board.testing import tiny_vit_backbone

    backbone = tiny_vit_backbone()
    torch.manual_seed(0)
    pixels = torch.randn(4, 3, 32, 32)
    support = SupportSet(ImageSet(pixels), torch.tensor([0, 1, 2, 3]), 4)
    predictor = SimpleShotAdapter().fit(
        backbone, support, ["a", "b", "c", "d"], SimpleShotAdapter.Config()
    )
    logits = predictor.predict(ImageSet(pixels.flip(0)))
    assert logits.argmax(1).tolist() == [3, 2, 1, 0]


def test_toy_command_runs_simpleshot_and_refuses_bad_counts() -> None:
    import json

    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli
    from fewtrans_board.plugins import get_plugin_manager

    cli = make_cli(get_plugin_manager(allow=["fewtrans-example"]))
    result = CliRunner().invoke(cli, ["simpleshot-toy", "--episodes", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert 0 <= json.loads(result.output)["accuracy"] <= 100
    refused = CliRunner().invoke(cli, ["simpleshot-toy", "--episodes", "0"])
    assert refused.exit_code == 2 and "--episodes" in refused.output
