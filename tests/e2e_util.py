"""What the Python end-to-end tests share: running a command, polling for a condition, reading
a run's JSONL files, a free port. Each test puts its own folder on sys.path to import this."""

import json
import os
import socket
import subprocess
import time


def run(cmd, timeout):
    """Runs `cmd`; its output, or the test fails printing the output's tail."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        print(out.stdout[-4000:])
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}")
    return out.stdout


def read_jsonl(path):
    """Every record of a JSONL file (metrics.jsonl, events.jsonl); none while it is missing."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f.read().splitlines() if line.strip()]


def wait_for(what, predicate, timeout, watch=(), interval=0.05):
    """Polls predicate() until it is true and returns its value; fails naming `what` when it
    does not come, or when a watched process (a Popen with a `log` path) exits first (its log's
    tail is printed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        for p in watch:
            if p.poll() is not None:
                print(open(p.log).read()[-4000:])
                raise SystemExit(f"{p.log} exited ({p.returncode}) while waiting for {what}")
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout} s waiting for {what}")


def free_port():
    """A TCP port free on loopback now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
