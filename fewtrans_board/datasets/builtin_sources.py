"""Datasets the papers pretrain on, and FewTrans Fig. 3's in-domain ImageNet classes.

BSCD-FSL Table 5 adds source models pretrained on CIFAR-100 (its training images) and
Caltech-256 to the miniImageNet one; FewTrans Fig. 3 (in-domain panel) pretrains on a class
subset of ImageNet and samples tasks from the other classes.
"""

from __future__ import annotations

from fewtrans_board.api.dataset_spec import ClassSplit, DatasetSpec
from fewtrans_board.datasets.builtin_bscd import BSCD_CITATION
from fewtrans_board.datasets.builtin_fewtrans import FEWTRANS_CITATION
from fewtrans_board.datasets.classlists import load_classlist
from fewtrans_board.datasets.readers import FileNumbering, FolderReader
from fewtrans_board.datasets.splits import all_base

CALTECH256_CLUTTER = "257.clutter"
"""The archive's background folder: 827 clutter images, not an object category."""

CIFAR100_BSCD_SOURCE = tuple(range(0, 100, 3))
"""The classes BSCD-FSL's CIFAR-100 source model trains on: its ``cifar_few_shot.py`` "base"
mode keeps fine labels ``label % 3 == 0`` (34 classes) of the training set."""


def category_prefix(class_id: str) -> str:
    """The ``NNN`` of a Caltech-256 folder ``NNN.name`` (its files are ``NNN_MMMM.jpg``)."""
    return class_id.split(".", 1)[0]


def caltech256() -> DatasetSpec:
    """Caltech-256's 256 object categories (``257.clutter`` is not a class)."""
    data = load_classlist("caltech256")
    ids = tuple(data["class_ids"])
    return DatasetSpec(
        name="caltech256",
        title="Caltech-256 (BSCD-FSL source)",
        domain="natural (objects)",
        class_ids=ids,
        class_names=tuple(data["class_names"]),
        split=all_base(len(ids)),
        reader=FolderReader(
            subdir="256_ObjectCategories",
            ignored=(CALTECH256_CLUTTER,),
            numbering=FileNumbering(prefix=category_prefix, width=4, suffix=".jpg"),
        ),
        layout=(
            "<root>/256_ObjectCategories/<NNN.name>/<NNN_MMMM>.jpg  the 256 category folders "
            "001.ak47 ... 256.toad as 256_ObjectCategories.tar extracts; 257.clutter (background "
            "images, not a category), 198.spider/RENAME2 and the sub-folder 056.dog/greg are "
            "not read"
        ),
        license="Research use (Caltech); CC BY 4.0 on CaltechDATA",
        source_url="https://data.caltech.edu/records/nyy15-4j048",
        download=(
            "Download 256_ObjectCategories.tar from CaltechDATA and extract it; --root is the "
            "folder that holds 256_ObjectCategories/."
        ),
        benchmarks=("bscd",),
        citation=(
            "Griffin, Holub and Perona, Caltech-256 Object Category Dataset, 2007; used as a "
            "source dataset by " + BSCD_CITATION
        ),
        description=(
            "29,780 images of 256 object categories, at least 80 each; one of BSCD-FSL's five "
            "source datasets (Table 5). 257.clutter is left out, as BSCD-FSL's loader (folders "
            "001-256) leaves it out: it is background, not a category. Scan names every file "
            "missing from a category's NNN_0001... numbering."
        ),
        min_items_per_class=80,
        expected_items=29780,
        extra={
            "source_classes": list(range(len(ids))),
            "classlist_sources": data["sources"],
        },
    )


def cifar100_train() -> DatasetSpec:
    """CIFAR-100's 50,000 training images (FewTrans's ``cifar100`` holds the test batch)."""
    data = load_classlist("cifar100")
    ids = tuple(data["class_ids"])
    novel = tuple(c for c in range(len(ids)) if c not in CIFAR100_BSCD_SOURCE)
    return DatasetSpec(
        name="cifar100-train",
        title="CIFAR-100 train (BSCD-FSL source)",
        domain="natural (low resolution)",
        class_ids=ids,
        class_names=tuple(data["class_names"]),
        split=ClassSplit(base=CIFAR100_BSCD_SOURCE, novel=novel),
        reader=FolderReader(suffix=".png"),
        layout=(
            "<root>/<fine label>/<file name>.png  the 50,000 training images, one folder per "
            "fine label, each under the file name the official pickle records (the layout "
            "FewTrans's prepare_datasets.py writes for the test batch)"
        ),
        license="Research use (CIFAR terms)",
        source_url="https://www.cs.toronto.edu/~kriz/cifar.html",
        download=(
            "Download cifar-100-python.tar.gz, extract it and write its train batch as PNGs: "
            "python -m fewtrans_board.datasets.cifar cifar-100-python <root> --batch train "
            "(32 px as distributed; --size 84 resizes with LANCZOS as FewTrans does)."
        ),
        benchmarks=("bscd",),
        citation=(
            "Krizhevsky, Learning Multiple Layers of Features from Tiny Images, 2009; used as "
            "a source dataset by " + BSCD_CITATION
        ),
        description=(
            "50,000 training images, 500 per class. split.base is what BSCD-FSL's CIFAR-100 "
            "source model trains on: the 34 classes whose fine label is a multiple of 3 "
            "(cifar_few_shot.py 'base' mode); the other 66 are novel."
        ),
        min_items_per_class=500,
        expected_items=50000,
        extra={
            "source_classes": list(CIFAR100_BSCD_SOURCE),
            "classlist_sources": data["sources"],
        },
    )


