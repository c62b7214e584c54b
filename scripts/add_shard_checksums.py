"""Add content checksums to result shards written before shards carried one.

Run from the repository root: python scripts/add_shard_checksums.py leaderboard/results

Only shards without a checksum are rewritten (rows and provenance unchanged, atomically;
shards from before base-to-novel get their implied ``split = "base"`` column, which
readers used to add on the fly); a shard that already has one is verified and left alone. Use it only on files you trust,
such as the committed demo entries: a checksum vouches for whatever the file holds now.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fewtrans_board.results.row_schema import METADATA_KEY, arrow_schema
from fewtrans_board.results.shards import CHECKSUM_KEY, read_shard, seal_table, write_table


def _current_schema(table: pa.Table) -> pa.Table:
    table = table.replace_schema_metadata(None)
    if "split" not in table.column_names:
        split = pa.array(["base"] * table.num_rows).dictionary_encode()
        table = table.add_column(table.column_names.index("kind"), "split", split)
    return table.cast(arrow_schema())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="run folders or folders above them")
    args = parser.parse_args()
    sealed = verified = 0
    for root in args.paths:
        for path in sorted(root.rglob("shard-*.parquet")):
            table = pq.read_table(path)
            meta = json.loads(table.schema.metadata[METADATA_KEY])
            if CHECKSUM_KEY in meta:
                read_shard(path)  # raises if the existing checksum does not hold
                verified += 1
                continue
            write_table(path, seal_table(_current_schema(table), meta))
            read_shard(path)
            sealed += 1
    print(f"{sealed} shard(s) given a checksum, {verified} already had a valid one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
