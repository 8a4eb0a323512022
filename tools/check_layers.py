#!/usr/bin/env python3
"""Fails when a folder includes one at its own level or above it.

The folders are the architecture (shared/DESIGN.md). Each sits on a level; a file may
include headers of its own folder and of folders on lower levels only. The role folders
(reward, rollout, trainer) share a level, so none of them includes another: what two roles
both need lives below them (weights/, data/, models/). tests/, bench/ and tools/ may include
anything.

It also keeps the two pages that describe the folders honest, where the tree has them:
docs/architecture.md's layer table must list exactly these levels, and the README's layout
table must name every top-level folder of the tree.

Usage: check_layers.py SOURCE_ROOT    (exit 0: clean; 1: every bad include listed)
"""
import os
import re
import sys

LEVELS = [
    ["common"],
    ["proto", "config", "templating", "kernels"],
    ["launch", "data", "dist", "dashboard", "models"],
    ["sim_bridge", "weights"],
    ["actors"],
    ["reward", "rollout", "trainer"],
    ["controller"],
    ["cli"],
]
EXEMPT = {"tests", "bench", "tools"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def level_of():
    return {folder: i for i, folders in enumerate(LEVELS) for folder in folders}


def bad_includes(root):
    level = level_of()
    bad = []
    for folder in sorted(os.listdir(root)):
        if folder not in level:
            continue
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".inc", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == folder or m.group(1) not in level:
                            continue
                        if level[m.group(1)] >= level[folder]:
                            rel = os.path.relpath(path, root)
                            bad.append(f"{rel}:{lineno}: {folder}/ includes {m.group(1)}/ "
                                       f"(level {level[m.group(1)]} >= {level[folder]})")
    return bad


def architecture_table_errors(root):
    """docs/architecture.md's rows between its layer markers against LEVELS."""
    path = os.path.join(root, "docs", "architecture.md")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- layers: begin.*?-->(.*?)<!-- layers: end -->", text, re.S)
    if not m:
        return ["docs/architecture.md: no '<!-- layers: begin -->' ... '<!-- layers: end -->' table"]
    rows = re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", m.group(1), re.M)
    doc = [[f.strip() for f in folders.split(",")] for _, folders in rows]
    if doc != LEVELS:
        return [f"docs/architecture.md: the layer table lists {doc}, tools/check_layers.py "
                f"has {LEVELS}"]
    return []


def readme_layout_errors(root):
    """Every top-level folder named in the README's '## Layout' table."""
    path = os.path.join(root, "README.md")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        return ["README.md: no '## Layout' section"]
    named = set(re.findall(r"^\|\s*`([a-z_]+)/`", m.group(1), re.M))
    folders = {d for d in os.listdir(root)
               if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
               and d != "build" and not d.startswith("build-")}
    return [f"README.md: the layout table does not list {d}/" for d in sorted(folders - named)]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    known = level_of()
    missing = [d for d in os.listdir(root)
               if os.path.isfile(os.path.join(root, d, "CMakeLists.txt"))
               and d not in known and d not in EXEMPT]
    if missing:
        print(f"folders with no level in tools/check_layers.py: {', '.join(sorted(missing))}")
        return 1
    bad = bad_includes(root) + architecture_table_errors(root) + readme_layout_errors(root)
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} problem(s) against the layering or its description")
        return 1
    print("layering clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
