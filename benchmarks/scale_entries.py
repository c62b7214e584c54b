"""Synthetic FewTrans-sized entries for ``store_scale.py``: frozen manifests and bundles.

The episode shapes of the project's ``fewtrans-varied`` sampler on a synthetic 100-class
dataset, one frozen manifest per dataset; a complete ``fewtrans-paper`` run per manifest
with random float16 logits written as the runner writes them, and predictions, accuracies
and both ensembles derived from them exactly as ``evaluate`` does, so every entry passes
validation.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = {27: "finetune--demo-cnn", 15: "linear-probe--demo-cnn"}
BENCHMARK = "store-scale"
SHARDS = 12


def register(manifests: list[str]) -> None:
    """Add the synthetic sub-benchmark (its manifests, centre searched on digits)."""
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark

    SUB_BENCHMARKS[BENCHMARK] = SubBenchmark(
        name=BENCHMARK,
        title="Store scale",
        description="Synthetic FewTrans-sized entries.",
        manifests=tuple(manifests),
        held_out=("digits",),
    )


def build_manifests(folder: Path, datasets: int, episodes: int, classes: int) -> list[Path]:
    """``datasets`` frozen fewtrans-varied manifests of a synthetic ``classes``-class dataset."""
    from fewtrans_board.api.dataset_spec import DatasetSpec
    from fewtrans_board.datasets.splits import fewtrans_split
    from fewtrans_board.episodes.build import build_manifest
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.episodes.protocols import get_protocol

    class Reader:
        def list_items(self, root, spec):  # type: ignore[no-untyped-def]
            return [[f"{cid}/{i:04d}.jpg" for i in range(600)] for cid in spec.class_ids]

        def load_image(self, root, item):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    folder.mkdir(parents=True, exist_ok=True)
    protocol = get_protocol("fewtrans-varied")
    ids = tuple(f"class-{c:03d}" for c in range(classes))
    template = None
    paths = []
    for d in range(datasets):
        name = f"scale-{d:02d}"
        path = folder / f"fewtrans-varied--{name}.parquet"
        if template is None:
            spec = DatasetSpec(
                name=name,
                title=name,
                domain="synthetic",
                class_ids=ids,
                class_names=ids,
                split=fewtrans_split(classes, 80),
                reader=Reader(),
                layout="-",
                license="-",
                source_url="-",
                download="-",
            )
            template = build_manifest(spec, None, protocol)
        # The same episode shapes under another dataset name: another frozen manifest.
        episodes_of = template.episodes()[:episodes]
        meta = {**template.meta, "dataset": {**template.meta["dataset"], "name": name}}
        for key in ("episodes", "sha256", "schema_version"):
            meta.pop(key, None)
        Manifest.from_episodes(name, episodes_of, meta).write(path)
        paths.append(path)
    return paths


def template_meta(configs: int) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """A committed entry's shard provenance and run.json (unsplit view) and its folder."""
    from fewtrans_board.results.blobs import LOGITS_BLOB_KEY
    from fewtrans_board.results.shards import read_shard

    ident = TEMPLATES[configs]
    run = next((REPO / "leaderboard" / "results" / ident).iterdir())
    _, meta = read_shard(sorted((run / "shards").glob("*.parquet"))[0])
    meta = {k: v for k, v in meta.items() if k not in (LOGITS_BLOB_KEY, "checksum")}
    record = json.loads((run / "run.json").read_text())
    return meta, record, REPO / "leaderboard" / "submissions" / ident


