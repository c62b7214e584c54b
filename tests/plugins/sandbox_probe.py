"""Adapters that report what a plugin worker lets them see and do (for the sandbox tests).

Each answers through its logits, the only channel out of a worker: column ``j`` of every
query row holds finding ``j``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from fewtrans_board import Adapter, AdapterConfig, hookimpl


class _Findings:
    def __init__(self, values: list[float]) -> None:
        self.values = values

    def predict(self, query):  # type: ignore[no-untyped-def]
        row = torch.tensor(self.values, dtype=torch.float32)
        return row.expand(len(query), len(self.values)).clone()


class _Probe(Adapter):
    description = "sandbox probe"
    trains = "nothing"
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        pass


class ScratchProbe(_Probe):
    """Did an earlier episode leave a file, a shared-memory file or a process behind?

    Findings: [scratch marker existed, /dev/shm marker existed, other live processes, 0, 0].
    Then it leaves all three behind for the next episode.
    """

    name = "probe-scratch"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        tmp, shm = Path(tempfile.gettempdir()) / "probe-marker", Path("/dev/shm/probe-marker")
        found = [float(tmp.exists()), float(shm.exists())]
        others = [
            p
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and int(p.name) not in (1, os.getpid())
        ]
        found.append(float(len(others)))
        tmp.write_text("left behind")
        shm.write_text("left behind")
        if os.fork() == 0:  # a process that outlives the episode, if it may
            os.setsid()
            time.sleep(60)
            os._exit(0)
        return _Findings([*found, 0.0, 0.0][: support.n_way])


def _round_trip(path: Path) -> float:
    """1 if ``path`` can be written and read back (then removed), else 0."""
    try:
        path.write_text("scratch")
        ok = path.read_text() == "scratch"
        path.unlink()
    except OSError:
        return 0.0
    return float(ok)


class PersistProbe(_Probe):
    """Can an episode leave state for the next one where the worker's cleaning misses it?

    Findings: [a mode-000 folder in /tmp found (2: the state in it read), a folder in / found
    (2: read), a folder in /dev found (2: read), /tmp written and read, /dev/shm written and
    read, the plugin's own metadata read through its bind under /tmp, the working folder is
    the /tmp it sees, writing in / refused, writing in /dev refused]. Then it leaves the three
    folders behind, the one in /tmp locked (mode 000); each refusal is recorded, not raised.
    """

    name = "probe-persist"
    places = ("/tmp/probe-locked", "/probe-left", "/dev/probe-left")

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import importlib.metadata

        found = []
        for place in map(Path, self.places):
            with contextlib.suppress(OSError):
                place.chmod(0o700)  # unlock what an earlier episode locked
            value = float(os.path.lexists(place))
            with contextlib.suppress(OSError):
                value += (place / "state").read_text() == "answers"
            found.append(value)
        scratch = Path(tempfile.gettempdir())
        found += [_round_trip(scratch / "probe-here"), _round_trip(Path("/dev/shm/probe-here"))]
        try:
            dist = importlib.metadata.distribution("fewtrans-probe")
            bound = str(dist.locate_file("")).startswith("/tmp/")
            found.append(float(bound and "fewtrans-probe" in (dist.read_text("METADATA") or "")))
        except (OSError, importlib.metadata.PackageNotFoundError):
            found.append(0.0)
        found.append(float(os.path.samefile(".", scratch)))
        refused = []
        for place in map(Path, self.places):
            try:
                place.mkdir(exist_ok=True)
                (place / "state").write_text("answers")
                refused.append(0.0)
            except OSError:
                refused.append(1.0)
        with contextlib.suppress(OSError):
            Path(self.places[0]).chmod(0)
        return _Findings([*found, *refused[1:]][: support.n_way])


class PersistProbeNext(PersistProbe):
    """:class:`PersistProbe` under another name: another adapter served by the same worker
    (one idle worker serves every adapter of its plugins and model) looks for the state."""

    name = "probe-persist-next"


class PipePlanter(_Probe):
    """Leaves a message for the next episode in its own request pipe (``/proc/self/fd/0``
    reopened for writing: a pipe's read end gives its write end)."""

    name = "probe-pipe"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        with open("/proc/self/fd/0", "wb") as pipe:
            pipe.write(b"answers for the next episode")
        return _Findings([0.0] * support.n_way)


class MemoryHog(_Probe):
    """Allocates far more than a worker's memory limit."""

    name = "probe-memory"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        hog = torch.ones((4 << 30) // 4)  # 4 GiB
        return _Findings([float(hog[0])] * support.n_way)


class FileHog(_Probe):
    """Writes a file larger than a worker's file-size limit."""

    name = "probe-file"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        with open("/tmp/big", "wb") as handle:
            for _ in range(64):
                handle.write(b"\0" * (1 << 20))
        return _Findings([0.0] * support.n_way)


class Sleeper(_Probe):
    """Takes longer than a worker's time limit."""

    name = "probe-sleep"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        time.sleep(120)
        return _Findings([0.0] * support.n_way)


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register the probes."""
    for adapter in (
        ScratchProbe,
        PersistProbe,
        PersistProbeNext,
        PipePlanter,
        MemoryHog,
        FileHog,
        Sleeper,
    ):
        register(adapter)
