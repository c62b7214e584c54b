"""Site environments share compiled templates, never globals, and recompile an edited one."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from fewtrans_board.website.build import environment
from fewtrans_board.website.template_code import TEMPLATE_CODE


def test_a_template_is_compiled_once_per_process_and_again_when_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled: list[str | None] = []
    real_compile = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):  # type: ignore[no-untyped-def]
        compiled.append(name)
        return real_compile(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    TEMPLATE_CODE.clear()
    (tmp_path / "page.html").write_text("{{ build_date }}: {{ title }}", encoding="utf-8")
    first, second = environment(tmp_path), environment(tmp_path)
    first.globals["build_date"], second.globals["build_date"] = "monday", "tuesday"
    assert first.get_template("page.html").render(title="<a>") == "monday: &lt;a&gt;"
    assert second.get_template("page.html").render(title="b") == "tuesday: b"  # its own globals
    assert compiled == ["page.html"]  # the second environment reused the code
    (tmp_path / "page.html").write_text("{{ title }}!", encoding="utf-8")
    assert environment(tmp_path).get_template("page.html").render(title="c") == "c!"
    assert compiled == ["page.html", "page.html"]  # the edited source compiled again
