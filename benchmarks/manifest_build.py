"""Time to build a 600-episode FewTrans manifest on a 100-class, 60,000-item dataset.

Run: python benchmarks/manifest_build.py
The dataset is synthetic and in memory (its reader lists 600 items per class), so the time
covers sampling (1,200 draws: the test block is the second block of 600), hashing and the
Parquet write, not disk listing.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.datasets.splits import fewtrans_split
from fewtrans_board.episodes.build import build_manifest
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.episodes.protocols import get_protocol

N_CLASSES, PER_CLASS = 100, 600


class InMemoryReader:
    def list_items(self, root, spec):  # type: ignore[no-untyped-def]
        return [[f"{cid}/{i:05d}.jpg" for i in range(PER_CLASS)] for cid in spec.class_ids]

    def load_image(self, root, item):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def main() -> None:
    ids = tuple(f"class_{c:03d}" for c in range(N_CLASSES))
    spec = DatasetSpec(
        name="bench",
        title="bench",
        domain="synthetic",
        class_ids=ids,
        class_names=ids,
        split=fewtrans_split(N_CLASSES, 80),
        reader=InMemoryReader(),
        layout="-",
        license="-",
        source_url="-",
        download="-",
    )
    protocol = get_protocol("fewtrans-varied")
    t0 = time.perf_counter()
    manifest = build_manifest(spec, None, protocol)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.parquet"
        manifest.write(path)
        t2 = time.perf_counter()
        Manifest.load(path)
        t3 = time.perf_counter()
    rows = len(manifest.rows["item"])
    print(f"dataset: {N_CLASSES} classes x {PER_CLASS} items = {N_CLASSES * PER_CLASS} items")
    print(f"episodes: {len(manifest.episodes())} (stream draws 601-1200), rows: {rows}")
    print(
        f"sample + hash: {t1 - t0:.2f} s | write: {t2 - t1:.2f} s | load + verify: {t3 - t2:.2f} s"
    )
    print(f"total build (sample + hash + write): {t2 - t0:.2f} s")


if __name__ == "__main__":
    main()
