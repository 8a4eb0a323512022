#!/usr/bin/env python3
"""Control PPO with rollout.max_staleness k against the synchronous loop, same seeds.

Runs a PPO config (configs/ppo_cartpole.yaml by default) with k = 0, 1, 2 for each seed, in
turn in this one run, and prints per k: env steps/s (env steps over the iterations' seconds)
and its ratio to k = 0, the trainer and stepper idle shares (means over iterations), the
largest version lag, the batches discarded as too stale, and the final episodic return
(mean of the last ppo.return_window episodes) over the seeds as min/median/max. Extra
arguments are dotted overrides for every run (e.g. sim.backend=server).

    python3 bench/ppo_async_bench.py [--seeds 1 2 3] [--ks 0 1 2] [--total-steps 100000]
        [--config configs/ppo_cartpole.yaml] [override ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def processor():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown processor"


def run(a, k, seed):
    name = f"ppo-async-bench-{os.getpid()}-k{k}-s{seed}"
    cmd = [a.rlforge, "run", a.config, f"ppo.total_steps={a.total_steps}", f"job.seed={seed}",
           f"job.name={name}", f"job.run_root={a.run_root}", f"rollout.max_staleness={k}"]
    cmd += a.overrides
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-4000:]}")
    recs = [json.loads(l) for l in open(os.path.join(a.run_root, name, "metrics.jsonl"))]
    steps = [r for r in recs if r["step"] > 0]
    seconds = sum(r["timings"]["iteration_s"] for r in steps)
    mean = lambda key: sum(r["timings"].get(key, 0) for r in steps) / len(steps)
    return {"steps_per_s": steps[-1]["metrics"]["env_steps"] / seconds,
            "trainer_idle": mean("trainer_idle_share"), "stepper_idle": mean("stepper_idle_share"),
            "lag": max(r["metrics"]["version_lag"] for r in steps),
            "stale": sum(r["metrics"].get("stale_batches_discarded", 0) for r in steps),
            "final_return": steps[-1]["metrics"].get("episodic_return", float("nan"))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlforge", default=os.path.join(ROOT, "build", "rlforge"))
    ap.add_argument("--config", default="configs/ppo_cartpole.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--total-steps", type=int, default=100000)
    ap.add_argument("--run-root", default="/tmp/ppo_async_bench_runs")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    # Seeds outermost: k = 0, 1, 2 of one seed run back to back, under the same load.
    by_k = {k: [] for k in a.ks}
    for seed in a.seeds:
        for k in a.ks:
            by_k[k].append(run(a, k, seed))
    base = statistics.mean(r["steps_per_s"] for r in by_k[a.ks[0]])
    print(f"{a.config} {' '.join(a.overrides)}, {a.total_steps} env steps, seeds {a.seeds}; "
          f"{processor()}, {os.cpu_count()} cpus (this machine's measurements)")
    print("k  env_steps/s  ratio  trainer_idle  stepper_idle  max_lag  stale  "
          "final_return min/median/max")
    for k in a.ks:
        rs = by_k[k]
        sps = statistics.mean(r["steps_per_s"] for r in rs)
        ret = sorted(r["final_return"] for r in rs)
        print(f"{k}  {sps:11.0f}  {sps / base:5.2f}  "
              f"{statistics.mean(r['trainer_idle'] for r in rs):12.3f}  "
              f"{statistics.mean(r['stepper_idle'] for r in rs):12.3f}  "
              f"{max(r['lag'] for r in rs):7.0f}  {sum(r['stale'] for r in rs):5.0f}  "
              f"{ret[0]:.1f}/{statistics.median(ret):.1f}/{ret[-1]:.1f}")


if __name__ == "__main__":
    main()
