#!/usr/bin/env python3
"""The one virtual environment every bench runs its peers in (docs/benchmarks.md#environment).

  python3 bench/bench_env.py [--venv DIR]     # make it (first use: pip installs
                                              # bench/requirements.txt, about 1.5 GB), print its python

DIR defaults to $RLFORGE_BENCH_VENV, else ~/.cache/rlforge/bench-venv. torch comes from its
CPU wheel index when that index is reachable (else PyPI's CUDA build, which runs on CPU too).
Benches call ensure() with their --venv: the same folder, made the same way, checked the same
way (every requirement importable) before a bench starts.
"""
import argparse
import os
import re
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
DEFAULT_VENV = os.environ.get("RLFORGE_BENCH_VENV",
                              os.path.expanduser("~/.cache/rlforge/bench-venv"))
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def requirements():
    """[(pip requirement, module it is imported as)] from requirements.txt."""
    out = []
    for line in open(REQUIREMENTS):
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        named = re.search(r"#\s*import:\s*(\w+)", line)
        module = named.group(1) if named else re.split(r"[<>=!~\[ ]", spec)[0].replace("-", "_")
        out.append((spec, module))
    return out


def missing(py):
    """The requirements the venv's python cannot import."""
    reqs = requirements()
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] " \
            "if importlib.util.find_spec(m) is None))"
    out = subprocess.run([py, "-c", probe, *[m for _, m in reqs]], capture_output=True, text=True)
    if out.returncode != 0:
        return [spec for spec, _ in reqs]
    gone = set(out.stdout.split())
    return [spec for spec, m in reqs if m in gone]


def torch_index():
    try:
        urllib.request.urlopen(CPU_INDEX + "/torch/", timeout=15).close()
        return ["--index-url", CPU_INDEX, "--extra-index-url", "https://pypi.org/simple"]
    except OSError:
        return []


def ensure(venv=None):
    """The venv's python, made and filled on first use; exits naming what could not be installed."""
    venv = venv or DEFAULT_VENV
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        print(f"bench_env: making {venv}", file=sys.stderr)
        subprocess.check_call(["/usr/bin/python3", "-m", "venv", venv])
    need = missing(py)
    if need:
        print(f"bench_env: installing into {venv}: {' '.join(need)}", file=sys.stderr)
        subprocess.check_call([py, "-m", "pip", "install", "-q", *torch_index(), "-r", REQUIREMENTS])
        need = missing(py)
        if need:
            sys.exit(f"bench_env: {venv} still cannot import {need} after pip install")
    return py


def versions(py, modules):
    """{module: version} as the venv's python reports them."""
    code = "import importlib, sys; print(' '.join(importlib.import_module(m).__version__ " \
           "for m in sys.argv[1:]))"
    out = subprocess.check_output([py, "-c", code, *modules], text=True)
    return dict(zip(modules, out.split()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--venv", default=DEFAULT_VENV)
    print(ensure(ap.parse_args().venv))


if __name__ == "__main__":
    main()
