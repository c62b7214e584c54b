"""Hostile and careless bundles: every one is refused in one line, or accepted and shown.

A corpus names each kind of damage the intake once turned into a traceback or wrongly
accepted (lying zip headers, encrypted members, TOML that is not UTF-8, stray files,
authors without limits, renamed columns, a dataset name that is not the frozen
manifest's ...). The property-based test then mutates a valid bundle at random
(structure, names, bytes, TOML/JSON type swaps, Arrow schema and row changes): each mutant
must be refused with a ``SubmissionError`` line and leave the store byte-identical, or be
accepted and then re-validate from the store and build the site.
``FEWTRANS_FUZZ_EXAMPLES`` sets the number of mutants (CI: a few dozen).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.intake import (
    Verification,
    add_bundle,
    check_entry,
    validate_bundle,
)
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.website.build import build_site
from tests.adversarial.conftest import FIXED, VARIED, Board, ok, run_cli
from tests.bundle_mutations import (
    Pristine,
    bundle_mutants,
    read_shard_bytes,
    toml_document,
    write_shard_bytes,
)
from tests.conftest import file_digests
from tests.faults import FUZZ, TALLY
from tests.zip_members import Entry, patch, read_entries, write_entries

UNVERIFIED = Verification(enabled=False)
"""This corpus tests intake and storage; verification has its own red-team suite."""

CODE = re.compile(r"\[([a-z]+(?:-[a-z]+)*)\] ")
IDENT = "fuzz--redteam"


@pytest.fixture(scope="module")
def intake(board: Board, centre: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A valid two-manifest bundle (two shards per run) and a store holding another entry."""
    for manifest, out in ((VARIED, "fz-varied"), (FIXED, "fz-fixed")):
        ok(
            run_cli(
                board.pm,
                [
                    *("evaluate", "--model", "demo-cnn.digits", "--adapter", "linear-probe"),
                    *("--manifest", board.manifest(manifest), "--hpe", "fewtrans-reference"),
                    *("--centre", centre, "--out", board.work / out, "--shards", "2"),
                    *("--quiet", "--device", "cpu", "--threads", "1"),
                ],
            )
        )
    base = board.pack("base--redteam", "linear-probe", ["fz-varied", "fz-fixed"])
    bundle = board.pack(IDENT, "linear-probe", ["fz-varied", "fz-fixed"])
    pristine = tmp_path_factory.mktemp("intake") / "leaderboard"
    shutil.copytree(board.store / "manifests", pristine / "manifests")
    add_bundle(base, LeaderboardStore(pristine), UNVERIFIED)
    scores = validate_bundle(bundle, LeaderboardStore(pristine)).runs
    return {"store": pristine, "bundle": Pristine(bundle.read_bytes()), "scores": scores}


def attempt(intake: dict[str, Any], data: bytes, work: Path) -> SubmissionError | None:
    """Add a bundle to a fresh copy of the store; check the outcome's guarantees.

    Returns:
        The refusal, or ``None`` when the bundle was accepted (and then re-validated from
        the store and shown on a freshly built site).
    """
    store_dir = work / "leaderboard"
    if not store_dir.exists():  # a refusal leaves the copy as it was (checked below)
        shutil.copytree(intake["store"], store_dir)
    bundle = work / "bundle.zip"
    bundle.write_bytes(data)
    before = file_digests(store_dir)
    store = LeaderboardStore(store_dir)
    try:
        added = add_bundle(bundle, store, UNVERIFIED)
    except SubmissionError as exc:
        message = str(exc)
        match = CODE.match(message)
        assert match and match.group(1) == exc.code, message
        assert "\n" not in message and len(message) <= 1100, message
        assert exc.code not in ("unexpected-fault", "cannot-check"), message  # name every fault
        assert file_digests(store_dir) == before, f"refused ({message}) but the store changed"
        return exc
    ident = added.validation.meta.id
    shutil.move(store_dir, work / "accepted")  # the next attempt starts from a fresh copy
    store_dir = work / "accepted"
    assert added.validation.runs == intake["scores"], "an accepted mutant scores differently"
    changed = {k for k, v in file_digests(store_dir).items() if before.get(k) != v}
    assert all(
        k == "index.json" or k.startswith((f"submissions/{ident}/", f"results/{ident}/", "blobs/"))
        for k in changed
    ), changed
    assert not any(k.startswith("blobs/") and k in before for k in changed)  # blobs: added only
    check_entry(ident, LeaderboardStore(store_dir), UNVERIFIED)
    site = work / "site"
    shutil.rmtree(site, ignore_errors=True)
    pages = build_site(store_dir, site)
    assert (site / f"method-{ident}.html") in pages
    shutil.rmtree(store_dir)
    return None


