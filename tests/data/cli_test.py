#!/usr/bin/env python3
"""End-to-end checks of the data subcommands through the `amber` binary: train a
tokenizer, round-trip text through encode/decode, tokenize into shards, restart
(every shard kept), compressed and Parquet inputs giving the plain file's shards, chat
messages rendered by a template, mixture weights, binary and mis-encoded inputs
refused, and the exit codes and messages of bad arguments."""
import glob
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_checks import Checks, FORTUNE  # noqa: E402

# One CPU step of a tiny model: enough for `amber train` to check its inputs and start.
TRAIN_CONFIG = """
model = {{ vocab_size = 1024, dim = 32, depth = 1, heads = 2, kv_heads = 1, mlp_hidden = 64, max_position = 256 }}

[train]
steps = 1
micro_batch_tokens = 512
eval_every = 0
checkpoint_every = 0
out_dir = "{run}"
device = "cpu"

[data]
dir = "{shards}"
tokenizer = "{tok}"
max_seq_len = 128
"""


def check_train_inputs(checks, tmp, tok, shards):
    """`amber train` refuses shards made by another tokenizer or swapped between splits,
    naming the tokenizer or the file, and trains on shards from an older manifest with a
    notice that their identity cannot be checked."""
    run, expect = checks.run, checks.expect

    def train(name, shard_dir, tokenizer, vocab_size=1024):
        config = os.path.join(tmp, name + ".toml")
        text = TRAIN_CONFIG.format(run=os.path.join(tmp, "run-" + name), shards=shard_dir, tok=tokenizer)
        text = text.replace("vocab_size = 1024", f"vocab_size = {vocab_size}")
        if tokenizer is None:
            text = "\n".join(line for line in text.splitlines() if not line.startswith("tokenizer ="))
        with open(config, "w", encoding="utf-8") as f:
            f.write(text)
        r = run(["train", config])
        return r.returncode, r.stdout + r.stderr

    rc, out = train("same", shards, tok)
    expect(rc == 0 and "identity cannot be checked" not in out, f"train on its own shards: exit {rc}, {out[-300:]!r}")

    # Without data.tokenizer the manifest still says how many tokens made the shards; the
    # 5 special tokens at the end never occur in the text, so no shard id gives it away.
    rc, out = train("small", shards, None, vocab_size=697)
    expect(rc == 1 and "model.vocab_size" in out and "700" in out,
           f"a model vocabulary smaller than the shards' tokenizer is refused: exit {rc}, {out[-300:]!r}")

    other = os.path.join(tmp, "other-tok.json")
    r = run(["tokenizer", "train", "--input", "/usr/share/games/fortunes/wisdom", "--vocab-size", "700",
             "--special", "<|a|>,<|b|>", "--out", other])
    expect(r.returncode == 0, f"second tokenizer: {r.stderr[-300:]}")
    rc, out = train("other", shards, other)
    expect(rc == 1 and "fingerprint" in out and "other-tok.json" in out,
           f"a different tokenizer of the same size is refused: exit {rc}, {out[-300:]!r}")

    swapped = os.path.join(tmp, "swapped")
    shutil.copytree(shards, swapped)
    a, b = os.path.join(swapped, "train-00000.bin"), os.path.join(swapped, "val-00000.bin")
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)
    rc, out = train("swapped", swapped, tok)
    expect(rc == 1 and "train-00000.bin" in out, f"swapped train and val shards are refused: exit {rc}, {out[-300:]!r}")

    old = os.path.join(tmp, "old")
    shutil.copytree(shards, old)
    path = os.path.join(old, "manifest.json")
    manifest = json.load(open(path, encoding="utf-8"))
    manifest.pop("tokenizer", None)
    for split in ("train", "val"):
        for entry in manifest[split]:
            entry.pop("checksum", None)
    json.dump(manifest, open(path, "w", encoding="utf-8"))
    rc, out = train("old", old, tok)
    expect(rc == 0 and out.count("identity cannot be checked") == 1,
           f"an older manifest trains with one notice: exit {rc}, {out[-300:]!r}")


