"""The FewTrans benchmark datasets (and CUB, the held-out centre-search dataset)."""

from __future__ import annotations

from fewtrans_board.api.dataset_spec import ClassSplit, DatasetReader, DatasetSpec
from fewtrans_board.datasets.classlists import load_classlist
from fewtrans_board.datasets.readers import CocoJsonReader, FolderReader, VggFlowerReader
from fewtrans_board.datasets.splits import fewtrans_split

FEWTRANS_CITATION = (
    "Luo et al., Benchmarking Few-shot Transferability of Pre-trained Models with Improved "
    "Evaluation Protocols (FewTrans), arXiv:2603.00478"
)
SPLIT_NOTE = (
    "Base/novel split as FewTrans draws it: RandomState(22).choice(N, n_base) with the base "
    "order kept; episodes sample base classes only."
)


def _spec(
    name: str,
    classlist: str,
    n_base: int,
    reader: DatasetReader,
    **fields: object,
) -> DatasetSpec:
    data = load_classlist(classlist)
    ids = tuple(data["class_ids"])
    fields.setdefault("benchmarks", ("fewtrans",))
    return DatasetSpec(
        name=name,
        class_ids=ids,
        class_names=tuple(data["class_names"]),
        split=fewtrans_split(len(ids), n_base),
        reader=reader,
        citation=FEWTRANS_CITATION,
        extra={"class_order": data["order"], "classlist_sources": data["sources"]},
        **fields,  # type: ignore[arg-type]
    )


def imagenet_sketch() -> DatasetSpec:
    """ImageNet-Sketch with Meta-Dataset's WordNet split and training-split hierarchy."""
    data = load_classlist("imagenet")
    md = load_classlist("imagenet-md-split")
    ids = tuple(data["class_ids"])
    position = {wnid: i for i, wnid in enumerate(ids)}
    base = tuple(position[w] for w in sorted(md["train"]))
    novel = tuple(sorted(position[w] for w in md["valid"] + md["test"]))
    return DatasetSpec(
        name="imagenet-sketch",
        title="ImageNet-Sketch",
        domain="sketch",
        class_ids=ids,
        class_names=tuple(data["class_names"]),
        split=ClassSplit(base=base, novel=novel),
        reader=FolderReader(),
        layout=(
            "<root>/<wnid>/<image>  one folder per ILSVRC-2012 synset (the 'sketch/' folder of "
            "ImageNet-Sketch), e.g. <root>/n01440764/sketch_0.JPEG"
        ),
        license="MIT (ImageNet-Sketch); ImageNet terms of access apply to class definitions",
        source_url="https://github.com/HaohanWang/ImageNet-Sketch",
        download=(
            "Download ImageNet-Sketch (Kaggle 'wanghaohan/imagenetsketch' or the Hugging Face "
            "'imagenet_sketch' dataset) and point --root at its 'sketch' folder."
        ),
        benchmarks=("fewtrans",),
        citation=FEWTRANS_CITATION,
        description=(
            "50,889 sketches of the 1,000 ImageNet classes. Base = Meta-Dataset's 712 training "
            "leaves (sorted by wnid); episodes draw classes under a WordNet node of that graph."
        ),
        min_items_per_class=2,
        expected_items=50889,
        extra={
            "hierarchy_edges": md["train_edges"],
            "classlist_sources": data["sources"] + md["sources"],
        },
    )


