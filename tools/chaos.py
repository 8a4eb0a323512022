#!/usr/bin/env python3
"""Fault injection for a running rlforge job: kills or stops random workers, then checks that
the job survived and lost nothing.

  rlforge run CONFIG (a child) -> once it runs, every --interval s (jittered) a random live
  rollout/reward worker (from the dashboard's /api/actors: the job needs dashboard.enabled)
  gets SIGKILL or SIGSTOP -> the job finishes -> events.jsonl (when each loss was detected,
  restarts) and metrics.jsonl (every iteration once, every sample counted)

Prints faults injected, detection latency (p50, max: from the signal to the controller's
`lost` event), works given back, work dealt again, restarts, lost samples. Exits non-zero when
the job failed, fewer than --min-faults faults went in, or a sample is missing or doubled.

Lost samples are counted from the metrics: every iteration 1..N must appear once; a
language-model job's batch must hold --groups groups (the controller refuses a batch in which
a prompt's group is missing or repeated, by request id); a simulator job's env_steps must grow
by --env-steps each iteration.

Example (GRPO, 2 engines + 2 reward workers, a fault every 2 s):
  tools/chaos.py --rlforge build/rlforge --config configs/grpo_arith.yaml --interval 2 \\
      --groups 16 -- rollout.workers=2 reward.workers=2 weights.transport=zmq \\
      launch.max_restarts=100 job.iterations=40
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

WORKER_ROLES = ("rollout", "reward")


def dashboard_url(run_dir):
    """The job's dashboard once the job runs (every actor registered), else None."""
    try:
        with open(os.path.join(run_dir, "status.json")) as f:
            status = json.load(f)
    except (OSError, ValueError):
        return None
    return status.get("dashboard_url") if status.get("state") == "running" else None


