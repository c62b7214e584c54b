"""The BSCD-FSL cross-domain target datasets: every class is an evaluation class."""

from __future__ import annotations

from fewtrans_board.api.dataset_spec import DatasetReader, DatasetSpec
from fewtrans_board.datasets.classlists import load_classlist
from fewtrans_board.datasets.readers import ChestXReader, FolderReader, OneHotCsvReader
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


# miniImageNet (Vinyals et al. 2016; Ravi & Larochelle's split): the 64 training classes are
# BSCD-FSL's source ("base") classes for meta-training; the 16 validation and 20 test classes
# are held back (novel).
MINI_IMAGENET_TRAIN = [
    "n01532829",
    "n01558993",
    "n01704323",
    "n01749939",
    "n01770081",
    "n01843383",
    "n01910747",
    "n02074367",
    "n02089867",
    "n02091831",
    "n02101006",
    "n02105505",
    "n02108089",
    "n02108551",
    "n02108915",
    "n02111277",
    "n02113712",
    "n02120079",
    "n02165456",
    "n02457408",
    "n02606052",
    "n02687172",
    "n02747177",
    "n02795169",
    "n02823428",
    "n02966193",
    "n03017168",
    "n03047690",
    "n03062245",
    "n03207743",
    "n03220513",
    "n03337140",
    "n03347037",
    "n03400231",
    "n03476684",
    "n03527444",
    "n03676483",
    "n03838899",
    "n03854065",
    "n03888605",
    "n03908618",
    "n03924679",
    "n03998194",
    "n04067472",
    "n04243546",
    "n04251144",
    "n04258138",
    "n04275548",
    "n04296562",
    "n04389033",
    "n04435653",
    "n04443257",
    "n04509417",
    "n04515003",
    "n04596742",
    "n04604644",
    "n04612504",
    "n06794110",
    "n07584110",
    "n07697537",
    "n07747607",
    "n09246464",
    "n13054560",
    "n13133613",
]
MINI_IMAGENET_HELD_OUT = [
    "n01855672",
    "n02091244",
    "n02114548",
    "n02138441",
    "n02174001",
    "n02950826",
    "n02971356",
    "n02981792",
    "n03075370",
    "n03417042",
    "n03535780",
    "n03584254",
    "n03770439",
    "n03773504",
    "n03980874",
    "n09256479",
    "n01930112",
    "n01981276",
    "n02099601",
    "n02110063",
    "n02110341",
    "n02116738",
    "n02129165",
    "n02219486",
    "n02443484",
    "n02871525",
    "n03127925",
    "n03146219",
    "n03272010",
    "n03544143",
    "n03775546",
    "n04146614",
    "n04149813",
    "n04418357",
    "n04522168",
    "n07613480",
]


def miniimagenet() -> DatasetSpec:
    """miniImageNet, the source dataset BSCD-FSL meta-trains and pretrains on."""
    from fewtrans_board.api.dataset_spec import ClassSplit

    imagenet = load_classlist("imagenet")
    names = dict(zip(imagenet["class_ids"], imagenet["class_names"], strict=True))
    ids = tuple(sorted(MINI_IMAGENET_TRAIN + MINI_IMAGENET_HELD_OUT))
    train = tuple(ids.index(w) for w in sorted(MINI_IMAGENET_TRAIN))
    held_out = tuple(i for i in range(len(ids)) if i not in train)
    return DatasetSpec(
        name="miniimagenet",
        title="miniImageNet (BSCD-FSL source)",
        domain="natural",
        class_ids=ids,
        class_names=tuple(names[w] for w in ids),
        split=ClassSplit(base=train, novel=held_out),
        reader=FolderReader(),
        layout="<root>/<wnid>/<image>  (100 folders, 600 images each; e.g. from the CSV split files)",
        license="ImageNet terms of access (non-commercial research)",
        source_url="https://github.com/twitter-research/meta-learning-lstm/tree/master/data/miniImagenet",
        download="Build it from ImageNet with the Ravi & Larochelle CSV lists; one folder per WordNet id.",
        benchmarks=("bscd",),
        citation="Vinyals et al., Matching Networks for One Shot Learning, NeurIPS 2016; Ravi & Larochelle, ICLR 2017 (split)",
        description="100 ImageNet classes; the 64 training classes (split.base) are the meta-training source of BSCD-FSL.",
        min_items_per_class=600,
        expected_items=60000,
        extra={"source_classes": list(train)},
    )
