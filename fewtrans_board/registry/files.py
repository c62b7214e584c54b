"""A digest of a distribution's installed code: what a ``name==version`` pin cannot see.

Code edited in place (an editable install, a patched ``site-packages``) keeps its pin, so
``evaluate`` records :func:`files_sha256` of the distributions that provided the model and
adapter (built-ins: ``fewtrans-board``); verification compares the plugin worker's digest.
It covers the files of the import packages (found the way Python imports them) and those
the distribution lists beside a single-file module (its data files, which the worker sees
too), without byte-code caches, so a wheel and an editable install of one source agree.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

ENTRY_POINT_GROUP = "fewtrans_board"
SKIPPED_DIRS = frozenset({"__pycache__"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def top_level_names(dist: importlib.metadata.Distribution) -> list[str]:
    """Import names a distribution installs.

    ``top_level.txt`` (else its RECORD's packages and modules), and the modules of its
    entry points.
    """
    listed = dist.read_text("top_level.txt")
    names = {line.strip() for line in (listed or "").splitlines() if line.strip()}
    record = dist.read_text("RECORD")
    if listed is None and record is not None:  # an egg-info's file list is its source tree
        for file in dist.files or []:
            parts = file.parts
            first = parts[0] if parts else ""
            if len(parts) > 1 and not first.endswith((".dist-info", ".data")):
                names.add(first)
            elif len(parts) == 1 and first.endswith(".py"):
                names.add(first.removesuffix(".py"))
    for entry in dist.entry_points:
        if entry.group == ENTRY_POINT_GROUP:
            names.add(entry.module.split(".")[0])
    return sorted(n for n in names if n.isidentifier() and n != "__pycache__")


def _files(name: str) -> list[tuple[str, Path]]:
    """``(label, path)`` of every file of the import package or module ``name``."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    found: list[tuple[str, Path]] = []
    if spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            root = Path(location)
            for path in sorted(root.rglob("*")):
                relative = path.relative_to(root)
                if (
                    path.is_file()
                    and not SKIPPED_DIRS.intersection(relative.parts)
                    and not path.name.endswith(SKIPPED_SUFFIXES)
                ):
                    found.append((f"{name}/{relative.as_posix()}", path))
    elif spec.origin and Path(spec.origin).is_file():
        found.append((Path(spec.origin).name, Path(spec.origin)))
    return found


def _beside_modules(
    dist: importlib.metadata.Distribution, entries: dict[str, Path]
) -> dict[str, Path]:
    """Files ``dist`` lists in the folder of one of its single-file modules (data files)."""
    folders = {path.parent for label, path in entries.items() if "/" not in label}
    found: dict[str, Path] = {}
    for file in dist.files or []:
        try:
            path = Path(str(file.locate()))
        except (NotImplementedError, TypeError, ValueError):
            continue
        if path.parent in folders and path.is_file() and not path.name.endswith(SKIPPED_SUFFIXES):
            found[path.name] = path
    return found


def compute_files_sha256(distribution: str) -> str | None:
    """sha256 over the installed files of ``distribution``'s import packages.

    Each file contributes its path below the package and the sha256 of its bytes, in
    sorted order.

    Args:
        distribution: an installed distribution's name (any spelling pip accepts).

    Returns:
        The hex digest; ``None`` when the distribution is not installed or none of its
        packages can be found.
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    entries: dict[str, Path] = {}
    for name in top_level_names(dist):
        entries.update(_files(name))
    entries.update(_beside_modules(dist, entries))
    if not entries:
        return None
    digest = hashlib.sha256()
    for label in sorted(entries):
        content = hashlib.sha256(entries[label].read_bytes()).hexdigest()
        digest.update(f"{label}\0{content}\n".encode())
    return digest.hexdigest()


@functools.cache
def files_sha256(distribution: str) -> str | None:
    """:func:`compute_files_sha256`, computed once per process.

    Every shard a process writes records the same digest, and the digest is that of the
    code the process imported at its start, not of files edited later.
    """
    return compute_files_sha256(distribution)


def files_record(distribution: str | None) -> dict[str, str]:
    """``{"files_sha256": digest}`` for a provenance record (empty without a digest)."""
    digest = files_sha256(distribution) if distribution else None
    return {} if digest is None else {"files_sha256": digest}
