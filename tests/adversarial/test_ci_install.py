"""CI installs no code where it judges: pins come as inert wheels, never as build steps.

The attacks: a pinned source distribution whose ``setup.py`` runs on the runner, and a
pinned wheel whose ``.pth`` file runs at every later start of that environment's Python.
Each control runs the same artefact the way the old workflow did (``pip install`` into an
environment) and shows the code running.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from fewtrans_board.registry.manager import get_plugin_manager
from tests.adversarial.conftest import run_cli
from tests.conftest import (
    VERIFY_WORKFLOW,
    WORKFLOW,
    command_options,
    run_commands,
    workflow,
    workflow_step,
)

ROOT = Path(__file__).resolve().parents[2]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A minimal valid wheel (PEP 427) holding ``files``."""
    stem = name.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return wheel


def make_sdist(folder: Path, name: str, version: str, setup_py: str) -> Path:
    """A source distribution whose build runs ``setup_py``."""
    stem = f"{name.replace('-', '_')}-{version}"
    sdist = folder / f"{stem}.tar.gz"
    members = {
        f"{stem}/setup.py": setup_py,
        f"{stem}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    with tarfile.open(sdist, "w:gz") as archive:
        for path, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return sdist


def pr_with_pin(tmp_path: Path, pin: str, digest: str) -> Path:
    """A repository whose branch ``pr`` adds an entry pinning ``pin`` with ``digest``."""
    repo = tmp_path / "repo"
    (repo / "leaderboard" / "manifests").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "leaderboard" / "manifests" / ".keep").write_text("")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)
    subprocess.run([*git, "checkout", "-q", "-b", "pr"], check=True)
    entry = repo / "leaderboard" / "submissions" / "evil--demo"
    entry.mkdir(parents=True)
    name = pin.split("==")[0]
    (entry / "submission.toml").write_text(
        '[submission]\nid = "evil--demo"\nmethod = "m"\nmodel = "demo-cnn.digits"\n'
        'adapter = "mean-centroid"\nbenchmark = "demo"\nhpe_protocol = "fewtrans-paper"\n'
        f'authors = ["A"]\nhardware = "CPU"\nplugins = ["fewtrans-board==0.1.0", "{pin}"]\n'
        f'wheels = {{ "{name}" = "sha256:{digest}" }}\n'
    )
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "entry"], check=True)
    return repo


def fetch(repo: Path, into: Path, links: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = run_cli(
        get_plugin_manager(entry_points=False),
        [
            *("leaderboard", "fetch-plugins", "--repo", repo, "--base", "main"),
            *("--into", into, "--find-links", links, "--no-index", "--json"),
        ],
    )
    return result.exit_code, json.loads(result.output)


@pytest.mark.slow
def test_a_pinned_source_distribution_is_never_built(tmp_path: Path) -> None:
    marker = tmp_path / "setup-ran"
    links = tmp_path / "index"
    links.mkdir()
    sdist = make_sdist(
        links,
        "fewtrans-evil",
        "1.0",
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
        "from setuptools import setup\nsetup(name='fewtrans-evil', version='1.0')\n",
    )
    # The old workflow ran 'pip install <pins>': pip builds the sdist, and setup.py runs
    # (without a wheel cache: a wheel built on an earlier run at the same path would be reused).
    control = tmp_path / "control"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"),
            "--no-cache-dir",
            *(
                "--target",
                str(control),
                "--no-index",
                "--find-links",
                str(links),
                "fewtrans-evil==1.0",
            ),
        ],
        capture_output=True,
        check=False,
    )
    assert marker.exists(), "the control should show a build step running"
    marker.unlink()
    repo = pr_with_pin(tmp_path, "fewtrans-evil==1.0", sha256(sdist))
    code, report = fetch(repo, tmp_path / "plugins", links)
    assert code == 1 and report["code"] == "pin-install-failed", report
    assert "wheels with the recorded hashes only" in report["error"]
    assert not marker.exists()


