"""Submission flow: a valid bundle is accepted; a corpus of malformed ones is rejected one by
one with specific codes, leaving the store byte-identical; verify catches altered predictions."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.row_schema import METADATA_KEY
from fewtrans_board.results.shards import rows_to_table
from tests.conftest import file_digests, shared_folder

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "leaderboard" / "manifests"
META = """\
[submission]
id = "lp--demo"
method = "Linear probe"
model = "demo-cnn.digits"
adapter = "linear-probe"
benchmark = "demo"
hpe_protocol = "fewtrans-reference"
authors = ["Test Author"]
paper = "https://example.org/paper"
code = "https://example.org/code"
hardware = "2-core CPU"
plugins = ["fewtrans-board==0.1.0"]
"""


@pytest.fixture(scope="module")
def valid_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A packed linear-probe bundle of the demo benchmark, built once per test run (every
    xdist worker that runs a test of this module reads the same one; never change it)."""
    return shared_folder(tmp_path_factory, "submission", build_valid_bundle) / "bundle.zip"


def build_valid_bundle(work: Path) -> None:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    cli = make_cli(get_plugin_manager(entry_points=False))

    def run(args: list[str]) -> None:
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output

    run(
        [
            "hpe",
            "search",
            "--model",
            "demo-cnn.digits",
            "--adapter",
            "linear-probe",
            "--manifest",
            str(MANIFESTS / "fewtrans-search--digits.parquet"),
            "--limit",
            "2",
            "--config",
            "epochs=10",
            "--out",
            str(work / "centre.json"),
            "--device",
            "cpu",
            "--json",
        ]
    )
    run(
        [
            "evaluate",
            "--model",
            "demo-cnn.digits",
            "--adapter",
            "linear-probe",
            "--manifest",
            str(MANIFESTS / "fewtrans-varied--digits.parquet"),
            "--protocol",
            "fewtrans-reference",
            "--centre",
            str(work / "centre.json"),
            "--out",
            str(work / "run"),
            "--quiet",
            "--device",
            "cpu",
            "--threads",
            "1",
        ]
    )
    (work / "submission.toml").write_text(META)
    run(
        [
            "submission",
            "pack",
            str(work / "run"),
            "--meta",
            str(work / "submission.toml"),
            "--out",
            str(work / "bundle.zip"),
        ]
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    target = tmp_path / "leaderboard"
    shutil.copytree(MANIFESTS, target / "manifests")
    return target


# --- mutations ---------------------------------------------------------------------------


def rezip(
    source: Path,
    out: Path,
    extra: dict[str, bytes] | None = None,
    skip: Callable[[str], bool] = lambda n: False,
) -> Path:
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if not skip(info.filename):
                dst.writestr(info, src.read(info))
        for name, data in (extra or {}).items():
            dst.writestr(name, data)
    return out


def edit_member(source: Path, out: Path, name: str, edit: Callable[[bytes], bytes]) -> Path:
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, edit(data) if info.filename == name else data)
    return out


def edit_meta(source: Path, out: Path, old: str, new: str) -> Path:
    return edit_member(
        source, out, "submission.toml", lambda b: b.decode().replace(old, new).encode()
    )


def first_shard(source: Path) -> str:
    with zipfile.ZipFile(source) as z:
        return sorted(n for n in z.namelist() if n.endswith(".parquet"))[0]


def edit_rows(
    source: Path, out: Path, edit: Callable[[list[dict], dict], None], name: str | None = None
) -> Path:
    import io

    name = name or first_shard(source)

    def rewrite(data: bytes) -> bytes:
        table = pq.read_table(io.BytesIO(data))
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        rows = table.to_pylist()
        edit(rows, meta)
        buffer = io.BytesIO()
        pq.write_table(
            rows_to_table(rows, {k: v for k, v in meta.items() if k != "schema_version"}), buffer
        )
        return buffer.getvalue()

    return edit_member(source, out, name, rewrite)


def symlink_bundle(source: Path, out: Path) -> Path:
    rezip(source, out)
    with zipfile.ZipFile(out, "a") as z:
        info = zipfile.ZipInfo("results/link.json")
        info.external_attr = 0o120777 << 16
        z.writestr(info, "/etc/passwd")
    return out


def set_row(
    predicate: Callable[[dict], bool], **changes: object
) -> Callable[[list[dict], dict], None]:
    def edit(rows: list[dict], meta: dict) -> None:
        row = next(r for r in rows if predicate(r))
        row.update(changes)

    return edit


def consistent_vote_change(rows: list[dict], meta: dict) -> None:
    row = next(r for r in rows if r["aggregation"] == "vote")
    row["predictions"] = [(p + 1) % row["n_way"] for p in row["predictions"]]
    labels = recover_labels(rows, row["episode"])
    row["accuracy"] = float(np.mean(np.array(row["predictions"]) == labels) * 100)


