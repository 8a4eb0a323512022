#!/usr/bin/env python3
"""Makes the tiny reference language models under tests/data/lm/ with transformers.

Run by hand (needs torch + transformers; e.g. the shared tooling venv):
    $(python3 bench/bench_env.py) tools/make_lm_fixtures.py [NAME ...]

For each model (all, or those named) it writes a Hugging Face checkpoint directory
(config.json + safetensors, some sharded with an index) and reference.safetensors holding
  tokens [B, T] int64, logits [B, T, vocab] float32   (one forward over the batch)
  incremental_logits [T, vocab] float32   (row 0 fed one token at a time with a KV cache)
  greedy_prompt [P], greedy_tokens [N] int64   (Qwen3 only: greedy generate, no stop token)
computed by transformers in fp32 eager mode. The C++ tests (models/hf_crosscheck_test.cc,
rollout/llm_engine_test.cc) load them and compare. Deterministic (fixed seeds); each
directory is a few hundred KB.
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import (AutoConfig, DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "lm")


def incremental_logits(model, tokens):
    """Row 0 of `tokens` fed one token at a time through a KV cache, as generation does."""
    cache = DynamicCache(config=model.config)
    out = []
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            step = model(input_ids=tokens[:1, t:t + 1], cache=cache, use_cache=True,
                         position_ids=torch.tensor([[t]]))
            out.append(step.logits[0, 0].float())
    return torch.stack(out)


def greedy(model, vocab, g):
    prompt = torch.randint(0, vocab, (1, 7), generator=g)
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        # An explicit mask: without one generate masks prompt tokens equal to pad_token_id.
        seq = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12,
                             do_sample=False, pad_token_id=0)
        # The margin between the two best logits along the path: a tie would make the
        # expected tokens depend on rounding.
        logits = model(input_ids=seq).logits[0, prompt.shape[1] - 1:-1]
    top2 = logits.topk(2, dim=-1).values
    print(f"  greedy: smallest top-2 logit margin {(top2[:, 0] - top2[:, 1]).min().item():.3f}")
    return {"greedy_prompt": prompt[0].contiguous(),
            "greedy_tokens": seq[0, prompt.shape[1]:].contiguous()}


def make(name, model, vocab, seed, shard=None, with_greedy=False, legacy_rope=None):
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
    if legacy_rope:
        write_legacy_rope(out, legacy_rope)
    tokens = torch.randint(0, vocab, (2, 11), generator=g)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()
    ref = {"tokens": tokens.contiguous(), "logits": logits.contiguous(),
           "incremental_logits": incremental_logits(model, tokens).contiguous()}
    if with_greedy:
        ref.update(greedy(model, vocab, g))
    save_file(ref, os.path.join(out, "reference.safetensors"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, {size} bytes, "
          f"files {sorted(os.listdir(out))}")


def write_legacy_rope(out, rope_scaling):
    """Rewrites config.json the way Qwen2.5 / Llama 3.x checkpoints ship it: top-level
    rope_theta and a rope_scaling object, no rope_parameters; checks transformers reads it
    back into the same RoPE."""
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    params = config.pop("rope_parameters")
    config["rope_theta"] = params["rope_theta"]
    config["rope_scaling"] = rope_scaling
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    again = dict(AutoConfig.from_pretrained(out).rope_parameters)
    again.pop("type", None)
    assert again == params, (again, params)


def llama(rope=None, tie=False, bias=False, max_pos=64):
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=max_pos,
        rope_parameters=rope or {"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-6, tie_word_embeddings=tie, attention_bias=bias, bos_token_id=1,
        eos_token_id=2))
    model.config._attn_implementation = "eager"
    return model


def qwen3(rope=None, tie=False, bias=False):
    # head_dim 24 is not hidden_size / heads (16), as in the real Qwen3 models.
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=128,
        rope_parameters=rope or {"rope_type": "default", "rope_theta": 1000000.0},
        rms_norm_eps=1e-6, tie_word_embeddings=tie, attention_bias=bias,
        use_sliding_window=False, bos_token_id=1, eos_token_id=2))
    model.config._attn_implementation = "eager"
    return model


# Llama 3.x: orig 64 with theta 1e4 and head_dim 8 puts frequencies in all three bands (kept,
# blended, divided by factor).
LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def build(name):
    if name == "llama_gqa":
        return llama(), 1, {}
    if name == "qwen2_tied":
        qwen = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
            use_sliding_window=False, bos_token_id=1, eos_token_id=2))
        qwen.config._attn_implementation = "eager"
        return qwen, 2, {"shard": "60KB"}
    if name == "qwen3_tied":
        return qwen3(tie=True), 3, {"with_greedy": True}
    if name == "qwen3_untied":  # with attention_bias: q/k/v and o_proj biases
        return qwen3(bias=True), 4, {"with_greedy": True, "shard": "100KB"}
    if name == "llama3_tied":
        return llama(LLAMA3, tie=True, max_pos=512), 5, {}
    if name == "llama3_untied":  # attention_bias, config.json as Llama 3.x ships it
        legacy = {k: v for k, v in LLAMA3.items() if k != "rope_theta"}
        return llama(LLAMA3, bias=True, max_pos=512), 6, {"legacy_rope": legacy}
    if name == "llama_linear":
        return llama({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.5}), 7, {}
    if name == "qwen2_yarn":  # as Qwen2.5 ships YaRN: rope_scaling with "type"
        qwen = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 64},
            rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False))
        qwen.config._attn_implementation = "eager"
        legacy = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
        return qwen, 8, {"legacy_rope": legacy}
    if name == "qwen3_yarn":  # every YaRN knob set
        return qwen3({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                      "original_max_position_embeddings": 16, "beta_fast": 16.0,
                      "beta_slow": 2.0, "mscale": 2.0, "mscale_all_dim": 1.0,
                      "truncate": False}), 9, {}
    if name == "llama_dynamic":  # max_position_embeddings 8 < the 11 tokens: scaling applies
        return llama({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
                     max_pos=8), 10, {}
    raise SystemExit(f"unknown fixture {name}")


NAMES = ["llama_gqa", "qwen2_tied", "qwen3_tied", "qwen3_untied", "llama3_tied", "llama3_untied",
         "llama_linear", "qwen2_yarn", "qwen3_yarn", "llama_dynamic"]


def main():
    for name in sys.argv[1:] or NAMES:
        torch.manual_seed(0)
        model, seed, kwargs = build(name)
        make(name, model, 96, seed=seed, **kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
