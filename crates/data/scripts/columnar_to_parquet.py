"""Writes a Parquet copy of csx columnar tables: the oracle's copy (DuckDB reads it).

Usage: columnar_to_parquet.py DATASET_DIR OUT_DIR

Every subdirectory of DATASET_DIR holding a schema.json becomes OUT_DIR/TABLE.parquet.
Types: int32/uint32/int64 stay integers, date becomes date32, decimal becomes
decimal128(18, scale) with the same unscaled value, dict becomes a plain string column.
A column file of the wrong length or a dictionary index out of range stops the
conversion with an error naming the file and the row.
"""

import json
import os
import sys

try:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as e:  # pragma: no cover - depends on the machine
    sys.exit(f"columnar_to_parquet: {e}; run scripts/setup.sh (pip install pyarrow numpy)")

DTYPES = {
    "int32": "<i4",
    "uint32": "<u4",
    "date": "<i4",
    "dict": "<u4",
    "int64": "<i8",
    "decimal": "<i8",
}


def read_dictionary(path, entries):
    with open(path, "rb") as f:
        data = f.read().decode("utf-8")
    if data and not data.endswith("\n"):
        sys.exit(f"{path}: the last entry has no final newline")
    items = data.split("\n")[:-1] if data else []
    if len(items) != entries:
        sys.exit(f"{path}: {len(items)} entries, the schema says {entries}")
    return items


def column(table_dir, col, rows):
    path = os.path.join(table_dir, col["name"] + ".col")
    kind = col["type"]
    values = np.fromfile(path, dtype=DTYPES[kind])
    width = np.dtype(DTYPES[kind]).itemsize
    if os.path.getsize(path) != rows * width:
        sys.exit(f"{path}: {os.path.getsize(path)} bytes, expected {rows * width}")
    if kind == "date":
        return pa.array(values, type=pa.int32()).cast(pa.date32())
    if kind == "decimal":
        raw = np.empty((rows, 2), dtype="<i8")
        raw[:, 0] = values
        raw[:, 1] = np.where(values < 0, -1, 0)
        dtype = pa.decimal128(18, col.get("scale", 0))
        return pa.Array.from_buffers(dtype, rows, [None, pa.py_buffer(raw.tobytes())])
    if kind == "dict":
        dpath = os.path.join(table_dir, col["name"] + ".dict")
        entries = read_dictionary(dpath, col.get("entries", 0))
        bad = np.nonzero(values >= len(entries))[0]
        if len(bad):
            row = int(bad[0])
            sys.exit(
                f"{path}: row {row}: dictionary index {int(values[row])} out of range, "
                f"the dictionary has {len(entries)} entries"
            )
        codes = pa.array(values.astype("<i4"), type=pa.int32())
        return pa.DictionaryArray.from_arrays(codes, pa.array(entries, type=pa.string())).dictionary_decode()
    return pa.array(values)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: columnar_to_parquet.py DATASET_DIR OUT_DIR")
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(src)):
        table_dir = os.path.join(src, name)
        schema_path = os.path.join(table_dir, "schema.json")
        if not os.path.isfile(schema_path):
            continue
        with open(schema_path) as f:
            schema = json.load(f)
        rows = schema["rows"]
        arrays = [column(table_dir, c, rows) for c in schema["columns"]]
        names = [c["name"] for c in schema["columns"]]
        table = pa.Table.from_arrays(arrays, names=names)
        pq.write_table(table, os.path.join(out, schema["table"] + ".parquet"))
        print(f"{schema['table']}: {rows} rows", flush=True)


if __name__ == "__main__":
    main()