def recover_labels(rows: list[dict], episode: int) -> np.ndarray:
    from fewtrans_board.episodes.manifest import Manifest

    manifest = Manifest.load(MANIFESTS / "fewtrans-varied--digits.parquet")
    return np.array([label for _, label in manifest.episodes()[episode].query])


def centre_edit(key: str, value: object) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        record = json.loads(data)
        if key.startswith("centre."):
            record["centre"][key.split(".", 1)[1]] = value
        else:
            record[key] = value
        return json.dumps(record).encode()

    return edit


MALFORMED: list[tuple[str, str, Callable[[Path, Path], Path]]] = [
    ("not-a-zip", "not-a-zip", lambda s, o: (o.write_bytes(b"PK not really a zip"), o)[1]),
    ("path-traversal", "unsafe-path", lambda s, o: rezip(s, o, {"../../escape.json": b"{}"})),
    ("absolute-path", "unsafe-path", lambda s, o: rezip(s, o, {"/etc/cron.json": b"{}"})),
    ("symlink", "symlink", symlink_bundle),
    (
        "pickle-file",
        "forbidden-file",
        lambda s, o: rezip(s, o, {"results/model.pkl": b"\x80\x04N."}),
    ),
    (
        "fake-parquet",
        "forbidden-file",
        lambda s, o: rezip(
            s,
            o,
            {"results/fewtrans-varied--digits/shards/shard-99999-of-00012.parquet": b"\x80\x04N."},
        ),
    ),
    (
        "missing-meta",
        "missing-meta",
        lambda s, o: rezip(s, o, skip=lambda n: n == "submission.toml"),
    ),
    (
        "bad-toml",
        "bad-toml",
        lambda s, o: edit_meta(s, o, 'hardware = "2-core CPU"', 'hardware = "2-core CPU'),
    ),
    (
        "no-authors",
        "meta-missing-field",
        lambda s, o: edit_meta(s, o, 'authors = ["Test Author"]\n', ""),
    ),
    (
        "script-url",
        "meta-bad-value",
        lambda s, o: edit_meta(s, o, "https://example.org/paper", "javascript:alert(1)"),
    ),
    (
        "unpinned",
        "unpinned-plugin",
        lambda s, o: edit_meta(s, o, "fewtrans-board==0.1.0", "fewtrans-board>=0.1"),
    ),
    (
        "wrong-pin",
        "plugin-version-mismatch",
        lambda s, o: edit_meta(s, o, "fewtrans-board==0.1.0", "fewtrans-board==9.9.9"),
    ),
    (
        "unknown-benchmark",
        "unknown-benchmark",
        lambda s, o: edit_meta(s, o, 'benchmark = "demo"', 'benchmark = "imagenet-1k"'),
    ),
    (
        "wrong-benchmark",
        "wrong-manifest",
        lambda s, o: edit_meta(s, o, 'benchmark = "demo"', 'benchmark = "fewtrans-adapters"'),
    ),
    (
        "model-mismatch",
        "model-mismatch",
        lambda s, o: edit_meta(s, o, 'model = "demo-cnn.digits"', 'model = "demo-cnn.random"'),
    ),
    (
        "protocol-mismatch",
        "protocol-mismatch",
        lambda s, o: edit_meta(s, o, '"fewtrans-reference"', '"fewtrans-paper"'),
    ),
    (
        "missing-shard",
        "incomplete",
        lambda s, o: rezip(s, o, skip=lambda n: n.endswith("shard-00003-of-00012.parquet")),
    ),
    (
        "unknown-manifest",
        "unknown-manifest",
        lambda s, o: edit_rows(s, o, lambda r, m: m["manifest"].update(sha256="0" * 64)),
    ),
    (
        "duplicate-episode",
        "duplicate-episode",
        lambda s, o: edit_rows(s, o, lambda r, m: r.append(dict(r[0]))),
    ),
    (
        "grid-mismatch",
        "grid-mismatch",
        lambda s, o: edit_rows(s, o, lambda r, m: m["identity"]["grid"].pop()),
    ),
    (
        "config-swapped",
        "grid-mismatch",
        lambda s, o: edit_rows(
            s, o, set_row(lambda r: r["config_index"] == 0, config='{"lr_head":9.0}')
        ),
    ),
    (
        "accuracy-inflated",
        "accuracy-mismatch",
        lambda s, o: edit_rows(s, o, set_row(lambda r: r["aggregation"] == "vote", accuracy=100.0)),
    ),
    (
        "nan-logits",
        "bad-logits",
        lambda s, o: edit_rows(s, o, lambda r, m: r[0]["logits"].__setitem__(0, float("nan"))),
    ),
    (
        "prediction-out-of-range",
        "bad-predictions",
        lambda s, o: edit_rows(s, o, lambda r, m: r[0]["predictions"].__setitem__(0, 99)),
    ),
    ("ensemble-forged", "ensemble-mismatch", lambda s, o: edit_rows(s, o, consistent_vote_change)),
    (
        "no-centre-search",
        "centre-search-missing",
        lambda s, o: rezip(s, o, skip=lambda n: n == "centre-search.json"),
    ),
    (
        "centre-moved",
        "centre-mismatch",
        lambda s, o: edit_member(s, o, "centre-search.json", centre_edit("centre.lr_head", 123.0)),
    ),
    (
        "centre-not-held-out",
        "centre-not-held-out",
        lambda s, o: edit_member(s, o, "centre-search.json", centre_edit("dataset", "eurosat")),
    ),
]


