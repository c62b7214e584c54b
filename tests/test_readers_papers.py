"""Source datasets of the papers: Caltech-256, CIFAR-100 train, ImageNet class subsets.

Each reader is checked on a synthetic copy of its official layout (``write_synthetic_copy``)
and on damaged copies, which ``datasets scan`` must describe file by file or class by class.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.check import check_local_copy
from fewtrans_board.datasets.cifar import write_cifar_folders
from fewtrans_board.datasets.synthetic import write_synthetic_copy
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.testing import check_dataset

NEW = ("caltech256", "cifar100-train", "imagenet-md-train", "imagenet-md-heldout")


@pytest.fixture(scope="module")
def specs() -> dict[str, DatasetSpec]:
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    return {e.name: e.obj for e in registry.datasets}


def loose(spec: DatasetSpec, counts: list[int]) -> DatasetSpec:
    """The spec with a tiny copy's counts as the official ones (so a complete copy is ok)."""
    extra = dict(spec.extra)
    if "expected_counts" in extra:
        extra["expected_counts"] = dict(zip(spec.class_ids, counts, strict=True))
    return dataclasses.replace(spec, min_items_per_class=1, expected_items=sum(counts), extra=extra)


def counts_of(spec: DatasetSpec) -> list[int]:
    return [2 + i % 3 for i in range(spec.num_classes)]


@pytest.fixture(scope="module")
def copies(
    tmp_path_factory: pytest.TempPathFactory, specs: dict[str, DatasetSpec]
) -> dict[str, Path]:
    roots = {}
    for name in NEW:
        roots[name] = tmp_path_factory.mktemp(name)
        write_synthetic_copy(specs[name], roots[name], counts_of(specs[name]), image_size=4)
    return roots


@pytest.mark.parametrize("name", NEW)
def test_synthetic_copy_of_the_official_layout_reads_back(
    name: str, specs: dict[str, DatasetSpec], copies: dict[str, Path]
) -> None:
    spec = specs[name]
    assert check_dataset(spec, copies[name]).passed == ["metadata", "reader"]
    listing = spec.list_items(copies[name])
    assert [len(items) for items in listing] == counts_of(spec)
    report = check_local_copy(loose(spec, counts_of(spec)), copies[name])
    assert report.ok, report.to_dict()


def test_official_paths(specs: dict[str, DatasetSpec], copies: dict[str, Path]) -> None:
    first = {name: specs[name].list_items(copies[name])[0][:2] for name in NEW}
    assert first["caltech256"] == [
        "256_ObjectCategories/001.ak47/001_0001.jpg",
        "256_ObjectCategories/001.ak47/001_0002.jpg",
    ]
    assert first["cifar100-train"][0].startswith("apple/")
    assert first["imagenet-md-train"][0].startswith("train/n01440764/")
    assert first["imagenet-md-heldout"][0].startswith("val/n02085620/")  # Chihuahua
    # a full copy's other folders are there, and are not "extra classes"
    assert (copies["caltech256"] / "256_ObjectCategories" / "257.clutter").is_dir()
    assert (copies["imagenet-md-train"] / "train" / "n02085620").is_dir()
    assert (copies["imagenet-md-heldout"] / "val" / "n01440764").is_dir()


def scan(invoke: Any, name: str, root: Path) -> dict[str, Any]:
    result = invoke(["datasets", "scan", name, "--root", str(root), "--json"])
    report: dict[str, Any] = json.loads(result.output)
    assert result.exit_code == (0 if report["ok"] else 1)
    return report


def test_scan_names_every_missing_caltech_file_and_category(
    invoke: Any, specs: dict[str, DatasetSpec], copies: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "caltech"
    shutil.copytree(copies["caltech256"], root)
    base = root / "256_ObjectCategories"
    before = scan(invoke, "caltech256", root)
    assert not (before["missing_files"] or before["extra_classes"] or before["empty_classes"])
    (base / "003.backpack" / "003_0001.jpg").unlink()  # 003 has 2 + 2 % 3 = 4 images
    (base / "003.backpack" / "003_0003.jpg").unlink()
    shutil.rmtree(base / "010.beer-mug")
    (base / "257.clutter" / "img_00000.jpg").unlink()  # not a category: nobody cares
    report = scan(invoke, "caltech256", root)
    assert report["missing_files"] == [
        "256_ObjectCategories/003.backpack/003_0001.jpg",
        "256_ObjectCategories/003.backpack/003_0003.jpg",
    ]
    assert report["empty_classes"] == ["010.beer-mug"] and not report["extra_classes"]
    assert (
        report["total"]
        == sum(counts_of(specs["caltech256"])) - 2 - counts_of(specs["caltech256"])[9]
    )
    (base / "stray").mkdir()
    assert scan(invoke, "caltech256", root)["extra_classes"] == ["stray"]


def test_caltech_reader_on_a_hand_built_copy(specs: dict[str, DatasetSpec], tmp_path: Path) -> None:
    from PIL import Image

    base = tmp_path / "256_ObjectCategories"
    for rel in (
        "056.dog/056_0001.jpg",
        "056.dog/056_0002.jpg",
        "056.dog/greg/vision309/a.jpg",  # the archive's sub-folder: not read
        "198.spider/198_0002.jpg",
        "257.clutter/257_0001.jpg",
    ):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4)).save(base / rel)
    (base / "198.spider" / "RENAME2").write_text("not an image")
    spec = specs["caltech256"]
    listing = spec.list_items(tmp_path)
    by_id = dict(zip(spec.class_ids, listing, strict=True))
    assert by_id["056.dog"] == [
        "256_ObjectCategories/056.dog/056_0001.jpg",
        "256_ObjectCategories/056.dog/056_0002.jpg",
    ]
    assert by_id["198.spider"] == ["256_ObjectCategories/198.spider/198_0002.jpg"]
    report = check_local_copy(spec, tmp_path)
    assert report.missing_files == ["256_ObjectCategories/198.spider/198_0001.jpg"]
    assert report.extra_classes == [] and len(report.empty_classes) == 254
    assert "257.clutter" not in spec.class_ids and spec.num_classes == 256
    assert spec.class_names[spec.class_ids.index("253.faces-easy-101")] == "faces easy"


