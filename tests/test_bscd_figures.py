"""BSCD-FSL's figures: relative layer change (Fig. 2) and source model selection (Fig. 3)."""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fewtrans_board.analysis.delta_w import (
    block_update,
    delta_w_report,
    delta_w_run,
    layer_updates,
)
from fewtrans_board.analysis.model_selection import model_selection_report
from fewtrans_board.analysis.refit import AdaptedEpisode
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.results.load import RunResults, load_run
from fewtrans_board.results.records import adapter_records

LIBRARY = "library:demo-cnn.digits+demo-cnn.random"
REPO = Path(__file__).resolve().parents[1]

# --- Fig. 2: per-element relative change ---------------------------------------------------


def tiny_encoder() -> Any:
    """A stem, two one-layer blocks and a root-level parameter; some weights exactly zero."""
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(3, 2)
            self.blocks = nn.ModuleList([nn.Linear(2, 2), nn.LayerNorm(2)])
            self.token = nn.Parameter(torch.tensor([0.5, -2.0]))

    torch.manual_seed(0)
    model = Tiny()
    with torch.no_grad():
        model.stem.weight[0, 1] = 0.0  # a zero weight that moves
        model.stem.bias[1] = 0.0  # a zero weight that stays
        model.blocks[1].bias.zero_()  # LayerNorm: a whole zero-initial bias
    return model


def adapted_copy(model: Any) -> Any:
    import torch

    adapted = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in adapted.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
        adapted.stem.bias[1] = 0.0  # zero before and after
    return adapted


def by_hand(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, int, float]:
    """``(mean |a - i| / |i| over i != 0, count of i == 0, mean |a| over i == 0)``."""
    initial = np.concatenate([i.ravel() for i, _ in pairs]).astype(np.float64)
    adapted = np.concatenate([a.ravel() for _, a in pairs]).astype(np.float64)
    keep = initial != 0
    ratio = np.abs(adapted[keep] - initial[keep]) / np.abs(initial[keep])
    zero_change = float(np.abs(adapted[~keep]).mean()) if (~keep).any() else 0.0
    return (float(ratio.mean()) if keep.any() else math.nan), int((~keep).sum()), zero_change


def arrays(module: Any, names: tuple[str, ...]) -> list[np.ndarray]:
    return [getattr(module, n).detach().numpy().copy() for n in names]


def test_per_element_relative_change_matches_numpy_and_leaves_zero_weights_out() -> None:
    initial = tiny_encoder()
    adapted = adapted_copy(initial)
    layers = {row["layer"]: row for row in layer_updates(initial, adapted)}
    # named_modules() order: the root's own parameter, the stem, each block's module
    assert list(layers) == ["token", "stem", "blocks.0", "blocks.1"]
    for name, module_names in (
        ("stem", ("weight", "bias")),
        ("blocks.0", ("weight", "bias")),
        ("blocks.1", ("weight", "bias")),
    ):
        before = arrays(initial.get_submodule(name), module_names)
        after = arrays(adapted.get_submodule(name), module_names)
        mean, zeros, zero_change = by_hand(list(zip(before, after, strict=True)))
        assert layers[name]["bscd_relative"] == pytest.approx(mean, rel=1e-12)
        assert layers[name]["zero_initial"] == zeros
        assert layers[name]["zero_change"] == pytest.approx(zero_change, rel=1e-12)
    assert layers["stem"]["zero_initial"] == 2 and layers["stem"]["elements"] == 8
    assert layers["blocks.1"]["zero_initial"] == 2  # LayerNorm's zero bias is left out
    token = np.array([0.5, -2.0])
    moved = adapted.token.detach().numpy().astype(np.float64)
    assert layers["token"]["bscd_relative"] == pytest.approx(
        float(np.mean(np.abs(moved - token) / np.abs(token))), rel=1e-6
    )
    # the ratio is not the ratio of norms (FewTrans's 'relative')
    block = block_update(initial.blocks[0], adapted.blocks[0])
    assert block["bscd_relative"] == pytest.approx(layers["blocks.0"]["bscd_relative"])
    assert block["bscd_relative"] != pytest.approx(block["relative"])


