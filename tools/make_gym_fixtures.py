#!/usr/bin/env python3
"""Records Gymnasium trajectories that rlforge's C++ envs must reproduce.

For each env and episode: the start state, then per step the action, the env's
full state before the step, and what Gymnasium returned (obs, reward,
terminated, truncated) through gym.make (so TimeLimit applies). Actions come
from a seeded NumPy generator, or from a simple balancing controller so that
one CartPole episode runs into the 500-step time limit.

Usage (in the bench environment, bench/bench_env.py; the product never needs it):
    $(python3 bench/bench_env.py) tools/make_gym_fixtures.py tests/data/gym
"""
import json
import sys

import gymnasium as gym
import numpy as np


def balance(obs):
    # PD on the pole angle: keeps CartPole up for the whole time limit.
    return 1 if obs[2] + 0.5 * obs[3] > 0 else 0


def record(env_id, seed, policy, max_steps):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed + 1000)
    u = env.unwrapped
    start = [float(v) for v in np.asarray(u.state, dtype=np.float64)]
    steps = []
    for _ in range(max_steps):
        state = [float(v) for v in np.asarray(u.state, dtype=np.float64)]
        if policy == "balance":
            action = balance(obs)
        elif isinstance(env.action_space, gym.spaces.Discrete):
            action = int(rng.integers(env.action_space.n))
        else:
            action = rng.uniform(-2.5, 2.5, size=env.action_space.shape).astype(np.float32)
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append({
            "state": state,
            "action": action if isinstance(action, int) else [float(a) for a in action],
            "obs": [float(v) for v in obs],
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
        })
        if terminated or truncated:
            break
    return {"env": env_id, "seed": seed, "policy": policy, "start": start,
            "steps": steps}


def main(out_dir):
    episodes = {
        "cartpole": [record("CartPole-v1", 3, "random", 500),
                     record("CartPole-v1", 7, "balance", 600)],
        "pendulum": [record("Pendulum-v1", 5, "random", 300)],
        "acrobot": [record("Acrobot-v1", 11, "random", 600)],
    }
    for name, eps in episodes.items():
        path = f"{out_dir}/{name}.json"
        with open(path, "w") as f:
            json.dump({"gymnasium": gym.__version__, "numpy": np.__version__,
                       "episodes": eps}, f, separators=(",", ":"))
        print(path, [len(e["steps"]) for e in eps],
              [(e["steps"][-1]["terminated"], e["steps"][-1]["truncated"]) for e in eps])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gym")
