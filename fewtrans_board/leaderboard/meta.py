"""``submission.toml``: who submits what, with which pinned plugins."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.core.errors import SubmissionError, shown
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.results.documents import is_name
from fewtrans_board.results.strict_json import text_problem

# Ids become folder names: lowercase, digits, '-' and '.', no '..', no leading/trailing separator.
ID_PATTERN = re.compile(r"^(?!.*\.\.)[a-z0-9](?:[a-z0-9.-]{0,98}[a-z0-9])?\Z")
PIN_PATTERN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!_-]*)\Z")
WHEEL_HASH_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}\Z")
URL_PATTERN = re.compile(r"^https?://[^\s\"'<>]+\Z")
REQUIRED = ("id", "method", "model", "adapter", "benchmark", "hpe_protocol", "authors", "hardware")
FIELDS = (
    *REQUIRED,
    "plugins",
    "wheels",
    "paper",
    "code",
    "supersedes",
    "weights_sha256",
    "weights_source",
)
"""Every key ``[submission]`` may hold; any other is refused (a typo would be ignored)."""
MAX_TEXT = 500
MAX_NAME = 200
MAX_AUTHORS = 100
MAX_PINS = 50
MAX_META_BYTES = 64 << 10

EXAMPLE = """\
[submission]
id = "linear-probe--demo-cnn"          # lowercase, '-' or '.' separated; the store key
method = "Linear probe (FewTrans recipe)"
model = "demo-cnn.digits"
adapter = "linear-probe"
benchmark = "demo"                     # see 'fewtrans-board sub-benchmarks'
hpe_protocol = "fewtrans-paper"
authors = ["Ada Lovelace"]
paper = "https://arxiv.org/abs/0000.00000"
code = "https://github.com/you/fewtrans-yourmethod"
hardware = "2-core CPU"
# supersedes = "older-submission-id"   # the only way to replace an entry
plugins = ["fewtrans-board==0.1.0"]    # every distribution that provided the model or adapter
# CI installs third-party pins from wheels only, checked against these hashes:
# wheels = { "fewtrans-yourmethod" = "sha256:<sha256 of fewtrans_yourmethod-1.0-py3-none-any.whl>" }
# The checkpoint the runs loaded (--weights): verification refuses any other file.
# weights_sha256 = "sha256:<sha256sum of the checkpoint file>"
# weights_source = "https://example.org/yourmodel.safetensors"  # or a hub tag / registry name
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
    wheels: dict[str, str] = field(default_factory=dict)
    paper: str = ""
    code: str = ""
    supersedes: str = ""
    weights_sha256: str = ""
    weights_source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the optional weights fields only where given)."""
        out = {**dataclasses.asdict(self), "authors": list(self.authors)}
        # Entries stored before the weights fields existed keep their index bytes.
        for key in ("weights_sha256", "weights_source"):
            if not out[key]:
                del out[key]
        return out


def _text(data: dict[str, Any], key: str, limit: int = MAX_TEXT, required: bool = False) -> str:
    value = data.get(key, "")
    problem = text_problem(value, limit, empty=not required)
    if problem:
        raise SubmissionError("meta-bad-value", f"submission.toml: submission.{key} {problem}")
    return str(value)


def _name(data: dict[str, Any], key: str) -> str:
    value = _text(data, key, required=True)
    if not is_name(value):
        raise SubmissionError(
            "meta-bad-value",
            f"submission.toml: submission.{key} {shown(value)} is not a registered name "
            "(letters, digits and . _ : + / @ -)",
        )
    return value


def _authors(data: dict[str, Any]) -> tuple[str, ...]:
    authors = data["authors"]
    if not isinstance(authors, list) or not 1 <= len(authors) <= MAX_AUTHORS:
        raise SubmissionError(
            "meta-bad-value",
            f"submission.toml: submission.authors must be a list of 1 to {MAX_AUTHORS} names",
        )
    for i, author in enumerate(authors):
        problem = text_problem(author, MAX_NAME, empty=False)
        if problem:
            raise SubmissionError(
                "meta-bad-value", f"submission.toml: submission.authors[{i}] {problem}"
            )
    return tuple(a.strip() for a in authors)


def _wheels(data: dict[str, Any], pins: dict[str, str]) -> dict[str, str]:
    """``submission.wheels``: the sha256 of the wheel each third-party pin installs from."""
    wheels = data.get("wheels", {})
    if not isinstance(wheels, dict) or len(wheels) > MAX_PINS:
        raise SubmissionError(
            "meta-bad-value",
            "submission.wheels must be a table of 'distribution = \"sha256:<hex>\"'",
        )
    checked: dict[str, str] = {}
    for name, digest in wheels.items():
        distribution = str(name).lower().replace("_", "-")
        if distribution not in pins or distribution == "fewtrans-board":
            raise SubmissionError(
                "meta-bad-value",
                f"submission.wheels names {shown(name)}, which is not a third-party pin",
            )
        if not isinstance(digest, str) or not WHEEL_HASH_PATTERN.match(digest):
            raise SubmissionError(
                "meta-bad-value",
                f"submission.wheels.{distribution} must be 'sha256:' and 64 lowercase hex digits",
            )
        checked[distribution] = digest
    return checked


def _weights(data: dict[str, Any]) -> tuple[str, str]:
    """``submission.weights_sha256`` and ``weights_source``: which checkpoint, from where."""
    digest = _text(data, "weights_sha256", 80)
    if digest and not WHEEL_HASH_PATTERN.match(digest):
        raise SubmissionError(
            "meta-bad-value",
            f"submission.weights_sha256 {shown(digest)} must be 'sha256:' and 64 lowercase hex "
            "digits (the output of 'sha256sum CHECKPOINT')",
        )
    source = _text(data, "weights_source", MAX_NAME)
    url = "://" in source
    if source and not (URL_PATTERN.match(source) if url else is_name(source)):
        raise SubmissionError(
            "meta-bad-value",
            f"submission.weights_source {shown(source)} must be an http(s) URL, a hub tag "
            "(e.g. timm:resnet18.a1_in1k) or a registry name",
        )
    if source and not digest:
        raise SubmissionError(
            "meta-bad-value",
            "submission.weights_source is given without submission.weights_sha256; add the "
            "checkpoint's 'sha256:<hex>' so verification can check the file it is given",
        )
    return digest, source


def _pins(data: dict[str, Any]) -> dict[str, str]:
    """``submission.plugins``: the version pinned for each distribution (names normalised)."""
    plugins = data["plugins"]
    if not isinstance(plugins, list) or not 1 <= len(plugins) <= MAX_PINS:
        raise SubmissionError(
            "unpinned-plugin",
            f"submission.plugins must list 1 to {MAX_PINS} 'distribution==version' pins",
        )
    pins: dict[str, str] = {}
    for pin in plugins:
        match = PIN_PATTERN.match(pin) if isinstance(pin, str) and len(pin) <= MAX_NAME else None
        if match is None:
            raise SubmissionError(
                "unpinned-plugin",
                f"plugin {shown(pin)} is not pinned: write 'distribution==version' "
                "(e.g. fewtrans-example==0.1.0)",
            )
        distribution = match.group(1).lower().replace("_", "-")
        if distribution in pins and pins[distribution] != match.group(2):
            raise SubmissionError(
                "unpinned-plugin", f"submission.plugins pins {distribution} twice"
            )
        pins[distribution] = match.group(2)
    return pins


def read_meta(data: bytes) -> SubmissionMeta:
    """Decode and check the bytes of ``submission.toml`` (UTF-8 TOML, bounded size).

    Raises:
        SubmissionError: too large, not UTF-8, not TOML, or any fault of :func:`parse_meta`.
    """
    if len(data) > MAX_META_BYTES:
        raise SubmissionError(
            "too-large", f"submission.toml is {len(data)} bytes (limit {MAX_META_BYTES})"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SubmissionError(
            "bad-toml", f"submission.toml is not UTF-8 text (byte {exc.start})"
        ) from exc
    return parse_meta(text)


def parse_meta(text: str) -> SubmissionMeta:
    """Parse and check ``submission.toml`` text.

    Raises:
        SubmissionError: invalid TOML, missing, unknown or malformed fields, unpinned plugins.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SubmissionError("bad-toml", f"submission.toml is not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise SubmissionError("bad-toml", "submission.toml is nested too deeply to read") from exc
    data = raw.get("submission")
    if not isinstance(data, dict):
        raise SubmissionError("meta-missing-field", "submission.toml needs a [submission] table")
    others = sorted(set(raw) - {"submission"}) + sorted(set(data) - set(FIELDS))
    if others:
        raise SubmissionError(
            "meta-unknown-field",
            f"submission.toml: {shown(others[0])} is not a submission field (known: "
            f"{', '.join(FIELDS)}); see 'fewtrans-board submission template'",
        )
    missing = [k for k in (*REQUIRED, "plugins") if k not in data]
    if missing:
        raise SubmissionError(
            "meta-missing-field",
            f"submission.toml lacks {', '.join(missing)}; see 'fewtrans-board submission "
            "template' for an example",
        )
    ident = _text(data, "id", required=True)
    if not ID_PATTERN.match(ident):
        raise SubmissionError(
            "meta-bad-value",
            f"submission.id {shown(ident)} must be lowercase letters, digits, '-' and '.'",
        )
    authors = _authors(data)
    for key in ("paper", "code"):
        url = _text(data, key)
        if url and not URL_PATTERN.match(url):
            raise SubmissionError(
                "meta-bad-value", f"submission.{key} must be an http(s) URL, got {shown(url)}"
            )
    benchmark = _text(data, "benchmark", required=True)
    if benchmark not in SUB_BENCHMARKS:
        raise SubmissionError(
            "unknown-benchmark",
            f"benchmark {shown(benchmark)} is not one of {', '.join(SUB_BENCHMARKS)}",
        )
    pins = _pins(data)
    wheels = _wheels(data, pins)
    supersedes = _text(data, "supersedes")
    if supersedes and not ID_PATTERN.match(supersedes):
        raise SubmissionError(
            "meta-bad-value", f"submission.supersedes {shown(supersedes)} is not a submission id"
        )
    weights_sha256, weights_source = _weights(data)
    return SubmissionMeta(
        id=ident,
        method=_text(data, "method", MAX_NAME, required=True),
        model=_name(data, "model"),
        adapter=_name(data, "adapter"),
        benchmark=benchmark,
        hpe_protocol=_name(data, "hpe_protocol"),
        authors=authors,
        hardware=_text(data, "hardware", MAX_NAME, required=True),
        plugins=pins,
        wheels=wheels,
        paper=_text(data, "paper"),
        code=_text(data, "code"),
        supersedes=supersedes,
        weights_sha256=weights_sha256,
        weights_source=weights_source,
    )
