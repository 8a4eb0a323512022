"""Reads a run's TensorBoard event files with TensorBoard itself and compares
every scalar with metrics.jsonl.

  $(python3 bench/bench_env.py) tools/check_tensorboard.py runs/<name>

Uses tensorboard's EventAccumulator (PyPI `tensorboard`, tooling only; rlforge
writes the files in C++ without it). Exits 1 on any mismatch.
"""
import glob
import json
import os
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
    if not files:
        sys.exit(f"no events.out.tfevents.* in {run}")
    want = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            for part in ("metrics", "timings"):
                for k, v in rec.get(part, {}).items():
                    want.setdefault(f"{part}/{k}", {})[rec["step"]] = float(v)
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    bad = 0
    points = 0
    for tag, by_step in sorted(want.items()):
        if tag not in tags:
            print(f"MISSING tag {tag}")
            bad += 1
            continue
        got = {e.step: e.value for e in acc.Scalars(tag)}
        for step, v in by_step.items():
            points += 1
            g = got.get(step)
            # Event files hold float32: the value must be metrics.jsonl's, rounded to float32.
            if g is None or g != struct.unpack("f", struct.pack("f", v))[0]:
                print(f"MISMATCH {tag} step {step}: tensorboard {g}, metrics.jsonl {v}")
                bad += 1
    print(f"{len(files)} event file(s), {len(tags)} scalar tags, {points} points compared "
          f"with metrics.jsonl, {bad} mismatches")
    print("OK" if bad == 0 else "FAILED")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
