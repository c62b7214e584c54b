"""Progress of long steps: a redrawn bar on a terminal, plain lines in a log.

A bar redrawn into a CI log or a redirected file is noise, and nothing at all leaves a
five-minute step silent; where stderr is not a terminal, :func:`progress_meter` prints one
line at most every :data:`LOG_EVERY_S` seconds (``$FEWTRANS_PROGRESS_EVERY_S``) with the
count, the rate and the time left, and a last line when a step that printed one ends. A
caller with its own printer (verification reports through a callback) uses
:class:`LogMeter` directly.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

LOG_EVERY_S = 30.0
"""Seconds between two progress lines in a log (the first comes after this long too)."""
EVERY_ENV = "FEWTRANS_PROGRESS_EVERY_S"


class Meter(Protocol):
    """What a long step reports its progress to (tqdm's ``update`` and ``close``)."""

    def update(self, n: int = 1) -> Any:
        """Count ``n`` more units done."""

    def close(self) -> Any:
        """The step ended (finished or not)."""


class NullMeter:
    """No progress shown."""

    def update(self, n: int = 1) -> None:
        """Ignore."""

    def close(self) -> None:
        """Ignore."""


def log_interval() -> float:
    """Seconds between lines: ``$FEWTRANS_PROGRESS_EVERY_S`` (0: every update), else 30."""
    raw = os.environ.get(EVERY_ENV, "").strip()
    try:
        value = float(raw) if raw else LOG_EVERY_S
    except ValueError:
        return LOG_EVERY_S
    return value if math.isfinite(value) and value >= 0 else LOG_EVERY_S


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 4 min``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


class LogMeter:
    """Plain progress lines, each at least ``every_s`` after the previous one.

    Args:
        total: units the step will do (``None``: unknown, no percentage or ETA).
        desc: what the step is (starts each line).
        unit: the unit counted (``episode``, ``config``).
        echo: prints one line.
        every_s: seconds between lines (default :func:`log_interval`).
        clock: the time source (tests pass a fake one).
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str,
        echo: Callable[[str], None],
        every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.desc, self.unit, self.echo = total, desc, unit, echo
        self.every_s = log_interval() if every_s is None else every_s
        self.clock = clock
        self.started = self.last = clock()
        self.done = 0
        self.lines = 0
        self.shown = 0  # ``done`` when the last line was printed

    def line(self) -> str:
        """The progress line for now: count, share, rate, time left."""
        elapsed = self.clock() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        units = f"{self.unit}s" if not self.unit.endswith("s") else self.unit
        if self.total:
            share = f"{self.done}/{self.total} {units} ({100 * self.done / self.total:.0f}%)"
        else:
            share = f"{self.done} {units}"
        speed = (
            f"{rate:.3g} {units}/s" if rate >= 1 or rate == 0 else f"{1 / rate:.3g} s/{self.unit}"
        )
        if self.total and self.done >= self.total:
            return f"{self.desc}: {share} in {duration(elapsed)}, {speed}"
        left = (
            f", about {duration((self.total - self.done) / rate)} left"
            if self.total and rate > 0
            else ""
        )
        return f"{self.desc}: {share}, {speed}{left} ({duration(elapsed)} so far)"

    def update(self, n: int = 1) -> None:
        """Count ``n`` units; print a line if ``every_s`` passed since the last one."""
        self.done += n
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last, self.shown = now, self.done
            self.lines += 1
            self.echo(self.line())

    def close(self) -> None:
        """A last line, if the step printed any and did more since (a short step is silent)."""
        if self.lines and self.done != self.shown:
            self.echo(self.line())
        self.lines, self.shown = 0, self.done


def progress_meter(
    total: int | None,
    desc: str,
    unit: str,
    *,
    enabled: bool = True,
    stream: TextIO | None = None,
) -> Meter:
    """A tqdm bar when ``stream`` (stderr) is a terminal, else a :class:`LogMeter` on it.

    Args:
        total: units the step will do.
        desc: what the step is.
        unit: the unit counted.
        enabled: ``False`` (``--quiet``, ``--json``): no progress at all.
        stream: where progress goes (default: ``sys.stderr``, read at the call).
    """
    out = sys.stderr if stream is None else stream
    if not enabled or total == 0:
        return NullMeter()
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty():
        from tqdm import tqdm

        bar: Meter = tqdm(total=total, desc=desc, unit=unit, file=out)
        return bar

    def echo(text: str) -> None:
        print(text, file=out, flush=True)

    return LogMeter(total, desc, unit, echo)
