"""No command answers bad input with a traceback: a sweep of the whole click tree.

Every command, built-in or from the example plugin, gets a valid baseline invocation; each
of its options and arguments is then replaced by invalid values generated from its type
(wrong type, zero, negative, out of range, empty, a missing path, a file where a folder is
expected and the reverse, a path that cannot be created) or, for free-text parameters,
from the table below (unknown names, malformed pairs, out-of-range hyperparameters). Every
variant must exit non-zero with exactly one ``Error:`` line that names the parameter or
the value, print no traceback, report no bug ("failed unexpectedly"), and write nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli
from fewtrans_board.cli.groups import DeviceType, FiniteFloatRange, OutputPath
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import REPO, extra_benchmark

MANIFESTS = REPO / "leaderboard" / "manifests"
SEARCH = MANIFESTS / "fewtrans-search--digits.parquet"
PINS = '["fewtrans-board==0.1.0"]'


@dataclass
class Workspace:
    """A folder holding everything the baselines need; the sweep checks nothing changes."""

    root: Path
    cli: click.Group

    def path(self, *parts: str) -> str:
        return str(self.root.joinpath(*parts))

    def invoke(self, args: list[str]) -> tuple[int, str]:
        result = CliRunner().invoke(self.cli, args, catch_exceptions=False)
        return result.exit_code, result.output


def _ok(ws: Workspace, command: str) -> None:
    code, output = ws.invoke(command.format(root=ws.root).split())
    assert code == 0, f"{command}\n{output}"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A tiny manifest, runs, a bundle, a store with the entry, a git checkout, an unlearned CLIP."""
    root = tmp_path_factory.mktemp("sweep")
    with extra_benchmark("sweep", "sweep.parquet"), pytest.MonkeyPatch.context() as env:
        # unlearn's importance cache and store of unlearned models: inside the workspace, so
        # a variant that writes to either before refusing is caught.
        env.setenv("FEWTRANS_BOARD_CACHE", str(root / "cache"))
        env.setenv("FEWTRANS_BOARD_UNLEARNED", str(root / "unlearned-store"))
        yield from _workspace(root)


def _workspace(root: Path) -> Iterator[Workspace]:
    ws = Workspace(root, make_cli(get_plugin_manager(allow=["fewtrans-example"])))
    for folder in ("folder", "cwd", "store/manifests"):
        (root / folder).mkdir(parents=True)
    (root / "file.txt").write_text("not what anything expects\n")
    _ok(ws, "manifest build --protocol fewtrans-varied --dataset digits --episodes 3 "
        "--out {root}/store/manifests/sweep.parquet")  # fmt: skip
    evaluate = (
        "evaluate --model demo-cnn.digits --manifest {root}/store/manifests/sweep.parquet "
        "--hpe fewtrans-reference --device cpu --threads 1 --quiet --adapter mean-centroid"
    )
    _ok(ws, evaluate + " --out {root}/runs/a")
    _ok(ws, evaluate + " --config normalize=true --out {root}/runs/b")
    (root / "meta.toml").write_text(
        '[submission]\nid = "sweep-entry"\nmethod = "Mean centroid"\nmodel = "demo-cnn.digits"\n'
        'adapter = "mean-centroid"\nbenchmark = "sweep"\nhpe_protocol = "fewtrans-reference"\n'
        f'authors = ["Sweep"]\nhardware = "CPU"\nplugins = {PINS}\n'
    )
    _ok(ws, "submission pack {root}/runs/a --meta {root}/meta.toml --out {root}/bundle.zip "
        "--leaderboard {root}/store")  # fmt: skip
    shutil.copytree(root / "store", root / "empty-store")
    _ok(ws, "leaderboard add {root}/bundle.zip --leaderboard {root}/store")
    repo = root / "repo"
    shutil.copytree(root / "empty-store", repo / "leaderboard")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    _zipf_runs(ws)
    _ok(ws, "sweep --model demo-cnn.digits --manifest {root}/store/manifests/sweep.parquet "
        "--adapter mean-centroid --grid normalize=false,true --device cpu --threads 1 --quiet "
        "--out {root}/sweeprun")  # fmt: skip
    # IMS-f's recorded selections (what 'analyze model-selection' reads): a 2-model library
    _ok(ws, f"evaluate --model {IMS_LIBRARY} --adapter ims-f --hpe single --config epochs=1 "
        "--manifest {root}/store/manifests/sweep.parquet --limit 2 --device cpu --threads 1 "
        "--quiet --out {root}/imsrun")  # fmt: skip
    _unlearned_stand_in(root / "unlearned.safetensors")
    yield ws