# --- the corpus ------------------------------------------------------------------------------


def edit(name: str, change: Callable[[bytes], bytes]) -> Callable[[list[Entry]], list[Entry]]:
    def apply(entries: list[Entry]) -> list[Entry]:
        return [
            Entry(e.name, change(e.data), e.method, e.mode) if e.name == name else e
            for e in entries
        ]

    return apply


def meta_edit(**values: Any) -> Callable[[list[Entry]], list[Entry]]:
    import tomllib

    def change(data: bytes) -> bytes:
        tables = tomllib.loads(data.decode())
        tables["submission"].update(values)
        return toml_document(tables)

    return edit("submission.toml", change)


def first_shard(entries: list[Entry]) -> str:
    return sorted(e.name for e in entries if e.name.endswith(".parquet"))[0]


def shard_edit(
    change: Callable[[pa.Table, dict[str, Any]], tuple[pa.Table, dict[str, Any]]],
    every: bool = False,
) -> Callable[[list[Entry]], list[Entry]]:
    """Edit the first shard (or every shard) and re-seal it, as an adversary would."""

    def apply(entries: list[Entry]) -> list[Entry]:
        target = first_shard(entries)
        out = []
        for e in entries:
            if e.name == target or (every and e.name.endswith(".parquet")):
                table, meta = change(*read_shard_bytes(e.data))
                e = Entry(e.name, write_shard_bytes(table, meta, reseal=True), e.method, e.mode)
            out.append(e)
        return out

    return apply


def run_json_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[list[Entry]], list[Entry]]:
    from fewtrans_board.results.row_schema import run_id_of

    def rewrite(data: bytes) -> bytes:
        record = json.loads(data)
        change(record)
        record["run_id"] = run_id_of(record["identity"])
        return json.dumps(record).encode()

    def apply(entries: list[Entry]) -> list[Entry]:
        name = sorted(e.name for e in entries if e.name.endswith("run.json"))[0]
        return edit(name, rewrite)(entries)

    return apply


def retype(name: str, target: pa.DataType) -> Callable[[pa.Table, dict[str, Any]], Any]:
    def change(table: pa.Table, meta: dict[str, Any]) -> tuple[pa.Table, dict[str, Any]]:
        index = table.column_names.index(name)
        column = table.column(name).combine_chunks()
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        array = column.cast(target)
        return table.set_column(index, pa.field(name, target), array), meta

    return change


def with_meta(
    change: Callable[[dict[str, Any]], None],
) -> Callable[[pa.Table, dict[str, Any]], Any]:
    def apply(table: pa.Table, meta: dict[str, Any]) -> tuple[pa.Table, dict[str, Any]]:
        change(meta)
        return table, meta

    return apply


def member_index(data: bytes, suffix: str) -> int:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return next(i for i, info in enumerate(z.infolist()) if info.filename.endswith(suffix))


def lying_size(data: bytes) -> bytes:
    i = member_index(data, "submission.toml")
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        size = z.infolist()[i].file_size
    return patch(data, i, "size", size + 7, "both")


def header_disagrees(data: bytes) -> bytes:
    return patch(data, member_index(data, "submission.toml"), "method", 0, "local")


def bad_crc(data: bytes) -> bytes:
    i = member_index(data, "run.json")
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        crc = z.infolist()[i].CRC
    return patch(data, i, "crc", crc ^ 0xFF, "both")


def encrypted(data: bytes) -> bytes:
    return patch(data, member_index(data, "submission.toml"), "flags", 1, "both")


def bzip2(data: bytes) -> bytes:
    return patch(data, member_index(data, "submission.toml"), "method", 12, "both")


def drop_author_limit(n: int) -> Callable[[list[Entry]], list[Entry]]:
    return meta_edit(authors=[f"Author {i}" for i in range(n)])


