# rlforge's Python reward process (reward/python_reward.h): embedded in the binary, run as
# `PYTHON -c <this> FILE FUNCTION`. It imports the user's module once, then scores one sample
# per request. Protocol, one JSON object per line:
#   at start, on stdout:  {"ready": "verl" | "trl"}  or  {"import_error": "FILE:LINE: ..."}
#   requests on stdin:    {"prompt": ..., "response": ..., "answer": ...}
#   replies on stdout:    {"score": x} | {"nonfinite": "nan"} | {"error": "..."}
# The user's print() goes to stderr (the reward worker's log), never into the protocol.
import importlib.util
import inspect
import json
import math
import os
import sys
import traceback

VERL = "compute_score(data_source, solution_str, ground_truth, extra_info=None)"
TRL = "reward_func(prompts, completions, **kwargs) -> list of floats"


def where(exc, path):
    """FILE:LINE of the innermost frame of the user's file in exc's traceback."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else path


def load(path, name):
    spec = importlib.util.spec_from_file_location("rlforge_user_reward", path)
    if spec is None:
        raise ImportError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise LookupError(f"{path}: no function named {name}")
    fn = getattr(module, name)
    params = inspect.signature(fn).parameters
    if "solution_str" in params:
        return fn, "verl"
    if "completions" in params:
        return fn, "trl"
    line = fn.__code__.co_firstlineno
    raise TypeError(f"{path}:{line}: {name}{inspect.signature(fn)} takes neither verl's "
                    f"arguments ({VERL}) nor TRL's ({TRL})")


def call(fn, style, req):
    if style == "verl":
        out = fn(data_source=req.get("data_source", ""), solution_str=req["response"],
                 ground_truth=req["answer"], extra_info={"prompt": req["prompt"]})
        if isinstance(out, dict):
            if "score" not in out:
                raise ValueError(f"returned a dict without 'score': {sorted(out)}")
            out = out["score"]
        return out
    columns = {"answer": [req["answer"]], "ground_truth": [req["answer"]]}
    params = inspect.signature(fn).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        columns = {k: v for k, v in columns.items() if k in params}
    out = fn(prompts=[req["prompt"]], completions=[req["response"]], **columns)
    if not isinstance(out, (list, tuple)) or len(out) != 1:
        raise TypeError(f"returned {type(out).__name__}, not a list with one score per completion")
    return out[0]


def reply(out):
    if isinstance(out, bool) or not isinstance(out, (int, float)):
        return {"error": f"returned {type(out).__name__} ({out!r:.80}), not a number"}
    out = float(out)
    return {"score": out} if math.isfinite(out) else {"nonfinite": repr(out)}


def main():
    path, name = sys.argv[1], sys.argv[2]
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)

    def send(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        fn, style = load(path, name)
    except Exception as e:  # noqa: BLE001 -- every import failure is reported, with its line
        text = str(e) if isinstance(e, (LookupError, TypeError)) and str(e).startswith(path) \
            else f"{where(e, path)}: {type(e).__name__}: {e}"
        send({"import_error": text})
        return
    send({"ready": style})
    for line in sys.stdin:
        req = json.loads(line)
        try:
            send(reply(call(fn, style, req)))
        except Exception as e:  # noqa: BLE001 -- the sample fails, the process goes on
            send({"error": f"{where(e, path)}: {type(e).__name__}: {e}"})


main()
