"""A results folder's integrity: its ``run.json``, its locks, and which shards are done.

Layout kept here::

    OUT/run.json                                  identity + numeric environment
    OUT/.locks/run.lock                           held while a run checks the folder
    OUT/.locks/shard-00003-of-00012.lock          held while a process computes that shard
    OUT/shards/shard-00003-of-00012.parquet       a finished, checksummed shard
    OUT/shards/shard-....parquet.corrupt-<time>   a damaged shard set aside by a resume

One writer per shard: a run locks every shard it will compute (under the folder lock, so
two runs never split them) and refuses, naming the holder, if a live process holds one;
only the holder of a shard's lock removes its temporary files.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import create_exclusive, remove_stale_temps
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.results.load import read_run_record
from fewtrans_board.results.shards import CorruptShardError, read_shard, shard_file_name
from fewtrans_board.runner.locks import FileLock
from fewtrans_board.runner.provenance import environment_differences

LOG = logging.getLogger(__name__)


def shard_path(out: Path, index: int, count: int) -> Path:
    """File of shard ``index`` of ``count``."""
    return out / "shards" / shard_file_name(index, count)


def shard_lock_path(out: Path, index: int, count: int) -> Path:
    """Lock file of shard ``index`` of ``count``."""
    return out / ".locks" / f"shard-{index:05d}-of-{count:05d}.lock"


def unwritable(out: Path, exc: OSError) -> FewtransError:
    """The one-line error for an output folder this process cannot write."""
    where = exc.filename or out
    return FewtransError(
        f"cannot write to the results folder {out} ({exc.strerror or exc} at {where}); "
        "choose a writable --out"
    )


@dataclass(frozen=True)
class FolderRecord:
    """What ``run.json`` holds: the run id, the identity it hashes, the numeric environment.

    (:mod:`fewtrans_board.runner.provenance` computes them from the run's plan.)
    """

    run_id: str
    identity: dict[str, Any]
    environment: dict[str, Any]

    @property
    def shard_count(self) -> int:
        """How many shards the run has (part of its identity)."""
        return int(self.identity["shards"])


def prepare_output(run: FolderRecord, out: Path) -> None:
    """Create ``out/run.json`` exclusively, or check the existing one describes this run.

    Call it holding the folder lock (:func:`claim_shards` does).

    Raises:
        FewtransError: the folder holds another run, was computed in another numeric
            environment, or its ``run.json`` is damaged.
    """
    identity, environment = run.identity, run.environment
    record = {"run_id": run.run_id, "identity": identity, "environment": environment}
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    remove_stale_temps(out / "run.json")  # the caller holds the folder lock every creator takes
    if create_exclusive(out / "run.json", text.encode()):
        return
    existing = read_run_record(out)
    if existing["identity"] != identity:
        differing = sorted(
            k
            for k in set(identity) | set(existing["identity"])
            if existing["identity"].get(k) != identity.get(k)
        )
        raise FewtransError(
            f"{out} holds results of a different run (differs in: {', '.join(differing)}); "
            "use another --out folder"
        )
    differences = environment_differences(existing.get("environment") or {}, environment)
    if differences:
        raise FewtransError(
            f"{out} was computed in another numeric environment ({'; '.join(differences)}); "
            "resuming here would mix shards computed with different kernels. Resume it where "
            "it started, or evaluate into a new --out folder."
        )


@dataclass
class ShardClaim:
    """Shards a run computes (their locks held) and shards already finished."""

    todo: list[int]
    done: list[int]


@contextmanager
def claim_shards(run: FolderRecord, out: Path, indices: list[int]) -> Iterator[ShardClaim]:
    """Prepare ``out`` and lock every unfinished shard among ``indices`` until the block ends.

    A finished shard whose checksum fails is renamed ``*.corrupt-<time>`` (kept for
    inspection) and computed again.

    Raises:
        FewtransError: an unwritable folder, another run in it, or shards that another
            live process is computing (the message names its PID and host).
    """
    count = run.shard_count
    leases: list[FileLock] = []
    try:
        busy: dict[int, str] = {}
        done: list[int] = []
        try:
            out.mkdir(parents=True, exist_ok=True)
            with FileLock(out / ".locks" / "run.lock", "checking the run folder"):
                prepare_output(run, out)
                for index in indices:
                    lease = FileLock(
                        shard_lock_path(out, index, count), f"computing shard {index} of {count}"
                    )
                    if not lease.acquire():
                        busy[index] = lease.holder()
                        continue
                    leases.append(lease)
                    if _finished(run, out, index):
                        leases.pop().release()
                        done.append(index)
                    else:
                        remove_stale_temps(shard_path(out, index, count))
        except OSError as exc:
            raise unwritable(out, exc) from exc
        if busy:
            holders = sorted(set(busy.values()))
            raise FewtransError(
                f"{out} is in use: shard(s) {', '.join(map(str, sorted(busy)))} are being "
                f"computed by {'; '.join(holders)}. Wait for it to finish and run this command "
                "again to resume, or use another --out folder."
            )
        yield ShardClaim(todo=[i for i in indices if i not in done], done=done)
    finally:
        for lease in leases:
            lease.release()


def _finished(run: FolderRecord, out: Path, index: int) -> bool:
    """Whether shard ``index`` holds this run's verified results (corrupt ones set aside)."""
    path = shard_path(out, index, run.shard_count)
    if not path.exists():
        return False
    try:
        _, meta = read_shard(path)
    except CorruptShardError as exc:
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        path.rename(aside)
        LOG.warning("%s is corrupt (%s); moved to %s, computing it again", path, exc.reason, aside)
        return False
    stored = meta.get("shard")
    position: dict[str, Any] = stored if isinstance(stored, dict) else {}
    if meta.get("run_id") != run.run_id or position != {
        **position,
        "index": index,
        "count": run.shard_count,
    }:
        raise FewtransError(
            f"{path} holds results of another run or another shard (run {meta.get('run_id')}, "
            f"shard {position.get('index')} of {position.get('count')}); move it out of {out}"
        )
    return True
