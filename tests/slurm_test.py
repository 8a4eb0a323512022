#!/usr/bin/env python3
"""The Slurm backend against a real Slurm: two nodes on this one machine.

Starts slurmctld and two slurmd (-N n1, -N n2) from a slurm.conf written into a fresh temp
folder (auth/none, free ports chosen now, state and logs in the folder), then:
  (a) ppo_cartpole through `rlforge slurm` (sbatch), its rollout workers on n1 and n2;
  (b) a short grpo_arith through `rlforge run` inside `salloc -N2`, its two sharded
      trainer ranks, engines and reward workers on both nodes;
  (c) a long `rlforge slurm` job: an actor killed inside its step is a lost worker that
      comes back as a new step on its node; then scancel: status interrupted, no process
      of the job left behind;
  (d) `scancel --batch --signal=TERM` of a checkpointing job: it checkpoints and stops.
Each actor is its own srun step: the controller log shows where each registered from (the
actor reports SLURMD_NODENAME). Stops every daemon and removes the folder, even on failure.
Skips (exit 77), saying why, where Slurm is missing or cannot start.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import free_port, read_jsonl, wait_for  # noqa: E402

SKIP = 77


class Cluster:
    """A two-node Slurm in `folder`: its daemons, its commands' environment, its cleanup."""

    def __init__(self, folder):
        self.folder = folder
        self.conf = os.path.join(folder, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.daemons = []
        host = socket.gethostname()
        os.makedirs(os.path.join(folder, "state"))
        for node in ("n1", "n2"):
            os.makedirs(os.path.join(folder, "spool-" + node))
        ports = {"ctld": free_port(), "n1": free_port(), "n2": free_port()}
        nodes = "".join(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[n]} CPUs=2 "
            f"State=UNKNOWN\n" for n in ("n1", "n2"))
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=rlf{os.getpid()}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports['ctld']}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool-%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd-%n.log
{nodes}PartitionName=test Nodes=n1,n2 Default=YES MaxTime=10 State=UP
""")

    def start(self):
        for cmd in (["slurmctld", "-D"], ["slurmd", "-D", "-N", "n1"], ["slurmd", "-D", "-N", "n2"]):
            log = open(os.path.join(self.folder, cmd[0] + "-" + cmd[-1] + ".out"), "w")
            self.daemons.append(subprocess.Popen(cmd, env=self.env, stdout=log,
                                                 stderr=subprocess.STDOUT,
                                                 start_new_session=True))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(d.poll() is not None for d in self.daemons):
                break
            out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=10)
            if sorted(out.split()) == ["idle", "idle", "n1", "n2"]:
                return True
            time.sleep(0.3)
        return False

    def logs(self):
        text = ""
        for name in sorted(os.listdir(self.folder)):
            if name.endswith((".out", ".log")):
                with open(os.path.join(self.folder, name), errors="replace") as f:
                    text += f"--- {name}\n" + "".join(f.readlines()[-15:])
        return text

    def run(self, cmd, check=True, timeout=60, cwd=None):
        out = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=timeout, cwd=cwd)
        if check and out.returncode != 0:
            raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-4000:]}")
        return out.stdout

    def jobs(self):
        return self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10).split()

    def leftovers(self):
        """Processes of this cluster's jobs (srun, steps, actors), by their SLURM_CONF."""
        mine = {d.pid for d in self.daemons} | {os.getpid()}
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"/proc/{pid}/stat") as f:
                    state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            script_helper = int(ppid) in mine and "slurmscriptd" in cmd  # slurmctld's own
            if (int(pid) not in mine and state != "Z" and not script_helper and
                    ("SLURM_CONF=" + self.conf).encode() in env):
                found.append(f"{pid} {cmd}")
        return found

    def stop(self):
        if self.daemons and self.daemons[0].poll() is None:
            self.run(["scancel", "--full", "-u", "root"], check=False, timeout=10)
            try:
                wait_for("the jobs to end", lambda: not self.jobs(), 40)
            except SystemExit as e:
                print(e)
        for d in self.daemons:
            if d.poll() is None:
                os.killpg(d.pid, signal.SIGTERM)
        for d in self.daemons:
            try:
                d.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(d.pid, signal.SIGKILL)
                d.wait()
        # slurmstepd outlives slurmd by design; end any of ours (by SLURM_CONF) that remain.
        for line in self.leftovers():
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except OSError:
                pass