def check_compressed_inputs(checks, tmp, tok):
    """.jsonl.gz (two gzip members) and .zst inputs tokenize to the very shards of the
    plain JSONL of the same rows; a file named .jsonl that holds gzip is read by its bytes."""
    run, expect = checks.run, checks.expect
    with open(FORTUNE, encoding="utf-8") as f:
        fortunes = [t.strip() for t in f.read().split("\n%\n") if t.strip()]
    rows = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=i % 2 == 0) + "\n" for i, t in enumerate(fortunes))
    data = rows.encode("utf-8")
    plain = os.path.join(tmp, "rows.jsonl")
    with open(plain, "wb") as f:
        f.write(data)
    half = len(data) // 2
    gz = os.path.join(tmp, "rows.jsonl.gz")
    with open(gz, "wb") as f:
        f.write(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    disguised = os.path.join(tmp, "gzip-inside.jsonl")
    shutil.copyfile(gz, disguised)
    zst = os.path.join(tmp, "rows.jsonl.zst")
    if shutil.which("zstd") is None:
        expect(False, "the zstd command is missing; scripts/setup installs Debian's zstd")
        return
    subprocess.run(["zstd", "-q", "-f", "-o", zst, plain], check=True)

    def shards(path, name):
        out = os.path.join(tmp, "mixed-" + name)
        r = run(["tokenize", "--tokenizer", tok, "--input", path, "--out", out, "--shard-mb", "0.02"])
        expect(r.returncode == 0, f"tokenize {name}: {r.stderr[-300:]}")
        files = sorted(glob.glob(os.path.join(out, "*.bin"))) + [os.path.join(out, "train-token-counts.json")]
        return {os.path.basename(p): open(p, "rb").read() for p in files if os.path.exists(p)}

    reference = shards(plain, "plain")
    expect(sum(name.startswith("train-") for name in reference) >= 3, f"several train shards: {sorted(reference)}")
    for path, name in [(gz, "gz"), (zst, "zst"), (disguised, "disguised")]:
        got = shards(path, name)
        expect(got == reference, f"{name} input gives the plain JSONL's shards: {sorted(got)} vs {sorted(reference)}")


def tokenize_shards(checks, tmp, tok, path, name, extra=()):
    """Tokenizes path into tmp/NAME; the shards and token counts by file name, and stderr."""
    out = os.path.join(tmp, name)
    r = checks.run(["tokenize", "--tokenizer", tok, "--input", path, "--out", out, "--shard-mb", "0.02"] + list(extra))
    checks.expect(r.returncode == 0, f"tokenize {name}: {r.stderr[-400:]}")
    files = sorted(glob.glob(os.path.join(out, "*.bin"))) + [os.path.join(out, "train-token-counts.json")]
    return {os.path.basename(p): open(p, "rb").read() for p in files if os.path.exists(p)}, r.stderr


def check_parquet_inputs(checks, tmp, tok):
    """Parquet files written by pyarrow tokenize to the very shards of the plain JSONL of
    the same rows (nulls skipped and counted) with each codec, with and without a
    dictionary, data page v1 and v2, in several row groups of several pages, the text
    column behind an integer and a nested column; what amber cannot read is refused
    naming the file, the column and what to do."""
    run, expect = checks.run, checks.expect
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        expect(False, "pyarrow is missing; scripts/setup installs it")
        return
    with open(FORTUNE, encoding="utf-8") as f:
        fortunes = [t.strip() for t in f.read().split("\n%\n") if t.strip()]
    texts = [None if i % 37 == 5 else t for i, t in enumerate(fortunes)]
    plain = os.path.join(tmp, "table.jsonl")
    with open(plain, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"text": t}) + "\n" for t in texts if t is not None))
    nulls = texts.count(None)
    table = pa.table({
        "id": pa.array(range(len(texts)), pa.int64()),
        "tags": pa.array([["a", "b"][: i % 3] for i in range(len(texts))], pa.list_(pa.string())),
        "text": pa.array(texts, pa.string()),
    })
    reference, _ = tokenize_shards(checks, tmp, tok, plain, "pq-reference")
    expect(sum(name.startswith("train-") for name in reference) >= 3, f"several train shards: {sorted(reference)}")
    # Every codec with and without a dictionary, every pair of the three settings once; and
    # a dictionary that overflows its 2 KiB limit, so each chunk goes on in PLAIN pages.
    cases = [("none", True, "1.0"), ("none", False, "2.0"), ("snappy", True, "2.0"), ("snappy", False, "1.0"),
             ("gzip", True, "1.0"), ("gzip", False, "2.0"), ("zstd", True, "2.0"), ("zstd", False, "1.0"),
             ("zstd", True, "1.0", 2048)]
    for codec, dictionary, version, *limit in cases:
        name = f"table-{codec}-{'dict' if dictionary else 'plain'}-v{version[0]}{'-fallback' if limit else ''}.parquet"
        path = os.path.join(tmp, name)
        pq.write_table(table, path, compression=codec, use_dictionary=dictionary, data_page_version=version,
                       row_group_size=150, data_page_size=4096, dictionary_pagesize_limit=(limit or [1 << 20])[0])
        meta = pq.ParquetFile(path).metadata
        pages = meta.row_group(0).column(2)  # id, tags.list.element, text
        expect(meta.num_row_groups >= 3 and pages.compression.lower() == ("uncompressed" if codec == "none" else codec)
               and pages.has_dictionary_page == dictionary, f"{name}: {meta.num_row_groups} row groups, {pages}")
        got, err = tokenize_shards(checks, tmp, tok, path, "pq-" + name)
        expect(got == reference, f"{name} gives the plain JSONL's shards: {sorted(got)} vs {sorted(reference)}")
        expect(f"{nulls} null texts skipped" in err, f"{name}: the {nulls} nulls are reported: {err[-300:]!r}")
    required = os.path.join(tmp, "required.parquet")
    schema = pa.schema([pa.field("text", pa.string(), nullable=False)])
    pq.write_table(pa.table({"text": [t for t in texts if t is not None]}, schema=schema), required,
                   row_group_size=200)
    got, _ = tokenize_shards(checks, tmp, tok, required, "pq-required")
    expect(got == reference, "a required (non-null) text column gives the plain JSONL's shards")
    empty, nulls_only = os.path.join(tmp, "empty.parquet"), os.path.join(tmp, "nulls.parquet")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    pq.write_table(pa.table({"text": pa.array([None] * 5, pa.string())}), nulls_only)
    got, _ = tokenize_shards(checks, tmp, tok, empty, "pq-with-empty", ["--input", required])
    expect(got == reference, "an empty table (a row group without rows) adds nothing")

    def refused(path, fragments, extra=()):
        out = os.path.join(tmp, "refused-" + os.path.basename(path) + "-" + "-".join(extra).strip("-"))
        r = run(["tokenize", "--tokenizer", tok, "--input", path, "--out", out] + list(extra))
        expect(r.returncode == 1 and all(f in r.stderr for f in fragments + [path]),
               f"{os.path.basename(path)} {extra} is refused: exit {r.returncode}, {r.stderr[-400:]!r}")

    lz4 = os.path.join(tmp, "lz4.parquet")
    pq.write_table(table, lz4, compression="lz4")
    refused(lz4, ["column \"text\"", "LZ4", "zstd"])
    delta = os.path.join(tmp, "delta.parquet")
    pq.write_table(table, delta, use_dictionary=False, column_encoding={"text": "DELTA_BYTE_ARRAY"})
    refused(delta, ["column \"text\"", "DELTA_BYTE_ARRAY", "pyarrow"])
    some = os.path.join(tmp, "table-zstd-plain-v1.parquet")
    refused(some, ["no column \"body\"", "--field", "text"], ["--field", "body"])
    refused(some, ["column \"id\"", "INT64", "not a string column"], ["--field", "id"])
    refused(some, ["column \"tags\"", "nested", "JSONL"], ["--field", "tags"])
    refused(some, ["Parquet", "chat messages", "JSONL"], ["--chat-template", "chatml"])
    cut = os.path.join(tmp, "cut.parquet")
    with open(some, "rb") as f:
        data = f.read()
    with open(cut, "wb") as f:
        f.write(data[: len(data) // 2])
    refused(cut, ["truncated"])
    r = run(["tokenize", "--tokenizer", tok, "--input", nulls_only, "--out", os.path.join(tmp, "pq-nulls")])
    expect(r.returncode == 1 and "no documents (5 null texts skipped)" in r.stderr and "--field" in r.stderr,
           f"a column of nulls is refused as no documents, counting them: {r.stderr[-300:]!r}")


def shard_documents(path):
    """The documents of a token shard (docs/data.md's layout), as lists of ids."""
    data = open(path, "rb").read()
    width, docs, tokens = struct.unpack_from("<IQQ", data, 12)
    ids = struct.unpack_from("<" + ("H" if width == 2 else "I") * tokens, data, 64)
    offsets = struct.unpack_from(f"<{docs + 1}Q", data, 64 + (tokens * width + 7) // 8 * 8)
    return [list(ids[offsets[d]:offsets[d + 1]]) for d in range(docs)]


def check_chat_inputs(checks, tmp):
    """JSONL chat rows render with --chat-template to exactly the template's text, its
    markers single tokens when the tokenizer has them as added tokens (a notice when it
    has not); a bad template name, a message without content and messages that are not
    a list are refused naming the file and line."""
    run, expect = checks.run, checks.expect
    tok = os.path.join(tmp, "chat-tok.json")
    r = run(["tokenizer", "train", "--input", "/usr/share/games/fortunes/wisdom", "--vocab-size", "700",
             "--special", "<|im_start|>,<|im_end|>", "--out", tok])
    expect(r.returncode == 0, f"chat tokenizer: {r.stderr[-300:]}")
    added = {t["content"]: t["id"] for t in json.load(open(tok, encoding="utf-8"))["added_tokens"]}
    chats = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
         {"role": "assistant", "content": "Hello! 数字"}],
        [{"role": "user", "content": "  Two\nlines \n"}, {"role": "assistant", "content": "ok"}],
    ]
    path = os.path.join(tmp, "chat.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"id": i, "messages": m}) + "\n" for i, m in enumerate(chats)))
    expected = {
        "chatml": ["<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                   "<|im_start|>assistant\nHello! 数字<|im_end|>\n",
                   "<|im_start|>user\n  Two\nlines \n<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"],
        "llama3": ["<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\nHello! 数字<|eot_id|>",
                   "<|start_header_id|>user<|end_header_id|>\n\nTwo\nlines<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\nok<|eot_id|>"],
    }
    for name, texts in expected.items():
        shards, err = tokenize_shards(checks, tmp, tok, path, "chat-" + name,
                                      ["--chat-template", name, "--val-fraction", "0"])
        docs = shard_documents(os.path.join(tmp, "chat-" + name, "train-00000.bin")) if shards else []
        decoded = [run(["tokenizer", "decode", "--tokenizer", tok], json.dumps(d)).stdout for d in docs]
        expect(decoded == texts, f"{name} renders exactly the template's text: {decoded!r}")
        if name == "chatml":
            expect(docs and docs[0].count(added["<|im_start|>"]) == 3 and docs[0].count(added["<|im_end|>"]) == 3,
                   f"chatml's markers are single added tokens: {docs[:1]}")
            expect("not added tokens" not in err, f"no notice when the markers are added tokens: {err[-300:]!r}")
        else:
            expect("<|start_header_id|>,<|end_header_id|>,<|eot_id|> are not added tokens" in err and
                   "--special" in err, f"llama3's markers are noted as not added tokens: {err[-400:]!r}")

    def refused(rows, fragments, extra=("--chat-template", "chatml")):
        bad = os.path.join(tmp, "bad-chat.jsonl")
        with open(bad, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(row) + "\n" for row in rows))
        out = os.path.join(tmp, "bad-chat-out")
        shutil.rmtree(out, ignore_errors=True)
        r = run(["tokenize", "--tokenizer", tok, "--input", bad, "--out", out] + list(extra))
        expect(r.returncode == 1 and all(f in r.stderr for f in fragments),
               f"{rows!r} {extra} is refused: exit {r.returncode}, {r.stderr[-300:]!r}")

    good = {"messages": chats[0]}
    refused([good], ["unknown chat template \"zephyr\"", "chatml", "llama3"], ["--chat-template", "zephyr"])
    refused([good, {"messages": [{"role": "user"}]}], ["bad-chat.jsonl:2", "message 0", "\"content\""])
    refused([{"messages": "hello"}], ["bad-chat.jsonl:1", "not a list of messages"])
    refused([{"messages": [{"role": "user", "content": ["a"]}]}], ["bad-chat.jsonl:1", "\"content\""])
    refused([{"text": "x"}], ["bad-chat.jsonl:1", "no field \"messages\""])
    refused([good], ["bad-chat.jsonl:1", "no field \"text\"", "--chat-template"], [])


def check_mixture_weights(checks, tmp, tok):
    """--input PATH:WEIGHT writes each document of a weight-2 input twice and about half
    of a weight-0.5 input's, and says so per file."""
    run, expect = checks.run, checks.expect
    plain = os.path.join(tmp, "rows.jsonl")  # written by check_compressed_inputs
    half = os.path.join(tmp, "half.txt")
    with open(half, "w", encoding="utf-8") as f:
        f.write("".join(f"line {i} of the down-weighted source\n" for i in range(1000)))
    out = os.path.join(tmp, "weighted")
    r = run(["tokenize", "--tokenizer", tok, "--input", plain + ":2", "--input", half + ":0.5", "--out", out])
    expect(r.returncode == 0, f"weighted tokenize: {r.stderr[-300:]}")
    read = json.load(open(os.path.join(tmp, "mixed-plain", "manifest.json")))
    mixed = json.load(open(os.path.join(out, "manifest.json")))
    total = lambda m: m["train_documents"] + m["val_documents"]  # noqa: E731
    expect(f"{plain} (weight 2): {total(read)} documents read, {2 * total(read)} written" in r.stderr,
           f"the weight-2 input is written twice: {r.stderr[-500:]!r}")
    kept = total(mixed) - 2 * total(read)
    expect(400 <= kept <= 600 and f"{half} (weight 0.5): 1000 documents read, {kept} written" in r.stderr,
           f"about half of the weight-0.5 input is kept: {kept}, {r.stderr[-500:]!r}")
    r = run(["tokenize", "--tokenizer", tok, "--input", plain + ":0", "--out", os.path.join(tmp, "zero")])
    expect(r.returncode == 1 and "(0, 1000]" in r.stderr, f"a zero weight is refused: {r.stderr[-300:]!r}")


def check_refused_inputs(checks, tmp, tok):
    """Binary files and a file mostly of invalid UTF-8 are refused naming the file and
    what is wrong; --max-invalid-utf8 lets the latter through."""
    run, expect = checks.run, checks.expect
    cases = [
        ("table.parquet", b"PAR1" + bytes(range(256)) + b"PAR1", ["damaged"]),
        ("archive.zip", b"PK\x03\x04" + bytes(100), ["zip archive"]),
        ("blob.txt", b"abc" + bytes(range(256)), ["looks binary"]),
    ]
    for name, content, fragments in cases:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(content)
        r = run(["tokenize", "--tokenizer", tok, "--input", path, "--out", os.path.join(tmp, "out-" + name)])
        expect(r.returncode == 1 and all(x in r.stderr for x in fragments + [path]),
               f"{name} is refused: exit {r.returncode}, {r.stderr[-300:]!r}")
    latin1 = os.path.join(tmp, "latin1.txt")
    with open(latin1, "wb") as f:
        f.write("café crème brûlée à la française\n".encode("latin-1") * 50)
    r = run(["tokenize", "--tokenizer", tok, "--input", latin1, "--out", os.path.join(tmp, "out-latin1")])
    expect(r.returncode == 1 and latin1 in r.stderr and "--max-invalid-utf8 0.01" in r.stderr,
           f"a Latin-1 file is refused: exit {r.returncode}, {r.stderr[-300:]!r}")
    r = run(["tokenize", "--tokenizer", tok, "--input", latin1, "--out", os.path.join(tmp, "out-latin1-ok"),
             "--max-invalid-utf8", "0.2"])
    expect(r.returncode == 0, f"--max-invalid-utf8 0.2 lets it through: {r.stderr[-300:]!r}")


def main():
    checks = Checks()
    run, expect = checks.run, checks.expect

    with tempfile.TemporaryDirectory() as tmp:
        tok = os.path.join(tmp, "tok.json")
        r = run(["tokenizer", "train", "--input", FORTUNE, "--vocab-size", "700", "--special", "<|a|>,<|b|>",
                 "--out", tok])
        expect(r.returncode == 0, f"train failed: {r.stderr}")
        vocab = json.load(open(tok, encoding="utf-8"))
        expect([t["content"] for t in vocab["added_tokens"]] == ["<|bos|>", "<|eos|>", "<|pad|>", "<|a|>", "<|b|>"],
               "special tokens and their order")
        expect([t["id"] for t in vocab["added_tokens"]] == [695, 696, 697, 698, 699], "special token ids at the end")

        text = "Ünïcode <|a|> and 数字 123\n\ttabs"
        ids = json.loads(run(["tokenizer", "encode", "--tokenizer", tok], text).stdout)
        expect(698 in ids, "a user special token is one id")
        expect(run(["tokenizer", "decode", "--tokenizer", tok], json.dumps(ids)).stdout == text,
               "decode(encode(x)) == x through the CLI")

        out = os.path.join(tmp, "shards")
        args = ["tokenize", "--tokenizer", tok, "--input", FORTUNE, "--out", out, "--shard-mb", "0.05"]
        first = run(args)
        expect(first.returncode == 0, f"tokenize failed: {first.stderr}")
        m = re.search(r"(\d+) shards written, (\d+) kept", first.stderr)
        written = int(m.group(1)) if m else 0
        expect(written >= 3 and m.group(2) == "0", f"first run writes shards: {first.stderr[-300:]}")
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        expect(len(manifest["train"]) + len(manifest["val"]) == written, "manifest lists every shard")
        again = run(args)
        m = re.search(r"(\d+) shards written, (\d+) kept", again.stderr)
        expect(m is not None and m.group(1) == "0" and int(m.group(2)) == written, "a re-run keeps every shard")
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        expect(manifest.get("tokenizer", {}).get("vocab_size") == 700 and
               re.fullmatch(r"[0-9a-f]+", manifest.get("tokenizer", {}).get("fingerprint", "")) is not None,
               f"the manifest records the tokenizer: {manifest.get('tokenizer')}")
        expect(all(re.fullmatch(r"[0-9a-f]+", e.get("checksum", "")) and e["documents"] > 0
                   for e in manifest["train"] + manifest["val"]), "the manifest records each shard's checksum")
        check_train_inputs(checks, tmp, tok, out)
        check_compressed_inputs(checks, tmp, tok)
        check_parquet_inputs(checks, tmp, tok)
        check_chat_inputs(checks, tmp)
        check_mixture_weights(checks, tmp, tok)
        check_refused_inputs(checks, tmp, tok)

        for bad, fragment in [
            (["tokenizer", "encode", "--tokenizer", os.path.join(tmp, "nope.json")], "nope.json"),
            (["tokenizer", "train", "--input", os.path.join(tmp, "missing"), "--out", tok], "missing"),
            (["tokenizer", "train", "--vocab-size", "100", "--out", tok], "--vocab-size"),
            (["tokenizer", "train", "--input", FORTUNE, "--out", os.path.join(tok, "under_a_file", "t.json")],
             "--out: cannot create the folder"),
            (["tokenize", "--tokenizer", tok, "--input", FORTUNE, "--out", out, "--val-fraction", "0.5"],
             "different settings"),
            (["tokenize", "--tokenizer", tok], "--out is required"),
            (["tokenize", "--tokenizer", tok, "--out", os.path.join(tmp, "big"), "--shard-mb", "1e30"], "--shard-mb"),
            (["tokenize", "--tokenizer", tok, "--out", os.path.join(tmp, "nan"), "--shard-mb", "nan"], "--shard-mb"),
            (["sample", "--checkpoint", os.path.join(tmp, "none"), "--max-tokens", "2000000000"], "--max-tokens"),
            (["sample", "--checkpoint", os.path.join(tmp, "none"), "--max-tokens", "-1"], "--max-tokens"),
        ]:
            r = run(bad)
            expect(r.returncode != 0 and fragment in r.stderr,
                   f"{' '.join(bad[:2])}: exit {r.returncode}, stderr {r.stderr[-200:]!r} lacks {fragment!r}")
        nested = os.path.join(tmp, "new", "folder", "tok.json")
        r = run(["tokenizer", "train", "--input", FORTUNE, "--vocab-size", "300", "--out", nested])
        expect(r.returncode == 0 and os.path.isfile(nested), f"tokenizer train makes --out's folder: {r.stderr[-200:]!r}")
        r = run(["tokenizer", "decode", "--tokenizer", tok], "[1, 99999]")
        expect(r.returncode == 1 and "99999" in r.stderr, "out-of-range id is an error naming it")
        r = run(["tokenizer", "decode", "--tokenizer", tok], "[4294967297]")
        expect(r.returncode == 1 and "4294967297" in r.stderr, f"an id past 32 bits is not wrapped: {r.stderr!r}")

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
