#!/usr/bin/env python3
"""Fails when a config choice is compared as a string, or a role name is spelled, outside its home.

Config choices. A closed choice of the job file (a key whose value is one word of a fixed list)
is parsed once, in config/, into an enum (config/choices.h) that every module switches on. The
choices are read from the schema itself: every `b.Enum("key", &Struct::member, ...)` (its words
from ChoiceWords in config/choices.h) and every `b.Choice("key", &Struct::member, {words}, ...)`
still stored as a string. Outside config/, a comparison of such a member with one of its words
(`c.sim.backend == "server"`, `"mapped" != w.apply`) is an error. Members whose name other
structs share (the Hugging Face config's `architecture`, a manifest's `dtype`) count only when
written with their section (`config.model.architecture == "..."`).

Role names. The actor roles are spelled once, in common/role_names.h (kTrainerRole, ...).
Outside it, a literal "trainer", "rollout", "reward" or "echo" where a role is meant is an error:
on a line that names a role (`IdsOfRole("reward")`, `role == "trainer"`), waits for one
(`AwaitLive("rollout")`) or lists a loop's roles (`{"rollout", static_cast<int>(...)`). The same
words as job-file sections (config/) or as tensor and metric names are not roles.

Tests (*_test.cc, tests/) and benches are not checked.

Usage: check_config_strings.py SOURCE_ROOT      (exit 0: clean; 1: every site listed)
       check_config_strings.py --self-test       (the checks against bad and good snippets)
"""
import os
import re
import sys

ROLE_HOME = "common/role_names.h"
ROLES = ("trainer", "rollout", "reward", "echo")
# Members another struct also has: only `.SECTION.member` is the job config's.
QUALIFY = {"architecture": ("model",), "dtype": ("weights", "model"),
           "transport": ("weights", "sim"), "backend": ("sim", "launch")}


SOURCE = re.compile(r"\.(cc|h|inc)$")


def choice_words(choices_h):
    """Enum type -> its words, from the RLFORGE_CHOICE_WORDS tables."""
    out = {}
    for m in re.finditer(r"RLFORGE_CHOICE_WORDS\(\s*(\w+)\s*,(.*?)\);", choices_h, re.S):
        out[m.group(1)] = re.findall(r'"([^"]+)"', m.group(2))
    return out


def choice_members(files, words_of):
    """Member name -> the words it may hold, for every Enum and Choice field of the schema."""
    enum_of = {}  # member -> enum type, from the options headers' declarations
    members = {}
    for name, text in files.items():
        if name.endswith(".h"):
            for m in re.finditer(r"^\s*(?:std::optional<)?(\w+)>?\s+(\w+)\s*(?:=|;)", text, re.M):
                if m.group(1) in words_of:
                    enum_of[m.group(2)] = m.group(1)
    for name, text in files.items():
        if not name.endswith(".cc"):
            continue
        for m in re.finditer(r'\.Enum\(\s*"\w+"\s*,\s*&\w+::(\w+)', text):
            if m.group(1) in enum_of:
                members.setdefault(m.group(1), set()).update(words_of[enum_of[m.group(1)]])
        for m in re.finditer(r'\.Choice\(\s*"\w+"\s*,\s*&\w+::(\w+)\s*,\s*\{([^}]*)\}', text):
            members.setdefault(m.group(1), set()).update(re.findall(r'"([^"]+)"', m.group(2)))
    return members


def comparison_patterns(members):
    pats = []
    for member, words in sorted(members.items()):
        alt = "|".join(re.escape(w) for w in sorted(words))
        owner = r"[\w\]\)]"
        if member in QUALIFY:
            owner = r"\b(?:%s)" % "|".join(QUALIFY[member])
        access = r"%s(?:\.|->)%s\b(?!\s*\()" % (owner, member)
        lit = r'"(?:%s)"' % alt
        pats.append((member, re.compile(r"%s\s*(?:==|!=)\s*%s|%s\s*(?:==|!=)\s*[\w.>\-]*%s" %
                                        (access, lit, lit, access))))
    return pats


ROLE_LIT = r'"(?:%s)"' % "|".join(ROLES)
ROLE_LINE = [
    re.compile(r"[Rr]ole\w*\s*\([^)]*%s" % ROLE_LIT),         # IdsOfRole("x"), NoRole(c, "x")
    re.compile(r"\brole\w*\s*(?:==|!=|=)\s*%s" % ROLE_LIT),   # role == "x", o.role = "x"
    re.compile(r"%s\s*(?:==|!=)\s*[\w.>\-]*role\b" % ROLE_LIT),
    re.compile(r"AwaitLive\s*\(\s*%s" % ROLE_LIT),             # AwaitLive("x")
    re.compile(r"\{\s*%s\s*,\s*static_cast<int>" % ROLE_LIT),  # a loop's Roles() entry
    re.compile(r"\{\s*%s\s*,\s*&Make" % ROLE_LIT),             # the role registry
]


