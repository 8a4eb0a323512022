"""sim_bridge server for Python environments (protocol: proto/sim_bridge.proto)."""
import array
import math
import struct
import sys

import zmq

from . import sim_bridge_pb2 as pb

PROTOCOL_VERSION = 1
_F32, _F64, _I64, _U8 = pb.F32, pb.F64, pb.I64, pb.U8


def _flatten(x):
    """Flattens numbers, lists, tuples and array-likes (anything with tolist)."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out.extend(_flatten(v))
        return out
    return [float(x)]


def _space_to_proto(space, out):
    if hasattr(space, "n") and not hasattr(space, "low"):
        out.kind = pb.Space.DISCRETE
        out.dtype = _I64
        out.n = int(space.n)
        return
    out.kind = pb.Space.BOX
    out.dtype = _F32
    shape = tuple(int(d) for d in space.shape)
    out.shape.extend(shape)
    size = 1
    for d in shape:
        size *= d

    def bounds(b):
        vals = _flatten(b)
        return vals * size if len(vals) == 1 else vals

    out.low.extend(bounds(space.low))
    out.high.extend(bounds(space.high))


class VectorServer:
    """A batch of envs with Gymnasium 1.x next-step autoreset, served on `bind`."""

    def __init__(self, env_fn, num_envs, bind, max_episode_steps=0, env_id=None):
        self.envs = [env_fn() for _ in range(num_envs)]
        first = self.envs[0]
        self.env_id = env_id or getattr(getattr(first, "spec", None), "id", None) or type(first).__name__
        self.max_episode_steps = int(max_episode_steps)
        self.discrete = hasattr(first.action_space, "n") and not hasattr(first.action_space, "low")
        self.action_size = 1
        if not self.discrete:
            for d in first.action_space.shape:
                self.action_size *= int(d)
        self.obs_shape = tuple(int(d) for d in first.observation_space.shape)
        self.obs_size = 1
        for d in self.obs_shape:
            self.obs_size *= d
        n = num_envs
        self.needs_reset = [False] * n
        self.elapsed = [0] * n
        self.returns = [0.0] * n
        self.ctx = zmq.Context.instance()
        self.socket = self.ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(bind)
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    # -- protocol -------------------------------------------------------------
    def serve_forever(self):
        while True:
            self.serve_one()

    def serve_one(self, timeout_ms=None):
        if timeout_ms is not None and not self.socket.poll(timeout_ms):
            return False
        frames = self.socket.recv_multipart(copy=True)
        if len(frames) < 2:
            return True
        peer, header, tensors = frames[0], frames[1], frames[2:]
        req = pb.SimRequest()
        seq = 0
        try:
            req.ParseFromString(header)
            seq = req.seq
            if req.protocol_version != PROTOCOL_VERSION:
                raise ValueError("sim_bridge protocol version %d, this server speaks %d"
                                 % (req.protocol_version, PROTOCOL_VERSION))
            if len(req.tensors) != len(tensors):
                raise ValueError("header announces %d tensors, %d frames arrived"
                                 % (len(req.tensors), len(tensors)))
            reply, out = self._handle(req, tensors)
        except _EnvError as e:
            reply, out = self._error(e.env_index, str(e)), []
        except Exception as e:  # a bad request must not stop the server
            reply, out = self._error(-1, "%s: %s" % (type(e).__name__, e)), []
        reply.protocol_version = PROTOCOL_VERSION
        reply.seq = seq
        payload = []
        for name, dtype, shape, data in out:
            meta = reply.tensors.add()
            meta.name, meta.dtype, meta.nbytes = name, dtype, len(data)
            meta.shape.extend(shape)
            payload.append(data)
        self.socket.send_multipart([peer, reply.SerializeToString()] + payload)
        return True

    def _error(self, env_index, message):
        r = pb.SimReply()
        r.error.env_index = env_index
        r.error.message = message
        return r

    def _handle(self, req, tensors):
        body = req.WhichOneof("body")
        r = pb.SimReply()
        n = len(self.envs)
        if body == "spec":
            s = r.spec
            s.env_id = self.env_id
            s.num_envs = n
            s.max_episode_steps = self.max_episode_steps
            _space_to_proto(self.envs[0].observation_space, s.observation_space)
            _space_to_proto(self.envs[0].action_space, s.action_space)
            return r, []
        if body == "reset":
            seeds = list(req.reset.seeds)
            if seeds and len(seeds) != n:
                raise ValueError("reset got %d seeds for %d envs" % (len(seeds), n))
            obs = []
            for i, env in enumerate(self.envs):
                seed = seeds[i] if seeds and seeds[i] >= 0 else None
                o, _ = env.reset(seed=seed)
                obs.extend(self._check_obs(i, o))
                self.needs_reset[i], self.elapsed[i], self.returns[i] = False, 0, 0.0
            r.reset.SetInParent()
            return r, [("obs", _F32, (n,) + self.obs_shape, array.array("f", obs).tobytes())]
        if body == "step":
            return self._step(req, tensors, r)
        if body == "close":
            r.close.SetInParent()
            return r, []
        raise ValueError("unknown request")

    def _step(self, req, tensors, r):
        n = len(self.envs)
        if len(tensors) != 1 or req.tensors[0].name != "actions":
            raise ValueError("step needs exactly one tensor named 'actions'")
        meta, data = req.tensors[0], tensors[0]
        if self.discrete:
            if meta.dtype != _I64 or len(data) != 8 * n:
                raise ValueError("actions must be i64 with %d elements" % n)
            actions = list(struct.unpack("<%dq" % n, data))
        else:
            if meta.dtype != _F32 or len(data) != 4 * n * self.action_size:
                raise ValueError("actions must be f32 with %d elements" % (n * self.action_size))
            flat = array.array("f")
            flat.frombytes(data)
            k = self.action_size
            actions = [list(flat[i * k:(i + 1) * k]) for i in range(n)]
        obs, rewards, term, trunc = [], [], bytearray(n), bytearray(n)
        for i, env in enumerate(self.envs):
            if self.needs_reset[i]:  # next-step autoreset: the action is ignored
                o, _ = env.reset()
                obs.extend(self._check_obs(i, o))
                rewards.append(0.0)
                self.needs_reset[i], self.elapsed[i], self.returns[i] = False, 0, 0.0
                continue
            o, reward, terminated, truncated, _ = env.step(actions[i])
            reward = float(reward)
            if not math.isfinite(reward):
                raise _EnvError(i, "env %d returned reward %r" % (i, reward))
            obs.extend(self._check_obs(i, o))
            self.elapsed[i] += 1
            self.returns[i] += reward
            if self.max_episode_steps > 0 and self.elapsed[i] >= self.max_episode_steps:
                truncated = True
            rewards.append(reward)
            term[i], trunc[i] = int(bool(terminated)), int(bool(truncated))
            if terminated or truncated:
                ep = r.step.episodes.add()
                ep.env_index, ep.episode_return, ep.length = i, self.returns[i], self.elapsed[i]
                self.needs_reset[i] = True
        r.step.SetInParent()
        return r, [
            ("obs", _F32, (n,) + self.obs_shape, array.array("f", obs).tobytes()),
            ("reward", _F64, (n,), array.array("d", rewards).tobytes()),
            ("terminated", _U8, (n,), bytes(term)),
            ("truncated", _U8, (n,), bytes(trunc)),
        ]

    def _check_obs(self, i, o):
        flat = _flatten(o)
        if len(flat) != self.obs_size:
            raise _EnvError(i, "env %d returned %d observation values, expected %d"
                            % (i, len(flat), self.obs_size))
        for k, v in enumerate(flat):
            if not math.isfinite(v):
                raise _EnvError(i, "env %d returned observation[%d] = %r" % (i, k, v))
        return flat


class _EnvError(Exception):
    def __init__(self, env_index, message):
        super().__init__(message)
        self.env_index = env_index


def serve(env_fn, num_envs, bind, max_episode_steps=0, env_id=None):
    """Builds num_envs envs with env_fn() and serves them on `bind` until killed."""
    server = VectorServer(env_fn, num_envs, bind, max_episode_steps, env_id)
    print("rlforge_sim: serving %s x %d on %s" % (server.env_id, num_envs, server.endpoint),
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
