"""Serve any Gymnasium-style environment to rlforge over the sim_bridge protocol.

Needs only /usr/bin/python3 with Debian's python3-zmq and python3-protobuf; it does
not import gymnasium or numpy (it uses them if your env returns numpy arrays).

    from rlforge_sim import serve
    serve(lambda: MyEnv(), num_envs=8, bind="tcp://127.0.0.1:5555")

An env is any object with observation_space, action_space, reset(seed=...) ->
(obs, info) and step(action) -> (obs, reward, terminated, truncated, info).
Spaces need .shape/.low/.high (a Box) or .n (a Discrete). See docs/sim_bridge.md.
"""
from .server import VectorServer, serve  # noqa: F401
