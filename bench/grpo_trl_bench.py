#!/usr/bin/env python3
"""GRPO iteration throughput: rlforge vs TRL's GRPOTrainer, same checkpoint, task and batch.

    python3 bench/grpo_trl_bench.py [--rounds 3] [--steps 20] [--warmup 2] \
        [--trl-threads 2 1] [--rlforge-set trainer.threads=2] [--venv DIR] \
        [--out /tmp/grpo_trl_bench.json]

Both sides run configs/grpo_arith.yaml's job from its SFT checkpoint
(runs/sft_arith_flawed/checkpoints/step_3000): 1-2 digit +/- problems ("12+34=" -> "46"),
exact-match reward, 16 prompts x 8 samples per iteration, at most grpo.max_new_tokens new
tokens, temperature 1, one AdamW step per iteration (lr 1e-4, beta2 0.99, grad norm 1,
no KL, clip 0.2/0.28, token-mean loss = TRL's "dapo", std-scaled group advantages).
TRL gets the very same prompts in the same order (rlforge's arithmetic stream is ported
below) so response lengths match too. Rounds alternate rlforge and TRL because the
machine is shared and noisy; each round reports its own ratio.

rlforge: `build/rlforge run configs/grpo_arith.yaml` for warmup+steps+1 iterations; the
first `warmup` iterations are dropped and so is the last (it always runs a held-out
evaluation, so it has eval_s > 0; grpo.eval_every=0 means no other one). Timings come
from metrics.jsonl. Its 3 actors (rollout, trainer, reward) take turns on the 2 cores with
trainer.threads=1 torch threads each; it runs twice per round: with the environment as
it is (as `launch/rlforge run` does; OpenBLAS then adds one thread per core) and with
OMP/OPENBLAS_NUM_THREADS=1 (strictly 1 thread per actor). Ratios use both.
TRL: one process, torch.set_num_threads(N) with OMP/MKL/OPENBLAS_NUM_THREADS=N, for each
N in --trl-threads; wall-clock between consecutive optimizer steps (TrainerCallback),
first `warmup` steps dropped.
Tokens are generated completion tokens up to and including eos on both sides (rlforge:
the samples' token count; TRL: sum of completion_mask, which TRL cuts after the first eos).

TRL runs in the bench environment (bench/bench_env.py, shared by every bench; first use makes it
and installs bench/requirements.txt, none of which is an rlforge dependency).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import bench_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CKPT = "runs/sft_arith_flawed/checkpoints/step_3000"
M64 = (1 << 64) - 1


# --- rlforge's arithmetic stream (controller/arith_task.cc), so TRL sees the same prompts ---
def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def fnv1a(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def arith_train_example(seed, index, ops=("+", "-"), heldout_fraction=0.1):
    """ArithmeticTask::Example(seed, kTrain, index) for 1-2 digits, no negative answers."""
    base = splitmix64(splitmix64(seed) ^ 0x7261696E) ^ splitmix64(index)
    attempt = 0
    while True:
        state = splitmix64((base + attempt) & M64)
        attempt += 1

        def nxt():
            nonlocal state
            state = splitmix64(state)
            return state

        def uniform(lo, hi):
            return lo + nxt() % (hi - lo + 1)

        def operand():
            d = uniform(1, 2)
            return uniform(0 if d == 1 else 10, 10 ** d - 1)

        a = operand()
        b = operand()
        op = ops[nxt() % len(ops)]
        if op == "-" and a < b:
            a, b = b, a
        if (splitmix64(fnv1a(f"{a}{op}{b}")) >> 11) * 2.0 ** -53 < heldout_fraction:
            continue  # held out: not a training problem
        return f"{a}{op}{b}=", str(a + b if op == "+" else a - b)


# --- TRL side (runs inside the venv, as `--trl-worker`) ---
def char_tokenizer(ckpt):
    """An HF fast tokenizer equal to rlforge's char tokenizer (models/tokenizer.cc):
    ids = specials then chars in file order, one token per character, bos prepended by the
    post-processor (TaskText::Encode prepends bos), eos as stop. transformers cannot read
    the "rlforge-char" tokenizer.json itself (it has no "model")."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    spec = json.load(open(os.path.join(ckpt, "tokenizer.json")))
    names = json.load(open(os.path.join(ckpt, "tokenizer_config.json")))
    name = lambda k: names[k]["content"] if isinstance(names.get(k), dict) else names.get(k)
    vocab = {t: i for i, t in enumerate(spec["special_tokens"] + spec["chars"])}
    unk = name("unk_token") or spec.get("unk_token")
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.add_special_tokens(spec["special_tokens"])
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    bos = name("bos_token")
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=name("eos_token"), bos_token=bos,
                                 pad_token=name("pad_token") or name("eos_token"), unk_token=unk)

    def rlforge_encode(text):  # the reference: CharTokenizer::Encode + TaskText::Encode
        return ([vocab[bos]] if bos else []) + [vocab.get(c, vocab[unk]) for c in text]
    return hf, rlforge_encode