def live_workers(url):
    """(pid, actor id) of every rollout and reward worker the controller counts as live."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/actors", timeout=2) as r:
            actors = json.load(r)
    except OSError:
        return []
    return [(a["pid"], a["id"]) for a in actors
            if a["role"] in WORKER_ROLES and a["state"] in ("ready", "busy") and a["pid"] > 0]


def live_sim_servers(log_path):
    """(pid, name) of each sim server the controller started or restarted, from its output
    (sim servers are the controller's helpers, not actors: the dashboard does not list them)."""
    latest = {}
    try:
        with open(log_path) as f:
            for m in re.finditer(r"(?:started|restarted) (sim-\d+) \(pid (\d+)\)", f.read()):
                latest[m.group(1)] = int(m.group(2))
    except OSError:
        return []
    return [(pid, name) for name, pid in latest.items()]


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def progress_allows(run_dir, injected, args):
    """With --every-steps N, fault k (from 1) waits for the job's iteration k * N: faults follow
    the job's progress, so a fast machine's short run still takes them all."""
    if not args.every_steps:
        return True
    records = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    step = max((r["step"] for r in records), default=0)
    return step >= (injected + 1) * args.every_steps


def inject(job, run_dir, args, rng):
    """Faults until the job exits or --max-faults went in: [(time, actor, signal name)]."""
    faults = []
    hit = set()
    url = None
    next_at = None
    while job.poll() is None and len(faults) < args.max_faults:
        time.sleep(0.05)
        if url is None:  # the job's actors are still starting
            url = dashboard_url(run_dir)
            next_at = time.time() + args.warmup
            continue
        if time.time() < next_at or not progress_allows(run_dir, len(faults), args):
            continue
        next_at = time.time() + args.interval * rng.uniform(0.5, 1.5)
        # A stopped worker counts as live until its heartbeats are missed: hit each process once.
        workers = [(pid, a) for pid, a in live_workers(url) if pid not in hit]
        if args.sim_servers:
            workers += [(pid, s) for pid, s in live_sim_servers(args.log_path) if pid not in hit]
        if not workers:
            continue
        pid, actor = rng.choice(sorted(workers))
        # A stopped sim server is not detected by heartbeats (it has none): its worker's step
        # times out (sim.step_timeout_s) and fails the job. Sim servers are killed only.
        sig = signal.SIGKILL if actor.startswith("sim-") else rng.choice([signal.SIGKILL,
                                                                         signal.SIGSTOP])
        try:
            os.killpg(pid, sig)  # the launcher gives each actor its own process group
        except ProcessLookupError:
            continue
        hit.add(pid)
        faults.append((time.time(), actor, sig.name))
        print(f"chaos: {sig.name} {actor} (pid {pid})", flush=True)
    return faults


def detection_latencies(faults, events):
    """Seconds from each fault to the first `lost` event of its actor after it."""
    lost = [e for e in events if e["event"] == "lost"]
    out = []
    for t, actor, _ in faults:
        after = [e["time"] - t for e in lost if e["actor"] == actor and e["time"] >= t - 0.01]
        if after:
            out.append(min(after))
    return out


def lost_samples(metrics, args):
    """Samples missing or doubled according to metrics.jsonl (0 when none)."""
    steps = [r["step"] for r in metrics if r["step"] > 0]
    bad = abs(len(steps) - len(set(steps))) + (len(set(steps)) != max(steps, default=0))
    previous = 0.0
    for r in metrics:
        m = r["metrics"]
        if r["step"] == 0:
            continue
        if args.groups and m.get("groups") != args.groups:
            bad += abs(args.groups - m.get("groups", 0))
        if args.env_steps:
            grown = m.get("env_steps", 0) - previous
            previous = m.get("env_steps", 0)
            bad += abs(args.env_steps - grown)
    return int(bad)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rlforge", required=True, help="the rlforge binary")
    p.add_argument("--config", required=True, help="the job's YAML")
    p.add_argument("--run-root", default="/tmp/rlforge_chaos")
    p.add_argument("--name", default="chaos")
    p.add_argument("--interval", type=float, default=3, help="mean seconds between faults")
    p.add_argument("--every-steps", type=int, default=0,
                   help="also wait for iteration k * N before the k-th fault (0: time only)")
    p.add_argument("--warmup", type=float, default=3,
                   help="seconds from the job's start (every actor registered) to the first fault")
    p.add_argument("--max-faults", type=int, default=1000)
    p.add_argument("--min-faults", type=int, default=0, help="fail with fewer faults injected")
    p.add_argument("--seed", type=int, default=0, help="the injector's random choices")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--groups", type=int, default=0, help="groups per batch (language jobs)")
    p.add_argument("--env-steps", type=int, default=0, help="env steps per iteration (sim jobs)")
    p.add_argument("--sim-servers", action="store_true",
                   help="also SIGKILL the job's sim servers (sim.backend: server)")
    p.add_argument("overrides", nargs="*", help="dotted config overrides (after --)")
    args = p.parse_args()

    run_dir = os.path.join(args.run_root, args.name)
    cmd = [args.rlforge, "run", args.config, f"job.run_root={args.run_root}",
           f"job.name={args.name}"] + args.overrides
    log_path = os.path.join(args.run_root, args.name + ".out")
    args.log_path = log_path
    os.makedirs(args.run_root, exist_ok=True)
    with open(log_path, "w") as log:
        job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            faults = inject(job, run_dir, args, random.Random(args.seed))
            code = job.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            job.kill()
            code = "timeout"
    events = read_jsonl(os.path.join(run_dir, "events.jsonl"))
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    latency = detection_latencies(faults, events)
    last = metrics[-1]["metrics"] if metrics else {}
    missing = lost_samples(metrics, args)
    print(f"job exit: {code} (output: {log_path}, run: {run_dir})")
    print(f"faults injected: {len(faults)} "
          f"({sum(f[2] == 'SIGKILL' for f in faults)} SIGKILL, "
          f"{sum(f[2] == 'SIGSTOP' for f in faults)} SIGSTOP)")
    if latency:
        print(f"detection latency: p50 {statistics.median(latency):.2f} s, "
              f"max {max(latency):.2f} s ({len(latency)} of {len(faults)} matched)")
    print(f"works given back: {sum(e.get('works_given_back', 0) for e in events)}")
    print("re-queued: " + ", ".join(f"{k[len('faults/'):]} {v:g}" for k, v in sorted(last.items())
                                     if k.startswith("faults/requeued") or
                                     k == "faults/episodes_cut") or "re-queued: none")
    print(f"restarts: {sum(e['event'] == 'restart' for e in events)}")
    print(f"lost samples: {missing}")
    print("final metrics: " + json.dumps({k: v for k, v in last.items()
                                          if not k.startswith(("rollout/", "faults/"))}))
    ok = code == 0 and missing == 0 and len(faults) >= args.min_faults
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
