r"""Per-class text descriptions for CoPrompt, one text file per dataset.

A file ``<dataset>.txt`` holds one description per line as ``<class name><TAB><text>``
(``#`` starts a comment). The package ships ``digits.txt`` (written by hand for the
miniature); files for other datasets go into ``$FEWTRANS_BOARD_DESCRIPTIONS`` (a folder)
and are read in addition. Descriptions are looked up by class name.

Regenerate or import descriptions (LLM output is never fetched at run time)::

    # CoPrompt's released GPT descriptions (gpt_file/<dataset>_prompt.json, a JSON object
    # class name -> list of sentences), or CuPL's, converted to this format:
    python -m fewtrans_board.methods.adapters.clip_prompts.descriptions \\
        import stanford_dogs_prompt.json $FEWTRANS_BOARD_DESCRIPTIONS/clip-stanford-dogs.txt

    # or ask any LLM, per class, CoPrompt's question ("Describe what a {class} looks
    # like", several answers) and write the answers in the same JSON shape first.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from fewtrans_board.core.errors import FewtransError

ENV = "FEWTRANS_BOARD_DESCRIPTIONS"


def parse(lines: Iterable[str], source: str) -> dict[str, list[str]]:
    """Descriptions per class name from ``<class><TAB><text>`` lines.

    Raises:
        FewtransError: a non-comment line without a tab, naming the file and line.
    """
    out: dict[str, list[str]] = {}
    for number, line in enumerate(lines, start=1):
        text = line.rstrip("\n")
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        name, sep, description = text.partition("\t")
        if not sep or not name.strip() or not description.strip():
            raise FewtransError(
                f"{source}:{number}: expected '<class name><TAB><description>', got {text[:60]!r}"
            )
        out.setdefault(name.strip(), []).append(description.strip())
    return out


def _files() -> list[tuple[str, str]]:
    shipped = resources.files(__name__)
    found = [
        (f"{__name__}/{f.name}", f.read_text(encoding="utf-8"))
        for f in shipped.iterdir()
        if f.name.endswith(".txt")
    ]
    folder = os.environ.get(ENV)
    if folder:
        for path in sorted(Path(folder).glob("*.txt")):
            found.append((str(path), path.read_text(encoding="utf-8")))
    return sorted(found)


def load_descriptions() -> dict[str, list[str]]:
    """All shipped and user descriptions, merged by class name (file order: sorted paths)."""
    merged: dict[str, list[str]] = {}
    for source, text in _files():
        for name, items in parse(text.splitlines(), source).items():
            merged.setdefault(name, []).extend(items)
    return merged


def descriptions_for(class_names: Sequence[str], fallback: str | None) -> list[list[str]]:
    """The descriptions of every class.

    Args:
        class_names: the classes.
        fallback: a template (``"a photo of a {}."``) used for classes without
            descriptions, or ``None`` to refuse them.

    Raises:
        FewtransError: classes without descriptions and no fallback, saying how to add them.
    """
    known = load_descriptions()
    missing = [n for n in class_names if n not in known]
    if missing and fallback is None:
        raise FewtransError(
            f"CoPrompt has no descriptions for {len(missing)} classes (e.g. {missing[:3]}); "
            f"put a '<dataset>.txt' file of '<class><TAB><description>' lines in ${ENV} "
            f"(python -m {__name__} import FILE.json OUT.txt converts CoPrompt's GPT files), or "
            "set missing_descriptions='template'"
        )
    return [known.get(n) or [str(fallback).format(n)] for n in class_names]


def import_json(source: Path, target: Path) -> int:
    """Convert a ``{class name: [sentences]}`` JSON file to the text format; return lines written."""
    data = json.loads(source.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise FewtransError(f"{source} is not a JSON object of class name -> list of sentences")
    lines = [
        f"{name.replace('_', ' ')}\t{' '.join(str(s).split())}"
        for name, sentences in data.items()
        for s in (sentences if isinstance(sentences, list) else [sentences])
        if str(s).strip()
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        f"# imported from {source.name}\n" + "\n".join(lines) + "\n", encoding="utf-8"
    )
    return len(lines)


def main(argv: Sequence[str]) -> None:
    """``import SOURCE.json TARGET.txt``."""
    if len(argv) != 3 or argv[0] != "import":
        raise SystemExit(f"usage: python -m {__name__} import SOURCE.json TARGET.txt")
    print(f"wrote {import_json(Path(argv[1]), Path(argv[2]))} descriptions to {argv[2]}")


if __name__ == "__main__":
    main(sys.argv[1:])
