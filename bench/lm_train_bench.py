#!/usr/bin/env python3
"""One LM training step (forward, backward, AdamW): rlforge (libtorch) vs PyTorch eager.

    $(python3 bench/bench_env.py) bench/lm_train_bench.py --build build --threads 1
    python bench/lm_train_bench.py --build build --device cuda --dtype bfloat16 \
        --sizes qwen0.5b --steps 3        # on a GPU (launch/gpu-check runs this)

Both sides train the same model with cross-entropy, grad-norm clipping and AdamW, at the
same intra-op thread count: Llama-style (GQA 8/4 heads, SwiGLU, RMSNorm, RoPE, untied
head) at ~10M and ~50M parameters on batch 4 x 256 tokens, or Qwen2.5-0.5B's shape
(qwen0.5b: 14/2 heads, q/k/v bias, tied embeddings) on 8 x 512 (--batch, --seq override
both sides). The PyTorch side is a plain eager nn.Module written with the same math
(transformers' LlamaForCausalLM / Qwen2ForCausalLM is timed too, as a second reference).
--device puts both sides' model, optimizer and batch there; --dtype bfloat16 makes
parameters, gradients and AdamW state bf16 on both. Each side also times a matmul in its
own process (1024^3 fp32 on the CPU, 8192^3 in --dtype on a GPU): achieved FLOP/s is
reported as a share of that peak. On a GPU every timed split waits for the device. Prints
a table and the ratio rlforge / PyTorch step time (target <= 1.0).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

LLAMA = dict(heads=8, kv_heads=4, bias=False, tied=False, theta=10000.0, batch=4, seq=256)
SIZES = {  # bench/bench_models.cc's shapes
    "10m": dict(LLAMA, vocab=8192, hidden=256, inter=768, layers=8),
    "50m": dict(LLAMA, vocab=16384, hidden=512, inter=1408, layers=12),
    "qwen0.5b": dict(vocab=151936, hidden=896, inter=4864, layers=24, heads=14, kv_heads=2,
                     bias=True, tied=True, theta=1000000.0, batch=8, seq=512),
}


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, inter, bias = cfg["hidden"], cfg["inter"], cfg["bias"]
        self.heads, self.kv_heads = cfg["heads"], cfg["kv_heads"]
        self.d = h // self.heads
        self.ln1, self.ln2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, self.heads * self.d, bias=bias)
        self.k = nn.Linear(h, self.kv_heads * self.d, bias=bias)
        self.v = nn.Linear(h, self.kv_heads * self.d, bias=bias)
        self.o = nn.Linear(self.heads * self.d, h, bias=False)
        self.gate = nn.Linear(h, inter, bias=False)
        self.up = nn.Linear(h, inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        H, KV = self.heads, self.kv_heads
        hn = self.ln1(x)
        q = rotate(self.q(hn).view(B, T, H, self.d).transpose(1, 2), cos, sin)
        k = rotate(self.k(hn).view(B, T, KV, self.d).transpose(1, 2), cos, sin)
        v = self.v(hn).view(B, T, KV, self.d).transpose(1, 2)
        s = q.reshape(B, KV, H // KV, T, self.d) @ k.unsqueeze(2).transpose(-1, -2)
        p = torch.softmax(s / math.sqrt(self.d) + mask, -1)
        out = (p @ v.unsqueeze(2)).reshape(B, H, T, self.d).transpose(1, 2).reshape(B, T, -1)
        x = x + self.o(out)
        h2 = self.ln2(x)
        return x + self.down(F.silu(self.gate(h2)) * self.up(h2))


class Model(nn.Module):
    def __init__(self, cfg, seq):
        super().__init__()
        vocab, hidden = cfg["vocab"], cfg["hidden"]
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["layers"]))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        if cfg["tied"]:
            self.head.weight = self.embed.weight
        d = hidden // cfg["heads"]
        inv = 1.0 / (cfg["theta"] ** (torch.arange(0, d, 2).float() / d))
        f = torch.arange(seq).float()[:, None] * inv
        emb = torch.cat([f, f], -1)
        # Buffers, so .to(device, dtype) moves them with the parameters.
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1),
                             persistent=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        return self.head(self.norm(x))


def step_flops(cfg, params_dense, batch, seq):
    attn = 12.0 * cfg["layers"] * batch * seq * seq * cfg["hidden"]
    return 6.0 * params_dense * batch * seq + attn


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device, dtype):
    n = 8192 if device.type == "cuda" else 1024
    dtype = dtype if device.type == "cuda" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    a @ b
    sync(device)
    best = 1e30
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def time_steps(model, steps, vocab, batch, seq, device):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        out = model(inp)
        logits = out.logits if hasattr(out, "logits") else out
        loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1))
        sync(device)
        t1 = time.perf_counter()
        loss.backward()
        sync(device)
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync(device)
        if i > 0:
            times.append((time.perf_counter() - t0, t1 - t0, t2 - t1, time.perf_counter() - t2))
    times.sort()
    return times[len(times) // 2]


def hf_model(cfg, seq):
    """transformers' own model of the shape (eager attention), or None where it is absent."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    except ImportError:
        return None
    common = dict(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
                  intermediate_size=cfg["inter"], num_hidden_layers=cfg["layers"],
                  num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                  max_position_embeddings=max(1024, seq), rope_theta=cfg["theta"],
                  tie_word_embeddings=cfg["tied"], attn_implementation="eager")
    if cfg["bias"]:  # Qwen2: q/k/v bias
        return "HF Qwen2", Qwen2ForCausalLM(Qwen2Config(**common))
    return "HF Llama", LlamaForCausalLM(LlamaConfig(**common))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sizes", nargs="+", default=["10m", "50m"], choices=list(SIZES))
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (both sides)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batch", type=int, default=0, help="rows per step (0: the size's own)")
    ap.add_argument("--seq", type=int, default=0, help="tokens per row (0: the size's own)")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' model")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)

    cmd = [os.path.join(args.build, "bench", "lm_train_bench"), "--threads", str(args.threads),
           "--steps", str(args.steps), "--device", args.device, "--dtype", args.dtype,
           "--batch", str(args.batch), "--seq", str(args.seq)]
    for s in args.sizes:
        cmd += ["--size", s]
    ours = [json.loads(l) for l in subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                                                    text=True).stdout.splitlines() if l.strip()]
    peak = matmul_peak(device, dtype)
    print(f"device {args.device}, dtype {args.dtype}, threads {args.threads}, "
          f"median of {args.steps} steps")
    print(f"matmul peak: rlforge process {ours[0]['matmul_peak_flops'] / 1e9:.1f} "
          f"GFLOP/s, PyTorch {torch.__version__} process {peak / 1e9:.1f} GFLOP/s")
    for r in ours:
        cfg = SIZES[r["size"]]
        batch, seq = r["batch"], r["seq"]
        model = Model(cfg, seq).to(device, dtype)
        n = sum(p.numel() for p in model.parameters())  # a tied matrix once
        dense = n - (0 if cfg["tied"] else cfg["vocab"] * cfg["hidden"])  # the head is a matmul
        flops = step_flops(cfg, dense, batch, seq)
        t_pt, *split_pt = time_steps(model, args.steps, cfg["vocab"], batch, seq, device)
        del model
        hf = None if args.no_hf else hf_model(cfg, seq)
        t_hf = None
        if hf:
            t_hf = time_steps(hf[1].to(device, dtype), args.steps, cfg["vocab"], batch, seq,
                              device)[0]
        print(f"{r['size']}: {n / 1e6:.1f}M params (rlforge counts {r['params'] / 1e6:.1f}M), "
              f"batch {batch} x {seq} tokens")
        print(f"  rlforge  step {r['step_s'] * 1e3:8.1f} ms  {r['achieved_flops'] / 1e9:6.1f} "
              f"GFLOP/s  {100 * r['share_of_peak']:5.1f}% of its matmul peak  (fwd/bwd/opt "
              f"{r['forward_s'] * 1e3:.0f}/{r['backward_s'] * 1e3:.0f}/{r['optimizer_s'] * 1e3:.0f} ms)")
        print(f"  PyTorch  step {t_pt * 1e3:8.1f} ms  {flops / t_pt / 1e9:6.1f} GFLOP/s  "
              f"{100 * flops / t_pt / peak:5.1f}% of its matmul peak  (fwd/bwd/opt "
              f"{split_pt[0] * 1e3:.0f}/{split_pt[1] * 1e3:.0f}/{split_pt[2] * 1e3:.0f} ms)")
        if t_hf:
            print(f"  {hf[0]} step {t_hf * 1e3:8.1f} ms  {flops / t_hf / 1e9:6.1f} GFLOP/s")
        print(f"  rlforge / PyTorch time: {r['step_s'] / t_pt:.2f}x" +
              (f"   rlforge / {hf[0]}: {r['step_s'] / t_hf:.2f}x" if t_hf else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