def test_a_layer_that_starts_at_zero_everywhere_has_no_value() -> None:
    import torch
    from torch import nn

    initial = nn.Linear(2, 2)
    with torch.no_grad():
        initial.weight.zero_()
        initial.bias.zero_()
    adapted = copy.deepcopy(initial)
    with torch.no_grad():
        adapted.weight.fill_(0.25)
    (row,) = layer_updates(nn.Sequential(initial), nn.Sequential(adapted))
    assert math.isnan(row["bscd_relative"])
    assert row["zero_initial"] == 6 and row["zero_change"] == pytest.approx(4 * 0.25 / 6)


def test_delta_w_report_draws_bscd_bars_per_layer_and_keeps_every_measure() -> None:
    initial = tiny_encoder()
    backbone = SimpleNamespace(image_encoder=initial)
    episodes = [
        AdaptedEpisode(e, backbone, adapted_copy(initial), None, 1.0)  # type: ignore[arg-type]
        for e in (3, 7)
    ]
    description = {"run": "r", "adapter": "finetune", "dataset": "tiny", "episodes": [3, 7]}
    result = delta_w_run(description, episodes)
    assert result["layers"]["names"] == ["token", "stem", "blocks.0", "blocks.1"]
    assert result["layers"]["zero_initial"] == [0, 2, 0, 2]
    expected = [row["bscd_relative"] for row in layer_updates(initial, episodes[0].encoder)]
    assert result["layers"]["bscd_relative"]["mean"] == pytest.approx(expected)
    assert len(result["bscd_relative"]["mean"]) == len(result["l2"]["mean"]) == 2  # blocks
    data, svg = delta_w_report([result], "bscd-relative")
    assert data["measure"] == "bscd-relative" and "zero_rule" in data["paper"]["bscd_relative"]
    assert svg.startswith("<svg") and svg.count("<rect") == 4  # one bar per layer
    assert "finetune / tiny, blocks.1:" in svg
    _, lines = delta_w_report([result], "l2")
    assert "<polyline" in lines and "<rect" not in lines


# --- Fig. 3: source model selection ------------------------------------------------------


def _run(registry: Any, dataset: str, out: Path, **spec: Any) -> RunResults:
    from fewtrans_board.episodes.build import build_manifest
    from fewtrans_board.episodes.protocols import get_protocol
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    specs = {entry.name: entry.obj for entry in registry.datasets}
    manifest = out.with_suffix(".parquet")
    protocol = get_protocol("fewtrans-fixed").with_overrides(ways=2, shots=2, queries=2)
    build_manifest(specs[dataset], None, protocol.with_overrides(episodes=3)).write(manifest)
    run_spec = RunSpec(model=LIBRARY, adapter="ims-f", manifest=str(manifest), threads=1, **spec)
    run_evaluation(run_spec, registry, out, progress=False)
    return load_run(out)


@pytest.fixture(scope="module")
def ims_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResults]:
    """IMS-f on a 2-model library: digits with a 2-configuration grid, digits-5-9 with one.

    Three 2-way 2-shot episodes each, one or two fine-tuning steps per model (about 6 s).
    """
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    root = tmp_path_factory.mktemp("ims")
    return {
        "digits": _run(registry, "digits", root / "digits", hpe="sweep", sweep={"epochs": [1, 2]}),
        "digits-5-9": _run(
            registry, "digits-5-9", root / "five", hpe="single", config={"epochs": 1}
        ),
    }


def hand_counts(run: Path, config: int | None = None) -> dict[str, Any]:
    """Counts from the stored records, read through the public reader."""
    selected: Counter[int] = Counter()
    picks: Counter[int] = Counter()
    layers: Counter[tuple[int, int]] = Counter()
    fits = 0
    models: list[str] = []
    for per_config in adapter_records(run).values():
        for index, record in per_config.items():
            if config is not None and index != config:
                continue
            fits += 1
            models = record["models"]
            pairs = [(s["model"], s["layer"]) for s in record["selected"]]
            selected.update({m for m, _ in pairs})
            picks.update(m for m, _ in pairs)
            layers.update(set(pairs))
    return {
        "fits": fits,
        "models": models,
        "selected": [selected[m] for m in range(len(models))],
        "picks": [picks[m] for m in range(len(models))],
        "frequency": [selected[m] / fits for m in range(len(models))],
        "layers": layers,
    }


