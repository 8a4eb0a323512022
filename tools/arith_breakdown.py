#!/usr/bin/env python3
"""What an arithmetic checkpoint gets wrong: carry-dropped answers or other mistakes.

    python3 tools/arith_breakdown.py --model runs/sft_arith_flawed/checkpoints/step_3000
    python3 tools/arith_breakdown.py --model A --model B     # several, one line each

Runs `rlforge eval` (greedy, exact match) on every 1-2 digit addition and subtraction
problem (a, b in 0..99, a >= b for subtraction: the task's whole space, train and held-out
splits together) and weighs each problem by how often the task draws it (each operand's
digit count is 1 or 2 with equal odds, then uniform). It prints the share of problems with
a carry or borrow, and for those and the others the share answered right, answered with
every carry dropped (the flawed demonstrations' mistake) or answered otherwise wrong.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def carryless(a, b, op):
    out, place = 0, 1
    while a > 0 or b > 0:
        x, y = a % 10, b % 10
        out += place * ((x + y) % 10 if op == "+" else (x - y + 10) % 10)
        place *= 10
        a //= 10
        b //= 10
    return out


def problems():
    for a in range(100):
        for b in range(100):
            for op in "+-":
                if op == "-" and a < b:
                    continue
                yield a, b, op


def draw_weight(a, b, op):
    def one(x):
        return 0.5 / 10 if x < 10 else 0.5 / 90

    # a - b with a < b is drawn and then swapped: both orders land on (max, min).
    return one(a) * one(b) * (2 if op == "-" and a != b else 1)


def breakdown(rlforge, model, data):
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as out:
        cmd = [rlforge, "eval", "--model", model, "--data", data, "--reward", "exact",
               "--max-tokens", "6", "--threads", "1", "--template", "none", "--out", out.name]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"arith_breakdown: {' '.join(cmd)} failed:\n{run.stderr}")
        rows = [json.loads(line) for line in out if line.startswith('{"answer"')]
    w = {}
    for r, (a, b, op) in zip(rows, problems()):
        kind = "carry" if carryless(a, b, op) != (a + b if op == "+" else a - b) else "plain"
        got = "right" if r["correct"] else (
            "carry dropped" if r["response"] == str(carryless(a, b, op)) else "other")
        weight = draw_weight(a, b, op)
        w[kind] = w.get(kind, 0) + weight
        w[kind, got] = w.get((kind, got), 0) + weight
    total = w["carry"] + w["plain"]
    right = (w.get(("carry", "right"), 0) + w.get(("plain", "right"), 0)) / total
    parts = [f"{model}: right {100 * right:.1f}%"]
    for kind in ("carry", "plain"):
        shares = ", ".join(f"{got} {100 * w.get((kind, got), 0) / w[kind]:.1f}%"
                           for got in ("right", "carry dropped", "other"))
        parts.append(f"{kind} ({100 * w[kind] / total:.1f}% of problems): {shares}")
    return "; ".join(parts)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", action="append", required=True, help="checkpoint directory")
    p.add_argument("--rlforge", default=os.path.join(root, "build", "rlforge"))
    args = p.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as data:
        for a, b, op in problems():
            value = a + b if op == "+" else a - b
            data.write(json.dumps({"prompt": f"{a}{op}{b}=", "answer": str(value)}) + "\n")
        data.flush()
        for model in args.model:
            print(breakdown(args.rlforge, model, data.name))


if __name__ == "__main__":
    main()
