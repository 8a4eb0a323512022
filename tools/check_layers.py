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

And it enforces the torch rule (docs/architecture.md, "Which code may include libtorch"): a
target whose CMakeLists.txt does not call rlforge_use_torch on it compiles no source that
reaches a libtorch header (<torch/...>, <ATen/...>, <c10/...>), directly or through the
project's headers; a folder with no library that links libtorch holds no file that reaches one;
and the page's list of the libraries that link libtorch is exactly the CMake files' list.

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


TORCH_HEADER = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10|caffe2)/([^>"]*)[>"]')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
TARGET = re.compile(r"\b(rlforge_library|rlforge_test|add_executable|add_library)\(\s*([\w-]+)([^)]*)\)",
                    re.S)
USES_TORCH = re.compile(r"\brlforge_use_torch\(\s*([\w-]+)\s*\)")
SOURCE_EXT = (".cc", ".c", ".cu", ".cpp")


def cmake_targets(root):
    """{target: (folder, [source paths relative to root], is_library)} and the torch set."""
    targets, torch = {}, set()
    for folder in sorted(os.listdir(root)):
        path = os.path.join(root, folder, "CMakeLists.txt")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"#[^\n]*", "", f.read())
        torch |= set(USES_TORCH.findall(text))
        for kind, name, args in TARGET.findall(text):
            words = args.split()
            if kind.startswith("rlforge_"):
                words = words[words.index("SOURCES") + 1:] if "SOURCES" in words else []
                words = words[:next((i for i, w in enumerate(words)
                                     if w in ("DEPS", "LABELS")), len(words))]
            sources = []
            for w in words:
                w = w.replace("${CMAKE_SOURCE_DIR}/", "/")
                if "$" in w or not w.endswith(SOURCE_EXT):
                    continue
                sources.append(w[1:] if w.startswith("/") else os.path.join(folder, w))
            library = kind in ("rlforge_library", "add_library")
            targets[name] = (folder, sources, library)
    return targets, torch


def torch_chain(root, rel, memo, stack=()):
    """The include chain from `rel` to a libtorch header, or None when it reaches none."""
    if rel in memo:
        return memo[rel]
    full = os.path.join(root, rel)
    if rel in stack or not os.path.isfile(full):
        return None
    chain = None
    with open(full, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = TORCH_HEADER.match(line)
            if m:
                chain = [rel, f"<{m.group(1)}/{m.group(2)}>"]
                break
            m = ANY_INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if "/" not in target:  # beside the including file
                target = os.path.join(os.path.dirname(rel), target)
            sub = torch_chain(root, target, memo, stack + (rel,))
            if sub:
                chain = [rel] + sub
                break
    memo[rel] = chain
    return chain


def documented_torch_libraries(root):
    """The libraries docs/architecture.md's torch rule lists (None: no such page or block)."""
    path = os.path.join(root, "docs", "architecture.md")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- torch: begin.*?-->(.*?)<!-- torch: end -->", text, re.S)
    if not m:
        return []
    listed = re.search(r"libraries that link libtorch[^:]*:(.*?)\.(\s|$)", m.group(1), re.S)
    return sorted(re.findall(r"`([\w-]+)`", listed.group(1))) if listed else []


def torch_errors(root):
    """Torch-free targets and folders that reach libtorch, and a stale list in the docs."""
    targets, torch = cmake_targets(root)
    memo, bad = {}, []
    for name, (folder, sources, _) in sorted(targets.items()):
        if name in torch:
            continue
        for src in sources:
            chain = torch_chain(root, src, memo)
            if chain:
                bad.append(f"{src}: built into {name}, which does not link libtorch "
                           f"(no rlforge_use_torch), yet includes it: {' -> '.join(chain)}")
    torch_folders = {folder for name, (folder, _, library) in targets.items()
                     if library and name in torch}
    for folder in sorted(set(level_of()) - torch_folders):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for file in sorted(files):
                if not file.endswith((".h", ".inc") + SOURCE_EXT):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, file), root)
                chain = torch_chain(root, rel, memo)
                if chain and not any(rel == s for _, srcs, _ in targets.values() for s in srcs):
                    bad.append(f"{rel}: {folder}/ has no library that links libtorch, yet this "
                               f"file includes it: {' -> '.join(chain)}")
    documented = documented_torch_libraries(root)
    actual = sorted(n for n, (folder, _, library) in targets.items()
                    if library and n in torch and folder not in EXEMPT)
    if documented is not None and documented != actual:
        bad.append(f"docs/architecture.md: the torch rule lists the libraries {documented} as "
                   f"linking libtorch; the CMake files link it into {actual}")
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
    bad = (bad_includes(root) + architecture_table_errors(root) + readme_layout_errors(root) +
           torch_errors(root))
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} problem(s) against the layering, the torch rule or their description")
        return 1
    print("layering and torch rule clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
