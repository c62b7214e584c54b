"""Few-shot CLIP datasets of the inductive CLIP benchmark (CoOp-style train/val/test splits).

Class order is CoOp's label order; base/novel is CoOp's base-to-novel split (first half of
the labels base). Partitions come from CoOp's ``split_zhou_*.json`` files where CoOp has
one, and from the official split files otherwise.
"""

from __future__ import annotations

from typing import Any

from fewtrans_board.api.dataset_spec import DatasetReader, DatasetSpec
from fewtrans_board.datasets.classlists import load_classlist
from fewtrans_board.datasets.readers import (
    AircraftVariantReader,
    CubOfficialReader,
    MatListReader,
    SplitJsonReader,
    TrainTestFolderReader,
)
from fewtrans_board.datasets.splits import half_split

INDUCTIVE_CITATION = (
    "Kravets et al., Rethinking Few Shot CLIP Benchmarks: A Critical Analysis in the "
    "Inductive Setting, ICCV 2025 (arXiv:2507.20834)"
)
COOP_DOC = "CoOp's DATASETS.md (https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md)"


def coop_ucf101_order(ids: list[str]) -> list[str]:
    """CoOp labels UCF-101 in classInd.txt order: CamelCase names compared case-insensitively.

    Sorting the underscored folder names instead swaps Hammer_Throw/Hammering and
    Jump_Rope/Jumping_Jack.
    """
    return sorted(ids, key=lambda cid: cid.replace("_", "").lower())


def _spec(
    name: str,
    classlist: str,
    reader: DatasetReader,
    *,
    order: list[int] | None = None,
    **fields: object,
) -> DatasetSpec:
    data = load_classlist(classlist)
    ids, names = list(data["class_ids"]), list(data["class_names"])
    if order is not None:
        ids, names = [ids[i] for i in order], [names[i] for i in order]
    return DatasetSpec(
        name=name,
        class_ids=tuple(ids),
        class_names=tuple(names),
        split=half_split(len(ids)),
        reader=reader,
        benchmarks=("clip",),
        citation=INDUCTIVE_CITATION,
        license=str(fields.pop("license", "Research use; see the dataset's terms")),
        extra={"classlist_sources": data["sources"]},
        **fields,  # type: ignore[arg-type]
    )


def _coop(
    name: str, classlist: str, folder: str, split_file: str, image_dir: str, **fields: Any
) -> DatasetSpec:
    layout = f"<root>/{split_file} and <root>/{image_dir + '/' if image_dir else ''}<paths in the split file>  (CoOp's '{folder}' folder)"
    return _spec(
        name,
        classlist,
        SplitJsonReader(split_file=split_file, image_dir=image_dir),
        layout=layout,
        download=f"Prepare '{folder}' as in {COOP_DOC}, including {split_file}; --root is '{folder}'.",
        **fields,
    )


