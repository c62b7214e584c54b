"""Embeddable badges: an SVG per ranked entry at ``badges/<entry id>.svg``.

README.md ("Downloads, the Python API and badges") shows what a badge says: the entry's
headline as its benchmark page ranks it, within its HPE protocol. Transductive entries show
their rank among the transductive ones; a superseded entry's badge says so (its path stays
valid). Method names are untrusted text: everything written into the SVG is XML-escaped
(characters XML cannot hold are dropped), so the file is well-formed whatever the name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from markupsafe import escape

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.text import text_width
from fewtrans_board.website.model import MethodView, SiteData

LABEL = "fewtrans-board"
SITE_URL_ENV = "FEWTRANS_SITE_URL"
URL = re.compile(r"^https?://[^\s\"'<>()\[\]\\`]+\Z")
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
FONT_PX = 11
"""The badge's font size; its texts are as wide as the plots' text-width model says."""
PADDING = 10


class SiteUrlError(FewtransError):
    """A site address that is not a plain http(s) URL."""


def site_url(base_url: str | None) -> str:
    """The site's address for badge Markdown, ending in ``/`` (``""``: links stay relative).

    Args:
        base_url: the address; ``None`` reads ``$FEWTRANS_SITE_URL`` (unset: relative).

    Raises:
        SiteUrlError: not an http(s) URL without spaces, quotes or brackets.
    """
    url = os.environ.get(SITE_URL_ENV, "") if base_url is None else base_url
    url = url.strip()
    if not url:
        return ""
    if not URL.match(url):
        raise SiteUrlError(
            f"the site address {url[:100]!r} is not an http(s) URL (no spaces, quotes or brackets)"
        )
    return url if url.endswith("/") else url + "/"


def _xml(text: str) -> str:
    """``text`` escaped for XML text and attributes."""
    return str(escape(NOT_XML.sub("", text)))


@dataclass(frozen=True)
class Badge:
    """A ranked entry's badge.

    Attributes:
        method: the entry.
        message: the badge's right-hand text (numbers, rank, status: ``re-run`` or
            ``legacy check``).
        detail: what the numbers are (the SVG's tooltip adds it).
    """

    method: MethodView
    message: str
    detail: str

    @property
    def path(self) -> str:
        """The badge's path in the site: ``badges/<entry id>.svg``."""
        return f"badges/{self.method.id}.svg"

    def markdown(self, base: str = "") -> str:
        """The Markdown that embeds the badge, linked to the method page.

        Args:
            base: the site's address (:func:`site_url`); ``""`` gives relative links.
        """
        return f"[![{LABEL}]({base}{self.path})]({base}method-{self.method.id}.html)"

    def svg(self) -> str:
        """The badge as a standalone, well-formed SVG document."""
        label_width = round(text_width(LABEL, FONT_PX) + 2 * PADDING)
        message_width = round(text_width(self.message, FONT_PX) + 2 * PADDING)
        width = label_width + message_width
        meta = self.method.meta
        title = (
            f"{LABEL}: {self.method.label} on {meta.benchmark} "
            f"(entry {self.method.id}): {self.message}. {self.detail}"
        )
        colour = "#2e7d32" if self.method.superseded_by is None else "#9e9e9e"
        message, aria = _xml(self.message), _xml(f"{LABEL}: {self.message}")
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" '
            f'role="img" aria-label="{aria}">'
            f"<title>{_xml(title)}</title>"
            '<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" '
            'stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>'
            f'<clipPath id="r"><rect width="{width}" height="20" rx="3" fill="#fff"/></clipPath>'
            f'<g clip-path="url(#r)"><rect width="{label_width}" height="20" fill="#555"/>'
            f'<rect x="{label_width}" width="{message_width}" height="20" fill="{colour}"/>'
            f'<rect width="{width}" height="20" fill="url(#s)"/></g>'
            '<g fill="#fff" text-anchor="middle" '
            f'font-family="Verdana,Geneva,DejaVu Sans,sans-serif" font-size="{FONT_PX}">'
            f'<text x="{label_width / 2:g}" y="14">{LABEL}</text>'
            f'<text x="{label_width + message_width / 2:g}" y="14">{message}</text></g>'
            "</svg>\n"
        )


def _headlines(data: SiteData) -> dict[str, tuple[str, str]]:
    """``{entry id: (numbers and rank, what they are)}`` from the protocol sections' tables."""
    out: dict[str, tuple[str, str]] = {}
    for view in data.benchmarks:
        for section in view.sections:
            where = f"{view.benchmark.title}, HPE protocol {section.protocol}"
            if section.shots:
                rows = section.shots.get("hpe", [])
                for row in rows:
                    out[row.method.id] = (
                        f"{row.average.average:.1f} ± {row.average.average_std:.1f}, "
                        f"rank {row.rank} of {len(rows)}",
                        f"Average over shots and datasets ± std over seeds ({where})",
                    )
            elif section.base_novel:
                rows_bn = section.base_novel.get("hpe", [])
                for bn in rows_bn:
                    h = bn.harmonic
                    out[bn.method.id] = (
                        f"HM {h.estimate:.1f} [{h.low:.1f}, {h.high:.1f}], "
                        f"rank {bn.rank} of {len(rows_bn)}",
                        "Harmonic mean of the average base and novel accuracy with its 95% "
                        f"bootstrap interval ({where})",
                    )
            else:
                table = section.tables.get("hpe", [])
                for t in table:
                    a, (_, low, high) = t.average, t.rank
                    out[t.method.id] = (
                        f"{a.estimate:.1f} [{a.low:.1f}, {a.high:.1f}], "
                        f"rank {low}–{high} of {len(table)}",
                        "Average over datasets with its 95% bootstrap interval and the 95% "
                        f"bootstrap rank interval ({where})",
                    )
            for t in section.transductive:
                a, (_, low, high) = t.average, t.rank
                out[t.method.id] = (
                    f"{a.estimate:.1f} [{a.low:.1f}, {a.high:.1f}], rank {low}–{high} of "
                    f"{len(section.transductive)} transductive",
                    "Average over datasets with its 95% bootstrap interval; ranked among the "
                    f"transductive entries ({where})",
                )
    return out


def badges(data: SiteData) -> dict[str, Badge]:
    """A badge for every ranked stored entry (re-run or legacy check), by entry id.

    The badge ends with the entry's status word and its tooltip says what the status
    means (with a re-run's date, sample and mode), from
    :mod:`~fewtrans_board.leaderboard.status` like every other surface.
    """
    headlines = _headlines(data)
    out = {}
    for method in data.methods:
        standing = method.standing
        if standing is None or not standing.ranked:
            continue
        if method.superseded_by is not None:
            message, detail = "superseded", f"Superseded by entry {method.superseded_by}"
        else:
            message, detail = headlines.get(method.id, ("", "Not ranked"))
        message = f"{message}, {standing.kind}" if message else standing.kind
        detail = f"{detail}. {standing.sentence}."
        out[method.id] = Badge(method, message, detail)
    return out
