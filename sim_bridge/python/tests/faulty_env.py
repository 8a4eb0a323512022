#!/usr/bin/env python3
"""Test-only envs served over sim_bridge that misbehave on purpose.

--fault nan: observation becomes NaN on the 5th step of env 1.
--fault raise: env 1's step raises on the 5th step.
--fault hang: env 1 stops answering on the 5th step.
--fault crash: the process exits on the 5th step.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rlforge_sim import serve  # noqa: E402


class Box:
    def __init__(self, n):
        self.low, self.high, self.shape = [-10.0] * n, [10.0] * n, (n,)


class Discrete:
    def __init__(self, n):
        self.n = n


def make(fault, index):
    class Faulty:
        observation_space = Box(2)
        action_space = Discrete(2)

        def __init__(self):
            self.t = 0

        def reset(self, seed=None, options=None):
            self.t = 0
            return [0.0, 0.0], {}

        def step(self, action):
            self.t += 1
            if index == 1 and self.t == 5:
                if fault == "nan":
                    return [float("nan"), 0.0], 1.0, False, False, {}
                if fault == "raise":
                    raise RuntimeError("the simulator lost its mind")
                if fault == "hang":
                    time.sleep(3600)
                if fault == "crash":
                    os._exit(3)
            return [float(self.t), float(action)], 1.0, False, False, {}
    return Faulty


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bind", required=True)
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--fault", default="none")
    a = p.parse_args()
    counter = iter(range(1000))
    serve(lambda: make(a.fault, next(counter))(), a.num_envs, a.bind, env_id="Faulty-v0")


if __name__ == "__main__":
    main()
