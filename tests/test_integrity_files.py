"""Fault injection on stored files: shards, run.json, feature-cache entries, manifests.

Every damaged file must be refused with a one-line error naming it, or read back exactly
as it was written; never accepted with changed content, never a traceback.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given

from fewtrans_board.episodes.manifest import Manifest, ManifestError, sidecar_path
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import RunResults, load_run
from fewtrans_board.results.row_schema import METADATA_KEY
from fewtrans_board.results.shards import (
    CorruptShardError,
    ResultsError,
    read_shard,
    shard_checksum,
    verify_shard_checksum,
)
from fewtrans_board.runner.features import decode_entry, encode_entry
from tests.faults import (
    FUZZ,
    Mutation,
    check_outcome,
    equal_tables,
    mutations,
    rewrite_column,
)
from tests.test_runner import evaluate_args


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResults]:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    out = tmp_path_factory.mktemp("fuzz") / "run"
    args = evaluate_args(out, "mean-centroid", "--limit", "3", "--shards", "1")
    result = CliRunner().invoke(make_cli(get_plugin_manager(entry_points=False)), args)
    assert result.exit_code == 0, result.output
    return out, load_run(out)


@pytest.fixture(scope="module")
def scratch_run(
    pristine_run: tuple[Path, RunResults], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A copy of the run whose files the fuzz tests damage (and restore)."""
    copy = tmp_path_factory.mktemp("scratch") / "run"
    shutil.copytree(pristine_run[0], copy)
    return copy


def same_run(pristine: RunResults, loaded: RunResults) -> bool:
    return (
        equal_tables(loaded.table, pristine.table)
        and loaded.meta == pristine.meta
        and loaded.shards_present == pristine.shards_present
        and loaded.shards_total == pristine.shards_total
    )


def damage_and_load(
    target: str, path: Path, mutation: Mutation, run: Path, pristine: RunResults
) -> None:
    original = path.read_bytes()
    path.write_bytes(mutation.apply(original))
    try:
        check_outcome(
            target,
            lambda: load_run(run),
            lambda loaded: same_run(pristine, loaded),
            (ResultsError,),
            path.name,
        )
    finally:
        path.write_bytes(original)


# --- result shards and run.json ----------------------------------------------------------


@pytest.mark.slow
def test_shards_carry_a_verified_checksum(pristine_run: tuple[Path, RunResults]) -> None:
    out, _ = pristine_run
    shard = next((out / "shards").glob("shard-*.parquet"))
    table, meta = read_shard(shard)
    assert meta["checksum"]["rows"] == table.num_rows
    assert meta["checksum"]["sha256"] == shard_checksum(table, meta)
    verify_shard_checksum(table, meta, shard)


@FUZZ
@given(data=mutations(1 << 30))
def test_fuzz_shard_bytes(
    scratch_run: Path, pristine_run: tuple[Path, RunResults], data: Mutation
) -> None:
    shard = next((scratch_run / "shards").glob("shard-*.parquet"))
    size = shard.stat().st_size
    mutation = Mutation(data.kind, data.position % size, data.payload)
    damage_and_load("result shard", shard, mutation, scratch_run, pristine_run[1])


@FUZZ
@given(data=mutations(1 << 30))
def test_fuzz_run_json_bytes(
    scratch_run: Path, pristine_run: tuple[Path, RunResults], data: Mutation
) -> None:
    marker = scratch_run / "run.json"
    mutation = Mutation(data.kind, data.position % marker.stat().st_size, data.payload)
    damage_and_load("run.json", marker, mutation, scratch_run, pristine_run[1])


