"""Built-in datasets: reference splits, class lists, readers on synthetic copies, checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fewtrans_board.datasets.builtin_clip import coop_ucf101_order
from fewtrans_board.datasets.check import check_local_copy
from fewtrans_board.datasets.spec import DatasetSpec
from fewtrans_board.datasets.synthetic import write_synthetic_copy
from fewtrans_board.errors import FewtransError
from fewtrans_board.registry import Registry
from fewtrans_board.testing import check_dataset


@pytest.fixture(scope="module")
def datasets() -> dict[str, DatasetSpec]:
    from fewtrans_board.plugins import get_plugin_manager

    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    return {e.name: e.obj for e in registry.datasets}


def novel_names(spec: DatasetSpec) -> list[str]:
    return [spec.class_ids[i] for i in spec.split.novel]


def test_eurosat_split_matches_reference(datasets: dict[str, DatasetSpec]) -> None:
    spec = datasets["eurosat"]
    assert novel_names(spec) == ["AnnualCrop", "Industrial", "Pasture", "River"]
    base = [spec.class_ids[i] for i in spec.split.base]
    assert base == [
        "HerbaceousVegetation",
        "Forest",
        "SeaLake",
        "PermanentCrop",
        "Highway",
        "Residential",
    ]


def test_dtd_split_matches_reference(datasets: dict[str, DatasetSpec]) -> None:
    assert novel_names(datasets["dtd"]) == [
        "banded",
        "bumpy",
        "crosshatched",
        "knitted",
        "pleated",
        "porous",
        "sprinkled",
        "stratified",
        "waffled",
        "woven",
    ]


def test_cifar100_split_matches_reference(datasets: dict[str, DatasetSpec]) -> None:
    spec = datasets["cifar100"]
    assert novel_names(spec) == [
        "beaver",
        "bed",
        "bicycle",
        "butterfly",
        "caterpillar",
        "crocodile",
        "dinosaur",
        "fox",
        "kangaroo",
        "keyboard",
        "lamp",
        "lawn_mower",
        "lizard",
        "lobster",
        "possum",
        "table",
        "tiger",
        "train",
        "turtle",
        "whale",
    ]
    assert [spec.class_ids[i] for i in spec.split.base[:6]] == [
        "baby",
        "mountain",
        "sunflower",
        "elephant",
        "house",
        "bridge",
    ]


def test_other_reference_novel_indices(datasets: dict[str, DatasetSpec]) -> None:
    assert datasets["plant-disease"].split.novel == (0, 4, 8, 14, 18, 20, 29, 31)
    assert datasets["vgg-flower"].split.novel == (
        4,
        5,
        8,
        14,
        18,
        27,
        29,
        34,
        39,
        40,
        41,
        44,
        45,
        64,
        84,
        88,
        89,
        93,
        95,
        97,
    )
    assert datasets["ucf101"].split.novel[:5] == (4, 5, 8, 14, 18)
    assert datasets["quickdraw"].split.novel[:5] == (5, 7, 8, 14, 17)
    assert datasets["fungi"].split.novel[:5] == (8, 9, 15, 19, 20)


@pytest.mark.parametrize(
    ("name", "classes", "base"),
    [
        ("imagenet-sketch", 1000, 712),
        ("quickdraw", 345, 276),
        ("vgg-flower", 102, 82),
        ("aircraft", 100, 80),
        ("dtd", 47, 37),
        ("fungi", 1394, 1115),
        ("cifar100", 100, 80),
        ("eurosat", 10, 6),
        ("ucf101", 101, 81),
        ("plant-disease", 38, 30),
        ("cub", 200, 160),
        ("bscd-cropdisease", 38, 38),
        ("bscd-eurosat", 10, 10),
        ("bscd-isic", 7, 7),
        ("bscd-chestx", 7, 7),
        ("digits", 10, 5),
    ],
)
def test_class_counts(datasets: dict[str, DatasetSpec], name: str, classes: int, base: int) -> None:
    spec = datasets[name]
    assert (spec.num_classes, len(spec.split.base)) == (classes, base)


def test_imagenet_sketch_uses_meta_dataset_split(datasets: dict[str, DatasetSpec]) -> None:
    spec = datasets["imagenet-sketch"]
    base = [spec.class_ids[i] for i in spec.split.base]
    assert base == sorted(base)
    novel = set(novel_names(spec))
    assert "n02085620" in novel  # Chihuahua: a carnivore, Meta-Dataset's validation root
    assert "n02672831" in novel  # accordion: a device, the test root
    assert "n01440764" in base  # tench


def test_class_names_never_contain_path_separators_in_folder_ids(
    datasets: dict[str, DatasetSpec],
) -> None:
    aircraft = datasets["aircraft"]
    assert "F-16A_B" in aircraft.class_ids and "F-16A/B" in aircraft.class_names
    assert all("/" not in cid for cid in aircraft.class_ids)


def test_coop_ucf101_order_differs_from_sorted_only_where_expected(
    datasets: dict[str, DatasetSpec],
) -> None:
    ids = list(datasets["ucf101"].class_ids)
    coop = coop_ucf101_order(ids)
    moved = [i for i, (a, b) in enumerate(zip(ids, coop, strict=True)) if a != b]
    assert [ids[i] for i in moved] == ["Hammer_Throw", "Hammering", "Jump_Rope", "Jumping_Jack"]
    assert list(datasets["clip-ucf101"].class_ids) == coop


def test_digits_is_embedded_and_split(datasets: dict[str, DatasetSpec]) -> None:
    spec = datasets["digits"]
    report = check_dataset(spec)
    assert report.details["items"] == 1797
    listing = spec.list_items(None)
    assert all(170 <= len(items) <= 190 for items in listing)
    assert spec.split.base == (5, 6, 7, 8, 9) and spec.split.novel == (0, 1, 2, 3, 4)
    image = spec.reader.load_image(None, listing[7][0])
    assert image.size == (8, 8) and image.mode == "RGB"


def synthetic_counts(spec: DatasetSpec) -> list[int]:
    return [2 + (i % 3) for i in range(spec.num_classes)]


@pytest.fixture(scope="module")
def synthetic_roots(
    tmp_path_factory: pytest.TempPathFactory, datasets: dict[str, DatasetSpec]
) -> dict[str, Path]:
    roots = {}
    for name, spec in datasets.items():
        if spec.extra.get("embedded"):
            continue
        root = tmp_path_factory.mktemp(name)
        write_synthetic_copy(spec, root, synthetic_counts(spec), image_size=4)
        roots[name] = root
    return roots


def test_every_builtin_reads_its_documented_layout(
    datasets: dict[str, DatasetSpec], synthetic_roots: dict[str, Path]
) -> None:
    for name, root in synthetic_roots.items():
        spec = datasets[name]
        report = check_dataset(spec, root)
        assert report.passed == ["metadata", "reader"], name
        listing = spec.list_items(root)
        assert [len(items) for items in listing] == synthetic_counts(spec), name
        for partition in spec.partitions:
            if partition != "all":
                parts = spec.list_items(root, partition)
                assert sum(map(len, parts)) > 0, (name, partition)


def test_class_order_follows_the_index_files(
    datasets: dict[str, DatasetSpec], synthetic_roots: dict[str, Path], tmp_path: Path
) -> None:
    # Synthetic copies list classes in label order; a folder-per-class layout has no order.
    for name in ("clip-dtd", "clip-fgvc-aircraft", "clip-stanford-dogs", "clip-plantdoc"):
        spec = datasets[name]
        assert spec.class_order(synthetic_roots[name], "train") == tuple(range(spec.num_classes))
    # FGVC-Aircraft's images_variant_train.txt is sorted by image id, so classes interleave.
    spec = datasets["clip-fgvc-aircraft"]
    root = tmp_path / "aircraft"
    shutil.copytree(synthetic_roots["clip-fgvc-aircraft"], root)
    train = root / "images_variant_train.txt"
    lines = train.read_text().splitlines()
    train.write_text("\n".join(reversed(lines)) + "\n")
    first = [spec.class_names.index(line.split(" ", 1)[1]) for line in reversed(lines)]
    assert spec.class_order(root, "train") == tuple(dict.fromkeys(first))
    assert spec.class_order(root, "train") != tuple(range(spec.num_classes))


def test_datasets_check_passes_on_complete_copy(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["datasets", "scan", "digits"])
    assert (
        result.exit_code == 0
        and "1797 items in 10 classes" in result.output
        and "OK" in result.output
    )


def test_datasets_check_flags_incomplete_copy(invoke, synthetic_roots: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["datasets", "scan", "dtd", "--root", str(synthetic_roots["dtd"]), "--json"])
    report = json.loads(result.output)
    assert result.exit_code == 1 and not report["ok"]
    assert report["total"] == sum(report["counts"].values()) < report["expected_total"] == 5640
    assert len(report["small_classes"]) == 47
    assert not (report["empty_classes"] or report["extra_classes"] or report["unreadable"])


def test_datasets_check_reports_problems(
    invoke, tmp_path: Path, datasets: dict[str, DatasetSpec]
) -> None:  # type: ignore[no-untyped-def]
    spec = datasets["eurosat"]
    write_synthetic_copy(spec, tmp_path, 3, image_size=4)
    for f in (tmp_path / "River").iterdir():
        f.unlink()
    (tmp_path / "River").rmdir()
    (tmp_path / "Clouds").mkdir()
    bad = tmp_path / "Forest" / "img_00001.jpg"
    bad.write_bytes(b"not an image at all")
    result = invoke(["datasets", "scan", "eurosat", "--root", str(tmp_path)])
    assert result.exit_code == 1
    assert "1 missing or empty classes: River" in result.output
    assert "1 extra folders not in the class list: Clouds" in result.output
    assert "1 unreadable images: Forest/img_00001.jpg" in result.output
    assert "FAILED" in result.output


def test_missing_root_gives_layout_help(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["datasets", "scan", "bscd-isic", "--root", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = invoke(["datasets", "scan", "bscd-isic"])
    assert (
        result.exit_code == 1
        and "needs --root" in result.output
        and "GroundTruth.csv" in result.output
    )


def test_reader_errors_name_missing_files(datasets: dict[str, DatasetSpec], tmp_path: Path) -> None:
    with pytest.raises(FewtransError, match=r"missing annotation file .*train\.json"):
        datasets["fungi"].list_items(tmp_path)


def test_chestx_keeps_single_label_rows_only(
    datasets: dict[str, DatasetSpec], synthetic_roots: dict[str, Path]
) -> None:
    spec = datasets["bscd-chestx"]
    listing = spec.list_items(synthetic_roots["bscd-chestx"])
    assert [len(x) for x in listing] == synthetic_counts(spec)  # No Finding / multi-label dropped


def test_check_local_copy_counts_expected_total(datasets: dict[str, DatasetSpec]) -> None:
    report = check_local_copy(datasets["digits"], None, verify_images=False)
    assert report.ok and report.total == report.expected_total == 1797