def trl_worker(a):
    threads = a.threads
    import torch
    torch.set_num_threads(threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok, ref_encode = char_tokenizer(a.checkpoint)
    total = a.warmup + a.steps
    rows = [arith_train_example(a.seed, i) for i in range(total * a.prompts)]
    for p, _ in rows[:200]:
        assert tok(p)["input_ids"] == ref_encode(p), (p, tok(p)["input_ids"], ref_encode(p))
    model = AutoModelForCausalLM.from_pretrained(a.checkpoint, dtype=torch.float32)
    assert model.config.eos_token_id in (None, tok.eos_token_id), "eos differs between model and tokenizer"

    t = {"generate": 0.0, "reward": 0.0, "rollout": 0.0, "tokens": 0}
    raw_generate = model.generate

    def generate(*args, **kw):
        t0 = time.perf_counter()
        out = raw_generate(*args, **kw)
        t["generate"] += time.perf_counter() - t0
        return out
    model.generate = generate  # TRL calls the unwrapped model's generate (no DDP on CPU)

    def exact(completions, answer, **_):
        t0 = time.perf_counter()
        r = [float(c.strip() == ans) for c, ans in zip(completions, answer)]
        t["reward"] += time.perf_counter() - t0
        return r

    cfg = GRPOConfig(
        output_dir="/tmp/grpo_trl_bench_out", use_cpu=True, seed=a.seed, max_steps=total,
        per_device_train_batch_size=a.prompts * a.group, gradient_accumulation_steps=1,
        num_generations=a.group, max_completion_length=a.max_new_tokens, temperature=1.0,
        top_p=1.0, top_k=0, learning_rate=1e-4, adam_beta2=0.99, weight_decay=0.0,
        max_grad_norm=1.0, warmup_steps=20, lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": 0.1}, beta=0.0, num_iterations=1, epsilon=0.2,
        epsilon_high=0.28, loss_type="dapo", scale_rewards="group", shuffle_dataset=False,
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0, bf16=False, fp16=False)
    ds = Dataset.from_list([{"prompt": p, "answer": ans} for p, ans in rows])
    trainer = GRPOTrainer(model=model, args=cfg, reward_funcs=[exact], train_dataset=ds,
                          processing_class=tok)

    raw_rollout = trainer._generate_and_score_completions

    def rollout(inputs):  # tokenize, generate, decode, reward, advantages: TRL's rollout phase
        t0 = time.perf_counter()
        out = raw_rollout(inputs)
        t["rollout"] += time.perf_counter() - t0
        t["tokens"] += int(out["completion_mask"].sum())
        return out
    trainer._generate_and_score_completions = rollout

    steps = []

    class Clock(TrainerCallback):
        def __init__(self):
            self.last_end = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):
            self.begin = time.perf_counter()
            for k in t:
                t[k] = 0

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            steps.append({"step_s": now - self.last_end, "in_step_s": now - self.begin,
                          "generate_s": t["generate"], "reward_s": t["reward"],
                          "rollout_s": t["rollout"], "tokens": t["tokens"]})
            self.last_end = now
    trainer.add_callback(Clock())
    trainer.train()
    json.dump({"threads": threads, "steps": steps[a.warmup:]}, open(a.result, "w"))


