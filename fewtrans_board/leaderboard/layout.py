"""The fixed layout of a submission bundle, and a defensive reader of its zip.

Layout (nothing else is extracted, validated or stored)::

    submission.toml                                       at most 64 KiB
    centre-search.json                                    at most 4 MiB
    results/<run>/run.json                                at most 1 MiB
    results/<run>/shards/shard-NNNNN-of-NNNNN.parquet     at most 512 MiB each

plus, optionally, the folder entries ``results/``, ``results/<run>/`` and
``results/<run>/shards/``. ``<run>`` is up to 100 letters, digits, ``.``, ``_`` or ``-``
(not starting with ``.``). Member names are normalised before any check (two spellings of
one path are a duplicate, compared case-insensitively), and the zip itself is checked
(headers, overlaps, encryption, compression, sizes and CRCs; README.md lists the refusals)
before the first byte is written.
"""

from __future__ import annotations

import re
import stat
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fewtrans_board.core.errors import SubmissionError, describe, shown

META, CENTRE, RUN, SHARD, FOLDER = "meta", "centre", "run", "shard", "folder"
RUN_NAME = r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}"
SHARD_NAME = r"shard-[0-9]{5}-of-[0-9]{5}\.parquet"
_FILES = (
    (META, re.compile(r"submission\.toml")),
    (CENTRE, re.compile(r"centre-search\.json")),
    (RUN, re.compile(rf"results/{RUN_NAME}/run\.json")),
    (SHARD, re.compile(rf"results/{RUN_NAME}/shards/{SHARD_NAME}")),
)
_FOLDERS = re.compile(rf"results(/{RUN_NAME}(/shards)?)?")
ALLOWED_SUFFIXES = {".toml", ".json", ".parquet"}

MAX_BYTES = {META: 64 << 10, CENTRE: 4 << 20, RUN: 1 << 20}
MAX_FILE_BYTES = 512 << 20
"""Largest shard; the other members have the smaller limits of :data:`MAX_BYTES`."""
MAX_TOTAL_BYTES = 2 << 30
MAX_ENTRIES = 5000
ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_ENCRYPTED, _DATA_DESCRIPTOR, _UTF8_NAME = 0x1, 0x8, 0x800
_ZIP64 = 0xFFFFFFFF


def normalise(name: str) -> str:
    """A member name with ``.`` and empty components dropped, or a refusal.

    Raises:
        SubmissionError: ``unsafe-path`` for absolute names, drive letters, ``..``,
            backslashes and NUL bytes.
    """
    if (
        "\\" in name
        or "\x00" in name
        or name.startswith("/")
        or re.match(r"[A-Za-z]:", name)
        or ".." in name.split("/")
    ):
        raise SubmissionError(
            "unsafe-path",
            f"bundle entry {shown(name)} escapes the bundle (absolute, '..', a drive, a "
            "backslash or a NUL byte)",
        )
    return "/".join(part for part in name.split("/") if part not in ("", "."))


def kind_of(path: str, folder: bool = False) -> str:
    """The layout kind of a normalised path: ``meta``, ``centre``, ``run``, ``shard``, ``folder``.

    Raises:
        SubmissionError: ``forbidden-file`` for a file type no bundle holds, else
            ``outside-layout``.
    """
    if folder:
        if _FOLDERS.fullmatch(path):
            return FOLDER
    else:
        for kind, pattern in _FILES:
            if pattern.fullmatch(path):
                return kind
        if Path(path).suffix not in ALLOWED_SUFFIXES:
            raise SubmissionError(
                "forbidden-file",
                f"bundle entry {shown(path)} is not allowed: only "
                f"{', '.join(sorted(ALLOWED_SUFFIXES))} files (no pickles, checkpoints or code)",
            )
    raise SubmissionError(
        "outside-layout",
        f"bundle entry {shown(path + ('/' if folder else ''))} is outside the bundle layout "
        "(submission.toml, centre-search.json, results/<run>/run.json, "
        "results/<run>/shards/shard-NNNNN-of-NNNNN.parquet); remove it",
    )


def check_tree(paths: list[str]) -> dict[str, str]:
    """Check normalised paths (files and folders) as a whole: duplicates, file/folder clashes.

    Args:
        paths: member paths, folders ending in ``/``.

    Returns:
        ``{path: kind}`` of the files.

    Raises:
        SubmissionError: a path outside the layout, two spellings of one path, a path that
            is both a file and a folder.
    """
    seen: dict[str, str] = {}
    files: dict[str, str] = {}
    folders: set[str] = set()
    for raw in paths:
        folder = raw.endswith("/")
        path = normalise(raw)
        key = path.casefold()
        if key in seen:
            raise SubmissionError(
                "duplicate-entry",
                f"bundle entries {shown(seen[key])} and {shown(raw)} name the same path",
            )
        seen[key] = raw
        kind = kind_of(path, folder)
        if folder:
            folders.add(key)
        else:
            files[path] = kind
            parts = key.split("/")
            folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = sorted(p for p in files if p.casefold() in folders)
    if clash:
        raise SubmissionError(
            "duplicate-entry", f"bundle entry {shown(clash[0])} is both a file and a folder"
        )
    return files


@dataclass(frozen=True)
class Member:
    """A checked zip member: its entry, normalised path and layout kind."""

    info: zipfile.ZipInfo
    path: str
    kind: str


def _check_mode(info: zipfile.ZipInfo) -> None:
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise SubmissionError("symlink", f"bundle entry {shown(info.filename)} is a symbolic link")
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise SubmissionError(
            "special-file", f"bundle entry {shown(info.filename)} is not a regular file"
        )