def fewtrans_datasets() -> list[DatasetSpec]:
    """All FewTrans datasets plus CUB."""
    return [
        imagenet_sketch(),
        _spec(
            "quickdraw",
            "quickdraw",
            276,
            FolderReader(),
            title="Quick Draw (DomainNet)",
            domain="sketch",
            layout="<root>/<class>/<image>  DomainNet 'quickdraw' folders, e.g. <root>/aircraft_carrier/...",
            license="DomainNet: fair use for research",
            source_url="http://ai.bu.edu/M3SDA/",
            download="Download 'quickdraw.zip' from the DomainNet page and unzip; --root is 'quickdraw'.",
            description="345 doodle classes from DomainNet's Quick Draw domain. " + SPLIT_NOTE,
            min_items_per_class=2,
            expected_items=172500,
        ),
        _spec(
            "vgg-flower",
            "vgg-flower",
            82,
            VggFlowerReader(),
            title="VGG Flowers (Oxford 102)",
            domain="natural (flowers)",
            layout="<root>/imagelabels.mat and <root>/jpg/image_00001.jpg ... image_08189.jpg",
            license="Research use (Visual Geometry Group, Oxford)",
            source_url="https://www.robots.ox.ac.uk/~vgg/data/flowers/102/",
            download="Download 102flowers.tgz and imagelabels.mat into --root.",
            description="8,189 images of 102 flower species. " + SPLIT_NOTE,
            min_items_per_class=40,
            expected_items=8189,
        ),
        _spec(
            "aircraft",
            "aircraft",
            80,
            FolderReader(suffix=".png"),
            title="FGVC-Aircraft (variants)",
            domain="aircraft",
            layout=(
                "<root>/<variant>/<image>  one folder per variant, '/' in a variant name "
                "replaced by '_' (F-16A/B -> F-16A_B, F/A-18 -> F_A-18)"
            ),
            license="Research use only (FGVC-Aircraft terms)",
            source_url="https://www.robots.ox.ac.uk/~vgg/data/fgvc-aircraft/",
            download=(
                "Download fgvc-aircraft-2013b and sort images/ into per-variant folders using "
                "images_variant_{train,val,test}.txt (FewTrans's prepare_datasets.py does this "
                "but nests folders for names containing '/': sanitise them as above)."
            ),
            description=(
                "10,000 images of 100 aircraft variants. Class order is sorted variant names; "
                "FewTrans's own listing mis-orders the two names containing '/'. " + SPLIT_NOTE
            ),
            min_items_per_class=100,
            expected_items=10000,
        ),
        _spec(
            "dtd",
            "dtd",
            37,
            FolderReader(subdir="images"),
            title="Describable Textures (DTD)",
            domain="texture",
            layout="<root>/images/<category>/<image>  (the 'dtd' folder of dtd-r1.0.1)",
            license="Research use (Visual Geometry Group, Oxford)",
            source_url="https://www.robots.ox.ac.uk/~vgg/data/dtd/",
            download="Download dtd-r1.0.1.tar.gz and extract; --root is the 'dtd' folder.",
            description="5,640 texture images in 47 categories. " + SPLIT_NOTE,
            min_items_per_class=120,
            expected_items=5640,
        ),
        _spec(
            "fungi",
            "fungi",
            1115,
            CocoJsonReader(),
            title="Fungi (FGVCx 2018)",
            domain="natural (fungi)",
            layout="<root>/train.json, <root>/val.json and <root>/images/... as the json file names say",
            license="FGVCx Fungi competition terms (research)",
            source_url="https://github.com/visipedia/fgvcx_fungi_comp",
            download="Download train_val_annotations.tgz and fungi_train_val.tgz into --root.",
            description="89,760 images of 1,394 fungi species, train and val pooled. " + SPLIT_NOTE,
            min_items_per_class=2,
            expected_items=89760,
        ),
        _spec(
            "cifar100",
            "cifar100",
            80,
            FolderReader(suffix=".png"),
            title="CIFAR-100 (test set, 84 px)",
            domain="natural (low resolution)",
            layout="<root>/<fine label>/<image>.png  the 10,000 test images, one folder per fine label",
            license="Research use (CIFAR terms)",
            source_url="https://www.cs.toronto.edu/~kriz/cifar.html",
            download=(
                "Download cifar-100-python.tar.gz and write the test batch as PNGs per fine label, "
                "upscaled to 84 px as FewTrans's prepare_datasets.py --process_CIFAR100 does: "
                "python -m fewtrans_board.datasets.cifar cifar-100-python <root> --batch test --size 84"
            ),
            description="10,000 images (the test batch), 100 per class. " + SPLIT_NOTE,
            min_items_per_class=100,
            expected_items=10000,
        ),
        _spec(
            "eurosat",
            "eurosat",
            6,
            FolderReader(),
            title="EuroSAT (RGB)",
            domain="remote sensing",
            layout="<root>/<Class>/<image>  the 10 folders of EuroSAT RGB (the '2750' folder)",
            license="MIT",
            source_url="https://github.com/phelber/EuroSAT",
            download="Download EuroSAT.zip (RGB) and unzip; --root is the '2750' folder.",
            description="27,000 Sentinel-2 64x64 tiles in 10 land-use classes. " + SPLIT_NOTE,
            min_items_per_class=2000,
            expected_items=27000,
        ),
        _spec(
            "ucf101",
            "ucf101",
            81,
            FolderReader(),
            title="UCF-101 (middle frames)",
            domain="action",
            layout="<root>/<Class_Name>/<image>  CoOp's UCF-101-midframes folders",
            license="Research use (UCF terms)",
            source_url="https://www.crcv.ucf.edu/data/UCF101.php",
            download="Download CoOp's UCF-101-midframes.zip (see CoOp's DATASETS.md); --root is that folder.",
            description="13,320 middle frames of 101 action classes. " + SPLIT_NOTE,
            min_items_per_class=90,
            expected_items=13320,
        ),
        _spec(
            "plant-disease",
            "plant-disease",
            30,
            FolderReader(),
            title="Plant Disease (PlantVillage)",
            domain="agriculture",
            layout="<root>/<Crop___Disease>/<image>  the 38 'train' folders of the Kaggle New Plant Diseases dataset",
            license="CC BY-SA 4.0 (PlantVillage)",
            source_url="https://www.kaggle.com/datasets/vipoooool/new-plant-diseases-dataset",
            download="Download the Kaggle dataset; --root is its 'train' folder.",
            description="70,295 leaf images in 38 crop/disease classes. " + SPLIT_NOTE,
            min_items_per_class=1000,
            expected_items=70295,
        ),
        _spec(
            "cub",
            "cub",
            160,
            FolderReader(subdir="images"),
            title="CUB-200-2011 (held out for centre search)",
            domain="natural (birds)",
            layout="<root>/images/<NNN.Class_Name>/<image>  (the CUB_200_2011 folder)",
            license="Research use (Caltech)",
            source_url="https://www.vision.caltech.edu/datasets/cub_200_2011/",
            download="Download CUB_200_2011.tgz and extract; --root is 'CUB_200_2011'.",
            description=(
                "11,788 bird images in 200 species; not a test dataset: FewTrans tunes HPE "
                "centres on its 50 search tasks. " + SPLIT_NOTE
            ),
            min_items_per_class=40,
            expected_items=11788,
            benchmarks=("fewtrans-search",),
        ),
    ]
