#!/usr/bin/env python3
"""rlforge tokenizer vs Hugging Face `tokenizers` on the same text, same run, one thread.

Usage (the shared tooling venv has `tokenizers`):
    ninja -C build bench/tokenizer_bench   # or: ninja -C build tokenizer_bench
    $(python3 bench/bench_env.py) bench/tokenizer_bench.py build/bench/tokenizer_bench

Text: tests/data/tokenizer/corpus.txt repeated to ~1 MB, plus the reference texts. Checks
that both give the same ids, then prints encode throughput of each and the ratio.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
REPEATS = 5


def fnv(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/bench/tokenizer_bench")
    with open(os.path.join(DATA, "corpus.txt"), encoding="utf-8") as f:
        corpus = f.read()
    refs = json.load(open(os.path.join(DATA, "reference.json"), encoding="utf-8"))
    extra = "\n".join(c["text"] for c in refs["qwen2"]["cases"])
    text = (corpus + extra + "\n") * (1_000_000 // (len(corpus) + len(extra)) + 1)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    print("text: %.2f MB, %d repeats per measurement" % (len(text.encode()) / 1e6, REPEATS))
    print("encode throughput, one thread; ratio = rlforge speed / HF speed")
    print("%-9s %-6s %10s %10s %12s %8s %s" % ("flavour", "mode", "tokens", "hf MB/s",
                                             "rlforge MB/s", "ratio", "same ids"))
    lines = [l + "\n" for l in text.split("\n")[:-1]]
    for flavour in ["qwen2", "gpt2", "fallback", "llama", "metaspace"]:
        tok = Tokenizer.from_file(os.path.join(DATA, flavour, "tokenizer.json"))
        for mode in ["whole", "lines"]:
            t0 = time.perf_counter()
            for _ in range(REPEATS):
                if mode == "whole":
                    ids = tok.encode(text, add_special_tokens=False).ids
                else:
                    ids = [i for e in tok.encode_batch(lines, add_special_tokens=False)
                           for i in e.ids]
            hf_s = (time.perf_counter() - t0) / REPEATS
            args = [binary, os.path.join(DATA, flavour), path, str(REPEATS)]
            if mode == "lines":
                args.append("lines")
            ours = json.loads(subprocess.run(args, check=True, capture_output=True,
                                             text=True).stdout)
            mb = len(text.encode()) / 1e6
            print("%-9s %-6s %10d %10.2f %12.2f %7.2fx %s" % (
                flavour, mode, len(ids), mb / hf_s, mb / ours["encode_s"],
                hf_s / ours["encode_s"],
                ours["ids_fnv"] == fnv(ids) and ours["tokens"] == len(ids)))
    os.unlink(path)


if __name__ == "__main__":
    main()