def _zipf_runs(ws: Workspace) -> None:
    """With runs/a, mean-centroid and simpleshot runs on three datasets (what zipf needs)."""
    manifests = {"digits": "{root}/store/manifests/sweep.parquet"}
    for dataset in ("digits-0-4", "digits-5-9"):
        manifests[dataset] = f"{{root}}/zipf-manifests/{dataset}.parquet"
        _ok(ws, f"manifest build --protocol fewtrans-fixed --dataset {dataset} --ways 2 "
            f"--shots 1 --queries 1 --episodes 1 --out {manifests[dataset]}")  # fmt: skip
    for dataset, manifest in manifests.items():
        for adapter in ("mean-centroid", "simpleshot")[dataset == "digits" :]:
            # --leaderboard: the eligibility check reads this store's one manifest only
            _ok(ws, f"evaluate --model demo-cnn.digits --manifest {manifest} --device cpu "
                f"--hpe fewtrans-reference --threads 1 --quiet --adapter {adapter} "
                f"--leaderboard {{root}}/store --out {{root}}/zipf/{adapter}--{dataset}")  # fmt: skip


def _unlearned_stand_in(weights: Path) -> None:
    """demo-clip.digits's own weights recorded as its unlearning of digits-5-9 (tkl's input).

    The sweep checks how ``tkl`` handles its input, not unlearning (tests/test_unlearning.py
    runs the real SSD); a real run's importances over 900 images would cost 10-60 s here.
    """
    from fewtrans_board.models.unlearned_records import SCHEMA, write_record
    from fewtrans_board.models.weights import file_sha256
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.unlearning.run import save_weights

    base = Registry.from_plugin_manager(get_plugin_manager()).model("demo-clip.digits")
    model = base.obj.load(None, "cpu").text.model  # type: ignore[union-attr]
    save_weights(model, weights)
    name = "demo-clip.digits+unlearn:digits-5-9"
    record = {"schema": SCHEMA, "name": name, "base_model": "demo-clip.digits"}
    write_record(weights, {**record, "weights": {"sha256": file_sha256(weights)}})


