"""Built-in datasets: reference splits, class lists, readers on synthetic copies, checks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.builtin_clip import coop_ucf101_order
from fewtrans_board.datasets.check import check_local_copy
from fewtrans_board.datasets.synthetic import write_synthetic_copy
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.testing import check_dataset


@pytest.fixture(scope="module")
def datasets() -> dict[str, DatasetSpec]:
    from fewtrans_board.registry.manager import get_plugin_manager

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


@pytest.mark.slow  # a Python process
def test_digits_are_scikit_learns_read_without_importing_it() -> None:
    from sklearn.datasets import load_digits

    from fewtrans_board.datasets.digits import _sklearn_digits

    oracle = load_digits()
    pixels, labels = _sklearn_digits()
    assert np.array_equal(pixels, oracle.images) and np.array_equal(labels, oracle.target)
    # Listing the digits in a fresh process leaves scikit-learn unimported (a second each).
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from fewtrans_board.datasets.digits import digits_arrays; "
            "images, labels = digits_arrays(); print(images.shape, 'sklearn' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.split() == ["(1797,", "8,", "8)", "False"]


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


@pytest.mark.slow
def test_synthetic_copies_of_every_builtin_pass_the_checks(
    datasets: dict[str, DatasetSpec], synthetic_roots: dict[str, Path]
) -> None:
    # Synthetic copies (used by other tests) come from each reader's own writer, so this only
    # checks that writer and reader agree; the layouts themselves are pinned by the
    # hand-built copies below.
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


# --- readers against hand-built copies ------------------------------------------------------
# Each copy below is laid out by hand, following the original dataset's published format (the
# spec's ``layout`` text), with plain pathlib/PIL/scipy writes and distractors: non-image
# files, index rows whose image is missing, rows of unknown or excluded classes. The expected
# listing is written out literally: {partition: {class index: item ids in reader order}}.

Expected = dict[str, dict[int, list[str]]]


def image(path: Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (200, 30, 30)).save(path)


def text(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")


def build_dtd(root: Path) -> Expected:
    for name in ("banded/b1.jpg", "banded/a0.png", "blotchy/x.JPG", "not-a-class/y.jpg"):
        image(root / "images" / name)
    text(root / "images/banded/notes.txt", "not an image")
    # one folder per class, sorted file names, any image suffix in any case
    return {
        "all": {0: ["images/banded/a0.png", "images/banded/b1.jpg"], 1: ["images/blotchy/x.JPG"]}
    }


def build_chestx(root: Path) -> Expected:
    rows = [
        ("00000001_000.png", "Cardiomegaly"),
        ("00000002_000.png", "Atelectasis"),
        ("00000003_000.png", "Cardiomegaly|Effusion"),  # multi-label: dropped
        ("00000004_000.png", "No Finding"),  # not one of the 7 classes: dropped
        ("00000005_000.png", "Cardiomegaly"),  # listed, no image file: dropped
        ("00000006_000.png", "Effusion"),
    ]
    body = "Image Index,Finding Labels,Follow-up #,Patient ID\n"
    body += "".join(f"{name},{label},0,{i}\n" for i, (name, label) in enumerate(rows))
    text(root / "Data_Entry_2017.csv", body)
    for name, _ in rows:
        if name != "00000005_000.png":
            image(root / "images" / name)
    return {
        "all": {
            0: ["images/00000002_000.png"],
            1: ["images/00000001_000.png"],
            2: ["images/00000006_000.png"],
        }
    }


def build_isic(root: Path) -> Expected:
    body = "image,MEL,NV,BCC,AKIEC,BKL,DF,VASC\n"
    body += "ISIC_0024306,0.0,1.0,0.0,0.0,0.0,0.0,0.0\n"
    body += "ISIC_0024307,1.0,0.0,0.0,0.0,0.0,0.0,0.0\n"
    body += "ISIC_0024308,0.0,1.0,0.0,0.0,0.0,0.0,0.0\n"  # no image file
    body += "ISIC_0024309,0.0,0.0,0.0,0.0,0.0,0.0,1.0\n"
    text(root / "ISIC2018_Task3_Training_GroundTruth/ISIC2018_Task3_Training_GroundTruth.csv", body)
    for name in ("ISIC_0024306", "ISIC_0024307", "ISIC_0024309"):
        image(root / "ISIC2018_Task3_Training_Input" / f"{name}.jpg")
    folder = "ISIC2018_Task3_Training_Input"
    return {
        "all": {
            0: [f"{folder}/ISIC_0024307.jpg"],
            1: [f"{folder}/ISIC_0024306.jpg"],
            6: [f"{folder}/ISIC_0024309.jpg"],
        }
    }


def build_clip_dtd(root: Path) -> Expected:
    split = {
        "train": [
            ["banded/banded_0002.jpg", 0, "banded"],
            ["blotchy/blotchy_0003.jpg", 1, "blotchy"],
            ["banded/banded_0001.jpg", 0, "banded"],
        ],
        "val": [["braided/braided_0001.jpg", 2, "braided"]],
        "test": [["banded/gone.jpg", 0, "banded"], ["blotchy/blotchy_0010.jpg", 1, "blotchy"]],
    }
    text(root / "split_zhou_DescribableTextures.json", json.dumps(split))
    for part in split.values():
        for impath, _, _ in part:
            if impath != "banded/gone.jpg":
                image(root / "images" / impath)
    b2, b1 = "images/banded/banded_0002.jpg", "images/banded/banded_0001.jpg"
    l3, l10 = "images/blotchy/blotchy_0003.jpg", "images/blotchy/blotchy_0010.jpg"
    r1 = "images/braided/braided_0001.jpg"
    # json order within a partition; "all" pools train, val, test class by class
    return {
        "train": {0: [b2, b1], 1: [l3]},
        "val": {2: [r1]},
        "test": {1: [l10]},
        "all": {0: [b2, b1], 1: [l3, l10], 2: [r1]},
    }


def build_cub(root: Path) -> Expected:
    a46 = "001.Black_footed_Albatross/Black_Footed_Albatross_0046_18.jpg"
    l02 = "002.Laysan_Albatross/Laysan_Albatross_0002_1027.jpg"
    a09 = "001.Black_footed_Albatross/Black_Footed_Albatross_0009_34.jpg"
    text(root / "images.txt", f"1 {a46}\n2 {l02}\n3 {a09}\n")
    text(root / "image_class_labels.txt", "1 1\n2 2\n3 1\n")
    text(root / "train_test_split.txt", "1 0\n2 1\n3 1\n")  # 1 = train, 0 = test
    for rel in (a46, l02, a09):
        image(root / "images" / rel)
    # images.txt order, also for "all"
    return {
        "all": {0: [f"images/{a46}", f"images/{a09}"], 1: [f"images/{l02}"]},
        "train": {0: [f"images/{a09}"], 1: [f"images/{l02}"]},
        "test": {0: [f"images/{a46}"]},
    }


def build_aircraft(root: Path) -> Expected:
    text(root / "images_variant_train.txt", "1025794 727-200\n0034309 707-320\n1514522 727-200\n")
    text(root / "images_variant_val.txt", "0062765 737-200\n0000001 no-such-variant\n")
    text(root / "images_variant_test.txt", "9999999 707-320\n")  # no image file
    for image_id in ("1025794", "0034309", "1514522", "0062765", "0000001"):
        image(root / "images" / f"{image_id}.jpg")
    return {
        "train": {1: ["images/1025794.jpg", "images/1514522.jpg"], 0: ["images/0034309.jpg"]},
        "val": {2: ["images/0062765.jpg"]},
        "test": {},
        "all": {
            0: ["images/0034309.jpg"],
            1: ["images/1025794.jpg", "images/1514522.jpg"],
            2: ["images/0062765.jpg"],
        },
    }


def build_plantdoc(root: Path) -> Expected:
    for rel in (
        "train/Apple Scab Leaf/b.jpg",
        "train/Apple Scab Leaf/a.jpg",
        "train/Apple leaf/c.png",
    ):
        image(root / rel)
    image(root / "test/Apple Scab Leaf/d.jpg")
    return {
        "train": {
            0: ["train/Apple Scab Leaf/a.jpg", "train/Apple Scab Leaf/b.jpg"],
            1: ["train/Apple leaf/c.png"],
        },
        "test": {0: ["test/Apple Scab Leaf/d.jpg"]},
        "all": {
            0: [
                "train/Apple Scab Leaf/a.jpg",
                "train/Apple Scab Leaf/b.jpg",
                "test/Apple Scab Leaf/d.jpg",
            ],
            1: ["train/Apple leaf/c.png"],
        },
    }


def build_dogs(root: Path) -> Expected:
    import numpy as np
    from scipy.io import savemat

    chihuahua = "n02085620-Chihuahua/n02085620_5927.jpg"
    maltese = "n02085936-Maltese_dog/n02085936_10073.jpg"
    spaniel = "n02085782-Japanese_spaniel/n02085782_2.jpg"
    # Stanford Dogs' lists: an N x 1 cell array of paths and N x 1 one-based labels
    for part, files, labels in (
        ("train", [maltese, chihuahua], [3, 1]),
        ("test", [spaniel, "n02085620-Chihuahua/gone.jpg"], [2, 1]),
    ):
        cells = np.empty((len(files), 1), dtype=object)
        for i, rel in enumerate(files):
            cells[i, 0] = rel
        savemat(
            str(root / f"{part}_list.mat"), {"file_list": cells, "labels": np.array([labels]).T}
        )
    for rel in (chihuahua, maltese, spaniel):
        image(root / "Images" / rel)
    return {
        "train": {2: [f"Images/{maltese}"], 0: [f"Images/{chihuahua}"]},
        "test": {1: [f"Images/{spaniel}"]},
        "all": {0: [f"Images/{chihuahua}"], 1: [f"Images/{spaniel}"], 2: [f"Images/{maltese}"]},
    }


def build_fungi(root: Path) -> Expected:
    a = "images/0001.Achroomyces disciformis/a.jpg"
    b = "images/0000.Abortiporus biennis/b.jpg"
    c = "images/0001.Achroomyces disciformis/c.jpg"
    train = {
        "images": [
            {"id": 7, "file_name": c},
            {"id": 3, "file_name": b},
            {"id": 9, "file_name": "x.jpg"},
        ],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 1},
            {"id": 2, "image_id": 3, "category_id": 0},
            {"id": 3, "image_id": 9, "category_id": 999999},  # no such category
        ],
        "categories": [{"id": 0, "name": "Abortiporus biennis"}],
    }
    val = {
        "images": [{"id": 11, "file_name": a}],
        "annotations": [{"id": 4, "image_id": 11, "category_id": 1}],
    }
    text(root / "train.json", json.dumps(train))
    text(root / "val.json", json.dumps(val))
    for rel in (a, b, c, "x.jpg"):
        image(root / rel)
    return {"all": {0: [b], 1: [c, a]}}  # json order, train.json first


def build_flowers(root: Path) -> Expected:
    import numpy as np
    from scipy.io import savemat

    savemat(str(root / "imagelabels.mat"), {"labels": np.array([[3, 1, 3, 2]], dtype=np.uint8)})
    for n in (1, 2, 3):  # image_00004 (label 2) is missing
        image(root / "jpg" / f"image_{n:05d}.jpg")
    return {"all": {0: ["jpg/image_00002.jpg"], 2: ["jpg/image_00001.jpg", "jpg/image_00003.jpg"]}}


HAND_BUILT = {
    "dtd": build_dtd,
    "bscd-chestx": build_chestx,
    "bscd-isic": build_isic,
    "clip-dtd": build_clip_dtd,
    "clip-cub": build_cub,
    "clip-fgvc-aircraft": build_aircraft,
    "clip-plantdoc": build_plantdoc,
    "clip-stanford-dogs": build_dogs,
    "fungi": build_fungi,
    "vgg-flower": build_flowers,
}


def test_hand_built_copies_cover_every_reader(datasets: dict[str, DatasetSpec]) -> None:
    readers = {type(s.reader).__name__ for s in datasets.values() if not s.extra.get("embedded")}
    assert readers == {type(datasets[name].reader).__name__ for name in HAND_BUILT}


@pytest.mark.parametrize("name", list(HAND_BUILT))
def test_reader_lists_a_hand_built_copy(
    name: str, datasets: dict[str, DatasetSpec], tmp_path: Path
) -> None:
    spec = datasets[name]
    expected = HAND_BUILT[name](tmp_path)
    for partition, items in expected.items():
        want = [items.get(c, []) for c in range(spec.num_classes)]
        assert spec.list_items(tmp_path, partition) == want, partition
    assert set(expected) == set(spec.partitions) | {"all"}


def test_class_order_of_hand_built_index_files(
    datasets: dict[str, DatasetSpec], tmp_path: Path
) -> None:
    # First appearance in the partition's index file, absent classes after, by label.
    for name, first in (("clip-dtd", [0, 1]), ("clip-fgvc-aircraft", [1, 0])):
        root = tmp_path / name
        HAND_BUILT[name](root)
        n = datasets[name].num_classes
        rest = [c for c in range(n) if c not in first]
        assert datasets[name].class_order(root, "train") == tuple(first + rest)


@pytest.mark.slow
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
