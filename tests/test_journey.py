"""The submitter's journey, from an empty folder to a leaderboard entry and its site page.

Follows README and CONTRIBUTING as a new method author would: copy the example plugin,
rename it, add an adapter that trains (a learning-rate and an epoch axis), install it,
look at it, preflight it, search its HPE centre on held-out tasks, evaluate, pack, validate,
add it to a leaderboard (which verifies it in a plugin worker, as ``submission verify``
does) and build the site, under both leaderboard protocols. The plugin is "installed" by a
``*.dist-info`` folder on ``sys.path`` / ``PYTHONPATH`` (what pip writes, without pip's
minute); everything else is the real command line on small manifests of a test
sub-benchmark.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fewtrans_board.cli import make_cli, needs_plugins
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import REPO, extra_benchmark, installed_distribution, shared_folder

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "plugins" / "fewtrans-example"
SEARCH = REPO / "leaderboard" / "manifests" / "fewtrans-search--digits.parquet"
MANIFEST = "journey-varied.parquet"

RIDGE_ADAPTER = '''

class RidgeHeadPredictor:
    """Scores query features with the trained head."""

    def __init__(self, backbone: Backbone, weight: "torch.Tensor", bias: "torch.Tensor") -> None:
        self.backbone, self.weight, self.bias = backbone, weight, bias

    def predict(self, query: ImageSet) -> "torch.Tensor":
        import torch.nn.functional as F

        return F.normalize(query.features(self.backbone), dim=-1) @ self.weight + self.bias


class RidgeHeadAdapter(Adapter):
    """A linear head with an L2 penalty, trained by full-batch gradient descent."""

    name = "ridge-head"
    trains = "linear head (backbone frozen)"
    description = "L2-penalised linear head on frozen normalised features, trained by SGD."
    paper = "https://example.org/ridge-head"
    code = "https://example.org/fewtrans-ridge"
    frozen_backbone = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """Ridge-head options."""

        lr: float = hparam(0.5, "SGD learning rate.", hpe="lr")
        epochs: int = hparam(10, "Full-batch gradient steps.", hpe="epochs")
        weight_decay: float = hparam(1e-3, "L2 penalty of the weights.", min=0)

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import torch
        import torch.nn.functional as F

        features = F.normalize(support.images.features(backbone), dim=-1)
        labels = support.labels.to(features.device)
        weight = torch.zeros(features.shape[1], support.n_way, requires_grad=True)
        bias = torch.zeros(support.n_way, requires_grad=True)
        optimiser = torch.optim.SGD([weight, bias], lr=config.lr, weight_decay=config.weight_decay)
        for _ in range(config.epochs):
            optimiser.zero_grad()
            F.cross_entropy(features @ weight + bias, labels).backward()
            optimiser.step()
        return RidgeHeadPredictor(backbone, weight.detach(), bias.detach())
'''


def make_plugin(folder: Path) -> Path:
    """Copy the example plugin as ``fewtrans-ridge`` and add the ridge-head adapter."""
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (folder / "fewtrans_example").rename(folder / "fewtrans_ridge")
    project = folder / "pyproject.toml"
    project.write_text(
        project.read_text()
        .replace('name = "fewtrans-example"', 'name = "fewtrans-ridge"')
        .replace('example = "fewtrans_example"', 'ridge = "fewtrans_ridge"')
        .replace('packages = ["fewtrans_example"]', 'packages = ["fewtrans_ridge"]')
    )
    module = folder / "fewtrans_ridge" / "__init__.py"
    source = (
        module.read_text()
        .replace('name = "simpleshot"', 'name = "ridge-simpleshot"')
        .replace('"example-resnet10t.c3_in1k"', '"ridge-resnet10t.c3_in1k"')
        .replace('"simpleshot-toy"', '"ridge-simpleshot-toy"')
        .replace(
            "    register(SimpleShotAdapter)",
            "    register(SimpleShotAdapter)\n    register(RidgeHeadAdapter)",
        )
    )
    module.write_text(source + RIDGE_ADAPTER)
    return folder


def install_without_pip(project: Path) -> contextlib.AbstractContextManager[Path]:
    """What ``pip install -e`` leaves behind: the distribution and its entry point, from
    the project's own pyproject.toml, found on ``sys.path`` and by worker processes."""
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    ((entry_point, module),) = meta["entry-points"]["fewtrans_board"].items()
    return installed_distribution(project, meta["name"], meta["version"], module, entry_point)


