#!/usr/bin/env python3
"""Asynchronous GRPO (rollout.max_staleness k) against the synchronous loop, same seed.

Runs configs/grpo_arith_async.yaml with k = 0, 1, 2 in turn (k = 0 with grpo.off_policy none:
the synchronous loop as configs/grpo_arith.yaml runs it), each from the same SFT checkpoint and
seed, and prints per k: training samples/s (samples over the iterations' seconds, evaluation
excluded), the engine and trainer idle shares (means over iterations), the share of trained
samples whose tokens span more than one version (partial), the held-out accuracy
curve against wall-clock seconds, and when each k first reaches the accuracy k = 0 ends with.
With --partial, each k >= 1 runs a second time with rollout.partial true (partial rollouts:
engines take each load at once, started groups continue under the new weights), listed as
"<k>p". The ratios are measured in the same run of this script; other load on the machine
moves the absolute figures (say it with them).

    python3 bench/async_bench.py [--iterations 200] [--eval-every 25] [--seed 1]
        [--checkpoint runs/sft_arith_flawed/checkpoints/step_3000] [--ks 0 1 2] [--partial]
        [--set KEY=VALUE ...]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(a, k, partial=False):
    label = f"{k}p" if partial else f"{k}"
    name = f"async-bench-{os.getpid()}-k{label}"
    cmd = [a.rlforge, "run", "configs/grpo_arith_async.yaml", f"model.path={a.checkpoint}",
           f"job.iterations={a.iterations}", f"grpo.eval_every={a.eval_every}",
           f"grpo.eval_examples={a.eval_examples}", f"job.seed={a.seed}", f"job.name={name}",
           f"job.run_root={a.run_root}", f"rollout.max_staleness={k}"]
    if k == 0:
        cmd += ["grpo.off_policy=none", "grpo.is_cap=2"]
    if partial:
        cmd += ["rollout.partial=true"]
    cmd += a.set
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-4000:]}")
    recs = [json.loads(l) for l in open(os.path.join(a.run_root, name, "metrics.jsonl"))]
    steps = [r for r in recs if r["step"] > 0]
    train_s = sum(r["timings"]["iteration_s"] - r["timings"].get("eval_s", 0) for r in steps)
    samples = sum(r["timings"]["samples_per_s"] * r["timings"]["iteration_s"] for r in steps)
    mean = lambda key: sum(r["timings"].get(key, 0) for r in steps) / len(steps)
    curve = [(r["timings"].get("elapsed_s", 0), r["metrics"]["heldout_accuracy"]) for r in recs
             if "heldout_accuracy" in r["metrics"]]
    stale = sum(r["metrics"].get("stale_groups_discarded", 0) for r in steps)
    lag = max(r["metrics"].get("policy_version_lag", 0) for r in steps)
    partial = sum(r["metrics"].get("partial_samples", 0) for r in steps)
    return {"k": label, "samples_per_s": samples / train_s, "engine_idle": mean("engine_idle_share"),
            "trainer_idle": mean("trainer_idle_share"), "curve": curve, "stale": stale,
            "lag": lag, "partial": partial / samples}


def first_reach(curve, target):
    for t, acc in curve:
        if acc >= target:
            return t
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlforge", default=os.path.join(ROOT, "build", "rlforge"))
    ap.add_argument("--checkpoint", default="runs/sft_arith_flawed/checkpoints/step_3000")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-examples", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--run-root", default="/tmp/async_bench_runs")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="more overrides for every run, e.g. engine.max_batch=8")
    ap.add_argument("--partial", action="store_true",
                    help="also run each k >= 1 with rollout.partial true")
    a = ap.parse_args()
    results = []
    for k in a.ks:
        results.append(run(a, k))
        if a.partial and k >= 1:
            results.append(run(a, k, partial=True))
    base = results[0]
    target = base["curve"][-1][1]
    print(f"grpo_arith, {a.iterations} iterations, seed {a.seed}, held-out {a.eval_examples} "
          f"every {a.eval_every}; target accuracy {target:.3f} (k={base['k']}'s final)")
    print("k   samples/s  ratio  engine_idle  trainer_idle  max_lag  stale  partial  "
          "t_to_target_s")
    for r in results:
        t = first_reach(r["curve"], target)
        print(f"{r['k']:<2}  {r['samples_per_s']:9.1f}  {r['samples_per_s'] / base['samples_per_s']:5.2f}"
              f"  {r['engine_idle']:11.3f}  {r['trainer_idle']:12.3f}  {r['lag']:7.0f}"
              f"  {r['stale']:5.0f}  {r['partial']:7.3f}  {'-' if t is None else f'{t:.1f}'}")
    for r in results:
        pts = "  ".join(f"{t:.1f}s:{acc:.3f}" for t, acc in r["curve"])
        print(f"curve k={r['k']}: {pts}")


if __name__ == "__main__":
    main()
