"""This installation's own record of the verifications it passed, so one bundle is re-run once.

``submission verify`` and ``leaderboard add`` write a record after a verification passes;
``leaderboard add`` reuses one made here of the same bundle instead of re-running it. A
record is keyed by everything that decides what a verification re-runs and how it judges:
the bundle's digest (every file), where the seed comes from (a given seed, a hash of the
secret, or fresh random draws), the sample options and the worker's settings, this
fewtrans-board's version and code digest, and each pinned distribution's installed version
and code digest. It lives in this user's cache folder, never in a bundle or a store: a
report a submitter supplies is never read (the bundle's files only enter the key through
its digest), and anything unreadable or different is a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.version import __version__
from fewtrans_board.leaderboard.verification import VerificationOptions

RECORDS_ENV = "FEWTRANS_VERIFY_RECORDS"
"""Environment variable naming the records folder (``off``: never record or reuse)."""
RECORD_VERSION = 1


def default_root() -> Path | None:
    """Where records live: ``$FEWTRANS_VERIFY_RECORDS``, else beside the build cache.

    Returns:
        ``$FEWTRANS_VERIFY_RECORDS``; else ``verifications/`` in the build cache folder
        (``$FEWTRANS_BUILD_CACHE``, else ``~/.cache/fewtrans-board/build``); ``None`` when
        either is ``off``.
    """
    from fewtrans_board.leaderboard.summary_cache import default_root as build_cache

    configured = os.environ.get(RECORDS_ENV, "").strip()
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured)
    cache = build_cache()
    return None if cache is None else cache / "verifications"


def _installed(distribution: str) -> dict[str, str | None]:
    from fewtrans_board.registry.files import files_sha256

    try:
        version: str | None = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"version": version, "files_sha256": files_sha256(distribution)}


def record_key(
    digest: str, pins: Mapping[str, str], options: VerificationOptions
) -> dict[str, Any]:
    """Everything a verification's outcome depends on besides the judge's random draws.

    Args:
        digest: the bundle's digest (``BundleContents.digest``).
        pins: the submission's pinned distributions.
        options: how it is verified.
    """
    if options.seed:
        seed: dict[str, str] = {"given": options.seed.lower()}
    elif options.secret:
        seed = {"secret_sha256": hashlib.sha256(options.secret).hexdigest()}
    else:
        seed = {"fresh": "urandom"}
    return {
        "record_version": RECORD_VERSION,
        "digest": digest,
        "seed": seed,
        "options": _options(options),
        "fewtrans_board": {"version": __version__, **_installed("fewtrans-board")},
        "pins": {d: {"pinned": v, **_installed(d)} for d, v in sorted(pins.items())},
    }


def _plain(value: Any) -> Any:
    """``value`` as JSON: paths resolved, mappings sorted, sequences as lists, others as text."""
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _options(options: VerificationOptions) -> dict[str, Any]:
    """Every option of the verification but the seed's source and the progress printer.

    Options added later enter the key without a change here, so a record is never reused
    across a setting it did not see.
    """
    skipped = {"seed", "secret", "progress"}
    return {
        f.name: _plain(getattr(options, f.name))
        for f in dataclasses.fields(options)
        if f.name not in skipped and not callable(getattr(options, f.name))
    }


def _path(root: Path, key: dict[str, Any]) -> Path:
    return root / f"{hashlib.sha256(canonical_json(key).encode()).hexdigest()}.json"


def find_record(root: Path | None, key: dict[str, Any]) -> tuple[dict[str, Any], Path] | None:
    """The passed verification report recorded here under ``key``, and its file (or ``None``)."""
    if root is None:
        return None
    path = _path(root, key)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    report = record.get("report") if isinstance(record, dict) else None
    if (
        record.get("key") != json.loads(canonical_json(key))
        or not isinstance(report, dict)
        or report.get("passed") is not True
        or report.get("digest") != key["digest"]
    ):
        return None
    return report, path


def save_record(root: Path | None, key: dict[str, Any], report: dict[str, Any]) -> Path | None:
    """Record a passed verification under ``key`` (atomically); nothing when ``root`` is None."""
    if root is None or report.get("passed") is not True:
        return None
    path = _path(root, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"key": json.loads(canonical_json(key)), "report": report}, default=str)
        write_bytes_atomic(path, text.encode())
    except OSError:  # a cache that cannot be written only costs a re-run later
        return None
    return path
