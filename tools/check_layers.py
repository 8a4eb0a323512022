#!/usr/bin/env python3
"""Fails when a folder includes one at its own level or above it.

The folders are the architecture (shared/DESIGN.md). Each sits on a level; a file may
include headers of its own folder and of folders on lower levels only. The role folders
(reward, rollout, trainer) share a level, so none of them includes another: what two roles
both need lives below them (weights/, data/, models/). tests/, bench/ and tools/ may include
anything.

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
    bad = bad_includes(root)
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} include(s) against the layering")
        return 1
    print("layering clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