def add_unverified(invoke, bundle: str, store: Path, *extra: str):  # type: ignore[no-untyped-def]
    """``leaderboard add --unsafe-no-verify``: these tests are about intake, not the re-run."""
    args = ["leaderboard", "add", bundle, "--leaderboard", str(store), "--unsafe-no-verify"]
    return invoke([*args, *extra], pm=get_plugin_manager(entry_points=False))


@pytest.mark.slow
def test_valid_bundle_is_accepted_and_added(valid_bundle: Path, store: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(entry_points=False)
    result = invoke(
        ["submission", "validate", str(valid_bundle), "--leaderboard", str(store), "--json"], pm=pm
    )
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["ok"] and report["runs"][0]["episodes"] == 600
    added = add_unverified(invoke, str(valid_bundle), store)
    assert added.exit_code == 0, added.output
    index = json.loads((store / "index.json").read_text())
    assert (
        index["benchmarks"]["demo"] == ["lp--demo"]
        and index["submissions"][0]["status"] == "not verified"
    )
    assert (
        invoke(["leaderboard", "rebuild", "--check", "--leaderboard", str(store)], pm=pm).exit_code
        == 0
    )
    again = add_unverified(invoke, str(valid_bundle), store)
    assert again.exit_code == 1 and "[immutable]" in again.output


@pytest.mark.slow
def test_malformed_corpus_is_rejected_and_changes_nothing(
    valid_bundle: Path, store: Path, tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    add_unverified(invoke, str(valid_bundle), store)
    before = file_digests(store)
    codes = set()
    for name, code, mutate in MALFORMED:
        bundle = mutate(valid_bundle, tmp_path / f"{name}.zip")
        result = add_unverified(invoke, str(bundle), store, "--json")
        report = json.loads(result.output)
        assert result.exit_code == 1 and not report["ok"], name
        assert report["code"] == code, (name, report["error"])
        codes.add(code)
        assert file_digests(store) == before, f"{name} changed the store"
    assert len(MALFORMED) >= 15 and len(codes) >= 15


@pytest.mark.slow
def test_size_limits(
    valid_bundle: Path, store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("fewtrans_board.leaderboard.layout.MAX_FILE_BYTES", 1000)
    result = invoke(
        ["submission", "validate", str(valid_bundle), "--leaderboard", str(store), "--json"],
        pm=get_plugin_manager(entry_points=False),
    )
    assert json.loads(result.output)["code"] == "too-large"


@pytest.mark.slow
def test_supersedes_marks_the_old_entry(
    valid_bundle: Path, store: Path, tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(entry_points=False)
    add_unverified(invoke, str(valid_bundle), store)
    newer = edit_meta(
        valid_bundle,
        tmp_path / "v2.zip",
        'id = "lp--demo"',
        'id = "lp--demo.v2"\nsupersedes = "lp--demo"',
    )
    assert add_unverified(invoke, str(newer), store).exit_code == 0
    index = json.loads((store / "index.json").read_text())
    old = next(e for e in index["submissions"] if e["id"] == "lp--demo")
    assert old["superseded_by"] == "lp--demo.v2"
    orphan = edit_meta(
        valid_bundle,
        tmp_path / "v3.zip",
        'id = "lp--demo"',
        'id = "lp--demo.v3"\nsupersedes = "nothing"',
    )
    assert (
        "[meta-bad-value]"
        in invoke(
            ["leaderboard", "add", str(orphan), "--leaderboard", str(store), "--unsafe-no-verify"],
            pm=pm,
        ).output
    )


def sampled_episodes(seed: int, sample: int, n: int = 600) -> list[int]:
    return sorted(int(i) for i in np.random.RandomState(seed).choice(n, size=sample, replace=False))


def stored_hpe_accuracy(bundle: Path, episode: int) -> float:
    """The stored logit-mean accuracy of one episode of a digits bundle."""
    import io

    with zipfile.ZipFile(bundle) as z:
        table = pq.read_table(
            io.BytesIO(
                z.read(
                    f"results/fewtrans-varied--digits/shards/shard-{episode // 50:05d}-of-00012.parquet"
                )
            )
        )
    return next(
        row["accuracy"]
        for row in table.to_pylist()
        if row["episode"] == episode and row["aggregation"] == "logit-mean"
    )


def forge_episode(episode: int) -> Callable[[list[dict], dict], None]:
    """Make every prediction of one episode correct, with consistent accuracies and ensembles."""

    def edit(rows: list[dict], meta: dict) -> None:
        labels = recover_labels(rows, episode).tolist()
        for row in rows:
            if row["episode"] == episode:
                row["predictions"] = list(labels)
                row["accuracy"] = 100.0
                if row["kind"] == "config":
                    n_way = row["n_way"]
                    row["logits"] = [
                        0.0 if c == label else -1.0 for label in labels for c in range(n_way)
                    ]
                elif row["aggregation"] == "logit-mean":
                    row["logits"] = [
                        0.0 if c == label else -1.0 for label in labels for c in range(row["n_way"])
                    ]

    return edit


@pytest.mark.slow
def test_verify_passes_honest_and_catches_forged_predictions(
    valid_bundle: Path, store: Path, tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(entry_points=False)
    args = ["--leaderboard", str(store), "--sample", "3", "--json"]
    honest = invoke(["submission", "verify", str(valid_bundle), *args], pm=pm)
    report = json.loads(honest.output)
    assert honest.exit_code == 0 and report["passed"], report
    assert report["datasets"][0]["mode"] == "exact"
    assert all(e["configs_equal"] == e["configs"] for e in report["episodes"])
    # Every episode forged: whichever episodes the secret seed draws, each re-run predicts
    # differently from the stored (all-correct) predictions.
    from tests.adversarial.forgery import correct_outside, forge_bundle

    forged = forge_bundle(valid_bundle, tmp_path / "forged.zip", MANIFESTS, correct_outside(set()))
    assert (
        invoke(
            ["submission", "validate", str(forged), "--leaderboard", str(store)], pm=pm
        ).exit_code
        == 0
    )
    result = invoke(["submission", "verify", str(forged), *args], pm=pm)
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["code"] == "verification-failed", report
    (dataset,) = report["report"]["datasets"]
    assert dataset["claimed"] == 100.0 and dataset["rerun_accuracy"] < 90.0
    assert "predict differently from the stored results" in report["error"]


def test_verify_requires_the_pinned_version() -> None:
    from fewtrans_board.leaderboard.verification import check_pins_installed

    check_pins_installed({"fewtrans-board": "0.1.0"}, {"fewtrans-board": "0.1.0"})
    with pytest.raises(SubmissionError, match=r"pin-not-installed.*found 0\.1\.0"):
        check_pins_installed({"fewtrans-board": "0.0.1"}, {"fewtrans-board": "0.1.0"})
    with pytest.raises(SubmissionError, match=r"pip install no-such-dist==1\.0"):
        check_pins_installed({"no-such-dist": "1.0"}, {"no-such-dist": None})


@pytest.mark.slow
def test_verify_names_the_pinned_distribution_the_worker_lacks(
    valid_bundle: Path, store: Path, tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    pinned = edit_meta(
        valid_bundle,
        tmp_path / "pinned.zip",
        'plugins = ["fewtrans-board==0.1.0"]',
        'plugins = ["fewtrans-board==0.1.0", "no-such-dist==1.0"]',
    )
    pm = get_plugin_manager(entry_points=False)
    result = invoke(
        ["submission", "verify", str(pinned), "--leaderboard", str(store), "--json"], pm=pm
    )
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["code"] == "pin-not-installed"
    assert "pip install fewtrans-board==0.1.0 no-such-dist==1.0" in report["error"]


@pytest.mark.slow
def test_leaderboard_check_on_a_stored_entry(valid_bundle: Path, store: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(entry_points=False)
    add_unverified(invoke, str(valid_bundle), store)
    result = invoke(
        [
            "leaderboard",
            "check",
            "lp--demo",
            "--verify",
            "--sample",
            "2",
            "--leaderboard",
            str(store),
            "--json",
        ],
        pm=pm,
    )
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["ok"] and report["verification"]["passed"]
    missing = invoke(["leaderboard", "check", "nope", "--leaderboard", str(store)], pm=pm)
    assert missing.exit_code == 1 and "[unknown-submission]" in missing.output
