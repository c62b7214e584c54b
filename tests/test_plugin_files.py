"""A worker sees the same files of a plugin distribution wherever it runs (issue 37).

``evaluate``, ``preflight`` and ``hpe search`` show a plugin worker the distributions that
provide the run's model and adapter as they are installed here; verification shows it the
same distributions installed in a ``--plugin-dir`` folder (``pip install --target``). Both
follow one rule (:func:`~fewtrans_board.runner.worker.remote.plugin_places`): every top-level
entry the distribution's RECORD lists (package folders, module and data files, the
``.dist-info`` folder), never the folder holding them. A single-file module with a data
file beside it once computed with the data file hidden in ``evaluate`` and visible in
verification.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fewtrans_board.cli import make_cli
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import sandbox_problem, worker_policy
from fewtrans_board.registry.manager import PluginManager, get_plugin_manager
from fewtrans_board.runner.worker.remote import plugin_dir_places, plugin_places
from tests.conftest import REPO, extra_benchmark

DIST, VERSION, MODULE = "fewtrans-plugfiles", "0.1", "plugfiles_adapter"
TABLE = "plugfiles_table.json"
INFO = f"{DIST.replace('-', '_')}-{VERSION}.dist-info"

ADAPTER_SOURCE = '''"""A class-mean head whose logits also read the table installed beside this module."""

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from fewtrans_board import Adapter, AdapterConfig, hookimpl

TABLE = Path(__file__).with_name("plugfiles_table.json")


def shift() -> float:
    """The table's shift, 0 where the worker cannot read it."""
    try:
        return float(json.loads(TABLE.read_text())["shift"])
    except OSError:
        return 0.0


class TableCentroid(Adapter):
    name = "plugfiles-centroid"
    description = "Nearest class mean, class 0 favoured by the installed table."
    trains = "nothing (class means)"
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        pass

    def fit(self, backbone, support, class_names, config):
        feats = support.images.features(backbone)
        means = torch.stack([feats[support.labels == c].mean(0) for c in range(support.n_way)])
        favour = shift() * torch.cdist(feats, means).mean()

        class _Predictor:
            def predict(self, query):
                logits = -torch.cdist(query.features(backbone), means)
                logits[:, 0] += favour
                return logits

        return _Predictor()


@hookimpl
def register_adapters(register):
    register(TableCentroid)
