#!/usr/bin/env python3
"""Writes the small Parquet files the C++ tests (tests/data/parquet_test.cpp) read and
the corpus_reader fuzz target starts from, with PyPI's pyarrow: columns id (int64), tags
(list of strings, nested) and text (strings, every 7th row from the 4th null), 60 rows
in row groups of 25 and pages of about 256 bytes, in four codec, dictionary and page
version combinations, and one LZ4 file amber refuses. Re-run it after changing the rows
and commit the files: the build never runs it."""
import os

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ_SEEDS = os.path.join(HERE, "..", "..", "..", "fuzz", "corpus", "corpus_reader")

ROWS = 60
texts = [None if i % 7 == 3 else f"row {i} café" + " ☕" * (i % 4) for i in range(ROWS)]
table = pa.table({
    "id": pa.array(range(ROWS), pa.int64()),
    "tags": pa.array([["a", "b", "c"][: i % 4] for i in range(ROWS)], pa.list_(pa.string())),
    "text": pa.array(texts, pa.string()),
})
files = {
    "none-plain-v1.parquet": dict(compression="none", use_dictionary=False, data_page_version="1.0"),
    "snappy-dict-v1.parquet": dict(compression="snappy", use_dictionary=True, data_page_version="1.0"),
    "gzip-plain-v2.parquet": dict(compression="gzip", use_dictionary=False, data_page_version="2.0"),
    "zstd-dict-v2.parquet": dict(compression="zstd", use_dictionary=True, data_page_version="2.0"),
    "lz4.parquet": dict(compression="lz4"),
}
for name, options in files.items():
    pq.write_table(table, os.path.join(HERE, name), row_group_size=25, data_page_size=256, **options)
    if name != "lz4.parquet":
        pq.write_table(table, os.path.join(FUZZ_SEEDS, name), row_group_size=25, data_page_size=256, **options)
