#!/usr/bin/env python3
"""Time to solve CartPole-v1 (mean return >= 475 over the last 20 episodes):
rlforge vs Stable-Baselines3 PPO vs CleanRL's ppo.py, side by side, same seeds.

SB3 runs with the same PPO hyperparameters as configs/ppo_cartpole.yaml (8 envs x
32 steps, 20 epochs, 1 minibatch, gamma 0.98, lambda 0.8, lr 1e-3 and clip 0.2
both annealed linearly, max grad norm 0.5); CleanRL with its own defaults (its
ppo.py has no linear clip schedule). Every run stops once solved; wall-clock is
measured around the whole command (process start, imports and env creation
included) and to the moment the solve is seen. Thread counts are pinned equal.

    python3 bench/ppo_time_to_solve.py [--seeds 1 2 3] [--venv DIR]

SB3 and CleanRL run in the bench environment (bench/bench_env.py, shared by every bench; first use makes it
and installs bench/requirements.txt, none of which is an rlforge dependency); CleanRL 1.2.0's ppo.py is taken
from its wheel into the venv folder on first use.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import zipfile

import bench_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREADS = "1"


def ensure_venv(venv):
    py = bench_env.ensure(venv)
    ppo = os.path.join(venv, "cleanrl_ppo.py")
    if not os.path.exists(ppo):
        d = os.path.join(venv, "cleanrl_wheel")
        subprocess.check_call([py, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--python-version", "3.10", "-d", d, "cleanrl==1.2.0"])
        whl = [f for f in os.listdir(d) if f.endswith(".whl")][0]
        with zipfile.ZipFile(os.path.join(d, whl)) as z, open(ppo, "wb") as out:
            out.write(z.read("cleanrl/ppo.py"))
    return py, ppo


def watch(cmd, parse_return, env=None, cwd=None):
    """Runs cmd; returns (seconds to solve or None, env steps at solve, total seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, cwd=cwd)
    window, solved = [], None
    for line in p.stdout:
        got = parse_return(line)
        if got is None:
            continue
        step, ret = got
        if ret == "solved":
            solved = solved or (time.monotonic() - t0, step)
            continue
        window = (window + [ret])[-20:]
        if solved is None and len(window) == 20 and sum(window) / 20 >= 475:
            solved = (time.monotonic() - t0, step)
            p.terminate()
    p.wait()
    total = time.monotonic() - t0
    return (solved[0], solved[1], total) if solved else (None, None, total)


SB3_SCRIPT = r'''
import sys, torch
torch.set_num_threads(int(sys.argv[2]))
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.callbacks import BaseCallback
seed = int(sys.argv[1])
class Solved(BaseCallback):
    def __init__(self):
        super().__init__(); self.returns = []
    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.returns = (self.returns + [info["episode"]["r"]])[-20:]
                print("step=%d return=%f" % (self.num_timesteps, info["episode"]["r"]), flush=True)
        return not (len(self.returns) == 20 and sum(self.returns) / 20 >= 475)
lin = lambda v: (lambda p: p * v)
env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98,
            gae_lambda=0.8, learning_rate=lin(1e-3), clip_range=lin(0.2), ent_coef=0.0,
            max_grad_norm=0.5, seed=seed, device="cpu", verbose=0)
model.learn(total_timesteps=200000, callback=Solved())
'''


def parse_sb3(line):
    m = re.match(r"step=(\d+) return=([-\d.]+)", line)
    return (int(m.group(1)), float(m.group(2))) if m else None


def parse_cleanrl(line):
    m = re.search(r"global_step=(\d+), episodic_return=([-\d.]+)", line)
    return (int(m.group(1)), float(m.group(2))) if m else None


def parse_rlforge(line):
    m = re.search(r"solved: mean return [-\d.]+ over the last \d+ episodes at (\d+) env steps", line)
    return (int(m.group(1)), "solved") if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--venv", default=bench_env.DEFAULT_VENV)
    ap.add_argument("--rlforge", default=os.path.join(ROOT, "build", "rlforge"))
    a = ap.parse_args()
    py, ppo = ensure_venv(a.venv)
    env = dict(os.environ, OMP_NUM_THREADS=THREADS, MKL_NUM_THREADS=THREADS)
    results = {"rlforge": [], "sb3": [], "cleanrl": []}
    for seed in a.seeds:  # interleaved per seed: noise hits all three alike
        r = watch([a.rlforge, "run", os.path.join(ROOT, "configs/ppo_cartpole.yaml"),
                   "job.run_root=/tmp/rlforge-bench-runs", f"job.name=ppo-s{seed}",
                   f"job.seed={seed}", "ppo.stop_when_solved=true", f"trainer.threads={THREADS}"],
                  parse_rlforge, env)
        results["rlforge"].append(r)
        results["sb3"].append(watch([py, "-c", SB3_SCRIPT, str(seed), THREADS], parse_sb3, env))
        results["cleanrl"].append(watch(
            [py, ppo, "--env-id", "CartPole-v1", "--total-timesteps", "500000", "--seed", str(seed),
             "--track", "False", "--capture-video", "False", "--cuda", "False"],
            parse_cleanrl, env, cwd="/tmp"))
        print(f"seed {seed}: " + ", ".join(f"{k} {v[-1]}" for k, v in results.items()), flush=True)
    print("\nCartPole-v1, time to mean return >= 475 over 20 episodes (seconds, env steps)")
    mean = {}
    for k, runs in results.items():
        solved = [x for x in runs if x[0] is not None]
        mean[k] = sum(x[0] for x in solved) / len(solved) if len(solved) == len(runs) else None
        cells = ["%.1f s @ %d" % (x[0], x[1]) if x[0] is not None else "not solved" for x in runs]
        print("%-8s %s   mean %s" % (k, " | ".join(cells), "%.1f s" % mean[k] if mean[k] else "-"))
    for k in ("sb3", "cleanrl"):
        if mean["rlforge"] and mean[k]:
            print("rlforge / %s time-to-solve: %.3fx" % (k, mean["rlforge"] / mean[k]))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
