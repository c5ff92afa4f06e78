#!/usr/bin/env python3
"""Two-way compatibility between amber's tokenizer and Hugging Face `tokenizers`.

(a) tokenizer.json files built by `tokenizers` (GPT-2 ByteLevel, ByteLevel with a
prefix space, Llama-3 Split+ByteLevel with ignore_merges or a Unicode normalizer, byte
fallback, SentencePiece-style spellings of spaces) must give the same ids in `amber
tokenizer encode`; (b) files written by `amber tokenizer train` must
load in `tokenizers` and give the same ids. decode(encode(x)) == x is checked on the
varied sample and on the whole fortunes corpus. Exits 77 (ctest: skipped) without
`tokenizers`.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError:
    print("SKIPPED: python package `tokenizers` is not installed (scripts/setup installs it)")
    sys.exit(77)

FORTUNES = "/usr/share/games/fortunes"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|user|>"]

SAMPLE = [
    "Hello, world! This is plain ASCII text.",
    "I'm sure they'll say we've done it; DON'T YOU'LL",
    "Café, naïve, résumé, Ångström, Øresund, façade — ça va?",
    "Ünïcödé äccents: àáâãäå èéêë ìíîï òóôõö ùúûü ñ ç",
    "日本語のテキストです。中文文本，还有한국어 텍스트.",
    "Emoji: 🎉🚀 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽 ❤️",
    "Numbers: 0 7 42 123 4567 89012 3.14159 -2.5e10 1,000,000 ٣٤٥",
    "Whitespace   runs\t\ttabs\n\n\nnewlines \r\n crlf    trailing   ",
    "\u00a0non-breaking\u00a0space and\u3000ideographic\u3000space\u2003em",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // C++",
    "{\"key\": [1, 2, 3], \"nested\": {\"x\": null}}",
    "Русский текст, Ελληνικά, العربية, עברית, हिन्दी",
    "<|bos|>special tokens<|eos|> inside<|user|>text<|pad|><|pad|>",
    "    leading spaces and trailing newline\n",
    "mixedCASE_identifiers and snake_case and kebab-case and URLs https://example.org/a?b=c#d",
    "!!!??? ... --- *** ### $$$ %%% ^^^ &&& (((",
    "A",
    " ",
    "\n",
    "e\u0301 combining acute, ﬁ ligature, ℌ script",
]


def random_text(seed, length):
    """Seeded random text mixing every class the pre-tokenizer regexes distinguish."""
    rng = random.Random(seed)
    pools = ["abcXYZ", "0123456789", "'sStTmMdD", "!?.,;:-_()[]{}<>|/\\\"#@&*+=~`^%$",
             " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2028", "\u3000", "\u0085", "\u2003",
             "éüñçÅ", "\u0301\u0308", "日本語中文한국", "🎉👍🏽\u200d❤️🇫🇷", "العربيةहिन्दी", "ΑΒΓабв", "٣٤٥", "<|eos|>"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(length))


def fortune_docs(limit_files=None):
    names = sorted(f for f in os.listdir(FORTUNES)
                   if not f.endswith(".dat") and not os.path.islink(os.path.join(FORTUNES, f))
                   and os.path.isfile(os.path.join(FORTUNES, f)))
    if limit_files:
        names = names[:limit_files]
    docs = []
    for name in names:
        text = open(os.path.join(FORTUNES, name), encoding="utf-8").read()
        docs += [d.strip("\n") for d in text.split("\n%\n") if d.strip("\n")]
    return names, docs


class Checker:
    def __init__(self, amber):
        self.amber = amber
        self.failures = 0
        self.checks = 0

    def run(self, args, stdin):
        r = subprocess.run([self.amber] + args, input=stdin.encode("utf-8"), capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"amber {' '.join(args)} failed: {r.stderr.decode()}")
        return r.stdout.decode("utf-8")

    def encode(self, path, text):
        return json.loads(self.run(["tokenizer", "encode", "--tokenizer", path], text))

    def decode(self, path, ids):
        return self.run(["tokenizer", "decode", "--tokenizer", path], json.dumps(ids))

    def expect(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures += 1
            print("MISMATCH:", what)

    def compare(self, label, path, hf, texts, round_trip=True):
        """Same ids as `tokenizers`, same decoded text, and (unless a prefix space is
        added, which decoding keeps) decode(encode(x)) == x."""
        for text in texts + ["\n".join(texts)]:
            want = hf.encode(text, add_special_tokens=False).ids
            got = self.encode(path, text)
            self.expect(got == want, f"{label}: ids differ for {text[:60]!r}\n  hf:    {want}\n  amber: {got}")
            back = self.decode(path, got)
            self.expect(back == hf.decode(want, skip_special_tokens=False),
                        f"{label}: amber and tokenizers decode {text[:60]!r} differently")
            if round_trip:
                self.expect(back == text, f"{label}: decode(encode(x)) != x for {text[:60]!r}")
        print(f"{label}: {len(texts) + 1} texts compared")


def train_hf(docs, pre_tokenizer, vocab_size, **bpe):
    tok = Tokenizer(models.BPE(**bpe))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    return tok


def edit_json(src, dst, fn):
    j = json.load(open(src, encoding="utf-8"))
    fn(j)
    json.dump(j, open(dst, "w", encoding="utf-8"), ensure_ascii=False)
    return Tokenizer.from_file(dst)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amber", required=True, help="path of the amber binary")
    args = ap.parse_args()
    c = Checker(args.amber)
    files, docs = fortune_docs(limit_files=8)
    train_docs = docs + SAMPLE
    probe = SAMPLE + docs[:10] + [random_text(1, 3000), random_text(2, 3000)]
    with tempfile.TemporaryDirectory() as tmp:
        # (a) files made by `tokenizers`.
        gpt2 = train_hf(train_docs, pre_tokenizers.ByteLevel(add_prefix_space=False), 2000)
        p = os.path.join(tmp, "gpt2.json")
        gpt2.save(p)
        c.compare("hf gpt2 ByteLevel", p, gpt2, probe)

        p = os.path.join(tmp, "gpt2_prefix.json")
        gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        gpt2.save(p)
        c.compare("hf gpt2 ByteLevel add_prefix_space", p, gpt2, probe, round_trip=False)

        # Added tokens that swallow the whitespace beside them (RoBERTa's <mask> style).
        gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        gpt2.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False),
                                 AddedToken("<sep>", rstrip=True, normalized=False)])
        p = os.path.join(tmp, "gpt2_strip.json")
        gpt2.save(p)
        strip_probe = ["hello   <mask> world", "<mask>x", "a\t\n <mask>", "a <sep>   b", "<sep>\u3000\u00a0z <mask>",
                       "x  <mask><sep> \n y", "  <mask>  <sep>  "]
        c.compare("hf added tokens lstrip/rstrip", p, gpt2, strip_probe + probe[:5], round_trip=False)

        split = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        llama = train_hf(train_docs, split, 2000)
        p0 = os.path.join(tmp, "llama3_plain.json")
        llama.save(p0)
        c.compare("hf llama3 Split+ByteLevel", p0, llama, probe)

        # Unicode normalizers before the Llama-3 split (Qwen-family files use NFC).
        for form in ["NFC", "NFKC", "NFD"]:
            p = os.path.join(tmp, f"llama3_{form}.json")
            normed = edit_json(p0, p, lambda j: j.update(normalizer={"type": form}))
            changed = sum(normed.encode(t, add_special_tokens=False).ids != llama.encode(t, add_special_tokens=False).ids
                          for t in probe)
            c.expect(changed > 0, f"{form} changed no ids; the sample does not exercise it")
            c.compare(f"hf {form} + llama3 Split+ByteLevel", p, normed, probe, round_trip=False)

        # DeepSeek-V3 style: several Splits (digits, CJK runs, then words) before ByteLevel,
        # and "no normalizer" written as an empty normalizer Sequence.
        deepseek = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), behavior="isolated"),
            pre_tokenizers.Split(Regex("[一-龥\u3040-ゟ゠-ヿ]+"), behavior="isolated"),
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        ds = train_hf(train_docs, deepseek, 2000)
        p0 = os.path.join(tmp, "deepseek0.json")
        ds.save(p0)
        p = os.path.join(tmp, "deepseek.json")
        ds = edit_json(p0, p, lambda j: j.update(normalizer={"type": "Sequence", "normalizers": []}))
        c.compare("hf multi-Split+ByteLevel (DeepSeek style)", p, ds, probe)

        # A Split on a literal string (pattern {"String": ...}) rather than a regex.
        literal = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", behavior="isolated"),
                                           pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        lit = train_hf(train_docs, literal, 1500)
        p = os.path.join(tmp, "literal_split.json")
        lit.save(p)
        c.expect('"String"' in open(p, encoding="utf-8").read(), "the literal Split was saved as a String pattern")
        c.compare("hf Split(String)+ByteLevel", p, lit, probe)

        # ignore_merges only matters for vocabulary words the merges would not build, so
        # add whole words as tokens and check that the flag changes Hugging Face's ids.
        extra = ["Ġworld", "Ġtext", "Ġspaces", "ĠÅngstrÃ¶m", "Ġruns"]

        def with_ignore_merges(j):
            vocab = j["model"]["vocab"]
            for w in extra:
                if w not in vocab:
                    vocab[w] = len(vocab)
            j["model"]["ignore_merges"] = True

        p = os.path.join(tmp, "llama3.json")
        llama_im = edit_json(p0, p, with_ignore_merges)
        changed = sum(llama_im.encode(t, add_special_tokens=False).ids != llama.encode(t, add_special_tokens=False).ids
                      for t in probe)
        c.expect(changed > 0, "ignore_merges changed no ids; the test would not notice if amber ignored it")
        c.compare("hf llama3 ignore_merges", p, llama_im, probe)

        # Byte fallback: a character-level BPE trained on ASCII-heavy text, without the
        # byte alphabet, so accents, CJK and emoji must fall back to <0xXX> tokens.
        bf = Tokenizer(models.BPE(byte_fallback=True))
        bf.pre_tokenizer = pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated")
        bf.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIALS,
                                                         show_progress=False))
        pbf0 = os.path.join(tmp, "fallback0.json")
        bf.save(pbf0)

        def add_bytes(j):
            vocab = j["model"]["vocab"]
            for b in range(256):
                vocab.setdefault(f"<0x{b:02X}>", len(vocab))
            j["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}

        pbf = os.path.join(tmp, "fallback.json")
        bf = edit_json(pbf0, pbf, add_bytes)
        used = sum("<0x" in tok for t in probe for tok in bf.encode(t, add_special_tokens=False).tokens)
        c.expect(used > 0, "no byte-fallback token was used; the sample does not exercise byte fallback")
        c.compare("hf byte_fallback", pbf, bf, probe)

        # SentencePiece-style BPE (Llama-2, Mistral, Gemma): spaces spelled "▁", byte
        # fallback, <unk> fused. One model, trained with a Metaspace pre-tokenizer; the
        # other spellings edit the file's normalizer, pre-tokenizer and decoder.
        sp = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        sp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
        sp.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
        sp.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>"] + SPECIALS,
                                                         show_progress=False))
        psp0 = os.path.join(tmp, "metaspace0.json")
        sp.save(psp0)
        byte_decoders = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                         {"type": "ByteFallback"}, {"type": "Fuse"}]

        def spelling(normalizer, pre_tokenizer, decoder):
            def edit(j):
                vocab = j["model"]["vocab"]
                for b in range(256):
                    vocab.setdefault(f"<0x{b:02X}>", len(vocab))
                j["normalizer"], j["pre_tokenizer"], j["decoder"] = normalizer, pre_tokenizer, decoder
            return edit

        def metaspace(scheme, split):
            return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}

        space_to_bar = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
        variants = [
            ("Metaspace first, split (Mistral)", None, metaspace("first", True),
             {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace("first", True)]}),
            ("Metaspace always, unsplit", None, metaspace("always", False),
             {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace("always", False)]}),
            ("Prepend+Replace normalizer (Llama-2)",
             {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, space_to_bar]}, None,
             {"type": "Sequence", "decoders": byte_decoders + [{"type": "Strip", "content": " ", "start": 1,
                                                                "stop": 0}]}),
            ("Replace normalizer (Gemma)", space_to_bar, None, {"type": "Sequence", "decoders": byte_decoders}),
        ]
        for label, normalizer, pre, decoder in variants:
            p = os.path.join(tmp, "sp.json")
            hf = edit_json(psp0, p, spelling(normalizer, pre, decoder))
            used = sum("<0x" in tok for t in probe for tok in hf.encode(t, add_special_tokens=False).tokens)
            c.expect(used > 0, f"{label}: no byte-fallback token was used")
            # A prepended "▁" is taken off again only at the text's start, so texts that
            # begin with a space, or with an added token, do not come back unchanged.
            c.compare(f"hf SentencePiece-style: {label}", p, hf, probe, round_trip="Gemma" in label)

        # (b) files written by amber, loaded by `tokenizers`.
        inputs = [os.path.join(FORTUNES, f) for f in files]
        for style in ["llama3", "gpt2"]:
            p = os.path.join(tmp, f"amber_{style}.json")
            c.run(["tokenizer", "train", "--vocab-size", "3000", "--pretokenizer", style, "--special", "<|user|>",
                   "--out", p] + sum([["--input", f] for f in inputs], []), "")
            hf = Tokenizer.from_file(p)
            c.compare(f"amber {style} -> hf", p, hf, probe)

        # Round trip and agreement on the whole bundled corpus in one text.
        _, all_docs = fortune_docs()
        corpus = "\n".join(all_docs)
        p = os.path.join(tmp, "amber_llama3.json")
        ids = c.encode(p, corpus)
        c.expect(ids == Tokenizer.from_file(p).encode(corpus, add_special_tokens=False).ids,
                 "ids differ from tokenizers on the whole fortunes corpus")
        c.expect(c.decode(p, ids) == corpus, "decode(encode(corpus)) != corpus")
        print(f"whole corpus: {len(corpus)} chars, {len(ids)} tokens")

    print(f"{c.checks - c.failures} passed, {c.failures} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
