#!/usr/bin/env python3
"""Doc tests: every fenced block of a covered page runs, as written, against its stated outcome.

page -> fenced blocks -> each block's annotation -> run in the page's fresh folder -> checked

Design (docs/doc_tests.md says the same for page authors):

- Every fenced block of a covered page (README.md and the docs/ pages registered in
  tests/CMakeLists.txt) is classified, or the page fails: a new example cannot be added
  untested. A block is classified by fence info `text` (sample output, a diagram, a file that
  is not rlforge's) or by an annotation, an HTML comment right before the fence (other comments,
  such as the `<!-- tested: NAME -->` markers C++ tests look for, may sit between):

      <!-- doctest: KIND [ARGUMENT]
      key: value
      ... -->

  KIND is `run` (run it; the keys below), `text` (not a command), `covered-by NAME` (a C++ test
  `Suite.Name` or a ctest name that runs this block; the name must exist in tests/ or a
  CMakeLists.txt), or `skip REASON` (not runnable here, e.g. it needs a Slurm cluster; the
  reason is printed, and every repository path the block names must exist).
- A `run` block's text is a bash script run from the page's folder, `set -e`, with the folder
  of the rlforge under test first on PATH, so `rlforge ...` runs as written. In a block whose
  lines start with `$ `, those lines (with their `\\` continuations) are the commands, each
  run on its own, and the other lines are the sample output shown to readers.
- The page's folder is fresh for each run of the harness: the checkout's top-level entries
  linked in (configs/, data/, tools/, ...), and build/ a folder of links to the build's
  outputs (executables, CMake's folders; not other tests' work folders), so `build/rlforge`
  and `build/bench/...` work and blocks may add folders of their own under build/.
  A page's blocks run in the page's order in that one folder: a run, then `--resume` of it,
  then `rlforge status` of it.
- Keys of a `run` block (repeatable ones marked +; values may use {source}, {build} and
  {port:NAME}, a free port per NAME and page):
    id: NAME               how later blocks name it (after:, wait:, stop:)
    after: NAME ...        run only if those blocks passed (else reported as not run)
    setup: SHELL +         run before the block, in the folder; `tiny_checkpoint DEST [JOB
                           [OVERRIDES]]` puts a seconds-long SFT checkpoint at DEST (made once
                           per page and job; default configs/sft_tiny.yaml, 4 steps)
    env: NAME=VALUE +      added to the block's environment
    write-to: FILE         the block is a file (a job's YAML): written to FILE, then `command:`
    merge-into: JOB        with write-to: the block is an excerpt, deep-merged into JOB first
    command: SHELL         what runs when write-to is given
    replace: OLD => NEW +  text substitutions (placeholders such as CONTROLLER_HOST, a fixed port)
    append: TEXT           appended to each command that matches append-to (default
                           `rlforge run`), before any `;`, `|`, `&` or `#` after it: the
                           overrides that shorten a run (iterations, sizes)
    append-to: REGEX
    exit: N [N ...]        expected exit code: one, or one per `$` command (default 0)
    output: REGEX +        must match the block's output (stdout and stderr; multiline);
                           named groups become {output:NAME} in later json: values
    no-output: REGEX +     must not match
    as-shown               every sample-output line of a `$` block appears in the output
    file: PATH +           must exist afterwards
    json: PATH KEY OP VALUE +  a value in a JSON file or, for .jsonl, the last record holding
                           KEY (KEY: keys joined by `.`); OP: == != < <= > >= ~ (regex) exists
    parallel               the block's commands start together (one process per slot, one per
                           host); each must exit as `exit:` says
    background: NAME       the block keeps running while the next ones run; `ready: REGEX`
    ready: REGEX           is awaited in its output first; its checks run when it ends
    wait: NAME             after this block, wait for background NAME to end and check it
    stop: NAME SIGNAL      after this block, send SIGNAL to NAME, then wait and check it
    timeout: SECONDS       per block (default 120); every wait has a deadline
- Output: per page `PAGE: N runnable blocks run, M passed; C covered by other tests; S skipped;
  K non-command blocks`, then every failure as `PAGE:LINE: what differed` and the tail of the
  block's output. Exit 1 on any failure or unclassified block.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_blocks import (Failure, append_overrides, classify, join_continuations,  # noqa: E402
                        parse_blocks, split_prompts)

DEFAULT_TIMEOUT = 120
# tiny_checkpoint DEST [JOB [OVERRIDES...]]: a seconds-long SFT run of JOB (once per page and
# arguments), its final checkpoint copied to DEST.
SETUP_PRELUDE = r'''
tiny_checkpoint() {
  local dest="$1"; shift
  local job="${1:-configs/sft_tiny.yaml}"; [ $# -gt 0 ] && shift
  local key; key=$(printf '%s ' "$job" "$@" | md5sum | cut -c1-12)
  local root="$DOCTEST_CACHE/sft-$key"
  if [ ! -d "$root/sft/checkpoints" ]; then
    rlforge run "$job" job.run_root="$root" job.name=sft sft.steps=4 sft.eval_every=0 \
        sft.save_every=0 "$@" >"$root.log" 2>&1 || { tail -20 "$root.log"; return 1; }
  fi
  local ckpt; ckpt=$(ls -d "$root"/sft/checkpoints/step_* | sort -t_ -k2 -n | tail -1)
  mkdir -p "$(dirname "$dest")" && rm -rf "$dest" && cp -r "$ckpt" "$dest"
}
'''


# ---------------------------------------------------------------------------------------------
# Running a page


class Page:
    def __init__(self, args, page):
        self.args = args
        self.page = page
        self.name = os.path.splitext(os.path.basename(page))[0]
        self.dir = os.path.join(args.work, self.name)
        self.ports = {}
        self.outputs = {}      # named regex groups seen so far: {output:NAME}
        self.results = {}      # block id -> passed
        self.background = {}   # name -> (Popen, block, log path, deadline)
        self.failures = []

    # -- the folder
    def prepare(self):
        if os.path.exists(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        src = self.args.source
        for entry in os.listdir(src):
            if entry in (".git", "build", "runs") or entry.startswith("."):
                continue
            os.symlink(os.path.join(src, entry), os.path.join(self.dir, entry))
        build = os.path.join(self.dir, "build")
        os.makedirs(build)
        for entry in os.listdir(self.args.build):
            # The build's outputs only: executables and CMake's own folders, not the work
            # folders other tests keep there (build/chaos_test, this harness's build/doctest),
            # which a block may create afresh here.
            full = os.path.join(self.args.build, entry)
            made_by_cmake = os.path.isdir(full) and os.path.exists(
                os.path.join(full, "cmake_install.cmake"))
            if made_by_cmake or (os.path.isfile(full) and os.access(full, os.X_OK)):
                os.symlink(full, os.path.join(build, entry))
        self.cache = os.path.join(self.dir, ".doctest")
        os.makedirs(self.cache)

    def env(self, extra=()):
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(self.args.rlforge) + os.pathsep + env.get("PATH", "")
        env["DOCTEST_CACHE"] = self.cache
        env.pop("RLFORGE_KEYS", None)
        env.pop("RLFORGE_DASHBOARD_TOKEN", None)
        for item in extra:
            name, _, value = item.partition("=")
            env[name.strip()] = self.fill(value.strip())
        return env

    def fill(self, text):
        def port(m):
            if m.group(1) not in self.ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    self.ports[m.group(1)] = s.getsockname()[1]
            return str(self.ports[m.group(1)])
        text = re.sub(r"\{port:([A-Za-z0-9_]+)\}", port, text)
        text = re.sub(r"\{output:([A-Za-z0-9_]+)\}",
                      lambda m: self.outputs.get(m.group(1), m.group(0)), text)
        return text.replace("{source}", self.args.source).replace("{build}", self.args.build)

    # -- processes
    def start(self, script, env, log):
        out = open(log, "w")
        return subprocess.Popen(["bash", "-e", "-c", script], cwd=self.dir,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def finish(self, proc, deadline, log):
        try:
            proc.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise Failure(f"still running after its timeout; killed\n{tail(log)}")
        return proc.returncode

    def run_script(self, script, env, timeout, log):
        proc = self.start(script, env, log)
        return self.finish(proc, time.monotonic() + timeout, log)

    # -- one block
    def run_block(self, b, index):
        keys = b.keys
        timeout = float(keys.get("timeout", DEFAULT_TIMEOUT))
        for dep in keys.get("after", "").split():
            if dep not in self.results:
                raise Failure(f"after: no earlier block has id '{dep}'")
            if not self.results[dep]:
                raise Failure(f"not run: it needs block '{dep}', which failed")
        env = self.env(keys.get("env", []))
        log = os.path.join(self.cache, f"block-{b.line}.log")
        for step in keys.get("setup", []):
            code = self.run_script(SETUP_PRELUDE + self.fill(step), env, timeout,
                                   log + ".setup")
            if code != 0:
                raise Failure(f"setup `{step}` exited {code}\n{tail(log + '.setup')}")

        text = b.text
        for rule in keys.get("replace", []):
            old, sep, new = rule.partition("=>")
            if not sep:
                raise Failure(f"replace: expected 'OLD => NEW', got '{rule}'")
            old, new = old.strip(), self.fill(new.strip())
            if old not in text and ("command" not in keys or old not in keys["command"]):
                raise Failure(f"replace: '{old}' is not in the block")
            text = text.replace(old, new)
            if "command" in keys:
                keys["command"] = keys["command"].replace(old, new)

        if "write-to" in keys:
            path = os.path.join(self.dir, keys["write-to"])
            if "merge-into" in keys:
                text = merged_yaml(os.path.join(self.dir, keys["merge-into"]), text)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            if "command" not in keys:
                raise Failure("write-to: needs a command: to run")
            commands, shown = [keys["command"]], []
        else:
            commands, shown = split_prompts(text)
            if commands is None:
                commands, shown = ["\n".join(join_continuations(text))], []
                if "parallel" in keys:
                    commands = [c for c in join_continuations(text)
                                if c.strip() and not c.strip().startswith("#")]

        pattern = keys.get("append-to", r"\brlforge run\b")
        if "append" in keys:
            extra = self.fill(keys["append"])
            hit = False
            new_commands = []
            for c in commands:
                lines = []
                for line in c.split("\n"):
                    changed = append_overrides(line, pattern, extra)
                    hit |= changed != line
                    lines.append(changed)
                new_commands.append("\n".join(lines))
            commands = new_commands
            if not hit:
                raise Failure(f"append: no command matches /{pattern}/")

        exits = [int(x) for x in keys.get("exit", "0").split()]
        if len(exits) == 1:
            exits = exits * len(commands)
        if len(exits) != len(commands):
            raise Failure(f"exit: {len(exits)} codes for {len(commands)} commands")

        if "background" in keys:
            if len(commands) != 1:
                raise Failure("background: one command per background block")
            proc = self.start(commands[0], env, log)
            deadline = time.monotonic() + timeout
            self.background[keys["background"]] = (proc, b, log, deadline, exits[0])
            if "ready" in keys:
                wait_for_output(proc, log, keys["ready"], deadline)
            return None  # checked when it ends

        if "parallel" in keys:
            procs = [self.start(c, env, f"{log}.{i}") for i, c in enumerate(commands)]
            deadline = time.monotonic() + timeout
            codes = [self.finish(p, deadline, f"{log}.{i}") for i, p in enumerate(procs)]
            with open(log, "w") as out:
                for i in range(len(procs)):
                    out.write(open(f"{log}.{i}").read())
        else:
            codes, deadline = [], time.monotonic() + timeout
            with open(log, "w"):
                pass
            for c in commands:
                proc = self.start(c, env, log + ".cmd")
                codes.append(self.finish(proc, deadline, log + ".cmd"))
                with open(log, "a") as out:
                    out.write(open(log + ".cmd").read())
                if codes[-1] != exits[len(codes) - 1]:
                    break
        for i, (got, want) in enumerate(zip(codes, exits)):
            if got != want:
                which = f"command {i + 1} (`{commands[i].strip()[:80]}`)" if len(commands) > 1 \
                    else f"`{commands[i].strip()[:100]}`"
                raise Failure(f"{which} exited {got}, the doc says {want}\n{tail(log)}")
        self.check(b, log, shown)
        for name in keys.get("wait", "").split():
            self.end_background(name, None)
        if "stop" in keys:
            name, _, sig = keys["stop"].partition(" ")
            self.end_background(name, getattr(signal, sig.strip() or "SIGTERM"))
        return True

    def end_background(self, name, sig):
        if name not in self.background:
            raise Failure(f"no background block named '{name}'")
        proc, b, log, deadline, want = self.background.pop(name)
        if sig is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)
        try:
            code = self.finish(proc, deadline, log)
            if code != want:
                raise Failure(f"exited {code}, the doc says {want}\n{tail(log)}")
            self.check(b, log, [])
            self.results[b.keys.get("id", f"line{b.line}")] = True
        except Failure as e:
            self.results[b.keys.get("id", f"line{b.line}")] = False
            self.failures.append((b.line, str(e)))

    def check(self, b, log, shown):
        keys, out = b.keys, open(log, errors="replace").read()
        for rx in keys.get("output", []):
            m = re.search(self.fill(rx), out, re.M)
            if not m:
                raise Failure(f"no line of its output matches /{rx}/\n{tail(log)}")
            self.outputs.update({k: v for k, v in m.groupdict().items() if v is not None})
        for rx in keys.get("no-output", []):
            m = re.search(self.fill(rx), out, re.M)
            if m:
                raise Failure(f"its output has /{rx}/: {m.group(0)!r}\n{tail(log)}")
        if keys.get("as-shown"):
            for line in shown:
                if line.strip() not in out:
                    raise Failure(f"the doc shows `{line.strip()}`, which its output lacks\n"
                                  f"{tail(log)}")
        for path in keys.get("file", []):
            if not os.path.exists(os.path.join(self.dir, self.fill(path))):
                raise Failure(f"{path} does not exist afterwards\n{tail(log)}")
        for spec in keys.get("json", []):
            check_json(self.dir, self.fill(spec))

    def run(self, blocks):
        counts = {"run": 0, "passed": 0, "covered-by": 0, "skip": 0, "text": 0}
        covered, skipped = [], []
        problems = []
        for b in blocks:
            try:
                classify(b)
            except Failure as e:
                problems.append((b.line, str(e)))
        for b in blocks:
            if b.kind == "covered-by":
                counts["covered-by"] += 1
                covered.append(b.arg)
                if not test_exists(self.args.source, b.arg):
                    problems.append((b.line, f"covered-by {b.arg}: no such test in tests/ or a "
                                             "CMakeLists.txt"))
            elif b.kind == "skip":
                counts["skip"] += 1
                skipped.append(f"line {b.line}: {b.arg}")
                for path in missing_paths(self.args, b.text):
                    problems.append((b.line, f"skipped block names {path}, which does not "
                                             "exist"))
            elif b.kind == "text":
                counts["text"] += 1
        if problems:
            self.failures += problems
            return counts, covered, skipped
        self.prepare()
        for index, b in enumerate(blocks):
            if b.kind != "run":
                continue
            counts["run"] += 1
            bid = b.keys.get("id", f"line{b.line}")
            started = time.monotonic()
            try:
                ok = self.run_block(b, index)
                if ok is not None:
                    self.results[bid] = True
                    print(f"  {self.page}:{b.line}: passed ({time.monotonic() - started:.1f} s)",
                          flush=True)
                else:  # started and ready; its result is settled when it ends
                    self.results[bid] = True
                    print(f"  {self.page}:{b.line}: started in the background", flush=True)
            except Failure as e:
                self.results[bid] = False
                self.failures.append((b.line, str(e)))
                print(f"  {self.page}:{b.line}: FAILED ({time.monotonic() - started:.1f} s)",
                      flush=True)
        for name in list(self.background):
            proc, b, log, _, _ = self.background[name]
            if proc.poll() is None:
                kill_group(proc)
                self.background.pop(name)
                self.results[b.keys.get("id", name)] = False
                self.failures.append((b.line, f"background block '{name}' still running at the "
                                              f"end of the page; killed\n{tail(log)}"))
            else:
                self.end_background(name, None)
        counts["passed"] = sum(1 for b in blocks if b.kind == "run" and
                               self.results.get(b.keys.get("id", f"line{b.line}")))
        return counts, covered, skipped


# ---------------------------------------------------------------------------------------------
# Helpers


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def tail(log, n=25):
    try:
        lines = open(log, errors="replace").read().rstrip().split("\n")
    except FileNotFoundError:
        return "(no output)"
    return "    | " + "\n    | ".join(l if len(l) <= 240 else l[:240] + " ..." for l in lines[-n:])


def wait_for_output(proc, log, rx, deadline):
    while time.monotonic() < deadline:
        if re.search(rx, open(log, errors="replace").read(), re.M):
            return
        if proc.poll() is not None:
            raise Failure(f"exited ({proc.returncode}) before its output had /{rx}/\n{tail(log)}")
        time.sleep(0.1)
    kill_group(proc)
    raise Failure(f"its output had no /{rx}/ within its timeout; killed\n{tail(log)}")


def merged_yaml(base_path, excerpt):
    import yaml  # Debian's python3-yaml; only excerpts need it
    base = yaml.safe_load(open(base_path))
    part = yaml.safe_load(excerpt)

    def merge(a, b):
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v
    merge(base, part)
    return yaml.safe_dump(base, sort_keys=False)


def check_json(root, spec):
    parts = shlex.split(spec)
    if len(parts) < 3 or (parts[2] != "exists" and len(parts) != 4):
        raise Failure(f"json: expected 'PATH KEY OP VALUE', got '{spec}'")
    path, key, op = parts[0], parts[1].split("."), parts[2]
    full = os.path.join(root, path)
    if not os.path.exists(full):
        raise Failure(f"json: {path} does not exist")

    def get(obj):
        for k in key:
            if not isinstance(obj, dict) or k not in obj:
                return None, False
            obj = obj[k]
        return obj, True
    if path.endswith(".jsonl"):
        found = None
        for line in open(full).read().splitlines():
            if line.strip():
                value, ok = get(json.loads(line))
                if ok:
                    found = (value, True)
        value, ok = found if found else (None, False)
    else:
        value, ok = get(json.load(open(full)))
    if not ok:
        raise Failure(f"json: {path} has no {parts[1]}")
    if op == "exists":
        return
    want = parts[3]
    if op == "~":
        if not re.search(want, str(value)):
            raise Failure(f"json: {path} {parts[1]} = {value!r}, not matching /{want}/")
        return
    try:
        a, b = float(value), float(want)
    except (TypeError, ValueError):
        a, b = str(value), want
    ok = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}.get(op)
    if ok is None:
        raise Failure(f"json: unknown operator '{op}'")
    if not ok:
        raise Failure(f"json: {path} {parts[1]} = {value!r}, the doc says {op} {want}")


def test_exists(source, name):
    """A gtest `Suite.Name` (or `Suite`) in tests/ or beside the code, or a ctest name."""
    suite, _, test = name.partition(".")
    rx = re.compile(r"TEST(_F|_P)?\(\s*" + re.escape(suite) + r"\s*,\s*" +
                    (re.escape(test) if test else r"\w+") + r"\s*\)")
    cmake = re.compile(r"(add_test\(NAME|rlforge_test\()\s*" + re.escape(name) + r"\b")
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in (".git", "build", "runs") and not d.startswith(".")]
        for f in files:
            path = os.path.join(folder, f)
            if f.endswith(".cc") and rx.search(open(path, errors="replace").read()):
                return True
            if f == "CMakeLists.txt" and cmake.search(open(os.path.join(folder, f)).read()):
                return True
    return False


def missing_paths(args, text):
    """Repository paths a skipped block names (tools/x.py, bench/y, build/bench/z, tests/...)
    that do not exist: a skipped block must still name real things."""
    out = []
    for m in re.finditer(r"(?<![\w/.-])((?:build/)?(?:tools|bench|tests|configs|launch|data)/"
                         r"[\w./-]*[\w])", text):
        rel = m.group(1)
        base = args.build if rel.startswith("build/") else args.source
        path = os.path.join(base, rel[len("build/"):] if rel.startswith("build/") else rel)
        if not os.path.exists(path):
            out.append(rel)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rlforge", required=True, help="the rlforge binary under test")
    p.add_argument("--source", required=True, help="the checkout")
    p.add_argument("--work", required=True, help="a folder for the pages' runs (emptied)")
    p.add_argument("pages", nargs="+", help="pages relative to the checkout (README.md, docs/x.md)")
    args = p.parse_args()
    args.rlforge = os.path.abspath(args.rlforge)
    args.source = os.path.abspath(args.source)
    args.build = os.path.dirname(args.rlforge)
    args.work = os.path.abspath(args.work)
    if not os.access(args.rlforge, os.X_OK):
        print(f"--rlforge {args.rlforge}: not an executable")
        return 2
    os.makedirs(args.work, exist_ok=True)
    failed = False
    for page in args.pages:
        path = os.path.join(args.source, page)
        if not os.path.exists(path):
            print(f"{page}: no such page")
            failed = True
            continue
        started = time.monotonic()
        runner = Page(args, page)
        counts, covered, skipped = runner.run(parse_blocks(path))
        print(f"{page}: {counts['run']} runnable blocks run, {counts['passed']} passed; "
              f"{counts['covered-by']} covered by other tests"
              + (f" ({', '.join(covered)})" if covered else "")
              + f"; {counts['skip']} skipped; {counts['text']} non-command blocks "
              f"({time.monotonic() - started:.0f} s)")
        for s in skipped:
            print(f"  skipped {page} {s}")
        for line, why in sorted(runner.failures):
            print(f"FAIL {page}:{line}: {why}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