IMS_LIBRARY = "library:demo-cnn.digits+demo-cnn.random"
RUN = "--model demo-cnn.digits --device cpu --threads 1 --adapter linear-probe"
REFIT = (
    "--manifest {root}/store/manifests/sweep.parquet --episodes 1 --seed 0 --config-index 0 "
    "--device cpu --out {root}/new"
)
CLIP = "--model demo-clip.digits --forget digits-5-9 --device cpu"
BASELINES: dict[str, tuple[str, str]] = {
    "plugins": ("", ""),
    "sweep": (
        "",
        f"{RUN} --manifest {{root}}/store/manifests/sweep.parquet --grid epochs=1,2 --limit 1 "
        "--shards 1 --out {root}/new --quiet",
    ),
    "analyze cross-validation": (
        "{root}/sweeprun",
        "--manifest {root}/store/manifests/sweep.parquet --folds 2 --limit 1 --device cpu "
        "--out {root}/new",
    ),
    "analyze grid-spacing": (
        "",
        f"{RUN} --manifest {{root}}/store/manifests/sweep.parquet --hpe fewtrans-reference "
        "--spacing 3 --config epochs=1 --limit 1 --runs-out {root}/new-runs --out {root}/new",
    ),
    "datasets list": ("digits", ""),
    "datasets scan": ("digits", "--no-verify-images"),
    "models list": ("demo-*", ""),
    "adapters list": ("linear-*", "--options"),
    "manifest build": (
        "",
        "--protocol fewtrans-fixed --dataset digits --ways 5 --shots 1 --queries 2 --episodes 2 "
        "--seed 0 --block 0 --out {root}/new",
    ),
    "manifest show": ("{root}/store/manifests/sweep.parquet", ""),
    "manifest verify": ("{root}/store/manifests/sweep.parquet", ""),
    "evaluate": (
        "",
        f"{RUN} --manifest {{root}}/store/manifests/sweep.parquet --out {{root}}/new --quiet "
        "--hpe fewtrans-reference --shards 1 --limit 1 --executor inline --workers 1 "
        "--leaderboard {root}/store",
    ),
    "results summary": ("{root}/runs/a", "--ddof 1"),
    "hpe grid": ("", "--adapter linear-probe --hpe fewtrans-paper"),
    "hpe search": (
        "",
        f"{RUN} --manifest {SEARCH} --limit 1 --config epochs=1 --out {{root}}/new",
    ),
    "preflight": (
        "",
        f"{RUN} --manifest {{root}}/store/manifests/sweep.parquet --episodes 1 "
        "--hpe fewtrans-reference",
    ),
    "demo": ("", "--out {root}/new --episodes 1 --adapters mean-centroid --quiet"),
    "submission template": ("", ""),
    "submission pack": (
        "{root}/runs/a",
        "--meta {root}/meta.toml --out {root}/new.zip --leaderboard {root}/store",
    ),
    "submission validate": ("{root}/bundle.zip", "--leaderboard {root}/store"),
    "submission verify": (
        "{root}/bundle.zip",
        "--leaderboard {root}/store --sample 1 --seed 0123456789abcdef --device cpu --threads 1",
    ),
    "leaderboard add": (
        "{root}/bundle.zip",
        "--leaderboard {root}/empty-store --sample 1 --seed 0123456789abcdef",
    ),
    "leaderboard check": ("sweep-entry", "--leaderboard {root}/store"),
    "leaderboard check-pr": (
        "",
        "--repo {root}/repo --base HEAD --head HEAD --store leaderboard",
    ),
    "leaderboard fetch-plugins": (
        "",
        "--repo {root}/repo --base HEAD --head HEAD --store leaderboard --into {root}/new "
        "--no-index",
    ),
    "leaderboard record-status": ("{root}/folder", "--leaderboard {root}/empty-store"),
    "leaderboard pr-comment": ("{root}/runs/a/run.json", "--run-url https://ci.example/runs/1"),
    "leaderboard rebuild": ("", "--leaderboard {root}/store --check"),
    "leaderboard reverify": ("sweep-entry", "--leaderboard {root}/store --plan"),
    "leaderboard migrate-blobs": ("", "--leaderboard {root}/store"),
    "leaderboard export-blobs": ("sweep-entry", "--leaderboard {root}/store --to {root}/new"),
    "leaderboard publish-blobs": ("", "--repo {root}/repo --store leaderboard --since HEAD"),
    "sub-benchmarks": ("", ""),
    "compare": ("{root}/runs/a {root}/runs/b", "--seed 0"),
    "site build": ("", "--leaderboard {root}/store --out {root}/new --results {root}/runs/a"),
    "simpleshot-toy": ("", "--episodes 1 --seed 0"),
    "analyze sensitivity": (f"{REPO}/leaderboard/results", "--out {root}/new"),
    "analyze zipf": (
        "{root}/zipf {root}/runs/a",
        "--finetune simpleshot --zero-shot mean-centroid --out {root}/new",
    ),
    "analyze delta-w": ("{root}/runs/a", REFIT),
    "analyze cka": ("{root}/runs/a", REFIT),
    "analyze model-selection": ("{root}/imsrun", "--config-index 0 --out {root}/new"),
    "meta-train": (
        "",
        "--method protonet --source digits --model demo-cnn.random --epochs 1 "
        "--episodes-per-epoch 1 --ways 2 --shots 1 --queries 1 --lr 0.001 --seed 0 "
        "--preprocessing fewtrans --device cpu --quiet --out {root}/new.safetensors",
    ),
    "unlearn": (
        "",
        f"{CLIP} --retain digits-0-4 --alpha 30 --lambda 1 --batch-size 64 "
        "--out {root}/new.safetensors",
    ),
    "tkl": ("", f"{CLIP} --validation digits-0-4 --unlearned {{root}}/unlearned.safetensors"),
    "reproduce": ("fewtrans:table-5", "--plan --work {root}/new --row Linear --dataset dtd"),
}
"""``{command path: (arguments, options)}``: valid invocations of every command."""


