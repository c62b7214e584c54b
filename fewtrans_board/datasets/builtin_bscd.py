"""The BSCD-FSL cross-domain target datasets: every class is an evaluation class."""

from __future__ import annotations

from fewtrans_board.datasets.classlists import load_classlist
from fewtrans_board.datasets.readers import ChestXReader, FolderReader, OneHotCsvReader
from fewtrans_board.datasets.spec import DatasetReader, DatasetSpec
from fewtrans_board.datasets.splits import all_base

BSCD_CITATION = (
    "Guo et al., A Broader Study of Cross-Domain Few-Shot Learning (BSCD-FSL), ECCV 2020"
)


def _spec(name: str, classlist: str, reader: DatasetReader, **fields: object) -> DatasetSpec:
    data = load_classlist(classlist)
    ids = tuple(data["class_ids"])
    return DatasetSpec(
        name=name,
        class_ids=ids,
        class_names=tuple(data["class_names"]),
        split=all_base(len(ids)),
        reader=reader,
        benchmarks=("bscd",),
        citation=BSCD_CITATION,
        extra={"classlist_sources": data["sources"]},
        **fields,  # type: ignore[arg-type]
    )


def bscd_datasets() -> list[DatasetSpec]:
    """CropDisease, EuroSAT, ISIC2018 and ChestX as BSCD-FSL reads them."""
    return [
        _spec(
            "bscd-cropdisease",
            "plant-disease",
            FolderReader(subdir="dataset/train"),
            title="CropDisease (BSCD-FSL)",
            domain="agriculture",
            layout="<root>/dataset/train/<Crop___Disease>/<image>  (38 PlantVillage classes)",
            license="CC BY-SA 4.0 (PlantVillage)",
            source_url="https://www.kaggle.com/datasets/vipoooool/new-plant-diseases-dataset",
            download="Download the Kaggle 'plant-disease' dataset so that dataset/train exists under --root.",
            description="Leaf images of 38 crop/disease classes; all classes are test classes.",
            min_items_per_class=100,
        ),
        _spec(
            "bscd-eurosat",
            "eurosat",
            FolderReader(),
            title="EuroSAT (BSCD-FSL)",
            domain="remote sensing",
            layout="<root>/<Class>/<image>  (EuroSAT/2750)",
            license="MIT",
            source_url="https://github.com/phelber/EuroSAT",
            download="Download EuroSAT.zip (RGB); --root is the '2750' folder.",
            description="27,000 satellite tiles in 10 classes; all classes are test classes.",
            min_items_per_class=2000,
            expected_items=27000,
        ),
        _spec(
            "bscd-isic",
            "isic",
            OneHotCsvReader(),
            title="ISIC 2018 skin lesions (BSCD-FSL)",
            domain="medical (dermoscopy)",
            layout=(
                "<root>/ISIC2018_Task3_Training_GroundTruth/ISIC2018_Task3_Training_GroundTruth.csv "
                "and <root>/ISIC2018_Task3_Training_Input/<image id>.jpg; the label is the argmax "
                "of the seven one-hot columns"
            ),
            license="CC BY-NC 4.0 (ISIC archive)",
            source_url="https://challenge.isic-archive.com/data/#2018",
            download="Download the Task 3 training input and ground truth into --root.",
            description="10,015 dermoscopic images in 7 diagnostic classes.",
            min_items_per_class=100,
            expected_items=10015,
        ),
        _spec(
            "bscd-chestx",
            "chestx",
            ChestXReader(),
            title="ChestX-ray14 (BSCD-FSL)",
            domain="medical (x-ray)",
            layout=(
                "<root>/Data_Entry_2017.csv and <root>/images/<file>.png (flatten images_001 ... "
                "images_012 into images/); only single-label rows of the 7 classes are used"
            ),
            license="NIH Clinical Center terms (public, citation required)",
            source_url="https://www.kaggle.com/datasets/nih-chest-xrays/data",
            download="Download the NIH ChestX-ray14 Kaggle copy and flatten its image folders.",
            description="Single-label chest x-rays of 7 findings (No Finding and multi-label rows dropped).",
            min_items_per_class=100,
        ),
    ]
