#!/usr/bin/env python3
"""check_layers.py must flag an upward include, a sibling-role include and a break of the torch
rule, and pass a clean tree."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_layers import LEVELS  # noqa: E402


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
    table = ("<!-- layers: begin -->\n| level | folders | what |\n| --- | --- | --- |\n"
             + "".join(f"| {i} | {', '.join(f)} | x |\n" for i, f in enumerate(LEVELS))
             + "<!-- layers: end -->\n")
    good_doc = run({"docs/architecture.md": table, "trainer/a.cc": ""})
    assert good_doc.returncode == 0, good_doc.stdout
    stale = table.replace("| 3 | sim_bridge, weights |", "| 3 | sim_bridge |")
    bad_doc = run({"docs/architecture.md": stale, "trainer/a.cc": ""})
    assert bad_doc.returncode == 1 and "docs/architecture.md: the layer table" in bad_doc.stdout, \
        bad_doc.stdout
    readme = "# x\n\n## Layout\n\n| folder | what |\n|---|---|\n| `trainer/` | t |\n\n## Next\n"
    listed = run({"README.md": readme, "trainer/a.cc": ""})
    assert listed.returncode == 0, listed.stdout
    unlisted = run({"README.md": readme, "trainer/a.cc": "", "models/m.h": ""})
    assert unlisted.returncode == 1 and "does not list models/" in unlisted.stdout, unlisted.stdout
    torch_cases()
    print("check_layers: 14 cases passed")


def torch_cases():
    engine = {"models/m.h": "#include <torch/torch.h>\n",
              "models/CMakeLists.txt": "rlforge_library(rlforge_models SOURCES m.cc)\n"
                                       "rlforge_use_torch(rlforge_models)\n",
              "rollout/runner.h": '#include "models/m.h"\n',
              "rollout/sched.cc": '#include "rollout/runner.h"\n',
              "rollout/CMakeLists.txt": "rlforge_library(rlforge_rollout_core SOURCES sched.cc\n"
                                        "  DEPS rlforge_common)  # rlforge_use_torch(not_this)\n"}
    free = run(engine)
    assert free.returncode == 1 and (
        "rollout/sched.cc: built into rlforge_rollout_core, which does not link libtorch"
        in free.stdout) and "rollout/runner.h -> models/m.h -> <torch/torch.h>" in free.stdout, \
        free.stdout
    linked = dict(engine)
    linked["rollout/CMakeLists.txt"] += "rlforge_use_torch(rlforge_rollout_core)\n"
    assert run(linked).returncode == 0, run(linked).stdout
    header = run({"controller/c.h": "#include <ATen/Parallel.h>\n",
                  "controller/CMakeLists.txt": "rlforge_library(rlforge_controller SOURCES)\n"})
    assert header.returncode == 1 and (
        "controller/c.h: controller/ has no library that links libtorch" in header.stdout), \
        header.stdout
    table = ("<!-- layers: begin -->\n| level | folders | what |\n| --- | --- | --- |\n"
             + "".join(f"| {i} | {', '.join(f)} | x |\n" for i, f in enumerate(LEVELS))
             + "<!-- layers: end -->\n")
    rule = ("<!-- torch: begin -->\nOne rule. The libraries that link libtorch: "
            "`rlforge_models`, `rlforge_rollout_core`.\n<!-- torch: end -->\n")
    listed = dict(linked, **{"docs/architecture.md": table + rule})
    assert run(listed).returncode == 0, run(listed).stdout
    stale = dict(linked, **{"docs/architecture.md": table + rule.replace(", `rlforge_rollout_core`",
                                                                         "")})
    out = run(stale)
    assert out.returncode == 1 and "the torch rule lists the libraries ['rlforge_models']" in \
        out.stdout, out.stdout
    unlisted = dict(linked, **{"docs/architecture.md": table})
    assert run(unlisted).returncode == 1, run(unlisted).stdout


if __name__ == "__main__":
    main()
