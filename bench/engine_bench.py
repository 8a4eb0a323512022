#!/usr/bin/env python3
"""Generated tokens/s on a GRPO-shaped load: rlforge's rollout engine vs naive
generation without a KV cache vs Hugging Face transformers' generate().

    OPENBLAS_NUM_THREADS=1 $(python3 bench/bench_env.py) bench/engine_bench.py --build build \
        [--sizes 10m 50m] [--prompts 64] [--hf-batch 16]
    python bench/engine_bench.py --build build --sizes qwen0.5b --device cuda \
        --dtype bfloat16 --hf-batch 64     # on a GPU (launch/gpu-check runs this)

build/bench/engine_bench makes a ~10M / ~50M Llama-style model, or a Qwen2.5-0.5B-shaped
one (qwen0.5b), with random weights, saves it as a Hugging Face checkpoint, writes the
workload (prompts of 96-160 tokens, n = 8 samples each, one stop point per prompt, no
EOS: 32-256 new tokens at 10m / 50m, 256 at qwen0.5b, --max-new N for all) and times the
engine (prefix sharing on; prompt KV memory with and without sharing) and naive
full-recompute sampling on one group. This script then loads the same checkpoint into
transformers (AutoModelForCausalLM: Llama or Qwen2) and runs generate() (sampling,
temperature 1, its KV cache) over the same prompts, --hf-batch prompts x n samples per
call, prompts sorted by stop point so a call wastes little on its longest request; only
requested tokens are counted. --device and --dtype hold for both sides (the engine's
model is moved there; on a GPU it runs through the CUDA kernels). On the CPU every side
runs on one thread (OPENBLAS_NUM_THREADS=1 for rlforge's BLAS, torch.set_num_threads(1)
here). Prints a table; the targets are >= 3x transformers' tokens/s and >= 6x less
prompt KV memory with sharing at n = 8.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_hf(model_dir, workload, hf_batch, threads, device, dtype):
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    # Cast after loading, as the engine's model is: any transformers version, the same rounding.
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device=device, dtype=dtype).eval()
    prompts, max_new, n = workload["prompts"], workload["max_new"], workload["n"]
    order = sorted(range(len(prompts)), key=lambda p: -max_new[p])
    sync(device)
    tokens, t0 = 0, time.monotonic()
    for b in range(0, len(order), hf_batch):
        idx = order[b:b + hf_batch]
        width = max(len(prompts[p]) for p in idx)
        ids = torch.zeros(len(idx), width, dtype=torch.long)
        mask = torch.zeros(len(idx), width, dtype=torch.long)
        for i, p in enumerate(idx):  # left padding, as generate() wants for decoder-only models
            ids[i, width - len(prompts[p]):] = torch.tensor(prompts[p])
            mask[i, width - len(prompts[p]):] = 1
        longest = max(max_new[p] for p in idx)
        with torch.no_grad():
            model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                           do_sample=True, temperature=1.0,
                           top_k=0, top_p=1.0, max_new_tokens=longest, min_new_tokens=longest,
                           num_return_sequences=n, pad_token_id=0, eos_token_id=None)
        tokens += sum(max_new[p] * n for p in idx)
    sync(device)
    seconds = time.monotonic() - t0
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", nargs="+", default=["10m", "50m"],
                    choices=["10m", "50m", "qwen0.5b"])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--naive-tokens", type=int, default=32)
    ap.add_argument("--dir", default="/tmp/rlforge-engine-bench")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (both sides)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--cuda-graphs", type=int, default=1, choices=[0, 1],
                    help="on a GPU: decode steps replay CUDA graphs (and a run without them is "
                         "timed for comparison)")
    ap.add_argument("--max-new", type=int, default=-1,
                    help="new tokens of every prompt (-1: the size's own)")
    a = ap.parse_args()
    threads = 1
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    rows = []
    for size in a.sizes:
        out = subprocess.run(
            [os.path.join(a.build, "bench", "engine_bench"), "--size", size, "--dir", a.dir,
             "--threads", str(threads), "--prompts", str(a.prompts), "--n", str(a.n),
             "--naive-tokens", str(a.naive_tokens), "--device", a.device, "--dtype", a.dtype,
             "--max-new", str(a.max_new), "--cuda-graphs", str(a.cuda_graphs)],
            env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        with open(os.path.join(a.dir, f"workload-{size}.json")) as f:
            workload = json.load(f)
        r["hf"] = run_hf(r["model_dir"], workload, a.hf_batch, threads, torch.device(a.device),
                         getattr(torch, a.dtype))
        print(json.dumps(r), flush=True)
        rows.append(r)
    print()
    print(f"device {a.device}, dtype {a.dtype}, {a.prompts} prompts x n = {a.n}")
    print(f"{'model':>8} {'engine tok/s':>13} {'naive tok/s':>12} {'HF tok/s':>9} "
          f"{'engine/HF':>10} {'engine/naive':>13} {'prompt KV shared':>17} {'unshared':>9} "
          f"{'cut':>6}")
    for r in rows:
        e, h, nv = r["engine_shared"], r["hf"], r["naive"]
        cut = r["engine_unshared"]["prompt_kv_mib"] / e["prompt_kv_mib"]
        print(f"{r['size']:>8} {e['tokens_per_s']:>13.0f} {nv['tokens_per_s']:>12.1f} "
              f"{h['tokens_per_s']:>9.0f} {e['tokens_per_s'] / h['tokens_per_s']:>9.2f}x "
              f"{e['tokens_per_s'] / nv['tokens_per_s']:>12.1f}x {e['prompt_kv_mib']:>13.1f} MiB "
              f"{r['engine_unshared']['prompt_kv_mib']:>5.1f} MiB {cut:>5.2f}x")
    for r in rows:
        if "engine_shared_no_graphs" in r:
            e, off = r["engine_shared"], r["engine_shared_no_graphs"]
            print(f"{r['size']:>8} CUDA graphs: {e['tokens_per_s']:.0f} tok/s with "
                  f"({e['graph_steps']} of {e['steps']} steps replayed), "
                  f"{off['tokens_per_s']:.0f} tok/s without: "
                  f"{e['tokens_per_s'] / off['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