def baseline(ws: Workspace, command: str) -> tuple[list[str], list[str]]:
    arguments, options = BASELINES[command]
    return arguments.format(root=ws.root).split(), options.format(root=ws.root).split()


def free_text_values(ws: Workspace) -> dict[str, list[str]]:
    """Invalid values of parameters whose type accepts any text, by parameter name.

    A path parameter listed here gets these values on top of those its type generates
    (e.g. a folder that exists but holds no runs).
    """
    datasets = ["no-such-dataset", "", ",", "digits-5-9", "digits-0-4,no-such-dataset"]
    return {
        "model": ["no-such-model", "", "timm:", "timm:no_such_architecture"],
        "adapter": ["no-such-adapter", ""],
        "hpe": ["no-such-protocol", ""],
        "protocol_name": ["no-such-protocol", ""],
        "dataset_name": ["no-such-dataset", ""],
        "dataset": ["no-such-dataset", ""],
        "config": [
            "lr_head",
            "=1",
            "no_such_key=1",
            "lr_head=-0.2",
            "lr_head=0",
            "epochs=0",
            "epochs=-1",
            "lr_head=nan",
            "epochs=1.5",
            "batch_size=x",
        ],
        "shard": ["x", "1/0", "3/2", "-1/2", "1/1"],
        "grid": [
            *["epochs", "=1", "no_such=1,2", "epochs=0,1", "epochs=1,1", "lr_head=nan,1"],
            *["epochs=1,,2", "epochs="],
        ],
        # unlearn's baseline forgets digits-5-9 from demo-clip.digits: the oracle must exist
        "match_oracle": ["no-such-model", "", "timm:"],
        # tkl's baseline measures the default strength's record; no such variant was written
        "variant": ["tkl", "tkl0", "tkl101", "x", "", "oracle"],
        # the evaluate baseline runs fewtrans-reference: any recipe is refused there
        "recipe": ["no-such-recipe", ""],
        "roots": ["digits", f"no-such-dataset={ws.path('folder')}", f"digits={ws.path('nothing')}"],
        "adapters": ["no-such-adapter", ",", ""],
        "target": ["no-such-target", "", "fewtrans:", "fewtrans:table-99"],
        "rows": ["no-such-row", ""],
        "datasets": ["no-such-dataset", "", "digits"],
        "files": ["x", "=y", "x="],
        "swaps": ["x", "=y", "x="],
        "build_date": ["2026-13-45", "x", ""],
        "benchmark": ["no-such-benchmark", ""],
        "idents": ["no-such-entry", ""],
        "base": ["no-such-ref"],
        "head": ["no-such-ref"],
        "store_folder": ["no-such-folder", "../.."],
        "ident": ["no-such-id", "../escape"],
        "name": ["no-such-dataset"],
        "pattern": ["no-such-name", ""],
        "max_memory": ["x", "", "0", "-4GiB", "150%", "0%"],
        "runs": [ws.path("folder"), ws.path("file.txt")],
        # the baseline compares simpleshot (as the fine-tune) with mean-centroid
        "finetune": ["no-such-adapter", "", "mean-centroid", "linear-probe"],
        "zero_shot": ["no-such-adapter", "", "simpleshot"],
        "source": ["no-such-dataset", ""],
        # the baselines forget digits-5-9 and retain (unlearn) or validate on (tkl) digits-0-4
        "forget": ["no-such-dataset", "", "digits-0-4"],
        "retain": datasets,
        "validation": datasets,
        "wordnet": [ws.path("folder")],
        "verification_seed": ["0", "x" * 16, "0" * 129, ""],
        "secret": ["FEWTRANS_SWEEP_UNSET_VARIABLE", ""],
        "find_links": [ws.path("nothing")],
        # blob locations: a folder or an fsspec URL; one to read from must exist
        "blobs_to": ["", "no-such-scheme://x", "://x", ws.path("file.txt")],
        "to_location": ["", "no-such-scheme://x", ws.path("file.txt")],
        "blobs_from": ["", ws.path("nothing"), "no-such-scheme://x", ws.path("file.txt")],
        "from_location": ["", ws.path("nothing"), "no-such-scheme://x"],
        "since": ["no-such-ref"],
        "run_url": ["http://ci.example/1", "javascript:alert(1)", "https://x y"],
        "entries": ["no-such-id", "../escape"],
    }


