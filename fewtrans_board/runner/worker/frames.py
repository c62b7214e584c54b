"""A pickle-free message format between the scoring process and a plugin worker.

A frame is an 8-byte big-endian length, a JSON header, then the raw bytes of numeric
arrays the header describes (name, dtype, shape). Nothing is unpickled, so a malicious
worker can send wrong numbers but never code; dtypes, sizes and shapes are checked before
any buffer is read.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from fewtrans_board.core.errors import FewtransError

DTYPES = ("float32", "float16", "float64", "int64", "int32", "int16", "uint8", "bool")
MAX_HEADER_BYTES = 16 << 20
MAX_ARRAY_BYTES = 8 << 30


class FrameError(FewtransError):
    """A frame is malformed, too large, or the other side went away."""


def write_frame(
    stream: IO[bytes], header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None
) -> None:
    """Write one frame and flush.

    Args:
        stream: a binary stream.
        header: JSON-serialisable values (the key ``arrays`` is reserved).
        arrays: numeric arrays to send after the header.
    """
    described = []
    buffers = []
    for name, array in (arrays or {}).items():
        contiguous = np.ascontiguousarray(array)
        if contiguous.dtype.name not in DTYPES:
            raise FrameError(f"array {name!r} has dtype {contiguous.dtype}; allowed: {DTYPES}")
        described.append(
            {"name": name, "dtype": contiguous.dtype.name, "shape": list(contiguous.shape)}
        )
        buffers.append(contiguous.tobytes())
    text = json.dumps({**header, "arrays": described}).encode()
    stream.write(struct.pack(">Q", len(text)))
    stream.write(text)
    for buffer in buffers:
        stream.write(buffer)
    stream.flush()


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = stream.read(min(remaining, 1 << 24))
        if not chunk:
            raise FrameError("the other process closed the connection mid-message")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: IO[bytes]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read one frame: ``(header, arrays)``.

    Raises:
        FrameError: end of stream, bad JSON, unknown dtype, or sizes over the limits.
    """
    prefix = stream.read(8)
    if not prefix:
        raise FrameError("the other process closed the connection")
    if len(prefix) < 8:  # a raw pipe may return part of the prefix
        prefix += _read_exact(stream, 8 - len(prefix))
    (length,) = struct.unpack(">Q", prefix)
    if length > MAX_HEADER_BYTES:
        raise FrameError(f"message header of {length} bytes (limit {MAX_HEADER_BYTES})")
    try:
        header = json.loads(_read_exact(stream, length))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"message header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or not isinstance(header.get("arrays", []), list):
        raise FrameError("message header is not a JSON object with an 'arrays' list")
    arrays: dict[str, np.ndarray] = {}
    for spec in header.pop("arrays", []):
        try:
            name, dtype, shape = str(spec["name"]), str(spec["dtype"]), spec["shape"]
            if dtype not in DTYPES or not all(isinstance(n, int) and n >= 0 for n in shape):
                raise ValueError(f"dtype {dtype}, shape {shape}")
        except (KeyError, TypeError, ValueError) as exc:
            raise FrameError(f"bad array description {spec!r}: {exc}") from exc
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if size > MAX_ARRAY_BYTES:
            raise FrameError(f"array {name!r} of {size} bytes (limit {MAX_ARRAY_BYTES})")
        arrays[name] = np.frombuffer(_read_exact(stream, size), dtype=dtype).reshape(shape)
    return header, arrays