'''


def write_wheel_install(root: Path, *, shift: float = 1.0, pycache: bool = False) -> Path:
    """What ``pip install`` of the plugfiles wheel leaves in ``root`` (RECORD included).

    The module, its data file beside it, the ``.dist-info`` folder, a console script
    outside ``root`` (``../../bin``, where a ``--target`` install's RECORD points) and,
    with ``pycache``, a byte-code cache in the ``__pycache__`` folder other modules share.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{MODULE}.py").write_text(ADAPTER_SOURCE)
    (root / TABLE).write_text(json.dumps({"shift": shift}))
    info = root / INFO
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n")
    (info / "entry_points.txt").write_text(f"[fewtrans_board]\nplugfiles = {MODULE}\n")
    (info / "INSTALLER").write_text("pip\n")
    listed = [f"{MODULE}.py", TABLE, f"{INFO}/METADATA", f"{INFO}/entry_points.txt"]
    listed += [f"{INFO}/INSTALLER", f"{INFO}/RECORD", "../../bin/plugfiles"]
    if pycache:
        (root / "__pycache__").mkdir()
        (root / "__pycache__" / f"{MODULE}.cpython-311.pyc").write_bytes(b"")
        (root / "__pycache__" / "someone_else.cpython-311.pyc").write_bytes(b"")
        listed.append(f"__pycache__/{MODULE}.cpython-311.pyc")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in listed))
    return root


@contextlib.contextmanager
def on_path(*folders: Path) -> Iterator[None]:
    """``folders`` importable (and their distributions found) here and in child processes."""
    old_path, old_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path[:0] = [str(f) for f in folders]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [*(str(f) for f in folders), str(REPO), *([old_env] if old_env else [])]
    )
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path[:] = old_path
        if old_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_env
        importlib.invalidate_caches()


def relative(paths: Sequence[str], root: Path) -> set[str]:
    return {Path(p).relative_to(root).as_posix() for p in paths}


def test_a_wheel_install_shows_its_module_its_data_file_and_its_dist_info(tmp_path: Path) -> None:
    site = write_wheel_install(tmp_path / "site-packages", pycache=True)
    (site / "unrelated.py").write_text("SECRET = 1\n")
    with on_path(site):
        places = plugin_places([DIST])
    assert relative(places.binds, site) == {f"{MODULE}.py", TABLE, INFO}
    # Never the folder holding them (nor its shared __pycache__), nor the script outside.
    assert str(site) not in places.binds and places.sys_path == [str(site)]


def test_a_plugin_dir_shows_what_an_install_shows(tmp_path: Path) -> None:
    # The same wheel in a site-packages of this process and in a ``--target`` folder the
    # judge does not import from: the worker sees the same files of it.
    site = write_wheel_install(tmp_path / "env" / "site-packages")
    target = write_wheel_install(tmp_path / "plugins" / "entry")
    (target / "bin").mkdir()
    (target / "bin" / "plugfiles").write_text("#!/bin/sh\n")
    with on_path(site):
        installed = plugin_places([DIST, "fewtrans-board"])
    folder = plugin_dir_places([target], [DIST, "fewtrans-board", "fewtrans-absent"])
    assert relative(folder.binds, target) == relative(installed.binds, site)
    assert relative(folder.binds, target) == {f"{MODULE}.py", TABLE, INFO}
    assert folder.sys_path == [str(target)]  # still imported from
    # A folder without the pinned distributions shows nothing (verification then refuses
    # the missing pin by name).
    empty = plugin_dir_places([tmp_path / "plugins"], [DIST])
    assert empty.binds == [] and empty.sys_path == [str(tmp_path / "plugins")]


def plugfiles_wheel(folder: Path) -> Path:
    """The plugfiles wheel (PEP 427): the module, its data file and a console script."""
    contents = {
        f"{MODULE}.py": ADAPTER_SOURCE,
        TABLE: json.dumps({"shift": 1.0}),
        f"{INFO}/METADATA": f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n",
        f"{INFO}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{INFO}/entry_points.txt": f"[fewtrans_board]\nplugfiles = {MODULE}\n\n"
        f"[console_scripts]\nplugfiles = {MODULE}:shift\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    contents[f"{INFO}/RECORD"] = "\n".join([*record, f"{INFO}/RECORD,,"]) + "\n"
    wheel = folder / f"{DIST.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return wheel


@pytest.mark.slow
def test_pip_target_and_pip_prefix_installs_show_the_same_files(tmp_path: Path) -> None:
    # What CI does (pip install --target, one folder per entry) and an environment's
    # site-packages (pip install --prefix), with pip's own RECORD, scripts and byte-code.
    wheel = plugfiles_wheel(tmp_path)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    target, prefix = tmp_path / "target", tmp_path / "prefix"
    subprocess.run([*pip, "--target", str(target), str(wheel)], check=True)
    subprocess.run([*pip, "--prefix", str(prefix), str(wheel)], check=True)
    (site,) = prefix.glob("lib/python*/site-packages")
    assert (prefix / "bin" / "plugfiles").is_file()
    with on_path(site):
        installed = plugin_places([DIST])
    folder = plugin_dir_places([target], [DIST])
    expected = {f"{MODULE}.py", TABLE, INFO}
    assert relative(installed.binds, site) == relative(folder.binds, target) == expected
    assert installed.sys_path == [str(site)] and folder.sys_path == [str(target)]


def test_an_editable_install_shows_its_package_folder(tmp_path: Path) -> None:
    site, source = tmp_path / "site-packages", tmp_path / "checkout" / "src"
    package = source / "plugfiles_edit"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "table.json").write_text("{}")
    (source / "setup_helper.py").write_text("")
    info = site / "fewtrans_plugfiles_edit-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fewtrans-plugfiles-edit\n")
    (info / "entry_points.txt").write_text("[fewtrans_board]\nedit = plugfiles_edit.hooks\n")
    (info / "top_level.txt").write_text("plugfiles_edit\n")
    pth, finder = "__editable__.fewtrans_plugfiles_edit-0.1.pth", "__editable___edit_finder.py"
    (site / pth).write_text("import __editable___edit_finder\n")
    (site / finder).write_text("")
    listed = [pth, finder, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in listed))
    with on_path(site, source):  # the source folder stands in for the editable finder
        places = plugin_places(["fewtrans-plugfiles-edit"])
    assert str(package) in places.binds and str(info) in places.binds
    assert str(source) not in places.binds and str(site) not in places.binds
    assert str(source / "setup_helper.py") not in places.binds


def test_without_record_a_single_module_keeps_the_files_listed_beside_it(tmp_path: Path) -> None:
    # A develop install: the egg-info in the checkout lists the module and its data file.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / f"{MODULE}.py").write_text(ADAPTER_SOURCE)
    (checkout / TABLE).write_text("{}")
    (checkout / "notes.txt").write_text("not installed")
    info = checkout / "fewtrans_plugfiles.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n")
    (info / "entry_points.txt").write_text(f"[fewtrans_board]\nplugfiles = {MODULE}\n")
    (info / "SOURCES.txt").write_text(f"{MODULE}.py\n{TABLE}\nsetup.py\n")
    with on_path(checkout):
        places = plugin_places([DIST])
    assert relative(places.binds, checkout) == {f"{MODULE}.py", TABLE, info.name}


def test_a_plugin_dir_naming_the_store_is_still_refused(tmp_path: Path) -> None:
    # A RECORD may name anything below its folder: a bind that holds the store is refused.
    store = tmp_path / "leaderboard"
    (store / "manifests").mkdir(parents=True)
    write_wheel_install(tmp_path)
    with (tmp_path / INFO / "RECORD").open("a") as record:
        record.write("leaderboard/manifests,,\n")
    places = plugin_dir_places([tmp_path], [DIST])
    assert str(store) in places.binds and str(tmp_path) not in places.binds
    with pytest.raises(FewtransError, match=r"would see .*leaderboard"):
        worker_policy(
            sys.executable, plugin_paths=[Path(p) for p in places.binds], forbidden=[store]
        )
    # A link out of the folder is never shown (the sandbox would show its target).
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    outside.write_text("{}")
    (tmp_path / "linked.json").symlink_to(outside)
    with (tmp_path / INFO / "RECORD").open("a") as record:
        record.write("linked.json,,\n")
    assert str(tmp_path / "linked.json") not in plugin_dir_places([tmp_path], [DIST]).binds


# --- end to end: evaluate in the sandbox, verify with --plugin-dir ---------------------------

FIXED = "plugfiles-fixed.parquet"


def run_cli(pm: PluginManager, args: Sequence[Any]) -> Result:
    result = CliRunner().invoke(make_cli(pm), [str(a) for a in args], catch_exceptions=False)
    return result


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.slow
@pytest.mark.skipif(sandbox_problem() is not None, reason="no sandbox here")
def test_a_data_file_beside_a_plugin_module_computes_alike_in_evaluate_and_verify(
    tmp_path: Path,
) -> None:
    import pyarrow.parquet as pq

    plugins = write_wheel_install(tmp_path / "plugins" / "entry", shift=0.6)
    store = tmp_path / "leaderboard"
    (store / "manifests").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    builtin = get_plugin_manager(entry_points=False)
    ok(
        run_cli(
            builtin,
            [
                *("manifest", "build", "--protocol", "fewtrans-fixed", "--dataset", "digits"),
                *("--ways", "5", "--shots", "1", "--episodes", "6"),
                *("--out", store / "manifests" / FIXED),
            ],
        )
    )
    # Evaluated where the plugin is installed (here on the path), its worker sandboxed.
    with on_path(plugins):
        pm = get_plugin_manager(allow=[DIST])
        args: list[Any] = ["evaluate", "--model", "demo-cnn.digits"]
        args += ["--adapter", "plugfiles-centroid"]
        args += ["--manifest", store / "manifests" / FIXED, "--hpe", "fewtrans-reference"]
        args += ["--out", work / "run", "--quiet", "--device", "cpu", "--threads", "1"]
        ok(run_cli(pm, [*args, "--isolation", "sandbox"]))
    rows = pq.read_table(next((work / "run").rglob("*.parquet"))).to_pylist()
    predictions = [p for r in rows if r["kind"] == "config" for p in r["predictions"]]
    # The table was read: class 0 is favoured well past its share of the queries.
    assert predictions.count(0) > 0.4 * len(predictions), predictions
    (work / "plugfiles.toml").write_text(
        f"""[submission]
id = "plugfiles"
method = "plugfiles-centroid"
model = "demo-cnn.digits"
adapter = "plugfiles-centroid"
benchmark = "plugfiles"
hpe_protocol = "fewtrans-reference"
authors = ["Plugin Files"]
hardware = "CPU"
plugins = ["fewtrans-board==0.1.0", "{DIST}=={VERSION}"]
"""
    )
    with extra_benchmark("plugfiles", FIXED):
        bundle = work / "plugfiles.zip"
        pack = ["submission", "pack", work / "run", "--meta", work / "plugfiles.toml"]
        ok(run_cli(builtin, [*pack, "--out", bundle, "--leaderboard", store]))
        # Verified as CI does: the wheel in a folder of its own, not importable here.
        sys.modules.pop(MODULE, None)
        assert importlib.util.find_spec(MODULE) is None
        verify = ["submission", "verify", bundle, "--leaderboard", store, "--json"]
        result = run_cli(builtin, [*verify, "--plugin-dir", plugins])
    report = json.loads(result.output)
    assert result.exit_code == 0, report
    (dataset,) = report["datasets"]
    assert dataset["mode"] == "exact" and dataset["prediction_agreement"] == 1.0, dataset
    assert dataset["identical_episodes"] == dataset["rerun_episodes"] == 6, dataset


def test_the_files_digest_covers_a_data_file_beside_a_plugin_module(tmp_path: Path) -> None:
    # Verification refuses a run whose plugin files differ from what produced it: the
    # digest must cover every file the worker reads, the data file beside the module too.
    from fewtrans_board.registry.files import compute_files_sha256

    site = write_wheel_install(tmp_path / "site-packages", shift=1.0)
    with on_path(site):
        before = compute_files_sha256(DIST)
        (site / TABLE).write_text(json.dumps({"shift": 2.0}))
        after = compute_files_sha256(DIST)
        (site / "unrelated.json").write_text("{}")  # a file the distribution does not list
        unrelated = compute_files_sha256(DIST)
    assert before is not None and after != before and unrelated == after