# --- driver ---
def ensure_venv(venv):
    py = bench_env.ensure(venv)
    return py, bench_env.versions(py, ["torch", "transformers", "trl"])


def thread_env(n):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(n)
    return env


def quiet_run(cmd, env):
    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-4000:]}")


def run_rlforge(a, tag, pinned):
    name = f"grpo-trl-bench-{os.getpid()}-{tag}{'-pinned' if pinned else ''}"
    cmd = [a.rlforge, "run", "configs/grpo_arith.yaml", f"model.path={a.checkpoint}",
           f"job.iterations={a.warmup + a.steps + 1}", "grpo.eval_every=0", "grpo.eval_examples=16",
           f"job.seed={a.seed}", f"job.name={name}", f"job.run_root={a.run_root}", *a.rlforge_set]
    # Unpinned is how `launch/rlforge run` runs it: trainer.threads=1 sets torch's intra-op
    # threads, but OpenBLAS (which libtorch uses here) still starts one thread per core.
    env = thread_env(1) if pinned else dict(os.environ)
    quiet_run(cmd, env)
    recs = [json.loads(l) for l in open(os.path.join(a.run_root, name, "metrics.jsonl"))]
    recs = [r for r in recs if r["step"] > a.warmup]  # step 0 is the evaluation-only record
    assert recs[-1]["timings"].get("eval_s", 0) > 0 and all(r["timings"].get("eval_s", 0) == 0 for r in recs[:-1])
    steps = []
    for r in recs[:-1]:  # the last iteration holds the final evaluation
        tm = r["timings"]
        steps.append({"step_s": tm["iteration_s"], "generate_s": tm["generate_s"], "reward_s": tm["reward_s"],
                      "rollout_s": tm["rollout_wall_s"], "train_s": tm["train_s"],
                      "weight_sync_s": tm["weight_sync_s"], "controller_share": tm["controller_share"],
                      "tokens": tm["tokens_per_s"] * tm["iteration_s"]})
    env = "OMP/OPENBLAS_NUM_THREADS=1" if pinned else "default env"
    return {"system": f"rlforge ({' '.join([env, *a.rlforge_set])})", "steps": steps}


def run_trl(a, py, threads, tag):
    result = f"/tmp/grpo_trl_bench_{os.getpid()}_{tag}.json"
    cmd = [py, os.path.abspath(__file__), "--trl-worker", "--threads", str(threads), "--result", result,
           "--checkpoint", a.checkpoint, "--steps", str(a.steps), "--warmup", str(a.warmup), "--seed", str(a.seed),
           "--max-new-tokens", str(a.max_new_tokens), "--prompts", str(a.prompts), "--group", str(a.group)]
    quiet_run(cmd, thread_env(threads))
    steps = json.load(open(result))["steps"]
    for s in steps:  # train: the rest of the optimizer step; other: between steps (data loader, callbacks)
        s["train_s"] = s["in_step_s"] - s["rollout_s"]
    return {"system": f"TRL GRPOTrainer ({threads} thread{'s' if threads > 1 else ''})", "steps": steps}


def cpu_busy_s():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def measured(job):
    """Runs job; adds the CPU others used meanwhile (cores busy outside this benchmark):
    the machine is shared, and that load is what makes rounds differ."""
    t0, busy0, own0 = time.monotonic(), cpu_busy_s(), os.times()
    run = job()
    own1 = os.times()
    own = sum(own1[k] - own0[k] for k in range(4))  # this script + its waited-for children
    run["foreign_cores"] = max(0.0, (cpu_busy_s() - busy0 - own) / (time.monotonic() - t0))
    return run


