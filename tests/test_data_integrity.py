"""Data integrity at the edges: corrupt images, malformed label files, no silent drops.

Red-team cases damage a synthetic copy the way a real one gets damaged (a truncated JPEG, a
text file named ``.jpg``, a CSV re-saved with a BOM, a renamed header, a bad value, a row
whose image is gone); each has an honest control on the undamaged copy.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fewtrans_board import hookimpl
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.check import check_local_copy
from fewtrans_board.datasets.readers import FolderReader, check_image
from fewtrans_board.datasets.synthetic import write_synthetic_copy
from fewtrans_board.registry.manager import get_plugin_manager


def _jpeg(path: Path, size: int = 48) -> None:
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 255, (size, size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=90)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_check_image_decodes_the_pixels(tmp_path: Path) -> None:
    from PIL import Image

    whole, cut, text = tmp_path / "whole.jpg", tmp_path / "cut.jpg", tmp_path / "text.jpg"
    _jpeg(whole)
    _jpeg(cut)
    _truncate(cut)
    text.write_text("not an image\n")
    check_image(whole)  # control
    with Image.open(cut) as image:  # the header alone passes: what the old check looked at
        image.verify()
    for bad in (cut, text):
        with pytest.raises(FewtransError, match=f"cannot read image {bad}"):
            check_image(bad)


@pytest.fixture
def folder_copy(tmp_path: Path, tiny_dataset_spec: Any) -> tuple[Any, Any, Path]:
    """A three-class folder-per-class JPEG copy and a plugin manager that registers it."""
    spec = replace(
        tiny_dataset_spec,
        name="tiny-jpeg",
        reader=FolderReader(suffix=".jpg"),
        extra={},
        min_items_per_class=6,  # what a complete copy has
    )

    class Plugin:
        @hookimpl
        def register_datasets(self, register):  # type: ignore[no-untyped-def]
            register(spec)

    pm = get_plugin_manager(entry_points=False, extra_plugins={"tiny": Plugin()})
    root = tmp_path / "copy"
    write_synthetic_copy(spec, root, [6, 6, 6], image_size=32)
    return spec, pm, root


BUILD = ["--protocol", "fewtrans-fixed", "--dataset", "tiny-jpeg", "--ways", "2"]
BUILD += ["--shots", "2", "--queries", "2", "--episodes", "3"]


def test_manifest_verify_fails_on_corrupt_items(folder_copy: Any, tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.episodes.manifest import Manifest

    _, pm, root = folder_copy
    out = tmp_path / "m.parquet"
    built = invoke(["manifest", "build", *BUILD, "--root", str(root), "--out", str(out)], pm=pm)
    assert built.exit_code == 0, built.output
    verify = ["manifest", "verify", str(out), "--root", str(root), "--json"]
    honest = json.loads(invoke(verify, pm=pm).output)
    assert honest["ok"] and honest["decoded"] and honest["unreadable"] == []
    items = sorted(set(Manifest.load(out).rows["item"]))
    _truncate(root / items[0])
    (root / items[1]).write_text("a text file named .jpg\n")
    result = invoke(verify, pm=pm)
    report = json.loads(result.output)
    assert result.exit_code == 1 and not report["ok"]
    assert [u[0] for u in report["unreadable"]] == items[:2]
    assert report["fingerprint_matches"]  # same names: only decoding sees the damage
    # --no-decode checks presence only, as before.
    assert invoke([*verify, "--no-decode"], pm=pm).exit_code == 0


def test_manifest_build_warns_when_scan_would_fail(
    folder_copy: Any, tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    _, pm, root = folder_copy
    args = ["manifest", "build", *BUILD, "--root", str(root), "--json"]
    honest = json.loads(invoke([*args, "--out", str(tmp_path / "a.parquet")], pm=pm).output)
    assert "scan_warning" not in honest
    min(root.glob("c/*.jpg")).unlink()  # a copy missing a file builds, with another sha256
    damaged = json.loads(invoke([*args, "--out", str(tmp_path / "b.parquet")], pm=pm).output)
    assert damaged["sha256"] != honest["sha256"]
    assert "datasets scan tiny-jpeg' fails" in damaged["scan_warning"]
    assert "1 classes below the minimum size (first: c)" in damaged["scan_warning"]
    text = invoke([*args[:-1], "--out", str(tmp_path / "c.parquet")], pm=pm).output
    assert "warning: 'fewtrans-board datasets scan tiny-jpeg' fails" in text


# --- label files --------------------------------------------------------------------------


@pytest.fixture
def isic(tmp_path: Path, datasets_registry: dict[str, Any]) -> tuple[Any, Path, Path]:
    spec = datasets_registry["bscd-isic"]
    root = tmp_path / "isic"
    write_synthetic_copy(spec, root, 3)
    return spec, root, root / spec.reader.csv_path


def _one_line_error(spec: Any, root: Path) -> str:
    with pytest.raises(FewtransError) as caught:
        spec.list_items(root, "all")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_isic_csv_with_a_bom_reads_as_without(isic: tuple[Any, Path, Path]) -> None:
    spec, root, csv = isic
    plain = spec.list_items(root, "all")
    assert sum(map(len, plain)) == 3 * spec.num_classes  # control: every row listed
    csv.write_bytes(b"\xef\xbb\xbf" + csv.read_bytes())  # as a spreadsheet re-saves it
    assert spec.list_items(root, "all") == plain


def test_isic_csv_renamed_header_is_one_line_with_file_and_line(
    isic: tuple[Any, Path, Path],
) -> None:
    spec, root, csv = isic
    csv.write_text(csv.read_text().replace("image,", "image_id,", 1))
    message = _one_line_error(spec, root)
    assert f"{csv}:1:" in message and "lacks column(s) 'image'" in message


def test_isic_csv_bad_value_is_one_line_with_file_and_line(isic: tuple[Any, Path, Path]) -> None:
    spec, root, csv = isic
    lines = csv.read_text().splitlines()
    lines[3] = lines[3].replace("0.0", "zero", 1)  # line 4 of the file
    csv.write_text("\n".join(lines) + "\n")
    message = _one_line_error(spec, root)
    assert f"{csv}:4:" in message and "'zero'" in message and "not a number" in message


def test_isic_short_row_is_one_line(isic: tuple[Any, Path, Path]) -> None:
    spec, root, csv = isic
    lines = csv.read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 2)[0]
    csv.write_text("\n".join(lines) + "\n")
    message = _one_line_error(spec, root)
    assert f"{csv}:3:" in message and f"where the header has {spec.num_classes + 1}" in message


def test_isic_row_without_its_image_is_counted_not_dropped_silently(
    isic: tuple[Any, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    spec, root, csv = isic
    assert check_local_copy(spec, root, verify_images=False).missing_files == []  # control
    name = csv.read_text().splitlines()[5].split(",")[0]
    item = f"{spec.reader.image_dir}/{name}.jpg"
    (root / item).unlink()
    with caplog.at_level(logging.WARNING):
        listing = spec.list_items(root, "all")
    assert item not in {i for items in listing for i in items}
    assert any("1 row(s)" in r.getMessage() and "line 6" in r.getMessage() for r in caplog.records)
    report = check_local_copy(spec, root, verify_images=False)
    assert report.missing_files == [item] and not report.ok


def test_chestx_renamed_header_is_one_line(
    tmp_path: Path, datasets_registry: dict[str, Any]
) -> None:
    spec = datasets_registry["bscd-chestx"]
    root = tmp_path / "chestx"
    write_synthetic_copy(spec, root, 2)
    csv = root / spec.reader.csv_path
    csv.write_text(csv.read_text().replace("Finding Labels", "Findings", 1))
    message = _one_line_error(spec, root)
    assert f"{csv}:1:" in message and "'Finding Labels'" in message


def test_scan_cli_names_file_and_line_not_an_unexpected_failure(
    isic: tuple[Any, Path, Path], invoke
) -> None:  # type: ignore[no-untyped-def]
    spec, root, csv = isic
    csv.write_text(csv.read_text().replace("image,", "image_id,", 1))
    pm = get_plugin_manager(entry_points=False)
    result = invoke(["datasets", "scan", spec.name, "--root", str(root)], pm=pm)
    assert result.exit_code != 0
    assert f"{csv}:1:" in result.output and "unexpectedly" not in result.output


def test_datasets_json_lists_the_layout(datasets_registry: dict[str, Any], invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(entry_points=False)
    (entry,) = json.loads(invoke(["datasets", "list", "bscd-isic", "--json"], pm=pm).output)
    assert entry["layout"] == datasets_registry["bscd-isic"].layout
    assert entry["reader"] == "OneHotCsvReader"


def test_failing_scan_names_the_expected_layout(isic: tuple[Any, Path, Path], invoke) -> None:  # type: ignore[no-untyped-def]
    spec, root, csv = isic
    name = csv.read_text().splitlines()[1].split(",")[0]
    (root / spec.reader.image_dir / f"{name}.jpg").unlink()
    pm = get_plugin_manager(entry_points=False)
    args = ["datasets", "scan", spec.name, "--root", str(root), "--no-verify-images"]
    result = invoke(args, pm=pm)
    assert result.exit_code == 1 and f"expected layout of {spec.name}" in result.output
    assert spec.layout.splitlines()[0] in result.output
    assert json.loads(invoke([*args, "--json"], pm=pm).stdout)["layout"] == spec.layout


def test_split_json_faults_are_one_line(tmp_path: Path, datasets_registry: dict[str, Any]) -> None:
    spec = datasets_registry["clip-dtd"]
    root = tmp_path / "dtd"
    write_synthetic_copy(spec, root, 4)
    split = root / spec.reader.split_file
    data = json.loads(split.read_text())
    assert sum(map(len, spec.list_items(root, "all"))) == 4 * spec.num_classes  # control
    split.write_text(json.dumps(data, indent=1)[:-40])  # cut short
    message = _one_line_error(spec, root)
    assert f"{split}:" in message and "is not valid JSON" in message
    data["test"][0][1] = spec.num_classes  # a label past the last class
    split.write_text(json.dumps(data))
    assert "test[0] has label" in _one_line_error(spec, root)


def test_cub_index_faults_are_one_line(tmp_path: Path, datasets_registry: dict[str, Any]) -> None:
    spec = datasets_registry["clip-cub"]
    root = tmp_path / "cub"
    write_synthetic_copy(spec, root, 2)
    assert sum(map(len, spec.list_items(root, "all"))) == 2 * spec.num_classes  # control
    labels = root / "image_class_labels.txt"
    lines = labels.read_text().splitlines()
    labels.write_text("\n".join([*lines[:2], lines[2].split()[0], *lines[3:]]) + "\n")
    assert f"{labels}:3:" in _one_line_error(spec, root)
    labels.write_text("\n".join(lines[1:]) + "\n")  # the first image has no label line
    message = _one_line_error(spec, root)
    assert f"{root / 'images.txt'}:1:" in message and "no line in image_class_labels.txt" in message


def test_stanford_dogs_list_faults_are_one_line_naming_file_and_entry(
    tmp_path: Path, datasets_registry: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    from scipy.io import loadmat, savemat

    spec = datasets_registry["clip-stanford-dogs"]
    root = tmp_path / "dogs"
    write_synthetic_copy(spec, root, 2)
    assert sum(map(len, spec.list_items(root, "all"))) == 2 * spec.num_classes  # control
    assert check_local_copy(spec, root, verify_images=False).missing_files == []
    lists = root / "test_list.mat"
    good = lists.read_bytes()
    lists.write_bytes(good[: len(good) // 2])  # a truncated download
    message = _one_line_error(spec, root)
    assert f"{lists}:" in message and "not the official list file" in message
    lists.write_bytes(good)
    mat = loadmat(str(lists))
    savemat(str(lists), {"files": mat["file_list"], "labels": mat["labels"]})  # renamed key
    assert "'file_list'" in _one_line_error(spec, root)
    labels = mat["labels"].copy()
    labels[2, 0] = spec.num_classes + 1  # entry 3 names no class
    savemat(str(lists), {"file_list": mat["file_list"], "labels": labels})
    message = _one_line_error(spec, root)
    assert f"{lists}: entry 3 has label" in message
    savemat(str(lists), {"file_list": mat["file_list"], "labels": mat["labels"][:-1]})
    assert "labels" in _one_line_error(spec, root)
    lists.write_bytes(good)
    item = "Images/" + str(np.ravel(mat["file_list"].ravel()[4])[0])
    (root / item).unlink()
    with caplog.at_level(logging.WARNING):
        listing = spec.list_items(root, "all")
    assert item not in {i for items in listing for i in items}
    assert any("entry 5" in r.getMessage() and item in r.getMessage() for r in caplog.records)
    report = check_local_copy(spec, root, verify_images=False)  # as the warning promises
    assert report.missing_files == [item] and not report.ok
