"""Calling plugin code: an exception it raises becomes a short error that says where.

A model loader, ``fit`` or ``predict`` that raises ``ZeroDivisionError`` deep inside a
plugin should not greet its author with a 40-line traceback through fewtrans-board's
runner. :func:`plugin_code` turns it into a :class:`PluginCallError` naming the plugin
object, the call, the episode and configuration, the original error and the plugin's line;
the CLI prints the full traceback only under ``--debug``.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sysconfig
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from fewtrans_board.core.errors import FewtransError

PACKAGE_DIR = Path(__file__).resolve().parent


class PluginCallError(FewtransError):
    """Plugin code raised an exception that is not a :class:`FewtransError`."""


@contextmanager
def plugin_code(subject: str, call: str, context: str = "", owner: object = None) -> Iterator[None]:
    """Run plugin code, turning its exceptions into a :class:`PluginCallError`.

    A :class:`FewtransError` passes unchanged: it already is a message for users.

    Args:
        subject: what is called, e.g. ``"adapter 'ridge'"``.
        call: the method or step, e.g. ``"fit"``, ``"predict"``, ``"loading"``.
        context: where in the run, e.g. ``"episode 3 (stream 604), configuration 2 {...}"``.
        owner: the plugin object (class or function) whose package the message should
            point into and whose distribution it names.

    Raises:
        PluginCallError: the plugin raised anything else.
    """
    try:
        yield
    except FewtransError:
        raise
    except Exception as exc:
        raise PluginCallError(describe_failure(subject, call, context, exc, owner)) from exc


def describe_failure(
    subject: str, call: str, context: str, exc: BaseException, owner: object = None
) -> str:
    """A few lines: what failed during which call, the original error, and the plugin line."""
    if owner is not None:
        subject = f"{subject} ({origin(owner)})"
    lines = [f"{subject} raised {type(exc).__name__} in {call}: {_first_line(exc)}"]
    context = context.removeprefix(f"{subject.split(' (')[0]}, ")
    if context:
        lines.append(f"  {context}")
    user, innermost = _frames(exc.__traceback__, _package_dir(owner))
    if user is not None:
        lines.append(f"  at {user.filename}:{user.lineno}, in {user.name}")
    if innermost is not None and innermost is not user:
        lines.append(f"  (raised in {innermost.filename}:{innermost.lineno}, in {innermost.name})")
    return "\n".join(lines)


def origin(obj: object) -> str:
    """``"distribution version"`` of the installed distribution that ships ``obj``'s module.

    Looked up only when something failed (it scans the installed distributions).
    """
    module = str(getattr(obj, "__module__", None) or type(obj).__module__)
    top = module.partition(".")[0]
    try:
        names = importlib.metadata.packages_distributions().get(top) or []
    except Exception:  # a broken installation must not hide the error being reported
        names = []
    for name in names:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"module {module}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _package_dir(owner: object) -> str | None:
    if owner is None:
        return None
    try:
        return str(Path(inspect.getfile(owner)).resolve().parent)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return None


def _frames(
    tb: TracebackType | None, package: str | None
) -> tuple[traceback.FrameSummary | None, traceback.FrameSummary | None]:
    """``(innermost frame of the plugin, innermost frame)``.

    The plugin's frame is the innermost one in ``package`` (the owner's folder), else the
    innermost one outside installed libraries and fewtrans-board itself.
    """
    frames = traceback.extract_tb(tb)
    if not frames:
        return None, None
    if package is not None:
        for frame in reversed(frames):
            if str(Path(frame.filename).resolve()).startswith(package):
                return frame, frames[-1]
    paths = sysconfig.get_paths()
    libraries = [paths[k] for k in ("purelib", "platlib", "stdlib") if k in paths]
    libraries.append(str(PACKAGE_DIR))
    for frame in reversed(frames):
        if not any(frame.filename.startswith(root) for root in libraries):
            return frame, frames[-1]
    return None, frames[-1]


def accepts_keyword(function: object, name: str) -> bool:
    """Whether ``function(..., name=...)`` is a valid call: it declares ``name`` as a parameter.

    How the core passes a newer, optional input (an adapter's ``fit_many(..., options=)``,
    a model loader's ``registry=``) to plugin code only where the plugin declared it, so
    plugins written against the older signature keep working. A parameter merely absorbed
    by ``**kwargs`` does not count; a signature that cannot be read counts as "no".

    Args:
        function: a callable (function, bound method, ``functools.partial`` ...).
        name: the keyword.
    """
    if not callable(function):
        return False
    try:
        parameter = inspect.signature(function).parameters.get(name)
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
