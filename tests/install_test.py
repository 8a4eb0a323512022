#!/usr/bin/env python3
"""rlforge installed: `cmake --install` into a fresh prefix, then jobs run from a folder outside
the source and build trees with only what the prefix holds (docs/install.md).

  install_test.py --build BUILD [--deb]

1. The prefix has the four binaries, rlforge-get-smollm2, the configs with their data, the docs,
   the Python client and the example plugin.
2. From a scratch folder: `rlforge validate` on every installed config (but the CUDA build's); a PPO CartPole job and a
   PPO job on the installed Python env (the rlforge_sim client from the prefix's
   lib/python3/dist-packages) run to their end, actors started from the prefix's bin/.
3. With --deb: `cpack -G DEB` makes the package; its control file declares the Debian
   dependencies (libtorch's, zmq's, protobuf's by dpkg-shlibdeps, and the run-time ones) and it
   holds the same files.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

BINARIES = ["rlforge", "rlforge-actor", "rlforge-store", "rlforge-lm", "rlforge-get-smollm2"]
SHORT_PPO = ["ppo.total_steps=2048", "ppo.epochs=2", "dashboard.enabled=false"]


def run(cmd, **kw):
    timeout = kw.pop("timeout", 300)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: {' '.join(cmd)} did not finish in {timeout} s")
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def check_prefix(prefix):
    for b in BINARIES:
        path = os.path.join(prefix, "bin", b)
        if not os.access(path, os.X_OK):
            sys.exit(f"FAIL: {path} is not installed (or not executable)")
    want = ["share/rlforge/configs/ppo_cartpole.yaml", "share/rlforge/configs/grpo_arith.yaml",
            "share/rlforge/data/word_problems/train.jsonl", "share/doc/rlforge/README.md",
            "share/doc/rlforge/install.md", "share/rlforge/examples/cartpole_py.py",
            "share/rlforge/examples/keyword_reward.c", "share/rlforge/tools/chaos.py",
            "lib/python3/dist-packages/rlforge_sim/__init__.py"]
    for rel in want:
        if not os.path.exists(os.path.join(prefix, rel)):
            sys.exit(f"FAIL: {rel} is not in the installed prefix {prefix}")
    if not glob.glob(os.path.join(prefix, "lib*", "rlforge", "plugins", "*keyword_reward.so")):
        sys.exit(f"FAIL: the example reward plugin is not under {prefix}/lib*/rlforge/plugins")


def metrics_steps(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"FAIL: the job wrote no {path}")
    with open(path) as f:
        return [json.loads(line)["step"] for line in f if line.strip()]


def check_iterations(work, name):
    """The run recorded every iteration: ppo.total_steps 2048 / (8 envs x 32 steps) = 8."""
    steps = metrics_steps(os.path.join(work, "runs", name))
    if steps != list(range(1, 9)):
        sys.exit(f"FAIL: the installed job {name} recorded iterations {steps}, not 1..8")
    print(f"{name}: 8 iterations run from the prefix")


def run_jobs(prefix, work):
    rlforge = os.path.join(prefix, "bin", "rlforge")
    for sub in ("configs", "data"):
        shutil.copytree(os.path.join(prefix, "share", "rlforge", sub), os.path.join(work, sub))
    env = dict(os.environ, PYTHONPATH=os.path.join(prefix, "lib", "python3", "dist-packages"))
    env.pop("RLFORGE_BIN", None)
    env["PATH"] = os.path.join(prefix, "bin") + ":/usr/bin:/bin"
    for cfg in sorted(glob.glob(os.path.join(work, "configs", "*.yaml"))):
        if not cfg.endswith("_gpu.yaml"):  # needs the CUDA build (docs/gpu.md)
            run([rlforge, "validate", os.path.relpath(cfg, work)], cwd=work, env=env)
    run([rlforge, "run", "configs/ppo_cartpole.yaml", "job.name=cartpole", *SHORT_PPO],
        cwd=work, env=env)
    check_iterations(work, "cartpole")
    example = os.path.join(prefix, "share", "rlforge", "examples", "cartpole_py.py")
    job = os.path.join(work, "py_env.yaml")
    with open(job, "w") as f:
        f.write(open(os.path.join(work, "configs", "ppo_cartpole.yaml")).read())
        f.write(f"sim:\n  backend: server\n  servers_per_worker: 1\n"
                f"  command: [python3, {example}, --bind, \"{{bind}}\", --num-envs, \"{{num_envs}}\"]\n")
    with open(job) as f:
        text = f.read().replace("id: CartPole-v1", "id: PyCartPole-v0")
    with open(job, "w") as f:
        f.write(text)
    run([rlforge, "run", "py_env.yaml", "job.name=py_env", *SHORT_PPO], cwd=work, env=env)
    check_iterations(work, "py_env")


def check_deb(build, work):
    out = os.path.join(work, "deb")
    run(["cpack", "-G", "DEB", "-B", out], cwd=build, timeout=600)
    debs = glob.glob(os.path.join(out, "rlforge_*.deb"))
    if len(debs) != 1:
        sys.exit(f"FAIL: cpack made {debs}, not one rlforge_*.deb")
    depends = run(["dpkg-deb", "-f", debs[0], "Depends"]).stdout
    for pkg in ["libtorch", "libzmq5", "libprotobuf", "libyaml-cpp", "python3-zmq",
                "python3-protobuf", "libopenblas0-pthread"]:
        if pkg not in depends:
            sys.exit(f"FAIL: the package's Depends lacks {pkg}: {depends}")
    files = run(["dpkg-deb", "-c", debs[0]]).stdout
    for rel in ["./usr/bin/rlforge", "./usr/bin/rlforge-actor", "./usr/share/rlforge/configs/",
                "./usr/lib/python3/dist-packages/rlforge_sim/__init__.py"]:
        if rel not in files:
            sys.exit(f"FAIL: the package lacks {rel}")
    print(f"deb: {os.path.basename(debs[0])}; Depends: {depends.strip()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--deb", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlforge_install_") as tmp:
        prefix, work = os.path.join(tmp, "prefix"), os.path.join(tmp, "work")
        os.makedirs(work)
        run(["cmake", "--install", a.build, "--prefix", prefix])
        check_prefix(prefix)
        run_jobs(prefix, work)
        if a.deb:
            check_deb(os.path.abspath(a.build), tmp)
    print("PASS: installed into a fresh prefix; jobs ran from outside the tree")


if __name__ == "__main__":
    main()
