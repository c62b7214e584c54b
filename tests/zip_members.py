"""Zip members and headers of submission bundles, for the intake tests and fuzzing.

A bundle is handled as a list of :class:`Entry` (written back by :func:`write_entries`,
duplicate names included); :func:`patch` sets a field of one member's local header, central
directory record or both, and :func:`zip_mutation` draws such a patch or raw byte damage.
"""

from __future__ import annotations

import io
import struct
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from tests.faults import mutations

# --- zip members ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One zip member: its raw name, bytes, compression and unix mode."""

    name: str
    data: bytes
    method: int = zipfile.ZIP_DEFLATED
    mode: int = 0o100644


def read_entries(bundle: bytes) -> list[Entry]:
    """The members of a (valid) bundle, in order."""
    with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
        return [
            Entry(i.filename, archive.read(i), i.compress_type, (i.external_attr >> 16) or 0o100644)
            for i in archive.infolist()
        ]


def write_entries(entries: list[Entry]) -> bytes:
    """A zip of the entries, names written as given (duplicates included)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names
        with zipfile.ZipFile(buffer, "w") as archive:
            for entry in entries:
                info = zipfile.ZipInfo(entry.name, (2024, 1, 1, 0, 0, 0))
                info.compress_type = entry.method
                info.external_attr = entry.mode << 16
                archive.writestr(info, entry.data)
    return buffer.getvalue()


def named(entries: list[Entry], predicate: Callable[[str], bool]) -> list[int]:
    """Indices of the entries whose name satisfies ``predicate``."""
    return [i for i, e in enumerate(entries) if predicate(e.name)]


# --- zip headers -----------------------------------------------------------------------------

LOCAL_FIELDS = {
    "flags": (6, "H"),
    "method": (8, "H"),
    "crc": (14, "L"),
    "packed": (18, "L"),
    "size": (22, "L"),
    "name_length": (26, "H"),
    "extra_length": (28, "H"),
}
CENTRAL_FIELDS = {
    "flags": (8, "H"),
    "method": (10, "H"),
    "crc": (16, "L"),
    "packed": (20, "L"),
    "size": (24, "L"),
    "name_length": (28, "H"),
    "extra_length": (30, "H"),
    "mode": (38, "L"),
    "offset": (42, "L"),
}


def header_offsets(bundle: bytes) -> list[tuple[int, int]]:
    """``(local header offset, central record offset)`` of every member."""
    with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
        infos, position = archive.infolist(), archive.start_dir
    out = []
    for info in infos:
        n, m, k = struct.unpack_from("<3H", bundle, position + 28)
        out.append((info.header_offset, position))
        position += 46 + n + m + k
    return out


def patch(bundle: bytes, member: int, field: str, value: int, where: str) -> bytes:
    """Set a header field of one member in its local header, central record or both."""
    local, central = header_offsets(bundle)[member]
    data = bytearray(bundle)
    for table, base in (("local", local), ("central", central)):
        fields = LOCAL_FIELDS if table == "local" else CENTRAL_FIELDS
        if where in (table, "both") and field in fields:
            offset, kind = fields[field]
            limit = 0xFFFF if kind == "H" else 0xFFFFFFFF
            struct.pack_into(f"<{kind}", data, base + offset, value & limit)
    return bytes(data)


def field_value(bundle: bytes, member: int, field: str) -> int:
    """A central-directory field of one member."""
    _, central = header_offsets(bundle)[member]
    offset, kind = CENTRAL_FIELDS[field]
    return int(struct.unpack_from(f"<{kind}", bundle, central + offset)[0])


def same_entry(entry: Entry, data: bytes) -> Entry:
    """``entry`` with other bytes."""
    return replace(entry, data=data)


@st.composite
def zip_mutation(draw: st.DrawFn, bundle: bytes) -> tuple[str, bytes]:
    """One zip-level mutation of written bytes: a header field, or raw byte damage."""
    kind = draw(st.sampled_from(["field", "field", "field", "bytes"]))
    if kind == "bytes":
        return "zip-bytes", draw(mutations(len(bundle))).apply(bundle)
    member = draw(st.integers(0, len(header_offsets(bundle)) - 1))
    name = draw(st.sampled_from(sorted(CENTRAL_FIELDS)))
    where = draw(st.sampled_from(["local", "central", "both", "both"]))
    current = field_value(bundle, member, name)
    value = draw(
        st.one_of(
            st.sampled_from([0, 1, 8, 12, 14, 99, 0xFFFF, 0xFFFFFFFF, current ^ 1, current + 1]),
            st.integers(0, 0xFFFFFFFF),
        )
    )
    return f"zip-{name}", patch(bundle, member, name, value, where)