SUBSET_NOTE = (
    "FewTrans Fig. 3 (in-domain panel) pretrains on 'a subset class of ImageNet' and samples "
    "tasks from 'the remaining part' without naming the subset. We use Meta-Dataset's ILSVRC "
    "split, the one FewTrans's ImageNet-Sketch uses: its 712 training leaves to pretrain on, "
    "the 288 carnivores and devices (its validation and test graphs) held out."
)


def _imagenet_subset(
    name: str, wnids: list[str], partition: str, others: list[str], **fields: object
) -> DatasetSpec:
    imagenet = load_classlist("imagenet")
    names = dict(zip(imagenet["class_ids"], imagenet["class_names"], strict=True))
    ids = tuple(sorted(wnids))
    return DatasetSpec(
        name=name,
        domain="natural",
        class_ids=ids,
        class_names=tuple(names[w] for w in ids),
        split=all_base(len(ids)),
        reader=FolderReader(subdir=partition, suffix=".JPEG", ignored=tuple(sorted(others))),
        license="ImageNet terms of access (non-commercial research)",
        source_url="https://image-net.org/challenges/LSVRC/2012/",
        benchmarks=("fewtrans-fig3",),
        citation=FEWTRANS_CITATION
        + "; Russakovsky et al., ImageNet Large Scale Visual Recognition Challenge, IJCV 2015",
        **fields,  # type: ignore[arg-type]
    )


def imagenet_subsets() -> list[DatasetSpec]:
    """The pretraining classes (``train/``) and the held-out classes (``val/``) of Fig. 3."""
    md = load_classlist("imagenet-md-split")
    counts_list = load_classlist("imagenet-train-counts")
    counts: dict[str, int] = counts_list["counts"]
    train, held = sorted(md["train"]), sorted(md["valid"] + md["test"])
    sources = [*md["sources"], *counts_list["sources"]]
    return [
        _imagenet_subset(
            "imagenet-md-train",
            train,
            "train",
            held,
            title="ImageNet, Meta-Dataset training classes (FewTrans Fig. 3 pretraining)",
            layout=(
                "<root>/train/<wnid>/<wnid>_<n>.JPEG  the ILSVRC-2012 training images, one "
                "folder per synset; the 712 Meta-Dataset training synsets are read, the other "
                "288 folders of a full copy are skipped"
            ),
            download=(
                "Download ILSVRC2012_img_train.tar from image-net.org and extract each "
                "per-synset tar into train/<wnid>/; --root is the folder holding train/."
            ),
            description=(
                "The 712 classes a model pretrains on for the in-domain panel (training "
                "images, 732-1300 per class). " + SUBSET_NOTE + " Scan names every class "
                "whose image count differs from the official one."
            ),
            min_items_per_class=min(counts[w] for w in train),
            expected_items=sum(counts[w] for w in train),
            extra={
                "source_classes": list(range(len(train))),
                "expected_counts": {w: counts[w] for w in train},
                "classlist_sources": sources,
            },
        ),
        _imagenet_subset(
            "imagenet-md-heldout",
            held,
            "val",
            train,
            title="ImageNet held-out classes (FewTrans Fig. 3 in-domain tasks)",
            layout=(
                "<root>/val/<wnid>/ILSVRC2012_val_<8 digits>.JPEG  the 50,000 validation "
                "images sorted into synset folders; the 288 held-out synsets are read, the "
                "other 712 folders of a full copy are skipped"
            ),
            download=(
                "Download ILSVRC2012_img_val.tar, extract it into val/ and move each image "
                "into val/<wnid>/ as the devkit's ground truth says (the usual valprep.sh "
                "does this); --root is the folder holding val/."
            ),
            description=(
                "The in-domain downstream dataset: 50 validation images of each of the 288 "
                "classes the pretraining subset leaves out (FewTrans's reference code reads "
                "ILSVRC tasks from imagenet/val). " + SUBSET_NOTE + " Tasks draw 2-15 of the "
                "288 classes uniformly (the held-out WordNet graphs are not shipped)."
            ),
            min_items_per_class=50,
            expected_items=50 * len(held),
            extra={"classlist_sources": sources},
        ),
    ]


def source_datasets() -> list[DatasetSpec]:
    """Every source dataset of this module."""
    return [caltech256(), cifar100_train(), *imagenet_subsets()]
