#!/usr/bin/env python3
"""A GRPO job across five hosts made of network namespaces, over real TCP (docs/multi_host.md).

    ctl  10.231.7.1   the controller (launch.backend kubernetes: it starts no actor) and the
                      trainer ranks' rendezvous store, bound to its own address
    trn  10.231.7.2   trainer rank 0
    gen  10.231.7.3   trainer rank 1 and rollout engine 0
    rwd  10.231.7.4   the reward worker, whose link the test cuts
    eng  10.231.7.5   rollout engine 1, whose link the test cuts

Each host's eth0 is a veth pair whose other end is a port of a bridge in a namespace of the
test's own (the root namespace's network is never touched). Every actor joins by address
(`rlforge actor --role R --rank K --connect tcp://10.231.7.1:PORT`); the trainer ranks meet at
the store, and the weights reach the engines by gloo broadcast from trainer rank 0 (checked in
the controller's log). Once the job runs, the reward host's bridge port goes down: the
controller must declare the reward worker lost (events.jsonl, with its silent_s), give its
scoring back (works_given_back) and wait for a reward worker; meanwhile the engine host's
port goes down too (no broadcast is in flight then), another dead worker. The
links come back, the old processes are refused and exit, replacements join both slots (event
"rejoined"), the gloo weight group forms again with the new engine, and the job finishes every
iteration with both engines at the last version.

With CURVE in the build (controller.security), the job runs with it (auto: the bind is not
loopback) and an actor without the job's key is refused.

Skips (77) when network namespaces cannot be made (not root, no `ip netns`). Namespaces are
named rlfmh-<pid>-<random>-<host>: concurrent runs never share one, and a run removes those
of dead runs. Everything it made is removed at the end, whatever happened.
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import read_jsonl, run, wait_for  # noqa: E402

SKIP = 77
PREFIX = "rlfmh-"
SUBNET = "10.231.7"
HOSTS = {"ctl": 1, "trn": 2, "gen": 3, "rwd": 4, "eng": 5}
PLACEMENT = [("trn", "trainer", 0), ("gen", "trainer", 1), ("gen", "rollout", 0),
             ("eng", "rollout", 1), ("rwd", "reward", 0)]
CONTROLLER_PORT = 29411
STORE_PORT = 29412
# Enough that the job is still running when the test cuts its first link (some 50 ms after
# iteration 2) on any machine: an iteration takes 10-30 ms here, the run ends at 1.5-5 s.
ITERATIONS = 150


def ip(*args, check=True):
    out = subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=20)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stdout.strip()}")
    return out


def remove_namespace(ns):
    """Kills what runs in `ns` (only this test's processes live there), then deletes it."""
    pids = ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    ip("netns", "del", ns, check=False)


def remove_stale_namespaces():
    """Namespaces of earlier runs whose process is gone (killed by a ctest timeout)."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            remove_namespace(name)


class Hosts:
    """The namespaces, the bridge joining them, and the processes started in them."""

    def __init__(self):
        self.tag = f"{os.getpid()}-{random.randrange(16**4):04x}"
        self.made = []
        self.procs = []
        self.rlforge = None

    def ns(self, host):
        return f"{PREFIX}{self.tag}-{host}"

    def address(self, host):
        return f"{SUBNET}.{HOSTS[host]}"

    def make(self):
        bridge = self.ns("br")
        ip("netns", "add", bridge)
        self.made.append(bridge)
        ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        ip("-n", bridge, "link", "set", "br0", "up")
        for host, n in HOSTS.items():
            ns = self.ns(host)
            ip("netns", "add", ns)
            self.made.append(ns)
            # Made in the bridge's namespace, one end moved straight into the host's.
            ip("-n", bridge, "link", "add", f"port{n}", "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            ip("-n", bridge, "link", "set", f"port{n}", "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def link(self, host, state):
        """The host's cable at the switch: `down` cuts it without the host noticing."""
        ip("-n", self.ns("br"), "link", "set", f"port{HOSTS[host]}", state)

    def start(self, host, argv, log, env=None):
        out = open(log, "w")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(host)] + argv, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env=dict(os.environ, **(env or {})))
        p.log = log
        self.procs.append(p)
        return p

    def remove(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
        for ns in reversed(self.made):
            remove_namespace(ns)
        self.made = []


def can_make_namespaces():
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    out = ip("netns", "add", probe, check=False)
    if out.returncode != 0:
        return f"`ip netns add` failed: {out.stdout.strip()}"
    ip("netns", "del", probe, check=False)
    return ""


def supports_curve(rlforge):
    return "controller.security" in run([rlforge, "config-docs"], 30)


def actor(rlforge, role, rank, connect):
    return [rlforge, "actor", "--role", role, "--rank", str(rank), "--connect", connect,
            "--register-timeout", "60"]


def event(events, kind, actor):
    found = [e for e in read_jsonl(events) if e["event"] == kind and e["actor"] == actor]
    return found[0] if found else None


def cut(hosts, host, events, actor, ctl):
    """Cuts `host`'s link; returns the loss event and the seconds to it from the cut."""
    hosts.link(host, "down")
    cut_at = time.monotonic()
    lost = wait_for(f"the controller to declare {actor} lost",
                    lambda: event(events, "lost", actor), 30, [ctl])
    return lost, time.monotonic() - cut_at


def rejoin(hosts, host, role, rank, connect, env, logs, events, ctl):
    """Restores `host`'s link and starts a replacement in the slot."""
    hosts.link(host, "up")
    hosts.start(host, actor(hosts.rlforge, role, rank, connect),
                f"{logs}/{role}-{rank}-replacement.out", env)
    wait_for(f"a replacement {role}-{rank} to rejoin",
             lambda: event(events, "rejoined", f"{role}-{rank}"), 60, [ctl])


def run_job(args, hosts, config, curve):
    connect = f"tcp://{hosts.address('ctl')}:{CONTROLLER_PORT}"
    run_dir = os.path.join(args.work, "mh")
    overrides = [
        f"job.run_root={args.work}", "job.name=mh", f"job.iterations={ITERATIONS}",
        f"model.path={args.work}/sft/checkpoints/step_4", "launch.backend=kubernetes",
        f"controller.host={hosts.address('ctl')}", f"controller.port={CONTROLLER_PORT}",
        f"controller.store_port={STORE_PORT}", "controller.heartbeat_interval_ms=500",
        "controller.heartbeat_misses=3", "controller.register_timeout_s=60",
        "trainer.ranks=2", "rollout.workers=2", "reward.workers=1", "weights.transport=gloo",
        "grpo.prompts_per_iteration=8", "grpo.group_size=4", "grpo.eval_every=0",
        "grpo.eval_examples=16"] + (["controller.security=auto"] if curve else [])
    logs = os.path.join(args.work, "hosts")
    os.makedirs(logs, exist_ok=True)
    ctl = hosts.start("ctl", [args.rlforge, "run", config] + overrides, f"{logs}/controller.out")
    env = {}
    if curve:  # the job's keys are made when it starts; every actor reads the same file
        keys = os.path.join(run_dir, "keys", "actor.key")
        wait_for("the job's actor key", lambda: os.path.exists(keys), 30, [ctl])
        env["RLFORGE_KEYS"] = keys
    old = {}
    for host, role, rank in PLACEMENT:
        old[f"{role}-{rank}"] = hosts.start(host, actor(args.rlforge, role, rank, connect),
                                            f"{logs}/{role}-{rank}.out", env)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    events = os.path.join(run_dir, "events.jsonl")
    wait_for("iteration 2", lambda: len(read_jsonl(metrics)) >= 2, 120, [ctl])
    # The reward host, at once: the job cannot end without it, and every iteration of the
    # second or so before the loss is declared deals it scoring that is never answered.
    lost = {"reward-0": cut(hosts, "rwd", events, "reward-0", ctl)}
    # The loop now waits for a reward worker, no weight stream in flight: the engine host's
    # loss is then a dead worker, not a broken broadcast (which would stop the job).
    lost["rollout-1"] = cut(hosts, "eng", events, "rollout-1", ctl)
    if curve:  # while the loop still waits: the job cannot end under the check
        check_keyless_actor_refused(args, hosts, connect, logs)
    rejoin(hosts, "eng", "rollout", 1, connect, env, logs, events, ctl)
    rejoin(hosts, "rwd", "reward", 0, connect, env, logs, events, ctl)
    wait_for("the job to end", lambda: ctl.poll() is not None, 120, [])
    if ctl.returncode != 0:
        print(open(ctl.log).read()[-6000:])
        raise SystemExit(f"the controller exited {ctl.returncode}")
    for p in hosts.procs:
        wait_for(f"{p.log} to exit", lambda p=p: p.poll() is not None, 30, [])
    return run_dir, lost, [old["reward-0"], old["rollout-1"]]


def check_run(run_dir, lost, cut_off, curve):
    rows = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    steps = [r["step"] for r in rows if r["step"] > 0]
    if steps != list(range(1, ITERATIONS + 1)):
        raise SystemExit(f"metrics.jsonl steps {steps}, expected 1..{ITERATIONS}")
    last = rows[-1]["metrics"]
    if last.get("faults/actors_lost", 0) < 2 or last.get("faults/works_given_back", 0) < 1:
        raise SystemExit(f"the last iteration's fault totals: {last}")
    if lost["reward-0"][0]["works_given_back"] < 1:
        raise SystemExit(f"events.jsonl's loss of the reward worker: {lost['reward-0'][0]}")
    log = open(os.path.join(run_dir, "logs", "controller.log")).read()
    for needle in [f"controller listening on tcp://{SUBNET}.1:{CONTROLLER_PORT}",
                   f"trainer ranks meet at {SUBNET}.1:{STORE_PORT}",
                   "policy weights reach the engines via gloo:weights",
                   # The replacement joins the next sync's group (a group of the survivor
                   # alone forms only if a sync falls while the replacement starts: timing).
                   "the weight group forms again with 2 engine(s)"] + (
                       ["made this job's CURVE keys", "without this job's CURVE key"] if curve
                       else []):
        if needle not in log:
            raise SystemExit(f"controller.log lacks '{needle}'")
    # The replacement engine served the last version with the other engine.
    versions = {k: v for k, v in last.items() if k.startswith("rollout/") and k.endswith("/version")}
    if len(versions) != 2 or len(set(versions.values())) != 1 or last["rollout/1/groups"] < 1:
        raise SystemExit(f"the engines at the end: {versions}, rollout-1 generated "
                         f"{last.get('rollout/1/groups')} group(s)")
    for p in cut_off:
        out = open(p.log).read()
        if p.returncode == 0 or "refused this actor" not in out:
            print(out[-3000:])
            raise SystemExit(f"{p.log}: the cut-off process exited {p.returncode}, not refused")


def check_keyless_actor_refused(args, hosts, connect, logs):
    """An actor without the job's key asks for trainer-0, a slot that is taken: with the key
    it would be told so by the controller; without it CURVE's handshake fails and it exits
    saying so."""
    log = f"{logs}/keyless.out"
    p = hosts.start("trn", [args.rlforge, "actor", "--role", "trainer", "--rank", "0",
                            "--connect", connect, "--register-timeout", "3"], log)
    wait_for("the keyless actor to give up", lambda: p.poll() is not None, 30, [])
    out = open(log).read()
    if p.returncode == 0 or "already registered" in out or "refused the handshake" not in out:
        print(out[-3000:])
        raise SystemExit(f"an actor without the key got an answer (exit {p.returncode})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rlforge", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    # SIGTERM (a ctest timeout, Ctrl-C's cousin) unwinds through the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    why = can_make_namespaces()
    if why:
        print(f"multi_host_test: skipped: {why}")
        return SKIP
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    from chaos_test import with_length_reward
    run([args.rlforge, "run", os.path.join(args.source, "configs/sft_tiny.yaml"),
         f"job.run_root={args.work}", "job.name=sft", "sft.steps=4", "sft.eval_every=0",
         "sft.save_every=0"], 300)
    config = with_length_reward(os.path.join(args.source, "configs/grpo_arith.yaml"),
                                os.path.join(args.work, "grpo_length.yaml"))
    curve = supports_curve(args.rlforge)
    remove_stale_namespaces()
    hosts = Hosts()
    hosts.rlforge = args.rlforge
    started = time.monotonic()
    try:
        hosts.make()
        run_dir, lost, cut_off = run_job(args, hosts, config, curve)
        check_run(run_dir, lost, cut_off, curve)
    finally:
        hosts.remove()
    for who, (e, seconds) in lost.items():
        print(f"{who}'s host cut: declared lost {seconds:.2f} s after the cut (silent_s "
              f"{e['silent_s']:.2f}; heartbeat every 0.5 s, 3 misses), "
              f"{e['works_given_back']} work(s) given back")
    print(f"{ITERATIONS} iterations across 5 namespaces in {time.monotonic() - started:.1f} s")
    print("CURVE: on, an actor without the key refused" if curve else
          "CURVE: not checked (this build has no controller.security)")
    print("multi_host_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
