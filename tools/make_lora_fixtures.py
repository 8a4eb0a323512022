#!/usr/bin/env python3
"""Makes the LoRA cross-check fixture under tests/data/lora/ with transformers and peft.

Run by hand, in the bench environment (bench/bench_env.py: torch, transformers, peft,
safetensors):
    $(python3 bench/bench_env.py) tools/make_lora_fixtures.py
    $(python3 bench/bench_env.py) tools/make_lora_fixtures.py --check-saved DIR [--base DIR]

It writes a tiny Llama (tied embeddings, as SmolLM2) as an HF checkpoint (base/), a peft LoRA
adapter on it (adapter/: rank 4, alpha 8, q/v/o/gate/down projections, lora_B random so the
adapter changes the output) saved by peft's save_pretrained, and reference.safetensors:
  tokens [2, 9] int64, targets [2, 9] int64, logits [2, 9, vocab] float32 (peft model, fp32),
  loss [] float32 (token-mean cross entropy of targets), and for every adapter tensor its
  gradient under the name peft saves it with plus the suffix ".grad".
models/lora_test.cc loads them and compares rlforge's adapter forward and gradients.

--check-saved DIR loads an adapter directory that rlforge wrote (`rlforge export --adapter`
or a run's checkpoint) with peft's PeftModel.from_pretrained on the base model (the fixture's,
or --base), and prints the largest logit difference between peft's merged and unmerged
forward; exit 1 unless peft's adapter holds exactly the file's tensors, values equal.
Deterministic (fixed seeds); the directory is about 100 KB.
"""
import argparse
import os
import shutil
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "lora")
TARGETS = ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"]


def tiny_llama():
    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=37, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                         attn_implementation="eager")
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def make():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    base = tiny_llama()
    base.save_pretrained(os.path.join(ROOT, "base"), safe_serialization=True)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS, bias="none",
                     task_type="CAUSAL_LM", init_lora_weights=False)
    torch.manual_seed(6)
    model = get_peft_model(base, cfg)
    with torch.no_grad():  # peft's init_lora_weights=False: B random too; make it larger
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    model.save_pretrained(os.path.join(ROOT, "adapter"))
    os.remove(os.path.join(ROOT, "adapter", "README.md"))  # peft's model card template
    torch.manual_seed(7)
    tokens = torch.randint(0, 37, (2, 9))
    targets = torch.randint(0, 37, (2, 9))
    model.train()
    logits = model(input_ids=tokens).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 37), targets.reshape(-1))
    loss.backward()
    out = {"tokens": tokens, "targets": targets, "logits": logits.detach().contiguous(),
           "loss": loss.detach().reshape(())}
    for n, p in model.named_parameters():
        if "lora_" in n:
            # peft saves "base_model.model.<module>.lora_A.weight" (adapter name dropped)
            out[n.replace(".default", "") + ".grad"] = p.grad.detach().contiguous()
    save_file(out, os.path.join(ROOT, "reference.safetensors"))
    print("wrote", ROOT)


def check_saved(adapter_dir, base_dir):
    base = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir)
    saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    state = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
    if set(state) != set(saved):
        print("tensors peft expects but the file lacks, or the reverse:",
              sorted(set(state) ^ set(saved)))
        return 1
    for k, v in saved.items():
        if not torch.equal(state[k], v):
            print("peft did not load", k)
            return 1
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, base.config.vocab_size, (2, 9), generator=gen)
    model.eval()
    with torch.no_grad():
        unmerged = model(input_ids=tokens).logits
        merged = model.merge_and_unload()(input_ids=tokens).logits
    print(f"peft loaded {adapter_dir}; merged vs unmerged max |diff| "
          f"{(merged - unmerged).abs().max().item():.3g}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-saved")
    ap.add_argument("--base", default=os.path.join(ROOT, "base"))
    a = ap.parse_args()
    if a.check_saved:
        return check_saved(a.check_saved, a.base)
    make()
    return 0


if __name__ == "__main__":
    sys.exit(main())