def column_edits(column: pa.ChunkedArray) -> list[tuple[str, pa.Array]]:
    """Ways to change a column's values or type while keeping the file well-formed."""
    array = column.combine_chunks()
    decoded = array.dictionary_decode() if pa.types.is_dictionary(array.type) else array
    values = decoded.to_pylist()
    edits: list[tuple[str, pa.Array]] = []
    if values != values[::-1]:
        edits.append(("reversed", pa.array(values[::-1], type=decoded.type)))
    changed = list(values)
    first = changed[0]
    if isinstance(first, str):
        changed[0] = first + "x"
    elif isinstance(first, list):
        changed[0] = first[:-1] if first else [0]
    elif isinstance(first, float):
        changed[0] = first + 0.01
    else:
        changed[0] = first + 1
    edits.append(("one value", pa.array(changed, type=decoded.type)))
    if pa.types.is_floating(decoded.type) or pa.types.is_integer(decoded.type):
        edits.append(("retyped", pa.array(values, type=decoded.type).cast(pa.string())))
    return edits


def test_every_column_edit_is_refused(
    pristine_run: tuple[Path, RunResults], tmp_path: Path
) -> None:
    shard = next((pristine_run[0] / "shards").glob("shard-*.parquet"))
    table = pq.read_table(shard)
    refused = 0
    for name in table.column_names:
        for label, array in column_edits(table.column(name)):
            target = tmp_path / f"{name}-{label}.parquet"
            rewrite_column(shard, name, array, target)
            with pytest.raises(CorruptShardError, match=target.name):
                read_shard(target)
            refused += 1
    assert refused >= 2 * len(table.column_names)


def test_edited_metadata_is_refused(pristine_run: tuple[Path, RunResults], tmp_path: Path) -> None:
    shard = next((pristine_run[0] / "shards").glob("shard-*.parquet"))
    table = pq.read_table(shard)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta["shard"]["index"] = 7  # e.g. a renamed copy of another shard's metadata
    target = tmp_path / "edited.parquet"
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), target)
    with pytest.raises(CorruptShardError, match="content sha256"):
        read_shard(target)
    del meta["checksum"]
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), target)
    with pytest.raises(CorruptShardError, match="no content checksum"):
        read_shard(target)


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["results", "summary"],
        ["site", "build", "--out", "{tmp}/site", "--results"],
        ["submission", "pack", "--meta", "{tmp}/submission.toml", "--out", "{tmp}/b.zip"],
    ],
)
def test_commands_name_a_corrupt_shard_in_one_line(
    pristine_run: tuple[Path, RunResults], tmp_path: Path, invoke, command: list[str]
) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    shutil.copytree(pristine_run[0], run)
    shard = next((run / "shards").glob("shard-*.parquet"))
    accuracy = pq.read_table(shard).column("accuracy").to_pylist()
    accuracy[0] -= 0.01  # what a flipped bit in the accuracy column does
    rewrite_column(shard, "accuracy", pa.array(accuracy, type=pa.float64()), shard)
    pm = get_plugin_manager(entry_points=False)
    (tmp_path / "submission.toml").write_text(invoke(["submission", "template"], pm=pm).output)
    args = [part.format(tmp=tmp_path) for part in command]
    args = [*args, str(run)] if args[0] != "submission" else [*args[:2], str(run), *args[2:]]
    result = invoke(args, pm=pm)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("Error:") and shard.name in lines[-1] and "corrupt" in lines[-1]


# --- feature-cache entries ---------------------------------------------------------------

FIELDS = {"format": 2, "weights_id": "sha256:abc", "dataset": "digits", "torch_threads": 1}
ITEMS = [f"class-{i % 7}/{i:04d}.png" for i in range(40)]
MATRIX = np.random.RandomState(0).randn(40, 12).astype(np.float32)
ENTRY = encode_entry(FIELDS, ITEMS, MATRIX)


