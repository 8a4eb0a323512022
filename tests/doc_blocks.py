"""A Markdown page's fenced blocks and their doctest annotations, for tests/doc_test.py (whose
top comment is the design): page text -> blocks -> classified blocks -> a block's commands."""

import re

PROMPT = "$ "
KINDS = ("run", "text", "covered-by", "skip")
RUN_KEYS = {"id", "after", "setup", "env", "write-to", "merge-into", "command", "replace", "append",
            "append-to", "exit", "output", "no-output", "as-shown", "file", "json", "parallel",
            "background", "ready", "wait", "stop", "timeout"}
REPEATABLE = {"setup", "env", "replace", "output", "no-output", "file", "json"}
FLAGS = {"as-shown", "parallel"}


class Block:
    def __init__(self, line, info, text, annotation):
        self.line = line          # 1-based line of the opening fence
        self.info = info          # fence info string
        self.text = text          # the block's content
        self.annotation = annotation  # the doctest comment's text, or None
        self.kind = None
        self.arg = ""
        self.keys = {}


class Failure(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_blocks(path):
    """Every fenced block of a Markdown file, with the doctest annotation right before it."""
    lines = open(path).read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^( {0,3}|\s*)(`{3,}|~{3,})(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        start, body = i, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" %
                                              len(fence), lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        blocks.append(Block(start + 1, info, "\n".join(body) + "\n",
                            annotation_before(lines, start)))
    return blocks


def annotation_before(lines, fence_index):
    """The `<!-- doctest: ... -->` comment among the comments directly above a fence."""
    j = fence_index - 1
    while j >= 0:
        if not lines[j].strip().endswith("-->"):
            return None
        end = j
        while j >= 0 and "<!--" not in lines[j]:
            j -= 1
        if j < 0:
            return None
        comment = "\n".join(l.strip() for l in lines[j:end + 1])
        comment = comment[comment.index("<!--") + 4:comment.rindex("-->")].strip()
        if comment.startswith("doctest:"):
            return comment[len("doctest:"):].strip()
        j -= 1
    return None


def classify(block):
    """Fills kind/arg/keys; raises Failure naming what is wrong with the annotation."""
    if block.annotation is None:
        if block.info.split(" ")[0] == "text":
            block.kind = "text"
            return
        raise Failure("a fenced block that is neither annotated runnable (<!-- doctest: run "
                      "... -->) nor classified (fence info `text`, or <!-- doctest: text | "
                      "covered-by TEST | skip REASON -->)")
    head, _, rest = block.annotation.partition("\n")
    kind, _, arg = head.strip().partition(" ")
    if kind not in KINDS:
        raise Failure(f"doctest annotation kind '{kind}': expected one of {', '.join(KINDS)}")
    block.kind, block.arg = kind, arg.strip()
    if kind in ("covered-by", "skip") and not block.arg:
        needs = "a test name" if kind == "covered-by" else "a reason"
        raise Failure(f"doctest: {kind} needs {needs}")
    for raw in rest.split("\n"):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in FLAGS and not sep:
            block.keys[key] = True
            continue
        if kind != "run":  # a reason or note, which may go on over several lines
            block.arg = (block.arg + " " + line).strip()
            continue
        if not sep or key not in RUN_KEYS:
            close = [k for k in RUN_KEYS if k[:3] == key[:3]]
            raise Failure(f"doctest annotation: unknown key '{key}'"
                          + (f" (did you mean '{close[0]}'?)" if close else ""))
        if key in REPEATABLE:
            block.keys.setdefault(key, []).append(value)
        elif key in block.keys:
            raise Failure(f"doctest annotation: key '{key}' given twice")
        else:
            block.keys[key] = value


# ---------------------------------------------------------------------------------------------
# Commands of a block


def join_continuations(text):
    """Logical lines: a line ending in `\\` goes on with the next."""
    out, cur = [], ""
    for line in text.split("\n"):
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1].rstrip() + " "
        else:
            out.append(cur + line)
            cur = ""
    if cur:
        out.append(cur)
    return out


def split_prompts(text):
    """A `$ ` block: (commands, sample-output lines); else (None, None)."""
    lines = text.split("\n")
    if not any(l.startswith(PROMPT) for l in lines):
        return None, None
    commands, shown, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(PROMPT):
            cmd = line[len(PROMPT):]
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1].rstrip() + " " + lines[i].strip()
            commands.append(cmd)
        elif line.strip():
            shown.append(line)
        i += 1
    return commands, shown


def append_overrides(line, pattern, text):
    """`text` inserted after the command that `pattern` finds in `line`, before what ends it."""
    m = re.search(pattern, line)
    if not m:
        return line
    i, quote = m.end(), None
    while i < len(line):
        c = line[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in ";|&#)":
            break
        i += 1
    head = line[:i].rstrip()
    return head + " " + text + (" " + line[i:] if i < len(line) else "")