def test_selection_frequencies_are_the_counts_of_the_stored_records(
    ims_runs: dict[str, RunResults],
) -> None:
    runs = list(ims_runs.values())
    data, svg = model_selection_report(runs)
    assert [d["dataset"] for d in data["datasets"]] == ["digits", "digits-5-9"]
    for entry, run in zip(data["datasets"], runs, strict=True):
        expected = hand_counts(run.path)
        assert entry["models"] == expected["models"] == ["demo-cnn.digits", "demo-cnn.random"]
        assert entry["episodes"] == 3
        assert entry["fits"] == expected["fits"] == (6 if entry["dataset"] == "digits" else 3)
        assert entry["selected"] == expected["selected"]
        assert entry["picks"] == expected["picks"]
        assert entry["frequency"] == pytest.approx(expected["frequency"])
        for m, row in enumerate(entry["layer_selected"]):
            assert row == [expected["layers"][(m, layer)] for layer in range(len(row))]
        assert sum(entry["models_per_fit"].values()) == entry["fits"]
        assert sum(entry["first"]) == entry["fits"]
    assert [r["run"] for r in data["runs"]] == [str(r.path) for r in runs]
    assert data["provenance"]["inputs"]["runs"] == [str(r.path) for r in runs]
    assert svg.startswith("<svg") and "Frequency of source model selection" in svg
    assert svg.count("<rect") == 4  # one bar per dataset and model (zero-height for 0)
    # one configuration: one fit per episode
    one, _ = model_selection_report([ims_runs["digits"]], config_index=1)
    expected = hand_counts(ims_runs["digits"].path, config=1)
    assert one["datasets"][0]["fits"] == 3 and one["config_index"] == 1
    assert one["datasets"][0]["selected"] == expected["selected"]


def test_model_selection_refuses_what_it_cannot_count(ims_runs: dict[str, RunResults]) -> None:
    digits = ims_runs["digits"]
    with pytest.raises(FewtransError, match=r"--config-index 2 is outside 0\.\.1"):
        model_selection_report([digits], config_index=2)
    no_records = [{k: v for k, v in m.items() if k != "adapter_records"} for m in digits.shard_meta]
    with pytest.raises(FewtransError, match="recorded no model selection"):
        model_selection_report([replace(digits, shard_meta=no_records)])
    other = copy.deepcopy(digits.shard_meta)
    for per_config in other[0]["adapter_records"].values():
        for record in per_config.values():
            record["models"] = ["demo-cnn.digits", "another"]
    with pytest.raises(FewtransError, match="different libraries"):
        model_selection_report([digits, replace(digits, shard_meta=other)])


def test_analyze_model_selection_end_to_end(
    ims_runs: dict[str, RunResults], invoke: Any, tmp_path: Path
) -> None:
    paths = [str(r.path) for r in ims_runs.values()]
    result = invoke(["analyze", "model-selection", *paths, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "model-selection.json").read_text())
    assert (tmp_path / "model-selection.svg").read_text().startswith("<svg")
    assert data["analysis"] == "model-selection" and data["config_index"] is None
    for entry, run in zip(data["datasets"], ims_runs.values(), strict=True):
        freq = hand_counts(run.path)["frequency"]
        assert entry["frequency"] == pytest.approx(freq)
        assert f"{entry['dataset']} (3 episodes, {entry['fits']} fits): " in result.output
        assert f"demo-cnn.digits {freq[0]:.2f}, demo-cnn.random {freq[1]:.2f}" in result.output
    one = ["--config-index", "0", "--json", "--out", str(tmp_path / "one")]
    as_json = invoke(["analyze", "model-selection", paths[0], *one])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["datasets"][0]["fits"] == 3
    stored = REPO / "leaderboard" / "results" / "finetune--demo-cnn"
    refused = invoke(["analyze", "model-selection", str(stored), "--out", str(tmp_path / "x")])
    assert refused.exit_code == 1 and "recorded no model selection" in refused.output
    assert "Traceback" not in refused.output and not (tmp_path / "x").exists()
