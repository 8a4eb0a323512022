#!/usr/bin/env python3
"""check_layers.py must flag an upward include and a sibling-role include, and pass a clean tree."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(files):
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        return subprocess.run([sys.executable, os.path.join(HERE, "check_layers.py"), root],
                              capture_output=True, text=True)


def main():
    clean = run({"trainer/a.cc": '#include "models/x.h"\n#include "trainer/b.h"\n'})
    assert clean.returncode == 0, clean.stdout
    up = run({"trainer/a.cc": '#include "controller/lm_loop.h"\n'})
    assert up.returncode == 1 and "trainer/a.cc:1: trainer/ includes controller/" in up.stdout, up.stdout
    sibling = run({"rollout/r.h": '\n#include "trainer/weight_sync.h"\n'})
    assert sibling.returncode == 1 and "rollout/r.h:2" in sibling.stdout, sibling.stdout
    unknown = run({"newfolder/CMakeLists.txt": "", "newfolder/a.cc": ""})
    assert unknown.returncode == 1 and "newfolder" in unknown.stdout, unknown.stdout
    print("check_layers: 4 cases passed")


if __name__ == "__main__":
    main()
