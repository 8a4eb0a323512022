#!/usr/bin/env python3
"""Trains tiny BPE tokenizers with Hugging Face `tokenizers` and records reference token ids.

rlforge's C++ tokenizer (models/tokenizer.h) must give exactly these ids and decode them back
to the original text. Three flavours cover the code paths:
  qwen2     NFC normalizer, Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=false), ChatML
            special tokens;
  gpt2      ByteLevel pre-tokenizer with its built-in GPT-2 regex;
  fallback  plain (not byte-level) BPE with byte_fallback and <0xXX> tokens, a small alphabet so
            rare characters fall back to bytes; decoder ByteFallback + Fuse;
  llama     SentencePiece-style BPE as Llama-2 / Mistral tokenizer.json files have it: normalizer
            Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, byte fallback, unk, decoder
            Replace + ByteFallback + Fuse + Strip;
  metaspace the newer conversion: Metaspace pre-tokenizer and decoder (prepend_scheme first).
Each is trained on tests/data/tokenizer/corpus.txt (written for this purpose) and saved as
OUT/<flavour>/tokenizer.json + tokenizer_config.json; OUT/reference.json holds the texts and ids.

With a small alphabet limit HF's trainer may break ties differently on a rerun (an equally
valid tokenizer): tokenizer.json and reference.json are always committed together.

Usage (the shared tooling venv; the product never needs it):
    $(python3 bench/bench_env.py) tools/make_tokenizer_fixtures.py tests/data/tokenizer
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
FALLBACK_PATTERN = r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"

# Texts whose ids must match exactly: unicode (seen and unseen), whitespace runs of every kind,
# digits, special tokens (alone, glued to words, repeated), contractions, empty.
TEXTS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "What is 12 + 345? The answer is 357.",
    "31415926535 and 2026-12-03, 1,000,000.5",
    "  two  spaces   three    four\tand\ttabs\n\nnewlines\r\nCRLF   \n  trailing   ",
    "\v vertical tab, \f form feed, \u00a0nbsp, \u3000ideographic space, \u2003em space",
    "Don't, it's, we'll, they're, I've, you'd, I'm, SHE'S, WE'LL",
    "caf\u00e9 na\u00efve Z\u00fcrich \u00c6r\u00f8sk\u00f8bing S\u00e3o Paulo Krak\u00f3w \u0130stanbul",
    "unseen: \u011f\u015f\u0131 \u00f1 \u0142\u00f3d\u017a \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "\u03b1\u03b2\u03b3 \u043f\u0440\u0438\u0432\u0435\u0442 \u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f \uc548\ub155",
    "emoji \U0001f642\U0001f680 \U0001f44d\U0001f3fd \U0001f980 \u00a9\u2122\u20ac\u2192\u221e",
    "combining e\u0301 vs \u00e9",
    "<|im_start|>user\nAdd 17 and 25.<|im_end|>\n<|im_start|>assistant\nThe answer is 42.<|im_end|>",
    "<|endoftext|><|endoftext|>glued<|im_end|>text <|im_start|> spaced",
    "<s>bos and eos</s> and a fake <|im_sta rt|> token",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }\n    return sum;",
    '{"prompt": "2+2=", "answer": "4"}',
    "x" * 40 + " " + "ab" * 20,
    "\n\n\n   \n\t\n",
]


def train(flavour, corpus):
    if flavour == "qwen2":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        config = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
    elif flavour == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        specials = ["<|endoftext|>"]
        trainer = trainers.BpeTrainer(vocab_size=380, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        config = {"eos_token": {"content": "<|endoftext|>", "special": True},
                  "bos_token": "<|endoftext|>"}
    elif flavour in ("llama", "metaspace"):
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        if flavour == "llama":
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                   normalizers.Replace(" ", "\u2581")])
            tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "),
                                             decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(" ", 1, 0)])
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                         prepend_scheme="first", split=True)
            tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(
                replacement="\u2581", prepend_scheme="first", split=True)])
        specials = ["<unk>", "<s>", "</s>"]
        trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials, show_progress=False,
                                      limit_alphabet=80)
        config = {"eos_token": "</s>", "bos_token": "<s>"}
    elif flavour == "fallback":
        tok = Tokenizer(models.BPE(byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(FALLBACK_PATTERN), behavior="isolated")
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
        specials = ["<unk>", "<s>", "</s>"]
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False,
                                      limit_alphabet=70)
        config = {"eos_token": "</s>", "bos_token": "<s>", "pad_token": "<unk>"}
    else:
        raise ValueError(flavour)
    # Without a pre-tokenizer (llama) the whole corpus would be one word: train per line.
    lines = corpus.split("\n") if flavour in ("llama", "metaspace") else [corpus]
    tok.train_from_iterator(lines, trainer=trainer)
    if flavour in ("fallback", "llama", "metaspace"):
        # Append the 256 byte tokens the way Llama-style vocabularies carry them.
        spec = json.loads(tok.to_str())
        vocab = spec["model"]["vocab"]
        next_id = max(vocab.values()) + 1
        for b in range(256):
            name = "<0x%02X>" % b
            if name not in vocab:
                vocab[name] = next_id
                next_id += 1
        tok = Tokenizer.from_str(json.dumps(spec))
    return tok, config


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/tokenizer"
    with open(os.path.join(out, "corpus.txt"), encoding="utf-8") as f:
        corpus = f.read()
    reference = {}
    for flavour in ["qwen2", "gpt2", "fallback", "llama", "metaspace"]:
        tok, config = train(flavour, corpus)
        d = os.path.join(out, flavour)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
            f.write("\n")
        cases = []
        for text in TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            back = tok.decode(ids, skip_special_tokens=False)
            cases.append({"text": text, "ids": ids, "decoded": back})
        reference[flavour] = {"vocab_size": tok.get_vocab_size(with_added_tokens=True),
                              "cases": cases}
        print(flavour, "vocab", tok.get_vocab_size(), "round-trips",
              sum(c["decoded"] == c["text"] for c in cases), "/", len(cases))
    with open(os.path.join(out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=True, indent=None)
        f.write("\n")


if __name__ == "__main__":
    main()