@pytest.mark.slow
def test_a_pth_file_in_a_pinned_wheel_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pth-ran"
    links = tmp_path / "index"
    links.mkdir()
    wheel = make_wheel(
        links,
        "fewtrans-evil",
        "1.0",
        {
            "fewtrans_evil.py": "VALUE = 1\n",
            "evil.pth": f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n",
        },
    )
    repo = pr_with_pin(tmp_path, "fewtrans-evil==1.0", sha256(wheel))
    code, report = fetch(repo, tmp_path / "plugins", links)
    assert code == 0, report
    folder = Path(report["plugins"]["evil--demo"])
    assert (folder / "evil.pth").is_file() and (folder / "fewtrans_evil.py").is_file()
    assert not any(p.stat().st_mode & 0o222 for p in folder.rglob("*"))  # read-only
    # The judge's interpreter, and a worker importing the plugin from the folder: inert.
    subprocess.run([sys.executable, "-I", "-c", "import fewtrans_board"], check=True)
    imported = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.append({str(folder)!r}); import fewtrans_evil",
        ],
        check=False,
    )
    assert imported.returncode == 0 and not marker.exists()
    # The control: the same folder as a site folder (what an environment's site-packages
    # is at every interpreter start) runs the .pth file.
    subprocess.run(
        [sys.executable, "-I", "-c", f"import site; site.addsitedir({str(folder)!r})"], check=True
    )
    assert marker.exists()


@pytest.mark.slow
def test_a_wheel_whose_hash_differs_from_the_pin_is_refused(tmp_path: Path) -> None:
    links = tmp_path / "index"
    links.mkdir()
    make_wheel(links, "fewtrans-evil", "1.0", {"fewtrans_evil.py": "VALUE = 1\n"})
    repo = pr_with_pin(tmp_path, "fewtrans-evil==1.0", "0" * 64)
    code, report = fetch(repo, tmp_path / "plugins", links)
    assert code == 1 and report["code"] == "pin-install-failed", report


def test_a_third_party_pin_needs_a_wheel_hash(tmp_path: Path) -> None:
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.meta import parse_meta
    from fewtrans_board.leaderboard.wheels import requirements

    meta = parse_meta(
        '[submission]\nid = "x--y"\nmethod = "m"\nmodel = "m"\nadapter = "a"\n'
        'benchmark = "demo"\nhpe_protocol = "fewtrans-paper"\nauthors = ["A"]\n'
        'hardware = "CPU"\nplugins = ["fewtrans-board==0.1.0", "fewtrans-x==2.0"]\n'
    )
    with pytest.raises(SubmissionError, match=r"pin-without-hash.*fewtrans-x==2\.0"):
        requirements(meta)


def test_the_workflow_installs_no_code_where_it_judges() -> None:
    # The parsed workflows: the commands their steps run, not text a comment could hold.
    job, path = "verify", VERIFY_WORKFLOW
    (_, fetch) = run_commands(
        workflow_step(job, "Pinned plugins, as wheels with their recorded hashes only", path)
    )
    check_step = workflow_step(job, "Check the pull request (sandboxed verification)", path)
    (check,) = [c for c in run_commands(check_step) if c[0].endswith("fewtrans-board")]
    assert fetch[1:3] == ["leaderboard", "fetch-plugins"] and fetch[0] == check[0]
    assert command_options(fetch)["--into"] == command_options(check)["--plugins-root"] == "plugins"
    assert command_options(check)["--secret-env"] == "VERIFY_SECRET"
    assert check_step["env"]["VERIFY_SECRET"] == "${{ secrets.VERIFY_SECRET }}"
    for workflow_path in (WORKFLOW, VERIFY_WORKFLOW):
        text = workflow_path.read_text()
        assert "pull_request.number" not in text  # never a seed
        # No pip run installs anything from the pull request.
        assert not [line for line in text.splitlines() if "pip install" in line]
    for job, path in (("verify", VERIFY_WORKFLOW), ("check-submissions", WORKFLOW)):
        step = workflow_step(job, "Install the base branch, then make it read-only", path)
        install = run_commands(step)
        assert install[-1][:4] == ["chmod", "-R", "a-w", "base/.venv"]  # after the install
        # the pinned environment: every version from the base branch's constraints
        assert step["env"]["PIP_CONSTRAINT"].endswith("base/constraints/ci.txt")
    sandbox = run_commands(
        workflow_step("verify", "Sandbox for the plugin worker", VERIFY_WORKFLOW)
    )
    assert sandbox[-1][1:3] == ["apt-get", "install"] and sandbox[-1][-1] == "bubblewrap"
    for path in (WORKFLOW, VERIFY_WORKFLOW):
        steps = [s for job in workflow(path)["jobs"].values() for s in job["steps"]]
        commands = [c for s in steps for c in run_commands(s)]
        assert not [c for c in commands if "pip install" in " ".join(c)], commands