def status(run_dir):
    with open(os.path.join(run_dir, "status.json")) as f:
        return json.load(f)["state"]


def check_spread(run_dir, roles):
    """Every actor of `roles` registered from a Slurm node, and both nodes hosted some."""
    with open(os.path.join(run_dir, "logs", "controller.log")) as f:
        log = f.read()
    hosts = {}
    for line in log.splitlines():
        if " registered from " in line:
            actor = line.split(" registered from ")[0].split()[-1]
            hosts[actor] = line.split(" registered from ")[1].split()[0]
    for role in roles:
        if not any(a.startswith(role + "-") for a in hosts):
            raise SystemExit(f"{run_dir}: no {role} actor registered; hosts {hosts}")
    if set(hosts.values()) != {"n1", "n2"}:
        raise SystemExit(f"{run_dir}: actors did not span n1 and n2: {hosts}")
    print(f"{os.path.basename(run_dir)}: actors on {hosts}")


def sbatch_job(cluster, args, runs, name, overrides):
    out = cluster.run([args.rlforge, "slurm", os.path.join(args.source, "configs/ppo_cartpole.yaml"),
                       f"job.run_root={runs}", f"job.name={name}"] + overrides, cwd=args.source)
    job_id = out.split("submitted Slurm job ")[1].split()[0]
    run_dir = out.split("run directory: ")[1].split()[0]
    return job_id, run_dir


PPO = ["rollout.workers=2", "env.num_envs=4", "rollout.steps_per_iteration=16", "ppo.epochs=2",
       "launch.placement.rollout.per_node=1", "controller.register_timeout_s=60"]


def test_sbatch_ppo(cluster, args, runs):
    job_id, run_dir = sbatch_job(cluster, args, runs, "ppo", PPO + ["ppo.total_steps=512"])
    wait_for(f"Slurm job {job_id} to finish", lambda: job_id not in cluster.jobs(), 120,
             interval=0.5)
    if status(run_dir) != "finished":
        raise SystemExit(f"{run_dir}: {status(run_dir)}\n" + open(run_dir + ".out").read()[-3000:])
    check_spread(run_dir, ["trainer", "rollout"])


def test_salloc_grpo(cluster, args, runs):
    cluster.run([args.rlforge, "run", os.path.join(args.source, "configs/sft_tiny.yaml"),
                 f"job.run_root={runs}", "job.name=sft", "sft.steps=4", "sft.eval_every=0",
                 "sft.save_every=0"], timeout=300, cwd=args.source)
    out = cluster.run(
        ["salloc", "-N2", "--immediate=60", args.rlforge, "run",
         os.path.join(args.source, "configs/grpo_arith.yaml"), f"job.run_root={runs}",
         "job.name=grpo", f"model.path={runs}/sft/checkpoints/step_4",
         "launch.backend=slurm", "trainer.ranks=2", "launch.placement.trainer.per_node=1",
         "rollout.workers=2", "reward.workers=2",
         "launch.placement.rollout.per_node=1", "launch.placement.reward.per_node=1",
         "job.iterations=3", "grpo.prompts_per_iteration=4", "grpo.group_size=4",
         "grpo.eval_every=0", "grpo.eval_examples=16"], timeout=300, cwd=args.source)
    run_dir = os.path.join(runs, "grpo")
    if status(run_dir) != "finished":
        raise SystemExit(f"{run_dir}: {status(run_dir)}\n{out[-3000:]}")
    check_spread(run_dir, ["trainer", "rollout", "reward"])


def events(run_dir):
    return read_jsonl(os.path.join(run_dir, "events.jsonl"))