def test_scan_names_imagenet_classes_short_of_their_official_count(
    invoke: Any, specs: dict[str, DatasetSpec], copies: dict[str, Path], tmp_path: Path
) -> None:
    spec = specs["imagenet-md-train"]
    counts = spec.extra["expected_counts"]
    assert isinstance(counts, dict)
    assert sum(counts.values()) == spec.expected_items and spec.min_items_per_class == min(
        counts.values()
    )
    # a tiny copy: every class differs from the official count, and scan says so per class
    report = scan(invoke, "imagenet-md-train", copies["imagenet-md-train"])
    assert report["miscounted_classes"]["n01440764"] == [2, counts["n01440764"]]
    assert len(report["miscounted_classes"]) == spec.num_classes and not report["extra_classes"]
    # against its own counts, a damaged copy is named class by class
    root = tmp_path / "imagenet"
    shutil.copytree(copies["imagenet-md-train"], root)
    tiny = loose(spec, counts_of(spec))
    assert check_local_copy(tiny, root).ok
    first = root / "train" / "n01443537"
    sorted(first.iterdir())[0].unlink()
    shutil.rmtree(root / "train" / "n01484850")
    report_after = check_local_copy(tiny, root)
    assert report_after.miscounted_classes == {"n01443537": [2, 3]}
    assert report_after.empty_classes == ["n01484850"]
    held = specs["imagenet-md-heldout"]
    assert held.min_items_per_class == 50 and held.expected_items == 50 * 288
    assert not set(held.class_ids) & set(spec.class_ids)
    assert len(set(held.class_ids) | set(spec.class_ids)) == 1000


def test_scan_names_a_short_cifar_class(invoke: Any, tmp_path: Path) -> None:
    source = official_cifar(tmp_path / "cifar-100-python", per_class=1)
    root = tmp_path / "cifar100-train"
    assert write_cifar_folders(source, root, "train") == 100
    report = scan(invoke, "cifar100-train", root)
    assert report["total"] == 100 and not (report["empty_classes"] or report["unreadable"])
    assert len(report["small_classes"]) == 100  # one image where a full copy has 500
    shutil.rmtree(root / "whale")
    assert scan(invoke, "cifar100-train", root)["empty_classes"] == ["whale"]


# --- CIFAR-100: the official python batches -------------------------------------------------


def official_cifar(folder: Path, per_class: int = 2) -> Path:
    """A miniature ``cifar-100-python`` folder: ``meta``, ``train`` and ``test`` pickles."""
    from fewtrans_board.datasets.classlists import load_classlist

    names = load_classlist("cifar100")["class_ids"]
    folder.mkdir(parents=True)
    rng = np.random.RandomState(0)
    with (folder / "meta").open("wb") as handle:
        pickle.dump({b"fine_label_names": [n.encode() for n in names]}, handle)
    for batch in ("train", "test"):
        labels = [c for c in range(100) for _ in range(per_class)]
        data = {
            b"data": rng.randint(0, 256, size=(len(labels), 3072)).astype(np.uint8),
            b"fine_labels": labels,
            b"filenames": [f"{names[c]}_s_{i:06d}.png".encode() for i, c in enumerate(labels)],
        }
        with (folder / batch).open("wb") as handle:
            pickle.dump(data, handle, protocol=2)
    return folder


def test_cifar_train_batch_becomes_the_documented_folders(
    specs: dict[str, DatasetSpec], tmp_path: Path
) -> None:
    from PIL import Image

    source = official_cifar(tmp_path / "cifar-100-python")
    root = tmp_path / "train"
    assert write_cifar_folders(source, root, "train") == 200
    spec = specs["cifar100-train"]
    listing = spec.list_items(root)
    assert [len(items) for items in listing] == [2] * 100
    assert listing[0] == ["apple/apple_s_000000.png", "apple/apple_s_000001.png"]
    with open(source / "train", "rb") as handle:
        pixels = pickle.load(handle, encoding="bytes")[b"data"][0].reshape(3, 32, 32)
    assert np.array_equal(np.asarray(Image.open(root / listing[0][0])), pixels.transpose(1, 2, 0))
    # FewTrans's test batch: upscaled to 84 px
    test_root = tmp_path / "test84"
    write_cifar_folders(source, test_root, "test", size=84)
    assert Image.open(next((test_root / "apple").iterdir())).size == (84, 84)
    # BSCD-FSL's CIFAR-100 source model trains on fine labels that are multiples of 3
    assert spec.split.base == tuple(range(0, 100, 3)) and spec.extra["source_classes"] == list(
        range(0, 100, 3)
    )


def test_cifar_converter_refuses_code_and_missing_batches(tmp_path: Path) -> None:
    import os

    source = official_cifar(tmp_path / "cifar-100-python")

    class Boom:
        def __reduce__(self) -> Any:
            return (os.system, ("true",))

    with (source / "train").open("wb") as handle:
        pickle.dump({b"data": Boom()}, handle)
    with pytest.raises(FewtransError, match=r"cannot read CIFAR batch .*refusing"):
        write_cifar_folders(source, tmp_path / "out", "train")
    (source / "test").unlink()
    with pytest.raises(FewtransError, match="test does not exist"):
        write_cifar_folders(source, tmp_path / "out", "test")
