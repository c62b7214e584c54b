"""``submission.toml``: who submits what, with which pinned plugins."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.leaderboard.benchmarks import BENCHMARKS
from fewtrans_board.leaderboard.errors import SubmissionError

# Ids become folder names: lowercase, digits, '-' and '.', no '..', no leading/trailing separator.
ID_PATTERN = re.compile(r"^(?!.*\.\.)[a-z0-9](?:[a-z0-9.-]{0,98}[a-z0-9])?$")
PIN_PATTERN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!_-]*)$")
URL_PATTERN = re.compile(r"^https?://[^\s\"'<>]+$")
REQUIRED = ("id", "method", "model", "adapter", "benchmark", "hpe_protocol", "authors", "hardware")
MAX_TEXT = 500

EXAMPLE = """\
[submission]
id = "linear-probe--demo-cnn"          # lowercase, '-' or '.' separated; the store key
method = "Linear probe (FewTrans recipe)"
model = "demo-cnn.digits"
adapter = "linear-probe"
benchmark = "demo"                     # see 'fewtrans-board benchmarks'
hpe_protocol = "fewtrans-paper"
authors = ["Ada Lovelace"]
paper = "https://arxiv.org/abs/0000.00000"
code = "https://github.com/you/fewtrans-yourmethod"
hardware = "2-core CPU"
# supersedes = "older-submission-id"   # the only way to replace an entry
plugins = ["fewtrans-board==0.1.0"]    # every distribution that provided the model or adapter
"""


@dataclass(frozen=True)
class SubmissionMeta:
    """Parsed and checked ``submission.toml``."""

    id: str
    method: str
    model: str
    adapter: str
    benchmark: str
    hpe_protocol: str
    authors: tuple[str, ...]
    hardware: str
    plugins: dict[str, str]
    paper: str = ""
    code: str = ""
    supersedes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "id": self.id,
            "method": self.method,
            "model": self.model,
            "adapter": self.adapter,
            "benchmark": self.benchmark,
            "hpe_protocol": self.hpe_protocol,
            "authors": list(self.authors),
            "hardware": self.hardware,
            "plugins": dict(self.plugins),
            "paper": self.paper,
            "code": self.code,
            "supersedes": self.supersedes,
        }


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or len(value) > MAX_TEXT or any(ord(c) < 32 for c in value):
        raise SubmissionError("meta-bad-value", f"submission.{key} must be a single-line string")
    return value


def parse_meta(text: str) -> SubmissionMeta:
    """Parse and check ``submission.toml`` text.

    Raises:
        SubmissionError: invalid TOML, missing or malformed fields, unpinned plugins.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SubmissionError("bad-toml", f"submission.toml is not valid TOML: {exc}") from exc
    data = raw.get("submission")
    if not isinstance(data, dict):
        raise SubmissionError("meta-missing-field", "submission.toml needs a [submission] table")
    missing = [k for k in REQUIRED if k not in data]
    if missing or "plugins" not in data:
        raise SubmissionError(
            "meta-missing-field",
            f"submission.toml lacks {', '.join(missing + ([] if 'plugins' in data else ['plugins']))}; "
            f"see the example:\n{EXAMPLE}",
        )
    ident = _text(data, "id")
    if not ID_PATTERN.match(ident):
        raise SubmissionError(
            "meta-bad-value",
            f"submission.id {ident!r} must be lowercase letters, digits, '-' and '.'",
        )
    authors = data["authors"]
    if (
        not isinstance(authors, list)
        or not authors
        or not all(isinstance(a, str) and a.strip() for a in authors)
    ):
        raise SubmissionError(
            "meta-bad-value", "submission.authors must be a non-empty list of names"
        )
    for key in ("paper", "code"):
        url = _text(data, key)
        if url and not URL_PATTERN.match(url):
            raise SubmissionError(
                "meta-bad-value", f"submission.{key} must be an http(s) URL, got {url!r}"
            )
    benchmark = _text(data, "benchmark")
    if benchmark not in BENCHMARKS:
        raise SubmissionError(
            "unknown-benchmark", f"benchmark {benchmark!r} is not one of {', '.join(BENCHMARKS)}"
        )
    plugins = data["plugins"]
    if not isinstance(plugins, list) or not plugins:
        raise SubmissionError(
            "unpinned-plugin", "submission.plugins must list 'distribution==version' pins"
        )
    pins: dict[str, str] = {}
    for pin in plugins:
        match = PIN_PATTERN.match(pin) if isinstance(pin, str) else None
        if match is None:
            raise SubmissionError(
                "unpinned-plugin",
                f"plugin {pin!r} is not pinned: write 'distribution==version' (e.g. fewtrans-example==0.1.0)",
            )
        pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    supersedes = _text(data, "supersedes")
    if supersedes and not ID_PATTERN.match(supersedes):
        raise SubmissionError(
            "meta-bad-value", f"submission.supersedes {supersedes!r} is not a submission id"
        )
    return SubmissionMeta(
        id=ident,
        method=_text(data, "method"),
        model=_text(data, "model"),
        adapter=_text(data, "adapter"),
        benchmark=benchmark,
        hpe_protocol=_text(data, "hpe_protocol"),
        authors=tuple(a.strip() for a in authors),
        hardware=_text(data, "hardware"),
        plugins=pins,
        paper=_text(data, "paper"),
        code=_text(data, "code"),
        supersedes=supersedes,
    )
