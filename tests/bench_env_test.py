#!/usr/bin/env python3
"""One bench environment serves every bench (bench/bench_env.py, docs/benchmarks.md):

- every third-party module that a script run in it imports (a bench/ or tools/ script that
  names bench_env.py) is installed by a line of bench/requirements.txt;
- no script makes a virtual environment or pip-installs on its own.

Imports are read from the text (code in strings, which the benches send to the venv's python,
included). Exit 0 when both hold; otherwise each offending script and module is named.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_env  # noqa: E402

IMPORT = re.compile(r"^\s*(?:import\s+([A-Za-z_]\w*)|from\s+([A-Za-z_]\w*)[\w.]*\s+import\s)", re.M)
OWN_VENV = re.compile(r"-m\"?,?\s*\"?venv\b|\bpip\"?,?\s*\"?install\b")


def local_modules():
    names = set()
    for folder in ("bench", "tools", "tests", "sim_bridge/python"):
        for path in glob.glob(os.path.join(ROOT, folder, "*")):
            names.add(os.path.splitext(os.path.basename(path))[0])
    return names


def scripts():
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "*.py")) +
                       glob.glob(os.path.join(ROOT, "tools", "*.py"))):
        yield os.path.relpath(path, ROOT), open(path).read()


def problems(text_of, provided, local):
    out = []
    for rel, text in text_of:
        if rel == "bench/bench_env.py":
            continue
        if OWN_VENV.search(text):
            out.append(f"{rel}: makes a venv or pip-installs itself; use bench_env.ensure()")
        if "bench_env" not in text:
            continue
        for m in IMPORT.finditer(text):
            mod = m.group(1) or m.group(2)
            if mod in sys.stdlib_module_names or mod in local or mod in provided:
                continue
            out.append(f"{rel}: imports {mod}, which bench/requirements.txt does not install")
    return sorted(set(out))


def self_test(provided, local):
    bad = [("bench/x.py", "import bench_env\nimport torch\nfrom missing_pkg.sub import y\n"),
           ("bench/y.py", 'subprocess.check_call([py, "-m", "venv", d])\n')]
    found = problems(bad, provided, local)
    want = ["bench/x.py: imports missing_pkg, which bench/requirements.txt does not install",
            "bench/y.py: makes a venv or pip-installs itself; use bench_env.ensure()"]
    if found != want:
        sys.exit(f"self-test: the checker found {found}, expected {want}")


def main():
    provided = {module for _, module in bench_env.requirements()}
    local = local_modules()
    self_test(provided, local)
    found = problems(scripts(), provided, local)
    for line in found:
        print(line)
    if found:
        sys.exit(1)
    print(f"bench_env_test: every bench script's imports are in bench/requirements.txt "
          f"({len(provided)} requirements)")


if __name__ == "__main__":
    main()
