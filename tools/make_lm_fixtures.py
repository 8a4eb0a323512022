#!/usr/bin/env python3
"""Makes the tiny reference language models under tests/data/lm/ with transformers.

Run by hand (needs torch + transformers; e.g. the shared tooling venv):
    /work/.venv-py/bin/python tools/make_lm_fixtures.py

For each model it writes a Hugging Face checkpoint directory (config.json + safetensors,
the Qwen2 one sharded with an index) and reference.safetensors holding
  tokens [B, T] int64, logits [B, T, vocab] float32
computed by transformers in fp32 eager mode. The C++ test models/hf_crosscheck_test.cc
loads both and compares. Deterministic (fixed seeds); files are a few hundred KB.
"""
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "lm")


def make(name, model, vocab, seed, shard=None):
    out = os.path.join(ROOT, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    g = torch.Generator().manual_seed(seed)
    # Larger than the default init so logits vary a lot across tokens and positions.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.15)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    model.eval()
    kwargs = {"safe_serialization": True}
    if shard:
        kwargs["max_shard_size"] = shard
    model.save_pretrained(out, **kwargs)
    tokens = torch.randint(0, vocab, (2, 11), generator=g)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()
    save_file({"tokens": tokens.contiguous(), "logits": logits.contiguous()},
              os.path.join(out, "reference.safetensors"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, {size} bytes, "
          f"files {sorted(os.listdir(out))}")


def main():
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        attention_bias=False, bos_token_id=1, eos_token_id=2))
    llama.config._attn_implementation = "eager"
    make("llama_gqa", llama, 96, seed=1)

    qwen = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        use_sliding_window=False, bos_token_id=1, eos_token_id=2))
    qwen.config._attn_implementation = "eager"
    make("qwen2_tied", qwen, 96, seed=2, shard="60KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
