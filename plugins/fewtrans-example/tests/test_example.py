"""The example plugin's own tests: the contract checks any plugin should run."""

from pathlib import Path

import pytest
import torch
from fewtrans_example import RESNET10T, SimpleShotAdapter

from fewtrans_board.testing import check_adapter, check_import_is_light, check_model


def test_adapter_contract() -> None:
    report = check_adapter(SimpleShotAdapter)
    assert "determinism" in report.passed
    # The toy classes differ by their mean colour, so a nearest-centroid method gets all
    # 6 toy queries right; random logits would get about a third of them.
    assert report.details["toy_accuracy"] == pytest.approx(1.0)


def test_model_contract_with_local_weights(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    from safetensors.torch import save_file

    model = timm.create_model("resnet10t", pretrained=False)
    path = tmp_path / "resnet10t.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    report = check_model(RESNET10T, weights=path)
    assert report.details["feature_dim"] == 512


@pytest.mark.slow
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


@pytest.mark.slow
def test_toy_command_runs_simpleshot_and_refuses_bad_counts() -> None:
    """Drive the command as a user does: ``fewtrans-board simpleshot-toy``, this plugin only."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "FEWTRANS_BOARD_LOAD_PLUGINS": "fewtrans-example"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "fewtrans_board", "simpleshot-toy", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, check=False)

    result = run("--episodes", "2", "--json")
    assert result.returncode == 0, result.stderr
    # As in the contract check, every toy query is classified correctly (2 episodes x 6).
    summary = json.loads(result.stdout)
    assert summary["episodes"] == 2 and summary["accuracy"] == pytest.approx(100.0)
    refused = run("--episodes", "0")
    assert refused.returncode == 2 and "--episodes" in refused.stderr
