#!/usr/bin/env python3
"""One LM training step (forward, backward, AdamW): rlforge (libtorch) vs PyTorch eager.

    /work/.venv-py/bin/python bench/lm_train_bench.py --build build --threads 1

Both sides train the same Llama-style model (GQA 8/4 heads, SwiGLU, RMSNorm, RoPE,
untied head) at ~10M and ~50M parameters on batch 4 x 256 tokens with cross-entropy,
grad-norm clipping and AdamW, at the same intra-op thread count. The PyTorch side is a
plain eager nn.Module written with the same math (transformers' LlamaForCausalLM is
timed too, as a second reference). Each side also times a 1024^3 fp32 matmul in its
own process: achieved FLOP/s is reported as a share of that peak. Prints a table and
the ratio rlforge / PyTorch step time (target <= 1.0).
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

SIZES = {
    "10m": dict(vocab=8192, hidden=256, inter=768, layers=8),
    "50m": dict(vocab=16384, hidden=512, inter=1408, layers=12),
}
HEADS, KV_HEADS, BATCH, SEQ = 8, 4, 4, 256


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
    def __init__(self, h, inter):
        super().__init__()
        self.d = h // HEADS
        self.ln1, self.ln2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, HEADS * self.d, bias=False)
        self.k = nn.Linear(h, KV_HEADS * self.d, bias=False)
        self.v = nn.Linear(h, KV_HEADS * self.d, bias=False)
        self.o = nn.Linear(HEADS * self.d, h, bias=False)
        self.gate = nn.Linear(h, inter, bias=False)
        self.up = nn.Linear(h, inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        g = HEADS // KV_HEADS
        hn = self.ln1(x)
        q = rotate(self.q(hn).view(B, T, HEADS, self.d).transpose(1, 2), cos, sin)
        k = rotate(self.k(hn).view(B, T, KV_HEADS, self.d).transpose(1, 2), cos, sin)
        v = self.v(hn).view(B, T, KV_HEADS, self.d).transpose(1, 2)
        s = q.reshape(B, KV_HEADS, g, T, self.d) @ k.unsqueeze(2).transpose(-1, -2)
        p = torch.softmax(s / math.sqrt(self.d) + mask, -1)
        out = (p @ v.unsqueeze(2)).reshape(B, HEADS, T, self.d).transpose(1, 2).reshape(B, T, -1)
        x = x + self.o(out)
        h2 = self.ln2(x)
        return x + self.down(F.silu(self.gate(h2)) * self.up(h2))


class Model(nn.Module):
    def __init__(self, vocab, hidden, inter, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, inter) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        d = hidden // HEADS
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        f = torch.arange(SEQ).float()[:, None] * inv
        emb = torch.cat([f, f], -1)
        self.cos, self.sin = emb.cos(), emb.sin()
        self.mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        return self.head(self.norm(x))


def step_flops(cfg, params_dense):
    attn = 12.0 * cfg["layers"] * BATCH * SEQ * SEQ * cfg["hidden"]
    return 6.0 * params_dense * BATCH * SEQ + attn


def matmul_peak():
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    best = 1e30
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * 1024 ** 3 / best


def time_steps(model, steps, vocab):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tokens = torch.randint(0, vocab, (BATCH, SEQ + 1))
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        out = model(inp)
        logits = out.logits if hasattr(out, "logits") else out
        loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i > 0:
            times.append((time.perf_counter() - t0, t1 - t0, t2 - t1, time.perf_counter() - t2))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sizes", nargs="+", default=["10m", "50m"])
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' LlamaForCausalLM")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cmd = [os.path.join(args.build, "bench", "lm_train_bench"), "--threads", str(args.threads),
           "--steps", str(args.steps)]
    for s in args.sizes:
        cmd += ["--size", s]
    ours = [json.loads(l) for l in subprocess.run(cmd, check=True, capture_output=True,
                                                    text=True).stdout.splitlines() if l.strip()]
    peak = matmul_peak()
    print(f"threads {args.threads}, batch {BATCH} x {SEQ} tokens, median of {args.steps} steps")
    print(f"matmul peak 1024^3 fp32: rlforge process {ours[0]['matmul_peak_flops'] / 1e9:.1f} "
          f"GFLOP/s, PyTorch {torch.__version__} process {peak / 1e9:.1f} GFLOP/s")
    rows = []
    for r in ours:
        cfg = SIZES[r["size"]]
        model = Model(cfg["vocab"], cfg["hidden"], cfg["inter"], cfg["layers"])
        n = sum(p.numel() for p in model.parameters())
        dense = n - cfg["vocab"] * cfg["hidden"]
        flops = step_flops(cfg, dense)
        t_pt, *split_pt = time_steps(model, args.steps, cfg["vocab"])
        t_hf = None
        if not args.no_hf:
            try:
                from transformers import LlamaConfig, LlamaForCausalLM
                hf = LlamaForCausalLM(LlamaConfig(
                    vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
                    intermediate_size=cfg["inter"], num_hidden_layers=cfg["layers"],
                    num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                    max_position_embeddings=1024, attn_implementation="eager"))
                t_hf = time_steps(hf, args.steps, cfg["vocab"])[0]
            except ImportError:
                pass
        rows.append((r, n, flops, t_pt, t_hf))
        print(f"{r['size']}: {n / 1e6:.1f}M params (rlforge counts {r['params'] / 1e6:.1f}M)")
        print(f"  rlforge  step {r['step_s'] * 1e3:8.1f} ms  {r['achieved_flops'] / 1e9:6.1f} "
              f"GFLOP/s  {100 * r['share_of_peak']:5.1f}% of its matmul peak  (fwd/bwd/opt "
              f"{r['forward_s'] * 1e3:.0f}/{r['backward_s'] * 1e3:.0f}/{r['optimizer_s'] * 1e3:.0f} ms)")
        print(f"  PyTorch  step {t_pt * 1e3:8.1f} ms  {flops / t_pt / 1e9:6.1f} GFLOP/s  "
              f"{100 * flops / t_pt / peak:5.1f}% of its matmul peak  (fwd/bwd/opt "
              f"{split_pt[0] * 1e3:.0f}/{split_pt[1] * 1e3:.0f}/{split_pt[2] * 1e3:.0f} ms)")
        if t_hf:
            print(f"  HF Llama step {t_hf * 1e3:8.1f} ms  {flops / t_hf / 1e9:6.1f} GFLOP/s")
        print(f"  rlforge / PyTorch time: {r['step_s'] / t_pt:.2f}x" +
              (f"   rlforge / HF Llama: {r['step_s'] / t_hf:.2f}x" if t_hf else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
