#!/usr/bin/env python3
"""Checks that models saved by rlforge load in transformers and give the same logits.

Run by hand after building the tests (needs torch + transformers):
    $(python3 bench/bench_env.py) tools/check_hf_roundtrip.py [--build build]

It runs the C++ test HfExportTest.WritesModelsForTransformersCheck, which saves
rlforge-initialised models (models/hf_crosscheck_test.cc ExportConfigs: Llama with GQA,
Qwen2 with qkv bias, tied and sharded, Qwen3 with q/k norms and attention biases, and
Llama / Qwen3 with llama3, yarn, linear and dynamic RoPE scaling) plus the logits rlforge
computed, then loads each directory with AutoModelForCausalLM and compares its config.json
reading and logits. Exit status 0 when every model matches within 1e-4 relative.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="rlforge_hf_check_")
    test = os.path.join(args.build, "models", "transformer_test")
    subprocess.run([test, "--gtest_filter=HfExportTest.*"], check=True,
                   env=dict(os.environ, RLFORGE_HF_EXPORT_DIR=out), stdout=subprocess.DEVNULL)
    ok = True
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        ref = load_file(os.path.join(d, "rlforge_reference.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=ref["tokens"]).logits.float()
        rel = ((logits - ref["logits"]).abs().max() / ref["logits"].abs().max()).item()
        # Every RoPE key rlforge wrote is what transformers took.
        with open(os.path.join(d, "config.json")) as f:
            written = json.load(f).get("rope_scaling") or {"rope_type": "default"}
        read = model.config.rope_parameters
        rope_ok = all(read.get(k) == v for k, v in written.items())
        good = rel < 1e-4 and rope_ok
        ok &= good
        print(f"{name}: {type(model).__name__}, rope {read['rope_type']}"
              f"{'' if rope_ok else f' (wrote {written}, read {read})'}, "
              f"max relative logit error {rel:.2e} -> {'OK' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
