#!/usr/bin/env python3
"""`rlforge k8s` manifests, run as pods would run them, on this machine.

The manifests of a short PPO job (2 rollout workers as a Deployment, the trainer as an indexed
Job) are parsed and every container is started as a local process the way the kubelet would
start it: its command with $(VAR) expanded from its env, the ConfigMap and the Secret written
where its volumes mount them (under a temporary folder: the mount paths are mapped there), only
the Secret's items a volume names, and the controller's Service name resolving to 127.0.0.1.
The job must finish (CURVE on, the keys from the Secret), every pod process must exit, and an
actor given no key must be refused. This checks that the manifests hang together; it does not
need Kubernetes.
"""

import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import free_port  # noqa: E402

def expand(text, env):
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), text)


class Pods:
    def __init__(self, docs, root, rlforge):
        self.docs = docs
        self.root = root
        self.rlforge = rlforge
        self.by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        self.procs = []

    def start(self, pod, name, env_extra=None):
        """Starts the pod's one container; its mounts are folders of its own."""
        (c,) = pod["spec"]["containers"]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: os.path.join(self.root, "pods", name, m["name"])
                  for m in c.get("volumeMounts", [])}

        def local(text):
            for path, folder in mounts.items():
                text = text.replace(path, folder)
            return text

        for m in c.get("volumeMounts", []):
            self.fill(volumes[m["name"]], mounts[m["mountPath"]], local)
        env = {k: v for k, v in os.environ.items() if k != "RLFORGE_KEYS"}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = local(e["value"])
            elif "secretKeyRef" in e.get("valueFrom", {}):
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = self.by[("Secret", ref["name"])]["stringData"][ref["key"]]
        env.update(env_extra or {})
        argv = [local(expand(a, env)) for a in c["command"]]
        argv[0] = self.rlforge
        # The controller's Service resolves to where its pod listens: this host.
        argv = [re.sub(r"tcp://[\w.-]+\.svc:", "tcp://127.0.0.1:", a) for a in argv]
        log = open(os.path.join(self.root, name + ".log"), "w")
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                             cwd=self.root, start_new_session=True)
        self.procs.append((name, p))
        return p

    def fill(self, volume, folder, local):
        """A volume's files, as the kubelet would project them (Secret items and mode)."""
        os.makedirs(folder, exist_ok=True)
        if "configMap" in volume:
            cm = self.by[("ConfigMap", volume["configMap"]["name"])]
            for key, text in cm["data"].items():
                with open(os.path.join(folder, key), "w") as f:
                    f.write(local(text))
        elif "secret" in volume:
            secret = self.by[("Secret", volume["secret"]["secretName"])]
            items = volume["secret"].get("items") or [{"key": k, "path": k}
                                                      for k in secret["stringData"]]
            os.chmod(folder, 0o700)
            for it in items:
                path = os.path.join(folder, it["path"])
                with open(path, "w") as f:
                    f.write(secret["stringData"][it["key"]])
                os.chmod(path, volume["secret"]["defaultMode"])

    def stop_all(self):
        for _, p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlforge", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="rlforge_k8s_")
    args.rlforge = os.path.abspath(args.rlforge)
    port = free_port()
    manifests = os.path.join(root, "job.yaml")
    out = subprocess.run(
        [args.rlforge, "k8s", os.path.join(args.source, "configs/ppo_cartpole.yaml"),
         "job.name=cart", "rollout.workers=2", "ppo.total_steps=8192", f"controller.port={port}",
         "dashboard.enabled=false", "--image", "registry.example/rlforge:1", "--out", manifests],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"rlforge k8s failed: {out.stdout}")
    mode = stat.S_IMODE(os.stat(manifests).st_mode)
    if mode != 0o600:
        raise SystemExit(f"{manifests} has mode {oct(mode)}, not 0600: it holds the keys")
    with open(manifests) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    pods = Pods(docs, root, os.path.abspath(args.rlforge))
    try:
        ctl = pods.start(pods.by[("Job", "cart-controller")]["spec"]["template"], "controller")
        time.sleep(0.5)
        # A stranger without the key is refused at the handshake.
        bad = subprocess.run([args.rlforge, "actor", "--role", "rollout", "--connect",
                              f"tcp://127.0.0.1:{port}", "--register-timeout", "20"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60, env={k: v for k, v in os.environ.items()
                                              if k != "RLFORGE_KEYS"})
        if bad.returncode == 0 or "requires its CURVE keys" not in bad.stdout:
            raise SystemExit(f"an actor without the key was not refused:\n{bad.stdout}")
        trainer = pods.by[("Job", "cart-trainer")]["spec"]
        for rank in range(trainer["completions"]):
            pods.start(trainer["template"], f"trainer-{rank}",
                       {"RANK": str(rank)})  # the completion-index annotation, as the Job sets it
        rollout = pods.by[("Deployment", "cart-rollout")]["spec"]
        for i in range(rollout["replicas"]):
            pods.start(rollout["template"], f"rollout-{i}")
        code = ctl.wait(timeout=240)
        log = open(os.path.join(root, "controller.log")).read()
        if code != 0:
            raise SystemExit(f"controller exited {code}:\n{log[-4000:]}")
        if "control plane: CURVE" not in log:
            raise SystemExit("the controller did not use CURVE:\n" + log[-2000:])
        deadline = time.time() + 30
        for name, p in pods.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                raise SystemExit(f"pod {name} did not exit after the job finished")
        status = open(os.path.join(root, "pods/controller/runs/cart/status.json")).read()
        if '"finished"' not in status:
            raise SystemExit("status.json: " + status)
        print(f"k8s_test: {len(pods.procs)} pods ran the job to the end with the Secret's keys; "
              "a keyless actor was refused")
    finally:
        pods.stop_all()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
