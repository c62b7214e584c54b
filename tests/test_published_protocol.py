"""The ``published`` HPE protocol: each method's cited recipe, run as published, end to end.

A test plugin's CLIP-Adapter declares a recipe (SGD with momentum, one per-dataset value);
``evaluate --hpe published`` runs exactly that configuration, a test sub-benchmark accepts
it, and validation refuses a run whose configuration is not the recipe, or whose recorded
recipe was rewritten to match (verification then finds the installed plugin declares
another).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli, needs_plugins
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import installed_distribution
from tests.plugins.recipe_adapters import RECIPE, RecipeClipAdapter

MANIFEST = "published.parquet"
PINS = '["fewtrans-board==0.1.0", "fewtrans-recipes==0.1"]'


def test_a_published_run_evaluates_the_recipe_on_its_dataset_and_nothing_else() -> None:
    from fewtrans_board.runner.centres import recipe_centre

    centre, recipe = recipe_centre(RecipeClipAdapter, None, "digits", {}, None)
    defaults = RecipeClipAdapter.Config().to_dict()
    assert recipe is RECIPE
    assert centre.to_dict() == {**defaults, **RECIPE.values, "batch_size": 8}
    elsewhere, _ = recipe_centre(RecipeClipAdapter, "test-recipe", "clip-eurosat", {}, None)
    assert elsewhere.batch_size == 16 and elsewhere.optimizer == "sgd"
    with pytest.raises(FewtransError, match="drop --config and --centre"):
        recipe_centre(RecipeClipAdapter, None, "digits", {"lr": 0.1}, None)
    with pytest.raises(FewtransError, match="drop --config and --centre"):
        recipe_centre(RecipeClipAdapter, None, "digits", {}, "centre.json")
    with pytest.raises(FewtransError, match="its published recipes: test-recipe"):
        recipe_centre(RecipeClipAdapter, "paper", "digits", {}, None)
    schema = RecipeClipAdapter.schema()
    assert schema["recipes"] == [RECIPE.describe()]
    variant = type("Variant", (RecipeClipAdapter,), {"name": "variant"})
    assert "recipes" not in variant.schema()  # not inherited: another plugin's variant
    with pytest.raises(FewtransError, match="its published recipes: none"):
        recipe_centre(variant, None, "digits", {}, None)


class Shell:
    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, command: str, *extra: str) -> Any:
        argv = [*command.format(root=self.root).split(), *extra]
        pm = get_plugin_manager(entry_points=needs_plugins(argv), allow=["fewtrans-recipes"])
        return CliRunner().invoke(make_cli(pm), argv, catch_exceptions=False)

    def ok(self, command: str, *extra: str) -> Any:
        result = self.run(command, *extra)
        assert result.exit_code == 0, f"{command}\n{result.output}"
        return json.loads(result.output) if "--json" in command else result.output


@contextlib.contextmanager
def published_benchmark() -> Iterator[None]:
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark

    saved = dict(SUB_BENCHMARKS)
    SUB_BENCHMARKS["published-test"] = SubBenchmark(
        name="published-test",
        title="Published recipes (test)",
        description="Methods as published, on a small digits manifest.",
        manifests=(MANIFEST,),
        hpe_protocols=("published",),
        held_out=("digits",),
        recipe="test-recipe",
    )
    try:
        yield
    finally:
        SUB_BENCHMARKS.clear()
        SUB_BENCHMARKS.update(saved)


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    root = tmp_path_factory.mktemp("published")
    with (
        installed_distribution(
            root / "dist", "fewtrans-recipes", "0.1", "tests.plugins.recipe_adapters"
        ),
        published_benchmark(),
    ):
        shell = Shell(root)
        shell.ok(
            "manifest build --protocol fewtrans-varied --dataset digits --episodes 2 "
            f"--out {{root}}/leaderboard/manifests/{MANIFEST}"
        )
        yield shell


@pytest.fixture(scope="module")
def bundle(shell: Shell) -> Path:
    store = "--leaderboard {root}/leaderboard"
    shell.ok(
        "evaluate --model tiny-clip.test --adapter recipe-clip-adapter --hpe published "
        f"--manifest {{root}}/leaderboard/manifests/{MANIFEST} --out {{root}}/run "
        f"--device cpu --threads 1 --quiet {store}"
    )
    (shell.root / "submission.toml").write_text(
        '[submission]\nid = "recipe-clip-adapter--published"\nmethod = "CLIP-Adapter"\n'
        'model = "tiny-clip.test"\nadapter = "recipe-clip-adapter"\n'
        'benchmark = "published-test"\nhpe_protocol = "published"\nauthors = ["T"]\n'
        f'hardware = "CPU"\nplugins = {PINS}\n'
    )
    shell.ok(
        f"submission pack {{root}}/run --meta {{root}}/submission.toml --out {{root}}/b.zip {store}"
    )
    return shell.root / "b.zip"


@pytest.mark.slow
def test_the_recipe_is_what_the_run_records_and_validation_accepts(
    shell: Shell, bundle: Path
) -> None:
    from fewtrans_board.results.load import load_run

    record = load_run(shell.root / "run").provenance
    assert record.adapter.centre == {
        **RecipeClipAdapter.Config().to_dict(),
        **RECIPE.values,
        "batch_size": 8,
    }
    assert record.adapter.extra["recipe"] == RECIPE.describe()
    assert record.identity.extra["recipe"] == {"name": "test-recipe", "version": 1}
    assert len(record.identity.grid) == 1
    valid = shell.ok(f"submission validate {bundle} --leaderboard {{root}}/leaderboard --json")
    assert valid["runs"][0]["configurations"] == 1
    assert any("published recipe 'test-recipe'" in c for c in valid["checks"])
    store = "--leaderboard {root}/leaderboard"
    verified = shell.ok(f"submission verify {bundle} {store} --sample 1 --threads 1 --json")
    assert verified["passed"]  # the honest control of the forgeries below


def forged(bundle: Path, out: Path, change: Any, rows: tuple[str, str]) -> Path:
    """Rewrite provenance (``change``) and each row's configuration text (``rows``: old, new)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from fewtrans_board.results.shards import seal_table
    from tests.adversarial.conftest import edit_provenance, rewrite

    step = out.with_name(out.stem + "-meta.zip")
    edit_provenance(bundle, step, change)

    def relabel(name: str, data: bytes) -> bytes:
        if not name.endswith(".parquet"):
            return data
        from fewtrans_board.results.row_schema import METADATA_KEY

        table = pq.read_table(io.BytesIO(data))
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        configs = [c.replace(*rows) for c in table.column("config").to_pylist()]
        column = pa.array(configs).dictionary_encode()
        table = table.set_column(table.column_names.index("config"), "config", column)
        meta.pop("schema_version")
        buffer = io.BytesIO()
        pq.write_table(seal_table(table, meta), buffer)
        return buffer.getvalue()

    return rewrite(step, out, relabel)