def kill_and_see_it_replaced(cluster, run_dir):
    """SIGKILL rollout-1's actor inside its step: its srun exits, the controller loses the
    worker and relaunches it as a new step on the same node, which rejoins."""
    victims = [line for line in cluster.leftovers()
               if line.split()[1].endswith("/rlforge-actor") and
               "--role rollout --rank 1 " in line]
    if len(victims) != 1:
        raise SystemExit(f"expected one rollout-1 actor process, found {victims}")
    os.kill(int(victims[0].split()[0]), signal.SIGKILL)
    wait_for("rollout-1 to be lost and rejoin",
             lambda: {"lost", "rejoined"} <= {e["event"] for e in events(run_dir)
                                                if e["actor"] == "rollout-1"}, 60, interval=0.5)
    with open(os.path.join(run_dir, "logs", "controller.log")) as f:
        rejoins = [l for l in f if "rollout-1 registered from" in l]
    if len(rejoins) != 2 or not rejoins[1].split(" registered from ")[1].startswith("n2 "):
        raise SystemExit(f"rollout-1's replacement did not register from n2: {rejoins}")
    print("cancel: rollout-1 killed on n2, lost, relaunched as a new step there, rejoined")


def test_scancel(cluster, args, runs):
    job_id, run_dir = sbatch_job(cluster, args, runs, "cancel", PPO + ["ppo.total_steps=10000000"])
    status_file = os.path.join(run_dir, "metrics.jsonl")
    wait_for("the job's first iteration",
             lambda: os.path.exists(status_file) and os.path.getsize(status_file) > 0, 120,
             interval=0.5)
    kill_and_see_it_replaced(cluster, run_dir)
    cluster.run(["scancel", job_id])
    wait_for(f"Slurm job {job_id} to end", lambda: job_id not in cluster.jobs(), 60, interval=0.5)
    if status(run_dir) != "interrupted":
        raise SystemExit(f"{run_dir}: {status(run_dir)}, not interrupted\n" +
                         open(run_dir + ".out").read()[-3000:])
    try:
        wait_for("the job's processes to end", lambda: not cluster.leftovers(), 15)
    except SystemExit:
        raise SystemExit(f"processes left after scancel: {cluster.leftovers()}")
    print(f"cancel: scancel {job_id} -> interrupted, no process left")


def test_graceful_scancel(cluster, args, runs):
    """scancel --batch --signal=TERM reaches the controller alone: with checkpoint.every set
    it finishes the iteration, checkpoints, and stops its steps itself."""
    job_id, run_dir = sbatch_job(cluster, args, runs, "graceful",
                                 PPO + ["ppo.total_steps=10000000", "checkpoint.every=1000000"])
    metrics = os.path.join(run_dir, "metrics.jsonl")
    wait_for("the job's first iteration",
             lambda: os.path.exists(metrics) and os.path.getsize(metrics) > 0, 120,
             interval=0.5)
    cluster.run(["scancel", "--batch", "--signal=TERM", job_id])
    wait_for(f"Slurm job {job_id} to end", lambda: job_id not in cluster.jobs(), 60, interval=0.5)
    checkpoints = os.path.join(run_dir, "checkpoints")
    saved = sorted(os.listdir(checkpoints)) if os.path.isdir(checkpoints) else []
    if status(run_dir) != "interrupted" or not saved:
        raise SystemExit(f"{run_dir}: {status(run_dir)}, checkpoints {saved}\n" +
                         open(run_dir + ".out").read()[-3000:])
    try:
        wait_for("the job's processes to end", lambda: not cluster.leftovers(), 15)
    except SystemExit:
        raise SystemExit(f"processes left after scancel: {cluster.leftovers()}")
    print(f"graceful: scancel --batch --signal=TERM {job_id} -> {saved[-1]}, interrupted")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rlforge", required=True)
    p.add_argument("--source", required=True)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("SKIP: starting slurmd needs root")
        return SKIP
    missing = [c for c in ("slurmctld", "slurmd", "srun", "sbatch", "salloc", "scontrol",
                           "scancel", "squeue", "sinfo") if shutil.which(c) is None]
    if missing:
        print(f"SKIP: Slurm is not installed (no {', '.join(missing)}; launch/setup.sh "
              "installs slurmctld slurmd slurm-client)")
        return SKIP
    folder = tempfile.mkdtemp(prefix="rlforge_slurm_")
    cluster = Cluster(folder)
    try:
        if not cluster.start():
            print("SKIP: Slurm did not start (n1 and n2 not idle within 30 s):\n" + cluster.logs())
            return SKIP
        runs = os.path.join(folder, "runs")
        test_sbatch_ppo(cluster, args, runs)
        test_salloc_grpo(cluster, args, runs)
        test_scancel(cluster, args, runs)
        test_graceful_scancel(cluster, args, runs)
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
    print("slurm_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