class Journey:
    """The method author's shell: every command goes through the real command line."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, command: str, **paths: object) -> Result:
        argv = command.format(root=self.root, search=SEARCH, **paths).split()
        # As main() does: scoring commands load no third-party plugin at all.
        pm = get_plugin_manager(entry_points=needs_plugins(argv), allow=["fewtrans-ridge"])
        return CliRunner().invoke(make_cli(pm), argv, catch_exceptions=False)

    def ok(self, command: str, **paths: object) -> Result:
        result = self.run(command, **paths)
        assert result.exit_code == 0, f"{command}\n{result.output}"
        return result

    def json(self, command: str, **paths: object) -> Any:
        return json.loads(self.ok(command + " --json", **paths).output)


@pytest.fixture(scope="module")
def journey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journey]:
    """An empty folder, then the copied plugin installed and a store with a small manifest."""
    root = tmp_path_factory.mktemp("journey")
    assert not any(root.iterdir())
    with (
        install_without_pip(make_plugin(root / "fewtrans-ridge")),
        extra_benchmark("journey", MANIFEST),
    ):
        journey = Journey(root)
        journey.ok(
            "manifest build --protocol fewtrans-varied --dataset digits --episodes 3 "
            f"--out {{root}}/leaderboard/manifests/{MANIFEST}"
        )
        yield journey


RUN = "--model demo-cnn.digits --adapter ridge-head --device cpu --threads 1"


@pytest.fixture(scope="module")
def centre(journey: Journey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Look at the installed plugin, preflight it, search its centre on held-out tasks.

    Once per test run: an xdist worker that runs the other protocol reuses the centre.
    """

    def search(folder: Path) -> None:
        ridge = next(p for p in journey.json("plugins") if p["name"] == "ridge")
        assert (ridge["distribution"], ridge["version"]) == ("fewtrans-ridge", "0.1.0")
        options = journey.ok("adapters list ridge-head --options").output
        assert "    lr (float, default 0.5, > 0) [HPE lr]" in options
        assert "    weight_decay (float, default 0.001, >= 0)" in options
        report = journey.json(f"preflight {RUN} --manifest {{search}} --episodes 1")
        assert "importing fewtrans_ridge does not import torch" in report["checks"]
        journey.ok(
            f"hpe search {RUN} --manifest {{search}} --limit 2 --out {{folder}}/centre.json --json",
            folder=folder,
        )

    return shared_folder(tmp_path_factory, "journey-centre", search) / "centre.json"


@pytest.mark.parametrize("protocol", ["fewtrans-paper", "fewtrans-reference"])
def test_from_an_empty_folder_to_a_leaderboard_entry(
    journey: Journey, centre: Path, protocol: str
) -> None:
    work, ident = journey.root / protocol, f"ridge-head--{protocol}"
    store = "--leaderboard {root}/leaderboard"
    evaluated = journey.ok(
        f"evaluate {RUN} --manifest {{root}}/leaderboard/manifests/{MANIFEST} --quiet "
        f"--hpe {protocol} --centre {{centre}} --out {{work}}/run {store}",
        work=work,
        centre=centre,
    )
    assert "not submittable" not in evaluated.output, evaluated.output
    # The template fills in the benchmark, model, adapter and protocol; the author names
    # the entry (its placeholder id is refused) and pins the plugin.
    template = journey.ok(
        f"submission template --benchmark journey --model demo-cnn.digits --adapter ridge-head "
        f"--hpe {protocol}"
    ).stdout
    (work / "submission.toml").write_text(
        template.replace('"my-method--demo-cnn.digits"', f'"{ident}"').replace(
            '["fewtrans-board==0.1.0"]', '["fewtrans-board==0.1.0", "fewtrans-ridge==0.1.0"]'
        )
    )
    journey.ok(
        f"submission pack {{work}}/run --meta {{work}}/submission.toml --out {{work}}/b.zip {store}",
        work=work,
    )
    valid = journey.json(f"submission validate {{work}}/b.zip {store}", work=work)
    assert valid["ok"] and valid["runs"][0]["configurations"] == (
        15 if protocol == "fewtrans-paper" else 3
    )
    added = journey.json(
        f"leaderboard add {{work}}/b.zip {store} --sample 2 --threads 1", work=work
    )
    assert added["id"] == ident and added["status"] == "verified"
    verified = added["verification"]  # the re-run in a plugin worker, as `submission verify`
    assert verified["passed"] and len(verified["episodes"]) == 2
    journey.ok(f"site build {store} --out {{work}}/site", work=work)
    pages = "".join(p.read_text() for p in (work / "site").rglob("*.html"))
    assert ident in pages