LR_ROWS = ('"lr":0.01,', '"lr":0.05,')


def _lr(value: float) -> Any:
    """Move the learning rate, as a forger would: centre, grid and the HPE hash agree."""
    from fewtrans_board.hpe.protocols import get_hpe_protocol

    def change(meta: dict[str, Any]) -> None:
        if "adapter" in meta:  # a shard's provenance (run.json holds the identity only)
            meta["adapter"]["centre"]["lr"] = value
            centre, roles = meta["adapter"]["centre"], meta["hpe"]["roles"]
            meta["hpe"]["hash"] = get_hpe_protocol("published").digest_for(centre, roles)
        identity = meta.get("identity", meta)
        identity["grid"][0]["lr"] = value

    return change


@pytest.mark.slow
def test_a_configuration_that_is_not_the_recipe_is_refused(shell: Shell, bundle: Path) -> None:
    tuned = forged(bundle, shell.root / "tuned.zip", _lr(0.05), LR_ROWS)
    result = shell.run(f"submission validate {tuned} --leaderboard {{root}}/leaderboard")
    assert result.exit_code != 0
    assert "[recipe-mismatch]" in result.output and "differs from recipe 'test-recipe' in lr" in (
        result.output
    )


@pytest.mark.slow
def test_a_recipe_rewritten_to_match_passes_validation_and_fails_verification(
    shell: Shell, bundle: Path
) -> None:
    lr = _lr(0.05)

    def rewrite_recipe_too(meta: dict[str, Any]) -> None:
        lr(meta)
        if "adapter" in meta:
            meta["adapter"]["recipe"]["values"]["lr"] = 0.05
            meta["adapter"]["schema"]["recipes"][0]["values"]["lr"] = 0.05

    rewritten = forged(bundle, shell.root / "rewritten.zip", rewrite_recipe_too, LR_ROWS)
    store = "--leaderboard {root}/leaderboard"
    shell.ok(f"submission validate {rewritten} {store}")  # the recorded schema is consistent
    result = shell.run(f"submission verify {rewritten} {store} --sample 1 --threads 1 --json")
    assert result.exit_code != 0
    assert "schema-mismatch" in result.output
