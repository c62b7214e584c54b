"""Frozen manifests of the embedded digits dataset, rebuilt on demand and hash-checked.

An installed wheel has no ``leaderboard/`` folder; validation and the demo rebuild the
digits manifests from the embedded data and refuse them unless their content hash equals
the frozen one committed here (and in ``leaderboard/manifests/``).
"""

from __future__ import annotations

from pathlib import Path

from fewtrans_board.datasets.digits import DIGITS
from fewtrans_board.datasets.digits_subsets import DIGITS_0_4, DIGITS_5_9
from fewtrans_board.episodes.build import build_manifest, manifest_recipe
from fewtrans_board.episodes.frozen import FROZEN
from fewtrans_board.episodes.manifest import Manifest, ManifestError
from fewtrans_board.episodes.protocols import get_protocol

FROZEN_DIGITS_SHA256 = {
    "fewtrans-varied--digits.parquet": (
        "244c1236441efb658e0faa2f15e31066acfecc5a80df5283bf4d307b5e9c2b0d"
    ),
    "fewtrans-fixed-5w1s--digits.parquet": (
        "c481fd6ba97d404594a4afbbe2fb9d83aff84186921e6b8ef4b2614c9ed167bb"
    ),
    "fewtrans-search--digits.parquet": (
        "05f9b9b51badbeeb4df5906262e3f152397253276cd63b6f0d4f86ea62942d24"
    ),
    "fewtrans-base2novel--digits.parquet": (
        "7fe06c3accb650a7f68204497f02237a7d0f1ff2fc47c735015304c963cf0df4"
    ),
    "clip-kshot--digits-5-9.parquet": (
        "5bb59a4503e9e94a85e238c41d4e88b7c6c82165378a0d345b628a1591401f31"
    ),
}


def digits_manifest(filename: str, folder: Path) -> Path:
    """Return ``folder/filename``, building it from the embedded digits if missing.

    Raises:
        ManifestError: the rebuilt manifest's hash differs from the frozen one.
    """
    entry = next((m for m in FROZEN if m.filename == filename and m.embedded), None)
    if entry is None:
        raise ManifestError(f"{filename} is not a frozen digits manifest")
    path = folder / filename
    if not path.is_file():
        protocol = get_protocol(entry.protocol).with_overrides(**entry.overrides)
        recipe = manifest_recipe(
            entry.protocol, entry.dataset, with_root=False, overrides=dict(entry.overrides)
        )
        spec = {s.name: s for s in (DIGITS, DIGITS_0_4, DIGITS_5_9)}[entry.dataset]
        manifest = build_manifest(spec, None, protocol, command=recipe)
        if manifest.sha256 != FROZEN_DIGITS_SHA256[filename]:
            raise ManifestError(
                f"rebuilt {filename} has sha256 {manifest.sha256[:16]}..., not the frozen "
                f"{FROZEN_DIGITS_SHA256[filename][:16]}...: sampling changed; this is a bug"
            )
        manifest.write(path)
    loaded = Manifest.load(path)
    if loaded.sha256 != FROZEN_DIGITS_SHA256[filename]:
        raise ManifestError(f"{path} is not the frozen {filename} (sha256 differs)")
    return path