CORPUS: list[tuple[str, str, Callable[[list[Entry]], list[Entry]] | None, Callable[[bytes], bytes] | None]] = [
    ("lying-size", "bad-zip-member", None, lying_size),
    ("crc-error", "bad-zip-member", None, bad_crc),
    ("local-header-disagrees", "header-mismatch", None, header_disagrees),
    ("encrypted-member", "encrypted-member", None, encrypted),
    ("bzip2-member", "unsupported-compression", None, bzip2),
    ("file-and-folder", "duplicate-entry", lambda es: [*es, Entry("submission.toml/", b"")], None),
    ("folder-as-file", "forbidden-file", lambda es: [*es, Entry("results/fz-varied/shards", b"")], None),
    ("toml-not-utf8", "bad-toml", edit("submission.toml", lambda b: b.replace(b"Red Team", b"R\xe9d")), None),
    ("toml-nested", "bad-toml", edit("submission.toml", lambda b: b + b"x = " + b"[" * 5000 + b"]" * 5000), None),
    ("run-json-missing-key", "bad-run-meta", run_json_edit(lambda r: r["identity"].pop("shards")), None),
    ("provenance-missing-key", "bad-run-meta", shard_edit(with_meta(lambda m: m["model"].pop("name"))), None),
    ("display-field-missing", "bad-run-meta", shard_edit(with_meta(lambda m: m.pop("environment")), every=True), None),
    ("centre-search-a-list", "bad-centre-search", edit("centre-search.json", lambda b: b"[1, 2]"), None),
    ("centre-search-nan", "bad-centre-search", edit("centre-search.json", lambda b: b.replace(b'"episodes": 2', b'"episodes": NaN')), None),
    ("logits-wrong-type", "corrupt-shard", shard_edit(retype("logits", pa.list_(pa.float32()))), None),
    ("episodes-as-strings", "corrupt-shard", shard_edit(retype("episode", pa.string())), None),
    ("accuracy-as-strings", "corrupt-shard", shard_edit(retype("accuracy", pa.string())), None),
    ("stray-50mb-notes", "outside-layout", lambda es: [*es, Entry("notes.json", b" " * (50 << 20))], None),
    ("junk-files", "outside-layout", lambda es: es + [Entry(f"results/junk/{i}.json", b"{}") for i in range(3000)], None),
    ("dot-slash-twin", "duplicate-entry", lambda es: [*es, Entry("./submission.toml", es[0].data)], None),
    ("case-twin", "duplicate-entry", lambda es: [*es, Entry("SUBMISSION.TOML", b"")], None),
    ("author-2mb", "too-large", meta_edit(authors=["x" * (2 << 20)]), None),
    ("author-2kb", "meta-bad-value", meta_edit(authors=["x" * 2000]), None),
    ("100k-authors", "too-large", drop_author_limit(100_000), None),
    ("200-authors", "meta-bad-value", drop_author_limit(200), None),
    ("author-escape", "meta-bad-value", meta_edit(authors=["Eve\x1b[2J"]), None),
    ("author-newline", "meta-bad-value", meta_edit(authors=["Eve\nMallory"]), None),
    ("method-bidi", "meta-bad-value", meta_edit(method="abc\u202edcba"), None),
    ("unknown-field", "meta-unknown-field", meta_edit(suppersedes="x"), None),
    ("extra-column", "corrupt-shard", shard_edit(lambda t, m: (t.append_column("extra", pa.nulls(t.num_rows, pa.int8())), m)), None),
    ("renamed-column", "corrupt-shard", shard_edit(lambda t, m: (t.rename_columns(["acc" if c == "accuracy" else c for c in t.column_names]), m)), None),
    ("dataset-renamed", "dataset-mismatch", shard_edit(with_meta(lambda m: m["manifest"].update(dataset="eurosat")), every=True), None),
    ("unknown-kind", "bad-rows", shard_edit(lambda t, m: (t.set_column(t.column_names.index("kind"), "kind", pa.array(["junk"] * t.num_rows).dictionary_encode()), m)), None),
    ("shards-disagree", "bad-run-meta", shard_edit(with_meta(lambda m: m["model"].update(weights_id="sha256:0"))), None),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_is_refused_in_one_line(
    intake: dict[str, Any], case: tuple[str, str, Any, Any], tmp_path: Path
) -> None:
    name, code, member_edit, zip_edit = case
    entries = read_entries(intake["bundle"])
    data = write_entries(member_edit(entries) if member_edit else entries)
    data = zip_edit(data) if zip_edit else data
    refusal = attempt(intake, data, tmp_path)
    assert refusal is not None, f"{name} was accepted"
    assert refusal.code == code, (name, str(refusal))


@pytest.mark.slow
def test_the_pristine_bundle_and_its_rezip_are_accepted(
    intake: dict[str, Any], tmp_path: Path
) -> None:
    assert attempt(intake, intake["bundle"], tmp_path) is None
    assert attempt(intake, write_entries(read_entries(intake["bundle"])), tmp_path) is None


@pytest.fixture(scope="module")
def fuzz_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One working folder for every mutant (a store copy survives refusals unchanged)."""
    return tmp_path_factory.mktemp("mutants")


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_random_mutants_are_refused_or_shown(
    intake: dict[str, Any], fuzz_work: Path, data: st.DataObject
) -> None:
    kinds, mutant = data.draw(bundle_mutants(intake["bundle"]), label="mutant")
    try:
        refusal = attempt(intake, mutant, fuzz_work)
    except BaseException:
        shutil.rmtree(fuzz_work / "leaderboard", ignore_errors=True)
        shutil.rmtree(fuzz_work / "accepted", ignore_errors=True)
        for target in ["bundle mutants", *(f"bundle {kind}" for kind in kinds)]:
            TALLY.add(target, "failed")  # a traceback, or a broken guarantee
        raise
    outcome = "accepted" if refusal is None else "refused"
    for target in ["bundle mutants", *(f"bundle {kind}" for kind in kinds)]:
        TALLY.add(target, outcome)


# --- through the command line ------------------------------------------------------------


def cli_json(args: list[Any]) -> tuple[int, dict[str, Any]]:
    from fewtrans_board.registry.manager import get_plugin_manager

    result = run_cli(get_plugin_manager(entry_points=False), [*args, "--json"])
    return result.exit_code, json.loads(result.output)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["crc-error", "toml-nested", "display-field-missing"])
def test_commands_refuse_with_one_json_line(
    intake: dict[str, Any], name: str, tmp_path: Path
) -> None:
    _, code, member_edit, zip_edit = next(c for c in CORPUS if c[0] == name)
    entries = read_entries(intake["bundle"])
    data = write_entries(member_edit(entries) if member_edit else entries)
    bundle = tmp_path / "bundle.zip"
    bundle.write_bytes(zip_edit(data) if zip_edit else data)
    store = tmp_path / "leaderboard"
    shutil.copytree(intake["store"], store)
    before = file_digests(store)
    for command in (["submission", "validate"], ["leaderboard", "add", "--unsafe-no-verify"]):
        status, report = cli_json([*command, bundle, "--leaderboard", store])
        assert status == 1 and report["code"] == code, report
        assert "\n" not in report["error"]
    assert file_digests(store) == before


# --- a damaged store: rebuild and site build name the entry and stop -----------------------


def _first(store: Path, pattern: str) -> Path:
    return sorted(store.glob(pattern))[0]


STORE_DAMAGE: list[tuple[str, str, Callable[[Path], None]]] = [
    ("status-not-json", "bad-status", lambda s: (s / "submissions/base--redteam/status.json").write_text("{")),
    ("status-claims-more", "bad-status", lambda s: (s / "submissions/base--redteam/status.json").write_text('{"status": "gold"}')),
    ("toml-not-utf8", "bad-toml", lambda s: (s / "submissions/base--redteam/submission.toml").write_bytes(b"\xff\xfe")),
    ("shard-flipped", "corrupt-shard", lambda s: _flip(_first(s, "results/base--redteam/*/shards/*.parquet"))),
    ("stray-result-file", "outside-layout", lambda s: (s / "results/base--redteam/notes.json").write_text("{}")),
    ("stray-entry-file", "outside-layout", lambda s: (s / "submissions/base--redteam/notes.txt").write_text("")),
    ("foreign-folder", "bad-store-entry", lambda s: (s / "submissions/not-an-entry").mkdir()),
    ("run-json-gone", "no-results", lambda s: _first(s, "results/base--redteam/*/run.json").unlink()),
    ("id-mismatch", "bad-store-entry", lambda s: _rename_entry(s)),
    ("supersedes-nothing", "bad-store-entry", lambda s: _append_meta(s, 'supersedes = "ghost"\n')),
]  # fmt: skip


def _append_meta(store: Path, line: str) -> None:
    with (store / "submissions/base--redteam/submission.toml").open("a") as handle:
        handle.write(line)


def _flip(path: Path) -> None:
    """Flip a byte in the middle of the logits column's pages (the data, not statistics).

    A flip in a page header's statistics or in padding leaves the decoded table, and so
    every number, unchanged (measured: about 8% of positions in a shard); one in a data
    page changes content, which page checksums and the shard checksum refuse.
    """
    import pyarrow.parquet as pq

    chunk = pq.ParquetFile(path).metadata.row_group(0)
    logits = next(
        chunk.column(i)
        for i in range(chunk.num_columns)
        if chunk.column(i).path_in_schema.startswith("logits")
    )
    data = bytearray(path.read_bytes())
    data[logits.data_page_offset + logits.total_compressed_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _rename_entry(store: Path) -> None:
    for kind in ("submissions", "results"):
        (store / kind / "base--redteam").rename(store / kind / "other--redteam")


@pytest.mark.parametrize("case", STORE_DAMAGE, ids=[c[0] for c in STORE_DAMAGE])
def test_rebuild_and_site_build_name_a_damaged_entry(
    intake: dict[str, Any], case: tuple[str, str, Callable[[Path], None]], tmp_path: Path
) -> None:
    from fewtrans_board.registry.manager import get_plugin_manager

    _, code, damage = case
    store = tmp_path / "leaderboard"
    shutil.copytree(intake["store"], store)
    damage(store)
    pm = get_plugin_manager(entry_points=False)
    for args in (
        ["leaderboard", "rebuild", "--leaderboard", store],
        ["site", "build", "--leaderboard", store, "--out", tmp_path / "site"],
    ):
        result = run_cli(pm, args)  # an exception escaping would fail the test here
        assert result.exit_code == 1, result.output
        line = result.output.strip()
        assert line.startswith(f"Error: [{code}] ") and "\n" not in line, line
        if code != "bad-store-entry" or "not-an-entry" not in line:
            assert "redteam" in line, line


def test_adding_to_a_damaged_store_changes_nothing(intake: dict[str, Any], tmp_path: Path) -> None:
    store = tmp_path / "leaderboard"
    shutil.copytree(intake["store"], store)
    (store / "results/base--redteam/notes.json").write_text("{}")
    before = file_digests(store)
    (tmp_path / "b.zip").write_bytes(intake["bundle"])
    with pytest.raises(SubmissionError, match=r"\[outside-layout\] stored entry base--redteam"):
        add_bundle(tmp_path / "b.zip", LeaderboardStore(store), UNVERIFIED)
    assert file_digests(store) == before


def test_an_entry_is_superseded_once(intake: dict[str, Any], tmp_path: Path) -> None:
    store_dir = tmp_path / "leaderboard"
    shutil.copytree(intake["store"], store_dir)
    entries = read_entries(intake["bundle"])
    for n, expected in ((1, None), (2, "meta-bad-value")):
        newer = meta_edit(id=f"newer-{n}--redteam", supersedes="base--redteam")(entries)
        (tmp_path / "b.zip").write_bytes(write_entries(newer))
        before = file_digests(store_dir)
        try:
            add_bundle(tmp_path / "b.zip", LeaderboardStore(store_dir), UNVERIFIED)
        except SubmissionError as exc:
            assert exc.code == expected and "already superseded by 'newer-1--redteam'" in str(exc)
            assert file_digests(store_dir) == before
        else:
            assert expected is None
    index = json.loads((store_dir / "index.json").read_text())
    base = next(e for e in index["submissions"] if e["id"] == "base--redteam")
    assert base["superseded_by"] == "newer-1--redteam"


# --- the site shows each manifest of a dataset -----------------------------------------------


def test_two_manifests_of_one_dataset_are_two_columns(
    intake: dict[str, Any], tmp_path: Path
) -> None:
    store = tmp_path / "leaderboard"
    shutil.copytree(intake["store"], store)
    site = tmp_path / "site"
    build_site(store, site)
    benchmark = (site / "benchmark-redteam.html").read_text()
    method = (site / "method-base--redteam.html").read_text()
    dataset = (site / "dataset-digits.html").read_text()
    for key in ("digits@redteam-varied", "digits@redteam-fixed"):
        assert f">{key}</a>" in benchmark and f'<section id="{key}">' in method
        assert f"method-base--redteam.html#{key}" in dataset
    assert benchmark.count('href="dataset-digits.html"') >= 2


def test_column_keys_separate_bscd_shots_and_keep_dataset_names_elsewhere() -> None:
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
    from fewtrans_board.website.data import column_keys

    bscd = column_keys(SUB_BENCHMARKS["bscd"], {})
    assert len(set(bscd.values())) == len(SUB_BENCHMARKS["bscd"].manifests) == 12
    assert bscd["bscd-5w20s--bscd-eurosat.parquet"] == "bscd-eurosat@bscd-5w20s"
    fewtrans = column_keys(SUB_BENCHMARKS["fewtrans-adapters"], {})
    assert sorted(fewtrans.values()) == sorted(m.split("--")[1][:-8] for m in fewtrans)