def test_entry_round_trip_and_checks() -> None:
    items, matrix = decode_entry(ENTRY, FIELDS, 12)  # type: ignore[misc]
    assert items == ITEMS and matrix.tobytes() == MATRIX.tobytes()
    with np.load(io.BytesIO(ENTRY)) as archive:
        header, items_array = archive["header"], archive["items"]
    for features, items, reason in (
        (MATRIX[::-1], items_array, "features do not match"),  # rows shuffled on disk
        (MATRIX, items_array[::-1], "item list does not match"),  # item order shuffled
    ):
        buffer = io.BytesIO()
        np.savez(buffer, header=header, items=items, features=features)
        assert reason in str(decode_entry(buffer.getvalue(), FIELDS, 12))
    assert "other inputs (weights_id)" in str(
        decode_entry(ENTRY, {**FIELDS, "weights_id": "sha256:other"}, 12)
    )
    assert "shape" in str(decode_entry(ENTRY, FIELDS, 13))


@FUZZ
@given(data=mutations(1 << 30))
def test_fuzz_feature_entry_bytes(data: Mutation) -> None:
    mutation = Mutation(data.kind, data.position % len(ENTRY), data.payload)
    damaged = mutation.apply(ENTRY)

    def load() -> tuple[list[str], np.ndarray]:
        entry = decode_entry(damaged, FIELDS, 12)
        if isinstance(entry, str):
            raise ValueError(f"feature entry refused: {entry}")
        return entry

    check_outcome(
        "feature-cache entry",
        load,
        lambda entry: entry[0] == ITEMS and entry[1].tobytes() == MATRIX.tobytes(),
        (ValueError,),
        "feature entry refused",
    )


# --- manifests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_manifest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Manifest]:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    path = tmp_path_factory.mktemp("manifest") / "m.parquet"
    args = ["manifest", "build", "--protocol", "fewtrans-fixed", "--dataset", "digits"]
    args += ["--ways", "3", "--shots", "1", "--queries", "2", "--episodes", "3", "--out", str(path)]
    result = CliRunner().invoke(make_cli(get_plugin_manager(entry_points=False)), args)
    assert result.exit_code == 0, result.output
    return path, Manifest.load(path)


def same_manifest(pristine: Manifest, loaded: Manifest) -> bool:
    content = {k: v for k, v in loaded.meta.items() if k != "built_with"}
    return (
        loaded.rows == pristine.rows
        and loaded.sha256 == pristine.sha256
        and content == {k: v for k, v in pristine.meta.items() if k != "built_with"}
    )


@pytest.mark.parametrize("sidecar", [True, False])
@FUZZ
@given(data=mutations(1 << 30))
def test_fuzz_manifest_bytes(
    small_manifest: tuple[Path, Manifest],
    tmp_path_factory: pytest.TempPathFactory,
    sidecar: bool,
    data: Mutation,
) -> None:
    source, pristine = small_manifest
    original = source.read_bytes()
    folder = tmp_path_factory.getbasetemp() / f"manifest-fuzz-{sidecar}"
    folder.mkdir(exist_ok=True)
    path = folder / "m.parquet"
    if sidecar:
        shutil.copyfile(sidecar_path(source), sidecar_path(path))
    mutation = Mutation(data.kind, data.position % len(original), data.payload)
    path.write_bytes(mutation.apply(original))
    check_outcome(
        "manifest (sidecar)" if sidecar else "manifest (no sidecar)",
        lambda: Manifest.load(path, check_sidecar=sidecar),
        lambda loaded: same_manifest(pristine, loaded),
        (ManifestError,),
        str(path),
    )


def test_corrupt_manifest_is_one_clean_error(
    small_manifest: tuple[Path, Manifest], tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    source, _ = small_manifest
    path = tmp_path / "m.parquet"
    data = bytearray(source.read_bytes())
    data[len(data) - 200] ^= 0x80  # inside the footer's key-value metadata
    path.write_bytes(bytes(data))
    shutil.copyfile(sidecar_path(source), sidecar_path(path))
    result = invoke(["manifest", "show", str(path)], pm=get_plugin_manager(entry_points=False))
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "is corrupt" in result.output
    assert "bytes do not match" in result.output  # the sidecar is checked before decoding