def clip_datasets() -> list[DatasetSpec]:
    """The twelve few-shot CLIP datasets."""
    ucf_ids = load_classlist("ucf101")["class_ids"]
    ucf_order = [ucf_ids.index(cid) for cid in coop_ucf101_order(list(ucf_ids))]
    return [
        _coop(
            "clip-caltech101",
            "caltech101",
            "caltech-101",
            "split_zhou_Caltech101.json",
            "101_ObjectCategories",
            title="Caltech101 (CoOp split)",
            domain="objects",
            source_url="https://data.caltech.edu/records/mzrjq-6wc02",
            description="Object images of 100 categories (CoOp drops BACKGROUND_Google and Faces_easy).",
        ),
        _coop(
            "clip-stanford-cars",
            "stanford-cars",
            "stanford_cars",
            "split_zhou_StanfordCars.json",
            "",
            title="Stanford Cars (CoOp split)",
            domain="cars",
            source_url="https://ai.stanford.edu/~jkrause/cars/car_dataset.html",
            description="196 car models, names with the year first as CoOp prompts them.",
        ),
        _spec(
            "clip-stanford-dogs",
            "stanford-dogs",
            MatListReader(),
            title="Stanford Dogs",
            domain="natural (dogs)",
            layout="<root>/train_list.mat, <root>/test_list.mat and <root>/Images/<wnid-Breed>/<image>",
            source_url="http://vision.stanford.edu/aditya86/ImageNetDogs/",
            download="Download images.tar and lists.tar from the Stanford Dogs page into --root.",
            description="120 dog breeds with the official train/test lists.",
        ),
        _coop(
            "clip-oxford-flowers",
            "vgg-flower",
            "oxford_flowers",
            "split_zhou_OxfordFlowers.json",
            "jpg",
            title="Oxford Flowers 102 (CoOp split)",
            domain="natural (flowers)",
            source_url="https://www.robots.ox.ac.uk/~vgg/data/flowers/102/",
            description="102 flower species.",
        ),
        _coop(
            "clip-food101",
            "food101",
            "food-101",
            "split_zhou_Food101.json",
            "images",
            title="Food-101 (CoOp split)",
            domain="food",
            source_url="https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/",
            description="101 dishes (CoOp label order: sorted folder names).",
        ),
        _spec(
            "clip-fgvc-aircraft",
            "fgvc-aircraft",
            AircraftVariantReader(),
            title="FGVC-Aircraft (CoOp split)",
            domain="aircraft",
            layout="<root>/images/<id>.jpg and <root>/images_variant_{train,val,test}.txt",
            source_url="https://www.robots.ox.ac.uk/~vgg/data/fgvc-aircraft/",
            download=f"Prepare 'fgvc_aircraft' as in {COOP_DOC}; --root is 'fgvc_aircraft'.",
            description="100 aircraft variants with the official train/val/test lists.",
        ),
        _coop(
            "clip-sun397",
            "sun397",
            "sun397",
            "split_zhou_SUN397.json",
            "SUN397",
            title="SUN397 (CoOp split)",
            domain="scenes",
            source_url="https://vision.princeton.edu/projects/2010/SUN/",
            description="397 scene categories.",
        ),
        _coop(
            "clip-dtd",
            "dtd",
            "dtd",
            "split_zhou_DescribableTextures.json",
            "images",
            title="DTD (CoOp split)",
            domain="texture",
            source_url="https://www.robots.ox.ac.uk/~vgg/data/dtd/",
            description="47 texture categories.",
        ),
        _coop(
            "clip-eurosat",
            "eurosat",
            "eurosat",
            "split_zhou_EuroSAT.json",
            "2750",
            title="EuroSAT (CoOp split)",
            domain="remote sensing",
            license="MIT",
            source_url="https://github.com/phelber/EuroSAT",
            description="10 land-use classes of Sentinel-2 tiles.",
        ),
        _spec(
            "clip-ucf101",
            "ucf101",
            SplitJsonReader(split_file="split_zhou_UCF101.json", image_dir="UCF-101-midframes"),
            order=ucf_order,
            title="UCF-101 middle frames (CoOp split)",
            domain="action",
            layout="<root>/split_zhou_UCF101.json and <root>/UCF-101-midframes/<paths in the split file>",
            source_url="https://www.crcv.ucf.edu/data/UCF101.php",
            download=f"Prepare 'ucf101' as in {COOP_DOC}; --root is 'ucf101'.",
            description="101 actions, one middle frame per video; CoOp (classInd.txt) label order.",
        ),
        _spec(
            "clip-cub",
            "cub",
            CubOfficialReader(),
            title="CUB-200-2011",
            domain="natural (birds)",
            layout="<root>/images.txt, image_class_labels.txt, train_test_split.txt and images/<class>/<image>",
            source_url="https://www.vision.caltech.edu/datasets/cub_200_2011/",
            download="Download CUB_200_2011.tgz and extract; --root is 'CUB_200_2011'.",
            description="200 bird species with the official train/test split.",
        ),
        _spec(
            "clip-plantdoc",
            "plantdoc",
            TrainTestFolderReader(),
            title="PlantDoc (classification)",
            domain="agriculture",
            license="CC BY 4.0",
            layout="<root>/train/<class>/<image> and <root>/test/<class>/<image>",
            source_url="https://github.com/pratikkayal/PlantDoc-Dataset",
            download="Clone or download PlantDoc-Dataset; --root is its top folder.",
            description="28 leaf disease classes photographed in the field.",
        ),
    ]