def run_tables(
    manifest_path: Path, meta: dict[str, Any], record: dict[str, Any], seed: int
) -> tuple[list[Any], dict[str, Any]]:
    """A complete fewtrans-paper run on one manifest: sealed shard tables and run.json."""
    import pyarrow as pa

    from fewtrans_board.api.adapter import typed_values
    from fewtrans_board.core.canonical import canonical_json
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.hpe.aggregate import fuse
    from fewtrans_board.hpe.protocols import get_hpe_protocol, schema_roles
    from fewtrans_board.results.row_schema import arrow_schema, run_id_of, storable_logits
    from fewtrans_board.results.shards import seal_table

    manifest = Manifest.load(manifest_path)
    episodes = manifest.episodes()
    count = min(SHARDS, len(episodes))
    chunks = np.array_split(np.arange(len(episodes)), count)
    protocol = get_hpe_protocol("fewtrans-paper")
    schema = meta["adapter"]["schema"]
    roles = schema_roles(schema)
    centre = typed_values(meta["adapter"]["centre"], schema["fields"])
    grid = [c for c in protocol.grid_for(centre, roles)]
    identity = {
        **record["identity"],
        "manifest_sha256": manifest.sha256,
        "hpe": protocol.name,
        "grid": grid,
        "shards": count,
        "limit": None,
    }
    run_id = run_id_of(identity)
    hpe = {
        "name": protocol.name,
        "version": protocol.version,
        "aggregation": protocol.aggregation,
        "hash": protocol.digest_for(centre, roles),
        "grid_size": len(grid),
        "roles": roles,
    }
    base = {
        **meta,
        "run_id": run_id,
        "identity": identity,
        "hpe": hpe,
        "manifest": {
            "sha256": manifest.sha256,
            "file": manifest_path.name,
            "dataset": manifest.dataset,
        },
    }
    names = [canonical_json(c) for c in grid]
    rng = np.random.default_rng(seed)
    tables = []
    for shard, chunk in enumerate(chunks):
        cols: dict[str, list[Any]] = {name: [] for name in arrow_schema().names}
        values: list[np.ndarray] = []
        offsets = [0]
        valid: list[bool] = []
        for episode in (episodes[int(i)] for i in chunk):
            labels = np.array([label for _, label in episode.query])
            q, w = len(labels), episode.ways
            raw = rng.normal(size=(len(grid), q, w)).astype(np.float32)
            raw[:, np.arange(q), labels] += 1.0  # better than chance, like a method
            stored = np.stack([storable_logits(r) for r in raw])
            member = raw.argmax(axis=2)
            rows = []
            for c in range(len(grid)):
                rows.append(("config", "", c, names[c], member[c], stored[c], 0.5, 1000 + c))
            for aggregation in ("logit-mean", "vote"):
                fused, fused_logits = fuse(aggregation, logits=stored, predictions=member, n_way=w)
                kept = None if fused_logits is None else storable_logits(fused_logits)
                rows.append(("ensemble", aggregation, -1, "", fused, kept, 0.0, 0))
            for kind, aggregation, index, config, pred, logits, seconds, row_seed in rows:
                cols["run_id"].append(run_id)
                cols["dataset"].append(manifest.dataset)
                cols["manifest_sha256"].append(manifest.sha256)
                cols["episode"].append(episode.index)
                cols["stream_index"].append(episode.stream_index)
                cols["split"].append("base")
                cols["kind"].append(kind)
                cols["aggregation"].append(aggregation)
                cols["config_index"].append(index)
                cols["config"].append(config)
                cols["n_way"].append(w)
                cols["n_query"].append(q)
                cols["accuracy"].append(float((pred == labels).mean() * 100.0))
                cols["predictions"].append(pred.astype(np.int16))
                cols["seconds"].append(seconds)
                cols["seed"].append(row_seed)
                valid.append(logits is not None)
                if logits is not None:
                    values.append(logits.ravel())
                offsets.append(offsets[-1] + (0 if logits is None else logits.size))
        arrays = []
        for field in arrow_schema():
            if field.name == "logits":
                mask = pa.array([not v for v in valid])
                flat = np.concatenate(values).astype(np.float16)
                arrays.append(
                    pa.ListArray.from_arrays(
                        pa.array(np.asarray(offsets, dtype=np.int32)), pa.array(flat), mask=mask
                    ).cast(field.type)
                )
            elif field.name == "predictions":
                p_offsets = np.cumsum([0] + [len(p) for p in cols["predictions"]]).astype(np.int32)
                arrays.append(
                    pa.ListArray.from_arrays(
                        pa.array(p_offsets), pa.array(np.concatenate(cols["predictions"]))
                    ).cast(field.type)
                )
            elif pa.types.is_dictionary(field.type):
                arrays.append(pa.array(cols[field.name], type=pa.string()).dictionary_encode())
            else:
                arrays.append(pa.array(cols[field.name], type=field.type))
        table = pa.Table.from_arrays(arrays, schema=arrow_schema())
        shard_meta = {**base, "shard": {**base.get("shard", {}), "index": shard, "count": count}}
        tables.append(seal_table(table, shard_meta))
    run_record = {**record, "identity": identity, "run_id": run_id}
    return tables, run_record


def build_bundle(out: Path, ident: str, manifests: list[Path], configs: int, seed: int = 0) -> Path:
    """A bundle of one synthetic entry (every dataset), as ``submission pack`` would write."""
    from fewtrans_board.results.shards import shard_file_name, write_table

    meta, record, submission = template_meta(configs)
    folder = out / f"{ident}.bundle"
    shutil.rmtree(folder, ignore_errors=True)
    toml = (submission / "submission.toml").read_text()
    lines = []
    for line in toml.splitlines():
        key = line.split("=", 1)[0].strip()
        if key == "id":
            line = f'id = "{ident}"'
        elif key == "benchmark":
            line = f'benchmark = "{BENCHMARK}"'
        elif key == "hpe_protocol":
            line = 'hpe_protocol = "fewtrans-paper"'
        lines.append(line)
    (folder).mkdir(parents=True)
    (folder / "submission.toml").write_text("\n".join(lines) + "\n")
    shutil.copy(submission / "centre-search.json", folder / "centre-search.json")
    for d, manifest in enumerate(manifests):
        tables, run_record = run_tables(manifest, meta, record, seed * 1000 + d)
        run = folder / "results" / manifest.stem
        (run / "shards").mkdir(parents=True)
        (run / "run.json").write_text(json.dumps(run_record, indent=2, sort_keys=True))
        for index, table in enumerate(tables):
            write_table(run / "shards" / shard_file_name(index, len(tables)), table)
    bundle = out / f"{ident}.zip"
    with zipfile.ZipFile(bundle, "w", compression=zipfile.ZIP_STORED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    shutil.rmtree(folder)
    return bundle
