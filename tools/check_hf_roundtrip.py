#!/usr/bin/env python3
"""Checks that models saved by rlforge load in transformers and give the same logits.

Run by hand after building the tests (needs torch + transformers):
    /work/.venv-py/bin/python tools/check_hf_roundtrip.py [--build build]

It runs the C++ test HfExportTest.WritesModelsForTransformersCheck, which saves an
rlforge-initialised Llama (GQA, untied) and Qwen2 (qkv bias, tied, sharded) model plus
the logits rlforge computed, then loads each directory with AutoModelForCausalLM and
compares. Exit status 0 when every model matches within 1e-4 relative.
"""
import argparse
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
        good = rel < 1e-4
        ok &= good
        print(f"{name}: {type(model).__name__}, files {sorted(os.listdir(d))}, "
              f"max relative logit error {rel:.2e} -> {'OK' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