def _check_member(info: zipfile.ZipInfo, kind: str) -> None:
    name = shown(info.filename)
    if info.flag_bits & _ENCRYPTED:
        raise SubmissionError("encrypted-member", f"bundle entry {name} is encrypted")
    if info.compress_type not in ZIP_METHODS:
        raise SubmissionError(
            "unsupported-compression",
            f"bundle entry {name} uses zip compression method {info.compress_type}; "
            "use stored or deflate (what 'fewtrans-board submission pack' writes)",
        )
    limit = 0 if kind == FOLDER else MAX_BYTES.get(kind, MAX_FILE_BYTES)
    if info.file_size > limit:
        raise SubmissionError(
            "too-large", f"bundle entry {name} is {info.file_size} bytes (limit {limit})"
        )


def _check_headers(bundle: IO[bytes], infos: list[zipfile.ZipInfo], end: int) -> None:
    """Every local header must agree with the central directory; no two members overlap."""
    ordered = sorted(infos, key=lambda i: i.header_offset)
    bounds = [i.header_offset for i in ordered[1:]] + [end]
    for info, bound in zip(ordered, bounds, strict=True):
        name = shown(info.filename)
        bundle.seek(info.header_offset)
        raw = bundle.read(_LOCAL_HEADER.size)
        if len(raw) != _LOCAL_HEADER.size:
            raise SubmissionError("header-mismatch", f"bundle entry {name}: truncated header")
        (sig, _, _, flags, method, _, _, crc, packed, size, n_name, n_extra) = _LOCAL_HEADER.unpack(
            raw
        )
        encoding = "utf-8" if info.flag_bits & _UTF8_NAME else "cp437"
        stored_name = bundle.read(n_name)
        problems = []
        if sig != b"PK\x03\x04":
            problems.append("no local header at its offset")
        elif stored_name != info.orig_filename.encode(encoding, errors="replace"):
            problems.append(f"local name {shown(stored_name)}")
        elif method != info.compress_type or (flags ^ info.flag_bits) & _ENCRYPTED:
            problems.append(f"local compression {method}, flags {flags:#x}")
        elif (
            not flags & _DATA_DESCRIPTOR
            and _ZIP64 not in (packed, size)
            and (crc, packed, size) != (info.CRC, info.compress_size, info.file_size)
        ):
            problems.append(f"local CRC/sizes {crc:#x}/{packed}/{size}")
        data_end = info.header_offset + _LOCAL_HEADER.size + n_name + n_extra
        if not problems and data_end + info.compress_size > bound:
            problems.append("its data overlaps the next member")
        if problems:
            raise SubmissionError(
                "header-mismatch",
                f"bundle entry {name}: {problems[0]} disagrees with the central directory; "
                "re-create the zip with 'fewtrans-board submission pack'",
            )


def open_members(bundle: Path, archive: zipfile.ZipFile) -> list[Member]:
    """Check every entry of an open archive against the layout and the zip format.

    Raises:
        SubmissionError: the first fault, naming the entry.
    """
    infos = archive.infolist()
    if len(infos) > MAX_ENTRIES:
        raise SubmissionError("too-large", f"bundle has {len(infos)} entries (limit {MAX_ENTRIES})")
    for info in infos:
        normalise(info.orig_filename)  # a NUL byte hides what follows it from ZipInfo.filename
        _check_mode(info)
    files = check_tree([i.filename for i in infos])
    members = []
    for info in infos:
        path = normalise(info.filename)
        kind = files.get(path, FOLDER) if not info.is_dir() else FOLDER
        _check_member(info, kind)
        members.append(Member(info, path, kind))
    total = sum(i.file_size for i in infos)
    if total > MAX_TOTAL_BYTES:
        raise SubmissionError(
            "too-large", f"bundle unpacks to {total} bytes (limit {MAX_TOTAL_BYTES})"
        )
    with bundle.open("rb") as handle:
        _check_headers(handle, infos, archive.start_dir)
    return members


def _bounded_copy(source: IO[bytes], sink: IO[bytes], declared: int) -> int:
    """Copy at most ``declared + 1`` bytes, so a lying header cannot fill the disk."""
    written = 0
    while chunk := source.read(min(1 << 20, declared + 1 - written)):
        sink.write(chunk)
        written += len(chunk)
        if written > declared:
            break
    return written


def extract_members(bundle: Path, target: Path) -> dict[str, str]:
    """Check a bundle zip completely, then extract its files into ``target`` (empty).

    Returns:
        ``{path: kind}`` of the extracted files.

    Raises:
        SubmissionError: not a zip, or any fault of :func:`open_members`; a member whose
            data cannot be read or does not match its declared size and CRC.
    """
    try:
        archive = zipfile.ZipFile(bundle)
    except Exception as exc:  # the zip decoder raises many types on malformed input
        raise SubmissionError(
            "not-a-zip", f"{bundle.name} is not a readable zip bundle: {describe(exc)}"
        ) from exc
    with archive:
        members = open_members(bundle, archive)
        for member in members:
            if member.kind == FOLDER:
                continue
            destination = target.joinpath(*member.path.split("/"))
            destination.parent.mkdir(parents=True, exist_ok=True)
            declared = member.info.file_size
            try:
                with archive.open(member.info) as source, destination.open("xb") as sink:
                    written = _bounded_copy(source, sink, declared)
            except Exception as exc:  # CRC errors, truncated or corrupt deflate streams
                raise SubmissionError(
                    "bad-zip-member",
                    f"bundle entry {shown(member.path)} cannot be read: {describe(exc)}",
                ) from exc
            if written != declared:
                raise SubmissionError(
                    "bad-zip-member",
                    f"bundle entry {shown(member.path)} declares {declared} bytes but holds "
                    f"{'more' if written > declared else written}",
                )
    return {m.path: m.kind for m in members if m.kind != FOLDER}
