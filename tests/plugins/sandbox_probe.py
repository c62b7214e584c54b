"""Adapters that report what a plugin worker lets them see and do (for the sandbox tests).

Each answers through its logits, the only channel out of a worker: column ``j`` of every
query row holds finding ``j``.
"""

from __future__ import annotations

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
    for adapter in (ScratchProbe, MemoryHog, FileHog, Sleeper):
        register(adapter)
