"""Fault injection helpers: byte mutations, hypothesis settings, and an outcome tally.

CI runs a few dozen mutations per target; ``FEWTRANS_FUZZ_EXAMPLES=5000`` makes a long
run, and ``FEWTRANS_FUZZ_REPORT=FILE`` writes the tally there as JSON (it is also printed
in pytest's terminal summary).
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

T = TypeVar("T")

EXAMPLES = int(os.environ.get("FEWTRANS_FUZZ_EXAMPLES", "40"))
IN_CI = "CI" in os.environ or os.environ.get("FEWTRANS_CI") == "1"
"""``.ci/run`` sets FEWTRANS_CI=1; hosted CI services set CI (Hypothesis's own CI rule)."""

# In CI the examples are derandomised: a red build fails again on rerun with the same
# example, and a green one cannot turn red by luck. On a developer's machine they are
# random, and a failing example is saved to .hypothesis/ and replayed first next time.
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=IN_CI,
    database=None if IN_CI else DirectoryBasedExampleDatabase(".hypothesis/examples"),
    suppress_health_check=list(HealthCheck),
)


@dataclass(frozen=True)
class Mutation:
    """One change to a file's bytes."""

    kind: str  # "flip" | "truncate" | "overwrite"
    position: int
    payload: bytes = b""

    def apply(self, data: bytes) -> bytes:
        """The mutated bytes (always different from ``data``)."""
        if self.kind == "truncate":
            return data[: self.position]
        if self.kind == "flip":
            changed = bytearray(data)
            changed[self.position] ^= self.payload[0]
            return bytes(changed)
        changed = bytearray(data)
        end = min(len(data), self.position + len(self.payload))
        changed[self.position : end] = self.payload[: end - self.position]
        if bytes(changed) == data:  # the random bytes happened to match: flip one instead
            changed[self.position] ^= 0xFF
        return bytes(changed)


def mutations(size: int) -> st.SearchStrategy[Mutation]:
    """Single-byte flips, truncations, and short random overwrites of a ``size``-byte file."""
    position = st.integers(0, size - 1)
    flip = st.builds(
        Mutation, st.just("flip"), position, st.integers(1, 255).map(lambda b: bytes([b]))
    )
    truncate = st.builds(Mutation, st.just("truncate"), position)
    overwrite = st.builds(
        Mutation, st.just("overwrite"), position, st.binary(min_size=1, max_size=16)
    )
    return st.one_of(flip, flip, truncate, overwrite)


class Tally:
    """Counts of what each mutation led to, per target file kind."""

    OUTCOMES = ("refused", "unchanged", "silently-changed", "traceback")

    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter[str]] = {}

    def add(self, target: str, outcome: str) -> None:
        """Record one outcome."""
        self.counts.setdefault(target, collections.Counter())[outcome] += 1

    def outcomes(self, counts: collections.Counter[str]) -> list[str]:
        """The standard outcomes, then any other a test recorded (``accepted`` ...)."""
        return [*self.OUTCOMES, *sorted(set(counts) - set(self.OUTCOMES))]

    def lines(self) -> list[str]:
        """One line per target."""
        return [
            f"{target}: {sum(c.values())} mutations, "
            + ", ".join(f"{c[o]} {o}" for o in self.outcomes(c))
            for target, c in sorted(self.counts.items())
        ]

    def write(self) -> None:
        """Write the tally to ``$FEWTRANS_FUZZ_REPORT`` when set."""
        path = os.environ.get("FEWTRANS_FUZZ_REPORT")
        if path and self.counts:
            data = {t: {o: c[o] for o in self.outcomes(c)} for t, c in self.counts.items()}
            with open(path, "w", encoding="utf-8") as handle:
                json.dump({"examples_per_target": EXAMPLES, "targets": data}, handle, indent=2)


TALLY = Tally()


def check_outcome(
    target: str,
    load: Callable[[], T],
    same: Callable[[T], bool],
    refused: tuple[type[BaseException], ...],
    named: str,
) -> None:
    """Load damaged data: it must be refused cleanly or decode to exactly the original.

    Args:
        target: the kind of file (tally key).
        load: reads the damaged file.
        same: whether a successful read equals the pristine content.
        refused: the clean error types.
        named: text the error must contain (the file's name).

    Raises:
        AssertionError: a silently changed read, a multi-line error or one not naming the file.
        Exception: any other error ``load`` raised (a traceback for a user).
    """
    try:
        value = load()
    except refused as exc:
        message = str(exc)
        assert named in message and "\n" not in message, message
        TALLY.add(target, "refused")
        return
    except Exception:
        TALLY.add(target, "traceback")
        raise
    if not same(value):
        TALLY.add(target, "silently-changed")
        raise AssertionError(f"{target}: damaged file accepted with changed content")
    TALLY.add(target, "unchanged")


def equal_tables(a: Any, b: Any) -> bool:
    """Row-for-row equality of two pyarrow tables (values, types and order)."""
    return bool(a.schema.remove_metadata().equals(b.schema.remove_metadata())) and bool(
        a.to_pylist() == b.to_pylist()
    )


def rewrite_column(path: Path, name: str, array: Any, target: Path) -> None:
    """Write a shard with one column replaced, keeping its original metadata and checksum."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    index = table.column_names.index(name)
    edited = table.set_column(index, table.schema.field(index).with_type(array.type), array)
    pq.write_table(edited.replace_schema_metadata(table.schema.metadata), target)