def summarize(run, samples):
    med = lambda k: statistics.median(s[k] for s in run["steps"])
    it = med("step_s")
    row = {"system": run["system"], "iteration_s": it, "mean_iteration_s": statistics.mean(s["step_s"] for s in run["steps"]),
           "samples_per_s": samples / it, "tokens_per_s": statistics.median(s["tokens"] / s["step_s"] for s in run["steps"]),
           "rollout_s": med("rollout_s"), "generate_s": med("generate_s"), "reward_s": med("reward_s"),
           "train_s": med("train_s"), "foreign_cores": run["foreign_cores"]}
    if "controller_share" in run["steps"][0]:
        row["weight_sync_s"] = med("weight_sync_s")
        row["other_s"] = statistics.median(s["controller_share"] * s["step_s"] for s in run["steps"])
        row["controller_share"] = med("controller_share")
    else:
        row["weight_sync_s"] = 0.0
        row["other_s"] = statistics.median(s["step_s"] - s["in_step_s"] for s in run["steps"])
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="measured iterations per run")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--trl-threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=6, help="configs/grpo_arith.yaml grpo.max_new_tokens")
    ap.add_argument("--checkpoint", default=CKPT)
    ap.add_argument("--rlforge", default=os.path.join(ROOT, "build", "rlforge"))
    ap.add_argument("--rlforge-set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra rlforge overrides, e.g. trainer.threads=2")
    ap.add_argument("--run-root", default="/tmp/grpo-trl-bench-runs")
    ap.add_argument("--venv", default=bench_env.DEFAULT_VENV)
    ap.add_argument("--out", default="/tmp/grpo_trl_bench.json")
    ap.add_argument("--trl-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.trl_worker:
        return trl_worker(a)
    a.checkpoint = os.path.abspath(os.path.join(ROOT, a.checkpoint))
    py, versions = ensure_venv(a.venv)
    samples = a.prompts * a.group
    rounds = []
    for r in range(a.rounds):
        plan = [lambda: run_rlforge(a, f"r{r}", False), lambda: run_rlforge(a, f"r{r}", True)]
        plan += [lambda n=n: run_trl(a, py, n, f"r{r}t{n}") for n in a.trl_threads]
        runs = [measured(job) for job in plan]
        rows = [summarize(x, samples) for x in runs]
        # each rlforge variant (rows[0]: as launched) against each TRL configuration
        ratios = {f"{x['system']} / {y['system']}": x["samples_per_s"] / y["samples_per_s"]
                  for x in rows[:2] for y in rows[2:]}
        rounds.append({"rows": rows, "ratios": ratios, "runs": runs})
        print(f"round {r + 1}: " + ", ".join(f"{x['system']} {x['iteration_s']:.3f} s/it" for x in rows)
              + " | " + ", ".join(f"{k}: {v:.2f}x" for k, v in ratios.items()), flush=True)

    print(f"\n{samples} samples/iteration, {a.steps} iterations per run after {a.warmup} warm-up, {a.rounds} rounds; "
          f"torch {versions['torch']}, transformers {versions['transformers']}, trl {versions['trl']}\n")
    print("| round | system | iteration s (median) | samples/s | tokens/s | rollout s | generate s | train s "
          "| weight sync s | other ms | others' load (cores) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, rd in enumerate(rounds):
        for x in rd["rows"]:
            print(f"| {i + 1} | {x['system']} | {x['iteration_s']:.3f} | {x['samples_per_s']:.0f} | {x['tokens_per_s']:.0f} "
                  f"| {x['rollout_s']:.3f} | {x['generate_s']:.3f} | {x['train_s']:.3f} | {x['weight_sync_s']:.3f} "
                  f"| {1000 * x['other_s']:.2f} | {x['foreign_cores']:.2f} |")
    print()
    for name in rounds[0]["ratios"]:
        per = [rd["ratios"][name] for rd in rounds]
        print(f"{name} samples/s: per round {', '.join(f'{v:.2f}x' for v in per)}; "
              f"median {statistics.median(per):.2f}x (target >= 2x)")
    shares = [rd["rows"][0]["controller_share"] for rd in rounds]
    print(f"rlforge controller share (median per round): {', '.join(f'{100 * s:.3f}%' for s in shares)} (target < 2%)")
    json.dump({"versions": versions, "args": vars(a), "rounds": rounds}, open(a.out, "w"), indent=1)
    print(f"raw per-step numbers: {a.out}")


if __name__ == "__main__":
    sys.exit(main())
