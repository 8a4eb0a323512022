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

The job's run directory is the one rlforge reports creating (`run directory ...` in its
output; else the one that appeared under --run-root): a second run with the same --name gets
<name>-2, and that is the run watched and counted. A job that ends before the first fault (too
short for --warmup and --interval) is an error that says so, not a quiet pass or fail.

Example (GRPO, 2 engines + 2 reward workers, faults paced by the job's progress; the inputs
are those `ctest -R chaos_test` leaves in build/chaos_test, docs/fault_tolerance.md):
  tools/chaos.py --rlforge build/rlforge --config build/chaos_test/grpo_length.yaml \\
      --run-root /tmp/chaos --name grpo --interval 0.2 --every-steps 10 --min-faults 10 \\
      --groups 8 -- model.path=build/chaos_test/sft/checkpoints/step_4 rollout.workers=2 \\
      reward.workers=2 weights.transport=zmq job.iterations=200 \\
      grpo.prompts_per_iteration=8 grpo.group_size=4 grpo.eval_every=0 \\
      launch.max_restarts=1000 launch.restart_backoff_s=0.2
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


RUN_DIRECTORY = re.compile(r"\brun directory (\S+)")


def run_directory(log_path, run_root, before):
    """The run directory this job created, once it exists, else None: the last one rlforge's
    output names (`run directory PATH`; a model.init_job's run is named before), else the only directory under run_root that was not there
    when the job started (the controller's info lines may be hidden by job.log_level). Raises
    when several appeared and the output names none: another run shares the root."""
    try:
        with open(log_path, errors="replace") as f:
            named = RUN_DIRECTORY.findall(f.read())
        if named:
            return named[-1]
    except OSError:
        pass
    try:
        new = sorted(set(e.name for e in os.scandir(run_root) if e.is_dir()) - before)
    except OSError:
        return None
    new = [d for d in new if os.path.exists(os.path.join(run_root, d, "config.resolved.yaml"))]
    if len(new) > 1:
        raise RuntimeError(f"several new run directories under {run_root} ({', '.join(new)}) and "
                           f"no `run directory` line in {log_path}: which one is this job's?")
    return os.path.join(run_root, new[0]) if new else None


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


def inject(job, find_run_dir, args, rng, deadline):
    """Faults until the job exits, --max-faults went in or the deadline passed: ([(time, actor,
    signal name)], the run directory, or None if the job ended before it was known)."""
    faults = []
    hit = set()
    url = None
    next_at = None
    run_dir = None
    while job.poll() is None and len(faults) < args.max_faults and time.time() < deadline:
        time.sleep(0.05)
        if url is None:  # the job's actors are still starting
            # Looked up until the job runs: a model.init_job's run comes first.
            run_dir = find_run_dir()
            url = dashboard_url(run_dir) if run_dir else None
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
    return faults, run_dir


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
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds from the job's start (every actor registered) to the first "
                        "fault; default 3, or 0 with --every-steps (which paces the first fault)")
    p.add_argument("--max-faults", type=int, default=1000)
    p.add_argument("--min-faults", type=int, default=0, help="fail with fewer faults injected")
    p.add_argument("--seed", type=int, default=0, help="the injector's random choices")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds for the whole job; then it is killed and the run fails")
    p.add_argument("--groups", type=int, default=0, help="groups per batch (language jobs)")
    p.add_argument("--env-steps", type=int, default=0, help="env steps per iteration (sim jobs)")
    p.add_argument("--sim-servers", action="store_true",
                   help="also SIGKILL the job's sim servers (sim.backend: server)")
    p.add_argument("overrides", nargs="*", help="dotted config overrides (after --)")
    args = p.parse_args()
    if args.warmup is None:
        args.warmup = 0 if args.every_steps else 3

    cmd = [args.rlforge, "run", args.config, f"job.run_root={args.run_root}",
           f"job.name={args.name}"] + args.overrides
    log_path = os.path.join(args.run_root, args.name + ".out")
    args.log_path = log_path
    os.makedirs(args.run_root, exist_ok=True)
    before = set(e.name for e in os.scandir(args.run_root) if e.is_dir())
    started = time.time()
    with open(log_path, "w") as log:
        job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = started + args.timeout
            faults, run_dir = inject(job, lambda: run_directory(log_path, args.run_root, before),
                                     args, random.Random(args.seed), deadline)
            code = job.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            job.kill()
            code = "timeout"
        except RuntimeError as e:
            job.kill()
            job.wait()
            print(f"chaos: error: {e}", file=sys.stderr)
            return 2
    ran = time.time() - started
    if run_dir is None:
        run_dir = run_directory(log_path, args.run_root, before)
    if run_dir is None:
        print(f"chaos: error: the job exited ({code}) without creating a run directory under "
              f"{args.run_root}; its output is {log_path}", file=sys.stderr)
        return 2
    if not faults:
        print(f"job exit: {code} (output: {log_path}, run: {run_dir})")
        print(f"chaos: error: the job ended {ran:.1f} s after it started, before the first fault "
              f"(--warmup {args.warmup:g} s once every actor registered, then --interval "
              f"{args.interval:g} s" + (f", --every-steps {args.every_steps}" if args.every_steps
                                        else "") +
              "): nothing was tested. " + (
                  f"Give the job more than {args.every_steps} iterations." if args.every_steps
                  else "Give the job more iterations, or pace the faults by its progress with "
                  "--every-steps N."), file=sys.stderr)
        return 3 if code == 0 else 1
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
    if len(faults) < args.min_faults:
        print(f"chaos: {len(faults)} faults went in, fewer than --min-faults {args.min_faults}: "
              "the job ended first (give it more iterations or a shorter --interval)",
              file=sys.stderr)
    ok = code == 0 and missing == 0 and len(faults) >= args.min_faults
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