def strip_comment(line):
    # Enough for this code base: no "//" inside the string literals the checks look at.
    cut = line.find("//")
    return line if cut < 0 else line[:cut]


def problems(files):
    """Every offending site in `files` (path relative to the root -> text)."""
    words_of = choice_words(files.get("config/choices.h", ""))
    cfg = {n: t for n, t in files.items() if n.startswith("config/")}
    pats = comparison_patterns(choice_members(cfg, words_of))
    out = []
    for rel, text in sorted(files.items()):
        top = rel.split("/", 1)[0]
        if top in ("tests", "bench", "tools") or rel.endswith("_test.cc"):
            continue
        for n, raw in enumerate(text.split("\n"), 1):
            line = strip_comment(raw)
            if top != "config":
                for member, pat in pats:
                    if pat.search(line):
                        out.append("%s:%d: config choice `%s` compared as a string (switch on its "
                                   "enum, config/choices.h): %s" % (rel, n, member, raw.strip()))
            if rel != ROLE_HOME and top != "config" and any(p.search(line) for p in ROLE_LINE):
                out.append("%s:%d: role name spelled as a literal (use %s): %s" %
                           (rel, n, ROLE_HOME, raw.strip()))
    return out


def read_tree(root):
    files = {}
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "build"
                       and not d.startswith("build")]
        for name in names:
            if SOURCE.search(name):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    files[os.path.relpath(path, root)] = f.read()
    return files


SELF_TEST_CONFIG = {
    "config/choices.h": 'RLFORGE_CHOICE_WORDS(SimBackend, {{SimBackend::kInprocess, "inprocess"},'
                        ' {SimBackend::kServer, "server"}});\n'
                        'RLFORGE_CHOICE_WORDS(FloatDtype, {{FloatDtype::kFloat32, "float32"}});\n',
    "config/control_options.h": "  SimBackend backend = SimBackend::kInprocess;\n"
                                "  FloatDtype dtype = FloatDtype::kFloat32;\n"
                                '  std::string transport = "auto";\n',
    "config/control_config.cc": '  b.Enum("backend", &SimOptions::backend, "doc");\n'
                                '  b.Enum("dtype", &WeightsOptions::dtype, "doc");\n'
                                '  b.Choice("transport", &WeightsOptions::transport, {"auto", "shm"},'
                                ' "doc");\n'
                                '  if (c.sim.backend == "server") {}  // config/ may\n',
}
BAD = [
    'if (config_.sim.backend == "server") return;',
    'const bool shm = c.weights.transport == "shm";',
    'if ("shm" != config.weights.transport) {}',
    'auto t = config_.weights.dtype == "float32" ? a : b;',
    'for (auto& id : ctl_.actors().IdsOfRole("reward")) {}',
    'RETURN_IF_ERROR(c.AwaitLive("rollout"));',
    'if (r.role == "trainer") n = r.count;',
    'return {{"rollout", static_cast<int>(c.rollout.workers), false}};',
]
GOOD = [
    'if (config_.sim.backend == SimBackend::kServer) return;',
    'if (m.dtype() != "float32") {}',                     # a manifest's dtype, not the config's
    'if (a.dtype != "float32") {}',                        # a bench's own flag
    'if (c.architecture == "Qwen3ForCausalLM") {}',       # the HF config's architecture
    'const TensorFrame* rew = FindTensor(r, "reward");',  # a tensor named reward
    'j["reward"] = r.reward;',                            # a metric
    'if (e.kind == "left") {}',                           # an event's kind, not a choice word
    '// c.sim.backend == "server" in a comment',
    'if (reg.role() == kTrainerRole) {}',
]


def self_test():
    failures = []
    for snippet in BAD:
        files = dict(SELF_TEST_CONFIG, **{"controller/x.cc": snippet + "\n"})
        if not problems(files):
            failures.append("not flagged: " + snippet)
    for snippet in GOOD:
        files = dict(SELF_TEST_CONFIG, **{"controller/x.cc": snippet + "\n"})
        if problems(files):
            failures.append("flagged: %s -> %s" % (snippet, problems(files)))
    files = dict(SELF_TEST_CONFIG, **{"common/role_names.h": 'x = "trainer"; role = "trainer";\n'})
    if problems(files):
        failures.append("the role names' home was flagged")
    for f in failures:
        print("self-test: " + f)
    print("self-test: %d bad and %d good snippets, %d failures" % (len(BAD), len(GOOD),
                                                                 len(failures)))
    return 1 if failures else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    found = problems(read_tree(argv[1]))
    for p in found:
        print(p)
    if found:
        print("%d site(s): compare a choice's enum, name a role by its constant" % len(found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
