"""Compiled site templates kept for the life of the process.

Every site build (and every reproduction report) makes a fresh Jinja environment, whose
globals belong to that build; without a shared cache each one parsed and compiled every
template again (1% of the test suite's CPU). Jinja's bytecode cache keeps the compiled code
only, keyed by template and checked against the source's checksum, so an edited template is
compiled again and no build sees another's globals.
"""

from __future__ import annotations

from jinja2.bccache import Bucket, BytecodeCache


class ProcessBytecodeCache(BytecodeCache):
    """Jinja template bytecode in memory, shared by every environment of this process."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        """Fill ``bucket`` with the stored code (Jinja discards it if the source changed)."""
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        """Keep the code Jinja just compiled."""
        self._code[bucket.key] = bucket.bytecode_to_string()

    def clear(self) -> None:
        """Forget every compiled template."""
        self._code.clear()


TEMPLATE_CODE = ProcessBytecodeCache()
"""The one cache the site's environments use."""
