#!/usr/bin/env python3
"""A pure-Python CartPole served to rlforge over sim_bridge: the "plug in your own
simulator" example. No gymnasium, no numpy: any object with Gymnasium's API works.

    python3 sim_bridge/python/examples/cartpole_py.py --bind tcp://127.0.0.1:5555 --num-envs 8

In a job file, let the controller start it (it fills in {bind} and {num_envs}); env.id names
what it serves (a server of another env than env.id is refused):

    env:
      id: PyCartPole-v0
    sim:
      backend: server
      command: [python3, sim_bridge/python/examples/cartpole_py.py,
                --bind, "{bind}", --num-envs, "{num_envs}"]
"""
import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rlforge_sim import serve  # noqa: E402


class Box:
    def __init__(self, low, high):
        self.low, self.high, self.shape = low, high, (len(low),)


class Discrete:
    def __init__(self, n):
        self.n = n


class PyCartPole:
    """Classic cart-pole: push left or right to keep the pole up."""

    def __init__(self):
        big = 3.4e38
        self.observation_space = Box([-4.8, -big, -0.42, -big], [4.8, big, 0.42, big])
        self.action_space = Discrete(2)
        self.rng = random.Random()
        self.state = [0.0] * 4

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng.seed(seed)
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        return list(self.state), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot * theta_dot * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = [x + 0.02 * x_dot, x_dot + 0.02 * x_acc,
                      theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc]
        terminated = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360
        return list(self.state), 1.0, terminated, False, {}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bind", required=True)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--max-episode-steps", type=int, default=500)
    a = p.parse_args()
    serve(PyCartPole, a.num_envs, a.bind, a.max_episode_steps, env_id="PyCartPole-v0")


if __name__ == "__main__":
    main()