def typed_values(param: click.Parameter, ws: Workspace) -> list[str] | None:
    """Invalid values generated from a parameter's type (``None``: free text, see table)."""
    kind = param.type
    missing, folder, file = ws.path("nothing"), ws.path("folder"), ws.path("file.txt")
    if isinstance(kind, click.IntRange):
        values = ["x", "", "1.5"]
        values += [str(kind.min - 1)] if kind.min is not None else ["-1"]
        return values + ([str(kind.max + 1)] if kind.max is not None else [])
    if isinstance(kind, FiniteFloatRange):
        values = ["x", "nan"]
        values += [str(kind.min - 1)] if kind.min is not None else []
        return values + ([str(kind.max + 1)] if kind.max is not None else [])
    if isinstance(kind, click.Choice):
        return ["no-such-choice"]
    if isinstance(kind, DeviceType):
        return ["tpu", "", "cuda:99", "meta"]
    if isinstance(kind, OutputPath):
        values = ["", ws.path("file.txt", "below")]
        return values + ([folder] if not kind.dir_okay else [file])
    if isinstance(kind, click.Path):
        values = [missing] if kind.exists else []
        # Where a file is expected: a folder, and a file with the wrong content.
        values += [folder, file] if not kind.dir_okay else []
        return values + ([file] if not kind.file_okay else [])
    if isinstance(kind, (click.types.IntParamType, click.types.FloatParamType)):
        return ["x", "-1"]
    return None


@pytest.fixture(autouse=True)
def build_cache_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's builds get an empty cache of their own (outside the workspace), so a
    baseline does the same work whichever test ran before it."""
    monkeypatch.setenv("FEWTRANS_BUILD_CACHE", str(tmp_path / "build-cache"))


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Size and mtime of everything under ``root`` (git's own bookkeeping excluded)."""
    found = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if name != ".git"]
        for name in (*folders, *files):
            if name == ".git":
                continue
            path = os.path.join(folder, name)
            facts = os.stat(path)
            found[os.path.relpath(path, root)] = (facts.st_size, facts.st_mtime_ns)
    return found


def walk(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if command.hidden:  # a former name: same command and parameters as the new one
            continue
        path = f"{prefix} {name}".strip()
        if isinstance(command, click.Group):
            yield from walk(command, path)
        else:
            yield path, command


def swept(param: click.Parameter) -> bool:
    """Flags take no value; hidden options are former spellings of swept ones."""
    return not (isinstance(param, click.Option) and (param.is_flag or param.count or param.hidden))


@pytest.mark.slow
def test_every_command_has_a_baseline_and_every_parameter_invalid_values(ws: Workspace) -> None:
    table = free_text_values(ws)
    commands = dict(walk(ws.cli))
    assert sorted(commands) == sorted(BASELINES), "add the command to BASELINES"
    untyped = [
        f"{path} {param.name}"
        for path, command in commands.items()
        for param in command.params
        if swept(param) and typed_values(param, ws) is None and param.name not in table
    ]
    assert not untyped, f"add invalid values for {untyped} to free_text_values()"


@pytest.mark.slow
def test_every_numeric_option_declares_its_range(ws: Workspace) -> None:
    unranged = [
        f"{path} {param.name}"
        for path, command in walk(ws.cli)
        for param in command.params
        if type(param.type) in (click.types.IntParamType, click.types.FloatParamType)
        or (
            isinstance(param.type, click.FloatRange)
            and not isinstance(param.type, FiniteFloatRange)
        )
    ]
    assert not unranged, f"declare a click.IntRange / FiniteFloatRange for {unranged}"


def _mentions(line: str, param: click.Parameter, value: str) -> bool:
    names = [*getattr(param, "opts", []), str(param.name), str(param.name).replace("_", "-")]
    if param.human_readable_name:
        names.append(param.human_readable_name)
    parts = [value or "''", *value.replace(":", "=").replace("/", "=").split("=")]
    return any(n and n.lower() in line.lower() for n in names) or any(
        len(p) >= 2 and p in line for p in parts
    )


FORM_FIELDS = {("submission template", "model"), ("submission template", "adapter")}
"""Values a command writes into a form without looking them up: a plugin's model and adapter
names are known to the sandboxed worker only (pack and validate check them)."""


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(BASELINES))
def test_invalid_input_gets_one_line_and_changes_nothing(
    ws: Workspace, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ws.root / "cwd")
    arguments, options = baseline(ws, command)
    target = dict(walk(ws.cli))[command]
    arguments_params = [p for p in target.params if isinstance(p, click.Argument)]
    failures = []
    for param in (p for p in target.params if swept(p) and (command, p.name) not in FORM_FIELDS):
        typed, table = typed_values(param, ws), free_text_values(ws)
        name = str(param.name)
        values = table[name] if typed is None else typed + table.get(name, [])
        for value in values:
            if isinstance(param, click.Option):
                args = [*arguments, *options, param.opts[0], value]
            elif param.nargs == -1:
                args = [value, *options]
            else:
                index = arguments_params.index(param)
                args = [*arguments[:index], value, *arguments[index + 1 :], *options]
            before = snapshot(ws.root)
            code, output = ws.invoke([*command.split(), *args])
            errors = [line for line in output.splitlines() if line.startswith("Error:")]
            problem = None
            if code == 0:
                problem = "accepted"
            elif "Traceback" in output or "failed unexpectedly" in output:
                problem = "traceback or unexpected failure"
            elif len(errors) != 1:
                problem = f"{len(errors)} 'Error:' lines"
            elif not _mentions(errors[0], param, value):
                problem = "the error names neither the parameter nor the value"
            elif snapshot(ws.root) != before:
                problem = "wrote files"
            if problem:
                failures.append(f"{command} {param.name}={value!r}: {problem}\n{output}")
    assert not failures, "\n".join(failures)


