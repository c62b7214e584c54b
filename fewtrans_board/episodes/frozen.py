"""The catalogue of frozen benchmark manifests under ``leaderboard/manifests/``.

Each entry fixes the exact ``manifest build`` command. Entries whose dataset is embedded
are committed; the others are built by maintainers from their local copies with the
printed command and committed with their ``.sha256`` sidecar.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FEWTRANS_TEST = (
    "imagenet-sketch",
    "quickdraw",
    "vgg-flower",
    "aircraft",
    "dtd",
    "fungi",
    "cifar100",
    "eurosat",
    "ucf101",
    "plant-disease",
)
BSCD = ("bscd-cropdisease", "bscd-eurosat", "bscd-isic", "bscd-chestx")
CLIP = (
    "clip-caltech101",
    "clip-stanford-cars",
    "clip-stanford-dogs",
    "clip-oxford-flowers",
    "clip-food101",
    "clip-fgvc-aircraft",
    "clip-sun397",
    "clip-dtd",
    "clip-eurosat",
    "clip-ucf101",
    "clip-cub",
    "clip-plantdoc",
)
EMBEDDED = ("digits", "digits-0-4", "digits-5-9")


def manifest_command(
    protocol: str, dataset: str, out: str, *, root: str | None, overrides: Mapping[str, int | None]
) -> list[str]:
    """The ``fewtrans-board manifest build`` command line.

    Args:
        protocol: sampling protocol name.
        dataset: registered dataset name.
        out: the ``--out`` value.
        root: the ``--root`` value, or ``None`` to leave ``--root`` out.
        overrides: ``--<flag> <value>`` pairs in order; ``None`` values are left out.

    Returns:
        The command as a list of arguments.
    """
    cmd = ["fewtrans-board", "manifest", "build", "--protocol", protocol, "--dataset", dataset]
    if root is not None:
        cmd += ["--root", root]
    for flag, value in overrides.items():
        if value is not None:
            cmd += [f"--{flag}", str(value)]
    return [*cmd, "--out", out]


@dataclass(frozen=True)
class FrozenManifest:
    """One frozen manifest: its file name and the command that builds it."""

    protocol: str
    dataset: str
    overrides: dict[str, int] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        """``<protocol>[-<W>w<K>s]--<dataset>.parquet``."""
        suffix = ""
        if "shots" in self.overrides:
            suffix = f"-{self.overrides.get('ways', 5)}w{self.overrides['shots']}s"
        return f"{self.protocol}{suffix}--{self.dataset}.parquet"

    def command(self, out_dir: str = "leaderboard/manifests") -> list[str]:
        """The ``fewtrans-board manifest build`` command line."""
        return manifest_command(
            self.protocol,
            self.dataset,
            f"{out_dir}/{self.filename}",
            root=None if self.embedded else f"$DATA/{self.dataset}",
            overrides=self.overrides,
        )

    @property
    def embedded(self) -> bool:
        """Whether it can be built without a local dataset copy."""
        return self.dataset in EMBEDDED


FROZEN: tuple[FrozenManifest, ...] = (
    FrozenManifest("fewtrans-varied", "digits"),
    FrozenManifest("fewtrans-fixed", "digits", {"ways": 5, "shots": 1}),
    FrozenManifest("fewtrans-search", "digits"),
    FrozenManifest("fewtrans-base2novel", "digits"),
    *(FrozenManifest("fewtrans-varied", d) for d in FEWTRANS_TEST),
    *(FrozenManifest("fewtrans-base2novel", d) for d in FEWTRANS_TEST),
    FrozenManifest("fewtrans-search", "cub"),
    *(FrozenManifest("bscd", d, {"shots": k}) for d in BSCD for k in (5, 20, 50)),
    *(FrozenManifest("clip-kshot", d) for d in CLIP),
    FrozenManifest("clip-kshot", "digits-5-9"),
)
