"""Unlearning records and the store that maps ``MODEL+unlearn:DATASET`` names to weights.

``fewtrans-board unlearn --out W.safetensors`` writes the unlearned weights to ``W`` and
its record to ``W.json`` (the sidecar), then registers the record in the store, a folder of
``<slug of the model name>.json`` files holding the record plus the absolute weights path.
Loading checks the weights file against the sha256 in its record, so a record always
describes the bytes it points at.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.errors import FewtransError

SCHEMA = "fewtrans-board/unlearning-record/1"


def sidecar(weights: Path) -> Path:
    """The record file next to a weights file: ``W.safetensors`` -> ``W.json``."""
    return weights.with_suffix(".json")


def default_store_dir() -> Path:
    """``$FEWTRANS_BOARD_UNLEARNED`` or ``~/.cache/fewtrans-board/unlearned``."""
    env = os.environ.get("FEWTRANS_BOARD_UNLEARNED")
    return Path(env) if env else Path.home() / ".cache" / "fewtrans-board" / "unlearned"


def slug(name: str) -> str:
    """A file-name-safe form of a model name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def write_record(weights: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` as the sidecar of ``weights`` (atomically) and return its path."""
    path = sidecar(weights)
    write_bytes_atomic(path, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return path


def read_record(weights: Path) -> dict[str, Any]:
    """The sidecar record of ``weights``.

    Raises:
        FewtransError: no sidecar, unreadable JSON, or another schema.
    """
    path = sidecar(weights)
    if not path.is_file():
        raise FewtransError(
            f"{weights} has no unlearning record {path.name} next to it; unlearned weights "
            "come from 'fewtrans-board unlearn --out FILE', which writes both"
        )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise FewtransError(f"cannot read unlearning record {path}: {exc}") from exc
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise FewtransError(f"{path} is not an unlearning record (schema {SCHEMA})")
    return record


def check_weights(weights: Path, record: dict[str, Any]) -> str:
    """Verify that ``weights`` is the file ``record`` describes; return its sha256.

    Raises:
        FewtransError: missing file or a different sha256.
    """
    from fewtrans_board.models.weights import file_sha256

    if not weights.is_file():
        raise FewtransError(f"unlearned weights {weights} do not exist")
    digest = file_sha256(weights)
    expected = record.get("weights", {}).get("sha256")
    if digest != expected:
        raise FewtransError(
            f"unlearned weights {weights} have sha256 {digest[:16]}..., but their record "
            f"says {str(expected)[:16]}...; the file was changed after unlearning"
        )
    return digest


class UnlearnedStore:
    """Where ``MODEL+unlearn:DATASET`` names find their weights.

    Args:
        folder: the store folder (default :func:`default_store_dir`).
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else default_store_dir()

    def entry_path(self, name: str) -> Path:
        """The store entry of a model name."""
        return self.folder / f"{slug(name)}.json"

    def register(self, weights: Path) -> Path:
        """Register the unlearned weights ``weights`` (with their sidecar) under their name.

        Returns:
            The store entry written (an existing entry of that name is replaced).
        """
        record = read_record(weights)
        check_weights(weights, record)
        entry = {**record, "weights_path": str(weights.resolve())}
        path = self.entry_path(record["name"])
        write_bytes_atomic(path, (json.dumps(entry, indent=2, sort_keys=True) + "\n").encode())
        return path

    def lookup(self, name: str) -> tuple[Path, dict[str, Any]]:
        """The weights path and record registered under ``name``.

        Raises:
            FewtransError: nothing registered under that name.
        """
        path = self.entry_path(name)
        if not path.is_file():
            raise FewtransError(
                f"no unlearned model {name!r} in {self.folder}; create it with "
                f"'fewtrans-board unlearn --model BASE --forget DATASET --out FILE', or pass "
                "the unlearned weights file with --weights"
            )
        entry = json.loads(path.read_text(encoding="utf-8"))
        weights = Path(entry.pop("weights_path"))
        return weights, entry