SLOW_BASELINES = {"submission verify", "tkl", "unlearn"}
"""9-20 s each on CPU; tests/test_unlearning.py and the submission tests run these commands."""
BROKEN_BASELINES: dict[str, str] = {}
"""Baselines that fail for a bug outside the sweep (strict xfail: remove once fixed)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(c, marks=pytest.mark.xfail(reason=BROKEN_BASELINES[c], strict=True))
        if c in BROKEN_BASELINES
        else c
        for c in sorted(set(BASELINES) - SLOW_BASELINES)
    ],
)
def test_every_baseline_succeeds(
    ws: Workspace, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing baseline would make every variant fail for its reason, proving nothing."""
    monkeypatch.chdir(ws.root / "cwd")
    arguments, options = baseline(ws, command)
    # outputs and the store 'leaderboard add' fills go elsewhere: the sweep needs them as they are
    shutil.copytree(ws.root / "empty-store", tmp_path / "empty-store")
    args = [
        a.replace(str(ws.root / "new"), str(tmp_path / "new")).replace(
            str(ws.root / "empty-store"), str(tmp_path / "empty-store")
        )
        for a in [*arguments, *options]
    ]
    before = snapshot(ws.root)
    code, output = ws.invoke([*command.split(), *args])
    assert code == 0, output
    assert snapshot(ws.root) == before


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("--root digits-0-4={root}/folder", "'digits-0-4' is embedded in its package"),
        ("--root digits={root}/folder", "this command reads only digits-5-9, digits-0-4"),
        ("--validation clip-dtd", "'clip-dtd' needs its local copy: pass --data-dir DIR"),
        ("--validation clip-dtd --root clip-dtd={root}/file.txt", "correct --root clip-dtd=PATH"),
        ("--validation clip-dtd --data-dir {root}/folder", "folder/clip-dtd is not a folder"),
    ],
)
@pytest.mark.parametrize("command", ["unlearn", "tkl"])
def test_clip_commands_refuse_local_copies_they_cannot_use_before_any_work(
    ws: Workspace, command: str, extra: str, expected: str
) -> None:
    # unlearn reads --retain where tkl reads --validation: the same datasets either way
    _, options = baseline(ws, command)
    extra = extra.format(root=ws.root)
    if command == "unlearn":
        extra = extra.replace("--validation", "--retain")
    before = snapshot(ws.root)
    code, output = ws.invoke([command, *options, *extra.split()])
    assert code == 1 and output.count("Error:") == 1, output
    assert expected in output and "Traceback" not in output
    # refused before reading a single image: no progress line came first
    assert output.startswith("Error:"), output
    assert snapshot(ws.root) == before
