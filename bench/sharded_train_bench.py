#!/usr/bin/env python3
"""Sharded training step: rlforge's sharded trainer vs PyTorch FSDP2, same model, batch, threads.

    /usr/bin/python3 bench/sharded_train_bench.py [--ranks 1 2] [--threads 1] [--batch 8] [--seq 128] \
        [--warmup 2] [--steps 5] [--seed 0] [--model-dir /tmp/rlforge-bench-50m] \
        [--rlforge-bin build/bench/sharded_train_bench] [--venv DIR] \
        [--out /tmp/sharded_train_bench.json]

Targets (the issue): step time at most 1.0x PyTorch FSDP2 at the same N; peak per-rank memory
(RSS increase) at N=2 at most 0.6x the N=1 run. Bytes communicated per step per rank are set
against the ideal 3 x params x 4 bytes x (N-1)/N (fp32 all-gather in forward, all-gather again
in backward, reduce-scatter of the gradients).

Model: a ~58.5M-parameter Llama decoder (RMSNorm, RoPE theta 10000, SwiGLU, GQA layout with
8 q / 8 kv heads of 64): vocab 32000, hidden 512, intermediate 1408, 8 layers, untied lm_head,
rms_norm_eps 1e-6, no biases; 58,466,816 parameters. It is plain torch.nn below: on these
weights its logits match transformers' LlamaForCausalLM to 2e-6 (checked once with
transformers 5.25, which this script does not need). Its config.json and random fp32 weights
(model.safetensors, Hugging Face names, normal(0, 0.02) from torch.Generator seed 0 in the
order of `param_shapes()`, norms ones) are written to --model-dir the first time; rlforge loads
the same directory.

The batch (both sides must produce exactly this): B = --batch sequences of S = --seq tokens,
    token[b][t] = ((1103515245 * (b * S + t + 1 + 7919 * seed) + 12345) mod 2^31) mod vocab_size
with exact integer arithmetic (the product needs 64 bits; b in [0, B), t in [0, S)). With N ranks,
rank r gets the global sequences b in [r * B/N, (r+1) * B/N) (B must divide by N).
Loss: next-token cross-entropy, mean over all B * (S-1) predicted tokens of the global batch
(positions 0..S-2 predict tokens 1..S-1; positions are 0..S-1 in every sequence; causal
attention, no padding). Each rank takes the mean over its own tokens; FSDP2 averages gradients
over ranks, which is the global mean since every rank has the same token count. The reported
loss of a step is that global mean, computed in the forward pass before the update.
Then clip_grad_norm_(1.0) on the global gradient and AdamW(lr 1e-5, betas (0.9, 0.999),
eps 1e-8, weight_decay 0).

FSDP2 (inside the venv): N processes (torch.multiprocessing spawn, gloo, 127.0.0.1, a free
port), each with torch.set_num_threads(--threads) and OMP/MKL/OPENBLAS_NUM_THREADS set to it,
the model built on the meta device, fully_shard on every decoder layer then on the root
(reshard_after_forward=True), the sharded parameters materialised and filled with each
rank's own rows of the safetensors file (so no rank ever holds the full model). --warmup
untimed steps, then --steps timed ones; each rank times forward+backward+clip+step+zero_grad
after a barrier, the step time is the max over ranks, the reported figure the median over steps.
Bytes: FSDP2 (torch 2.15) issues its collectives through torch.distributed.all_gather_single
and reduce_scatter_single (checked by wrapping every ProcessGroup method: nothing else is called
in a step), and clip_grad_norm_ on DTensor gradients all-reduces the per-parameter norms through
the functional collectives. Those entry points (and all_gather_into_tensor, reduce_scatter_tensor,
all_reduce, in case) are wrapped to count, per rank, the bytes a ring algorithm moves:
all-gather (N-1)/N x output bytes received, reduce-scatter (N-1)/N x input bytes sent,
all-reduce 2 (N-1)/N x bytes. At N=2 that is 18 all-gathers (9 groups: 8 layers + the root,
each gathered in forward and again in backward, the root too) of exactly the parameters, 9
reduce-scatters, and one all-reduce of 75 floats: 3 x params x 4 x (N-1)/N + 300 bytes.
At N=1 FSDP2 issues no collective at all.
Peak memory: VmHWM from /proc/self/status at the end, and its increase over VmRSS right after
`import torch` (before the process group and the model exist; PyPI's torch alone is ~570 MiB
of RSS, so the increase is the figure to compare). VmHWM includes the pages of the mmapped
safetensors file a rank read (its own rows only).

rlforge: `--rlforge-bin --model DIR --ranks N --threads T --batch B --seq S --warmup W --steps K
--seed SEED` with OMP/MKL/OPENBLAS_NUM_THREADS=T, printing one JSON line on stdout:
{"ranks":N,"step_s":[per timed step],"bytes_per_step":int,"peak_rss_bytes":[per rank],
 "base_rss_bytes":[per rank],"loss":[per step, warmup steps included]}.
If the binary is absent, only the FSDP2 side is run and the rlforge side is reported skipped.
Step-1 losses (the first step, before any update: same weights, same batch) must agree within
1e-4 relative.

The torch side runs in the bench environment (bench/bench_env.py, shared by every bench; first use makes it
and installs bench/requirements.txt, none of which is an rlforge dependency).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import bench_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "pretraining_tp": 1,
    "use_cache": True,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def param_shapes(c=CONFIG):
    """Hugging Face names and shapes, in the order the random weights are drawn."""
    h, i, d = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv, v = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    out = [("model.embed_tokens.weight", (v, h))]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (nh * d, h)),
                (p + "self_attn.k_proj.weight", (nkv * d, h)),
                (p + "self_attn.v_proj.weight", (nkv * d, h)),
                (p + "self_attn.o_proj.weight", (h, nh * d)),
                (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (i, h)),
                (p + "mlp.up_proj.weight", (i, h)),
                (p + "mlp.down_proj.weight", (h, i))]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return out


def num_params():
    n = 0
    for _, shape in param_shapes():
        k = 1
        for s in shape:
            k *= s
        n += k
    return n


def batch_tokens(batch, seq, seed, vocab):
    """The benchmark batch as nested lists (see the module docstring)."""
    return [[((1103515245 * (b * seq + t + 1 + 7919 * seed) + 12345) % (1 << 31)) % vocab
             for t in range(seq)] for b in range(batch)]


# --- torch side (runs inside the venv) ---
def build_model_class():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, n, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))
            self.eps = eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self, c):
            super().__init__()
            h, d = c["hidden_size"], c["head_dim"]
            self.nh, self.nkv, self.d = c["num_attention_heads"], c["num_key_value_heads"], d
            self.q_proj = nn.Linear(h, self.nh * d, bias=False)
            self.k_proj = nn.Linear(h, self.nkv * d, bias=False)
            self.v_proj = nn.Linear(h, self.nkv * d, bias=False)
            self.o_proj = nn.Linear(self.nh * d, h, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, self.nh, self.d).transpose(1, 2)
            k = self.k_proj(x).view(b, s, self.nkv, self.d).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.nkv, self.d).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if self.nkv != self.nh:  # GQA: each kv head serves nh/nkv query heads
                k = k.repeat_interleave(self.nh // self.nkv, dim=1)
                v = v.repeat_interleave(self.nh // self.nkv, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(o.transpose(1, 2).reshape(b, s, self.nh * self.d))

    class MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            h, i = c["hidden_size"], c["intermediate_size"]
            self.gate_proj = nn.Linear(h, i, bias=False)
            self.up_proj = nn.Linear(h, i, bias=False)
            self.down_proj = nn.Linear(i, h, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class DecoderLayer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
            self.self_attn = Attention(c)
            self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
            self.mlp = MLP(c)

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Decoder(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
            self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["num_hidden_layers"]))
            self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    class LlamaForCausalLM(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            self.model = Decoder(c)
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

        def forward(self, ids):
            d = self.c["head_dim"]
            inv_freq = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
            freqs = torch.arange(ids.shape[1], dtype=torch.float32)[:, None] * inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
            x = self.model.embed_tokens(ids)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            return self.lm_head(self.model.norm(x))

    return LlamaForCausalLM


def make_model(model_dir, seed=0):
    import torch
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in param_shapes():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape)
        else:
            tensors[name] = torch.empty(shape).normal_(0.0, 0.02, generator=g)
    os.makedirs(model_dir, exist_ok=True)
    tmp = os.path.join(model_dir, f".model.safetensors.{os.getpid()}")
    save_file(tensors, tmp, metadata={"format": "pt"})
    os.chmod(tmp, 0o644)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    os.replace(tmp, os.path.join(model_dir, "model.safetensors"))


def rss_bytes(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def fsdp_rank(rank, a, port, result_dir):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    base_rss = rss_bytes("VmRSS")  # after imports, before the process group and the model

    torch.set_num_threads(a.threads)
    n = a.ranks
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n)

    # Count what each collective moves per rank (ring algorithms); only while `counting`.
    counter = {"on": False, "bytes": 0.0, "calls": {}}
    frac = (n - 1) / n

    def count(name, nbytes):
        if counter["on"]:
            counter["bytes"] += nbytes
            counter["calls"][name] = counter["calls"].get(name, 0) + 1

    def wrap(name, fn, nbytes):
        def wrapped(*args, **kw):
            count(name, nbytes(*args, **kw))
            return fn(*args, **kw)
        return wrapped

    nb = lambda t: t.numel() * t.element_size()
    dist.all_gather_single = wrap("all_gather_single", dist.all_gather_single,
                                  lambda out, inp, *r, **k: frac * nb(out))
    dist.all_gather_into_tensor = wrap("all_gather_into_tensor", dist.all_gather_into_tensor,
                                       lambda out, inp, *r, **k: frac * nb(out))
    dist.reduce_scatter_single = wrap("reduce_scatter_single", dist.reduce_scatter_single,
                                      lambda *r, **k: frac * nb(k.get("input", r[1] if len(r) > 1 else None)))
    dist.reduce_scatter_tensor = wrap("reduce_scatter_tensor", dist.reduce_scatter_tensor,
                                      lambda out, inp, *r, **k: frac * nb(inp))
    dist.all_reduce = wrap("all_reduce", dist.all_reduce, lambda t, *r, **k: 2 * frac * nb(t))
    # DTensor's Partial -> Replicate (clip_grad_norm_'s total norm) uses functional collectives.
    import torch.distributed._functional_collectives as funcol
    funcol.all_reduce = wrap("funcol.all_reduce", funcol.all_reduce, lambda t, *r, **k: 2 * frac * nb(t))
    funcol.all_gather_single = wrap("funcol.all_gather_single", funcol.all_gather_single,
                                    lambda t, *r, **k: frac * n * nb(t))
    funcol.reduce_scatter_single = wrap("funcol.reduce_scatter_single", funcol.reduce_scatter_single,
                                        lambda t, *r, **k: frac * nb(t))

    Model = build_model_class()
    with torch.device("meta"):
        model = Model(CONFIG)
    for layer in model.model.layers:
        fully_shard(layer, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)
    model.to_empty(device="cpu")

    # Fill each rank's shard from the file: FSDP2 shards dim 0 as torch.chunk does.
    from safetensors import safe_open
    names = dict(model.named_parameters())
    with safe_open(os.path.join(a.model_dir, "model.safetensors"), framework="pt") as f, torch.no_grad():
        assert sorted(f.keys()) == sorted(names), "checkpoint names differ from the model's"
        for name, p in names.items():
            assert isinstance(p, DTensor)
            full = f.get_slice(name)
            rows = full.get_shape()[0]
            per = -(-rows // n)
            lo, hi = min(rank * per, rows), min((rank + 1) * per, rows)
            local = p.to_local()
            assert local.shape[0] == hi - lo, (name, local.shape, lo, hi)
            if hi > lo:
                local.copy_(full[lo:hi])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    assert a.batch % n == 0, "--batch must divide by the rank count"
    per_rank = a.batch // n
    toks = batch_tokens(a.batch, a.seq, a.seed, CONFIG["vocab_size"])
    ids = torch.tensor(toks[rank * per_rank:(rank + 1) * per_rank], dtype=torch.int64)

    step_s, losses, step_bytes, calls = [], [], [], []
    for step in range(a.warmup + a.steps):
        dist.barrier()
        counter["on"], counter["bytes"], counter["calls"] = True, 0.0, {}
        t0 = time.perf_counter()
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_s.append(time.perf_counter() - t0)
        counter["on"] = False
        step_bytes.append(counter["bytes"])
        calls.append(counter["calls"])
        del logits
        l = loss.detach().clone()
        dist.all_reduce(l)  # not counted: outside the step
        losses.append(l.item() / n)

    peak = rss_bytes("VmHWM")
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "step_s": step_s, "loss": losses, "bytes": step_bytes, "calls": calls,
                   "base_rss_bytes": base_rss, "peak_rss_bytes": peak}, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fsdp_worker(a):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(fsdp_rank, args=(a, free_port(), d), nprocs=a.ranks, join=True)
        ranks = [json.load(open(os.path.join(d, f"rank{r}.json"))) for r in range(a.ranks)]
    w = a.warmup
    bytes_per_step = [r["bytes"][w:] for r in ranks]
    out = {"ranks": a.ranks,
           "step_s": [max(r["step_s"][i] for r in ranks) for i in range(w, w + a.steps)],
           "loss": ranks[0]["loss"],
           # per rank, timed steps; each step moves the same bytes (asserted by the driver)
           "bytes_per_step": max(max(b) for b in bytes_per_step),
           "bytes_per_step_all": bytes_per_step,
           "calls_per_step": ranks[0]["calls"][w],
           "peak_rss_bytes": [r["peak_rss_bytes"] for r in ranks],
           "base_rss_bytes": [r["base_rss_bytes"] for r in ranks],
           "step_s_per_rank": [r["step_s"] for r in ranks]}
    json.dump(out, open(a.result, "w"))


# --- driver ---
def thread_env(n):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(n)
    return env


def ensure_venv(venv):
    py = bench_env.ensure(venv)
    return py, bench_env.versions(py, ["torch", "safetensors"])


def quiet_run(cmd, env, capture=False):
    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p.stdout


def cpu_busy_s():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def measured(job):
    """Runs job; adds the cores others kept busy meanwhile (the machine is shared)."""
    t0, busy0, own0 = time.monotonic(), cpu_busy_s(), os.times()
    run = job()
    own1 = os.times()
    own = sum(own1[k] - own0[k] for k in range(4))  # this script + its waited-for children
    run["foreign_cores"] = max(0.0, (cpu_busy_s() - busy0 - own) / (time.monotonic() - t0))
    return run


def run_fsdp(a, py, n):
    result = f"/tmp/sharded_train_bench_{os.getpid()}_fsdp{n}.json"
    cmd = [py, os.path.abspath(__file__), "--fsdp-worker", "--ranks", str(n), "--threads", str(a.threads),
           "--batch", str(a.batch), "--seq", str(a.seq), "--warmup", str(a.warmup), "--steps", str(a.steps),
           "--seed", str(a.seed), "--model-dir", a.model_dir, "--result", result]
    quiet_run(cmd, thread_env(a.threads))
    r = json.load(open(result))
    os.unlink(result)
    b = [x for per in r["bytes_per_step_all"] for x in per]
    assert max(b) - min(b) < 1, f"bytes per step differ between steps or ranks: {b}"
    return r


def run_rlforge(a, n):
    cmd = [a.rlforge_bin, "--model", a.model_dir, "--ranks", str(n), "--threads", str(a.threads),
           "--batch", str(a.batch), "--seq", str(a.seq), "--warmup", str(a.warmup), "--steps", str(a.steps),
           "--seed", str(a.seed)]
    lines = [l for l in quiet_run(cmd, thread_env(a.threads)).splitlines() if l.strip().startswith("{")]
    r = json.loads(lines[-1])
    assert r["ranks"] == n and len(r["peak_rss_bytes"]) == n and len(r["base_rss_bytes"]) == n, r
    assert len(r["step_s"]) == a.steps, f"expected {a.steps} timed steps: {r['step_s']}"
    assert len(r["loss"]) == a.warmup + a.steps, f"expected warmup + steps losses: {r['loss']}"
    return r


def summarize(r):
    inc = [p - b for p, b in zip(r["peak_rss_bytes"], r["base_rss_bytes"])]
    return {"step_s": statistics.median(r["step_s"]), "bytes": r["bytes_per_step"], "peak_inc": inc,
            "peak_inc_max": max(inc), "peak_abs_max": max(r["peak_rss_bytes"]), "loss1": r["loss"][0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--batch", type=int, default=8, help="global sequences per step")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="batch seed (the weights always use seed 0)")
    ap.add_argument("--model-dir", default="/tmp/rlforge-bench-50m")
    ap.add_argument("--rlforge-bin", default=os.path.join(ROOT, "build", "bench", "sharded_train_bench"))
    ap.add_argument("--venv", default=bench_env.DEFAULT_VENV)
    ap.add_argument("--out", default="/tmp/sharded_train_bench.json")
    ap.add_argument("--fsdp-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--make-model", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.make_model:
        return make_model(a.model_dir)
    if a.fsdp_worker:
        a.ranks = a.ranks[0]
        return fsdp_worker(a)

    a.model_dir = os.path.abspath(a.model_dir)
    py, versions = ensure_venv(a.venv)
    if not (os.path.exists(os.path.join(a.model_dir, "model.safetensors"))
            and os.path.exists(os.path.join(a.model_dir, "config.json"))):
        print(f"writing config.json and random weights to {a.model_dir}", flush=True)
        quiet_run([py, os.path.abspath(__file__), "--make-model", "--model-dir", a.model_dir], thread_env(a.threads))
    P = num_params()
    have_rlforge = os.access(a.rlforge_bin, os.X_OK)

    results = {}
    for n in a.ranks:
        rows = {}
        if have_rlforge:
            rows["rlforge"] = measured(lambda: run_rlforge(a, n))
            print(f"N={n} rlforge: median step {statistics.median(rows['rlforge']['step_s']):.3f} s", flush=True)
        rows["fsdp2"] = measured(lambda: run_fsdp(a, py, n))
        print(f"N={n} FSDP2: median step {statistics.median(rows['fsdp2']['step_s']):.3f} s, losses "
              + " ".join(f"{x:.6f}" for x in rows["fsdp2"]["loss"]), flush=True)
        results[n] = rows

    mib = lambda x: x / 2**20
    print(f"\n{P:,} parameters ({mib(4 * P):.1f} MiB fp32), batch {a.batch} x {a.seq} tokens, {a.threads} torch "
          f"thread(s) per rank, {a.warmup} warm-up + {a.steps} timed steps; step time = median over steps of the "
          f"slowest rank; torch {versions['torch']} (gloo)")
    if not have_rlforge:
        print(f"rlforge side skipped: {a.rlforge_bin} not found")
    sides = (["rlforge"] if have_rlforge else []) + ["fsdp2"]
    label = {"rlforge": "rlforge", "fsdp2": "FSDP2"}
    print("\n| N | rlforge step s | FSDP2 step s | rlforge/FSDP2 (target <= 1.0) | others' load (cores) rlforge, FSDP2 |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    summ = {n: {s: summarize(results[n][s]) for s in sides} for n in a.ranks}
    for n in a.ranks:
        f = summ[n]["fsdp2"]
        if have_rlforge:
            r = summ[n]["rlforge"]
            print(f"| {n} | {r['step_s']:.3f} | {f['step_s']:.3f} | {r['step_s'] / f['step_s']:.2f} "
                  f"| {results[n]['rlforge']['foreign_cores']:.2f}, {results[n]['fsdp2']['foreign_cores']:.2f} |")
        else:
            print(f"| {n} | skipped | {f['step_s']:.3f} | - | -, {results[n]['fsdp2']['foreign_cores']:.2f} |")

    print("\n| N | side | bytes/step/rank | ideal 3 x params x 4 x (N-1)/N | / ideal |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for n in a.ranks:
        ideal = 3 * P * 4 * (n - 1) / n
        for s in sides:
            b = summ[n][s]["bytes"]
            print(f"| {n} | {label[s]} | {b:,.0f} ({mib(b):.1f} MiB) | {ideal:,.0f} ({mib(ideal):.1f} MiB) "
                  f"| {b / ideal:.3f} |" if ideal else f"| {n} | {label[s]} | {b:,.0f} | 0 | - |")

    print("\n| N | side | peak RSS increase per rank MiB | peak RSS per rank MiB (absolute) |")
    print("| ---: | --- | --- | --- |")
    for n in a.ranks:
        for s in sides:
            r = results[n][s]
            print(f"| {n} | {label[s]} | {', '.join(f'{mib(x):.0f}' for x in summ[n][s]['peak_inc'])} "
                  f"| {', '.join(f'{mib(x):.0f}' for x in r['peak_rss_bytes'])} |")
    if 1 in a.ranks:
        for n in [x for x in a.ranks if x > 1]:
            for s in sides:
                ratio = summ[n][s]["peak_inc_max"] / summ[1][s]["peak_inc_max"]
                ratio_abs = summ[n][s]["peak_abs_max"] / summ[1][s]["peak_abs_max"]
                print(f"{label[s]} peak per-rank RSS increase N={n}/N=1: {ratio:.2f}x (target <= 0.6x); "
                      f"absolute peak: {ratio_abs:.2f}x")

    print()
    for n in a.ranks:
        f = summ[n]["fsdp2"]["loss1"]
        line = f"N={n} step-1 loss: FSDP2 {f:.6f}"
        if have_rlforge:
            r = summ[n]["rlforge"]["loss1"]
            rel = abs(r - f) / abs(f)
            line += f", rlforge {r:.6f}, relative difference {rel:.2e} ({'OK' if rel <= 1e-4 else 'MISMATCH'}, tolerance 1e-4)"
        print(line)
    if len(a.ranks) > 1:
        l1 = [summ[n]["fsdp2"]["loss1"] for n in a.ranks]
        print(f"FSDP2 step-1 loss spread across N: {(max(l1) - min(l1)) / abs(l1[0]):.2e} relative")
    for n in a.ranks:
        print(f"FSDP2 N={n} collectives per step per rank: {results[n]['fsdp2']['calls_per_step']}")

    json.dump({"versions": versions, "args": vars(a), "params": P,
               "results": {str(n): results[n] for n in a.ranks}}, open(a.out, "w"), indent=1)
    print(f"raw per-step numbers: {a.out}")


if __name__ == "__main__":
    sys.exit(main())
