"""Canonical JSON and hashing helpers shared by manifests and results."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(data: Any) -> str:
    """Serialise ``data`` deterministically (sorted keys, no spaces, ASCII only)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def sha256_text(*parts: str) -> str:
    """Return the hex sha256 of the UTF-8 parts joined by newlines."""
    digest = hashlib.sha256()
    for i, part in enumerate(parts):
        if i:
            digest.update(b"\n")
        digest.update(part.encode("utf-8"))
    return digest.hexdigest()
