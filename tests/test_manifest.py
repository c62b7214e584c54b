"""Manifests: byte-identical rebuilds, hash refusal, show/verify CLI, bad input, frozen files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fewtrans_board.episodes.__main__ import readme_text
from fewtrans_board.episodes.frozen import FROZEN
from fewtrans_board.episodes.manifest import Manifest, ManifestError

ROOT = Path(__file__).resolve().parents[1]
FROZEN_DIR = ROOT / "leaderboard" / "manifests"


def build(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fewtrans_board", "manifest", "build", *extra, "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.slow
def test_two_processes_build_byte_identical_files(tmp_path: Path) -> None:
    args = ("--protocol", "fewtrans-varied", "--dataset", "digits", "--episodes", "40")
    first, second = tmp_path / "a" / "m.parquet", tmp_path / "b" / "m.parquet"
    assert build(first, *args).returncode == 0 and build(second, *args).returncode == 0
    assert first.read_bytes() == second.read_bytes()
    assert Manifest.load(first).sha256 == Manifest.load(second).sha256
    assert (first.parent / "m.parquet.sha256").read_text() == (
        second.parent / "m.parquet.sha256"
    ).read_text()


@pytest.mark.slow
def test_bytes_do_not_depend_on_the_output_name(tmp_path: Path) -> None:
    args = ("--protocol", "fewtrans-search", "--dataset", "digits", "--episodes", "5")
    first, second = tmp_path / "one.parquet", tmp_path / "deeper" / "renamed-copy.parquet"
    assert build(first, *args).returncode == 0 and build(second, *args).returncode == 0
    assert first.read_bytes() == second.read_bytes()
    recorded = json.loads(pq.read_schema(first).metadata[b"fewtrans_board.manifest"])
    assert recorded["build_command"].endswith("--out '<out>'")


def test_manifest_rows_and_metadata(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "m.parquet"
    result = invoke(
        [
            "manifest",
            "build",
            "--protocol",
            "fewtrans-varied",
            "--dataset",
            "digits",
            "--episodes",
            "12",
            "--block",
            "1",
            "--out",
            str(out),
            "--json",
        ]
    )
    summary = json.loads(result.output)
    manifest = Manifest.load(out)
    assert summary["sha256"] == manifest.sha256
    assert manifest.meta["draw"] == {"block": 1, "block_size": 12, "first_stream_index": 12}
    assert manifest.meta["protocol"]["name"] == "fewtrans-varied"
    assert manifest.meta["dataset"]["name"] == "digits" and manifest.meta["seed"] == 0
    episodes = manifest.episodes()
    assert [ep.stream_index for ep in episodes] == list(range(12, 24))
    for ep in episodes:
        assert set(ep.classes) <= {5, 6, 7, 8, 9}  # evaluation classes only
        assert not {i for i, _ in ep.support} & {i for i, _ in ep.query}
        assert sorted({label for _, label in ep.support}) == list(range(ep.ways))
    table = pq.read_table(out)
    assert table.column_names == [
        "dataset",
        "episode",
        "stream_index",
        "role",
        "item",
        "label",
        "class_index",
        "class_id",
    ]


@pytest.mark.slow
def test_block_one_continues_the_stream_of_block_zero(tmp_path: Path) -> None:
    both = tmp_path / "both.parquet"
    second = tmp_path / "second.parquet"
    build(
        both,
        "--protocol",
        "fewtrans-varied",
        "--dataset",
        "digits",
        "--episodes",
        "20",
        "--block",
        "0",
    )
    build(
        second,
        "--protocol",
        "fewtrans-varied",
        "--dataset",
        "digits",
        "--episodes",
        "10",
        "--block",
        "1",
    )
    tail = Manifest.load(both).episodes()[10:]
    assert [(e.classes, e.support, e.query) for e in tail] == [
        (e.classes, e.support, e.query) for e in Manifest.load(second).episodes()
    ]


@pytest.mark.slow
def test_one_changed_byte_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "m.parquet"
    build(out, "--protocol", "fewtrans-search", "--dataset", "digits")
    data = bytearray(out.read_bytes())
    for position in (len(data) // 3, len(data) // 2, 10):
        tampered = bytearray(data)
        tampered[position] ^= 0x01
        out.write_bytes(bytes(tampered))
        with pytest.raises(ManifestError):
            Manifest.load(out)


@pytest.mark.slow
def test_edited_content_fails_the_content_hash(tmp_path: Path) -> None:
    out = tmp_path / "m.parquet"
    build(out, "--protocol", "fewtrans-search", "--dataset", "digits")
    table = pq.read_table(out)
    items = table.column("item").to_pylist()
    items[0], items[1] = items[1], items[0]
    import pyarrow as pa

    edited = table.set_column(table.column_names.index("item"), "item", pa.array(items))
    pq.write_table(edited, out)
    with pytest.raises(ManifestError, match="content does not match its sha256"):
        Manifest.load(out, check_sidecar=False)


@pytest.mark.slow
def test_show_prints_histograms(invoke) -> None:  # type: ignore[no-untyped-def]
    path = FROZEN_DIR / "fewtrans-varied--digits.parquet"
    summary = json.loads(invoke(["manifest", "show", str(path), "--json"]).output)
    assert summary["episodes"] == 600 and sum(summary["way_histogram"].values()) == 600
    assert set(summary["way_histogram"]) <= {"2", "3", "4", "5"}
    assert max(int(k) for k in summary["shot_histogram"]) <= 10
    text = invoke(["manifest", "show", str(path)]).output
    assert "fewtrans-varied v1" in text and "episodes  600" in text


def test_verify_against_a_local_copy(invoke, tmp_path: Path, tiny_dataset_spec) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from fewtrans_board import hookimpl
    from fewtrans_board.datasets.readers import FolderReader
    from fewtrans_board.datasets.synthetic import write_synthetic_copy
    from fewtrans_board.registry.manager import get_plugin_manager

    spec = replace(
        tiny_dataset_spec, name="tiny-folder", reader=FolderReader(suffix=".png"), extra={}
    )

    class Plugin:
        @hookimpl
        def register_datasets(self, register):  # type: ignore[no-untyped-def]
            register(spec)

    pm = get_plugin_manager(entry_points=False, extra_plugins={"tiny": Plugin()})
    root = tmp_path / "copy"
    write_synthetic_copy(spec, root, [8, 9, 10])
    out = tmp_path / "m.parquet"
    result = invoke(
        [
            "manifest",
            "build",
            "--protocol",
            "fewtrans-fixed",
            "--dataset",
            "tiny-folder",
            "--root",
            str(root),
            "--ways",
            "2",
            "--shots",
            "2",
            "--queries",
            "3",
            "--episodes",
            "5",
            "--out",
            str(out),
        ],
        pm=pm,
    )
    assert result.exit_code == 0, result.output
    assert invoke(["manifest", "verify", str(out), "--root", str(root)], pm=pm).exit_code == 0
    victim = Manifest.load(out).rows["item"][0]
    (root / victim).unlink()
    result = invoke(["manifest", "verify", str(out), "--root", str(root), "--json"], pm=pm)
    report = json.loads(result.output)
    assert result.exit_code == 1 and not report["ok"] and not report["fingerprint_matches"]
    assert [victim.split("/")[0], victim] in report["missing"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--protocol", "fewtrans-varied", "--dataset", "dtd", "--root", "/nonexistent/dtd"],
            "does not exist",
        ),
        (["--protocol", "fewtrans-varied", "--dataset", "dtd"], "needs --root"),
        (["--protocol", "fewtrans-varied", "--dataset", "dtdd"], "Did you mean 'dtd'"),
        (["--protocol", "fewtrans-varid", "--dataset", "digits"], "Did you mean 'fewtrans-varied'"),
        (
            ["--protocol", "fewtrans-fixed", "--dataset", "digits", "--shots", "200"],
            "at least 215 items",
        ),
        (
            ["--protocol", "fewtrans-varied", "--dataset", "digits", "--shots", "5"],
            "only to fixed protocols",
        ),
        (
            ["--protocol", "fewtrans-varied", "--dataset", "digits", "--episodes", "0"],
            "'--episodes': 0 is not in the range x>=1",
        ),
    ],
)
def test_bad_input_fails_clearly(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "m.parquet"
    result = build(out, *args)
    # 2: click refused the option value before the command ran; 1: the command refused.
    assert result.returncode == (2 if "Invalid value" in result.stderr else 1), result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.slow
def test_class_too_small_for_protocol_names_classes(tmp_path: Path, datasets_registry) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.datasets.synthetic import write_synthetic_copy

    root = tmp_path / "eurosat"
    write_synthetic_copy(datasets_registry["bscd-eurosat"], root, 3)
    result = build(
        tmp_path / "m.parquet",
        "--protocol",
        "bscd",
        "--dataset",
        "bscd-eurosat",
        "--root",
        str(root),
    )
    assert result.returncode == 1 and "at least 20 items (5 shots + 15 queries)" in result.stderr


def test_missing_manifest_and_garbage_file(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    assert "does not exist" in invoke(["manifest", "show", str(tmp_path / "x.parquet")]).output
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"PAR1 this is not parquet")
    result = invoke(["manifest", "show", str(garbage)])
    assert result.exit_code == 1 and "not a readable Parquet file" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("frozen", [m for m in FROZEN if m.embedded], ids=lambda m: m.filename)
def test_frozen_manifests_are_current(frozen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    committed = FROZEN_DIR / frozen.filename
    rebuilt = tmp_path / frozen.filename
    cmd = frozen.command(str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "fewtrans_board", *cmd[1:]], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    # Compare content, never bytes: the Parquet bytes embed the writer's pyarrow version
    # (unpinned). load() recomputes the content digest from the decoded metadata and rows
    # and refuses a file whose stored digest differs, so equal digests mean equal content;
    # rows, content metadata and the column schema are compared too, to name what changed.
    old, new = Manifest.load(committed), Manifest.load(rebuilt)
    assert new.sha256 == old.sha256
    assert new.rows == old.rows

    def content_meta(manifest: Manifest) -> dict[str, object]:
        return {k: v for k, v in manifest.meta.items() if k != "built_with"}

    assert content_meta(new) == content_meta(old)
    assert pq.read_schema(rebuilt).remove_metadata() == pq.read_schema(committed).remove_metadata()


def test_manifest_readme_is_current() -> None:
    assert (FROZEN_DIR / "README.md").read_text() == readme_text()


def test_a_manifest_read_again_is_decoded_once_and_its_copies_are_its_callers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = Path(__file__).resolve().parents[1] / "leaderboard" / "manifests"
    first = Manifest.load(frozen / "fewtrans-search--digits.parquet")
    first.meta["protocol"]["name"] = "edited by a caller"

    def no_decoding(path: Path) -> None:
        raise AssertionError(f"{path} was decoded again")

    monkeypatch.setattr(Manifest, "_decode", classmethod(lambda cls, path: no_decoding(path)))
    again = Manifest.load(frozen / "fewtrans-search--digits.parquet")
    assert again.protocol == "fewtrans-search" and again.sha256 == first.sha256
    assert again.episodes() == first.episodes()
    monkeypatch.undo()
    # Other bytes at the same path are other content: decoded, never served from memory.
    out = tmp_path / "m.parquet"
    out.write_bytes((frozen / "fewtrans-search--digits.parquet").read_bytes())
    assert Manifest.load(out, check_sidecar=False).sha256 == first.sha256
    Manifest.load(frozen / "fewtrans-fixed-5w1s--digits.parquet").write(out)
    assert Manifest.load(out).protocol == "fewtrans-fixed"


def test_dictionary_columns_decode_to_what_to_pylist_gives() -> None:
    """The fast decoding of dictionary columns against Arrow's own ``to_pylist`` (the
    oracle): several chunks with their own dictionaries, nulls (the general path), empty."""
    import pyarrow as pa

    from fewtrans_board.episodes.manifest import _python_values

    chunks = [
        pa.array(["query", "support", "query"]).dictionary_encode(),
        pa.array(["novel", "query"]).dictionary_encode(),
        pa.array([], type=pa.string()).dictionary_encode(),
    ]
    cases = [
        pa.chunked_array(chunks),
        pa.chunked_array([pa.array(["a", None, "b"]).dictionary_encode()]),
        pa.chunked_array([pa.array([3, 1, 2], type=pa.int32())]),
        pa.chunked_array([], type=pa.dictionary(pa.int32(), pa.string())),
    ]
    for column in cases:
        assert _python_values(column) == column.to_pylist()
    frozen = pq.read_table(FROZEN_DIR / "fewtrans-varied--digits.parquet")
    for name in frozen.column_names:
        assert _python_values(frozen.column(name)) == frozen.column(name).to_pylist(), name
