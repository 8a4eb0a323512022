#!/usr/bin/env python3
"""tests/doc_test.py against pages written here, with a stand-in `rlforge` that prints its
arguments: an unclassified block fails its page naming the line; a block whose outcome differs
from its annotation fails naming the line and what differed; overrides are appended inside the
command (before `;`), `$` commands are run one by one with their own exit codes, a background
block is stopped by a later one, and a passing page prints its counts."""

import os
import subprocess
import sys
import tempfile

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "doc_test.py")

PASSING = """# A page

```text
a diagram
```

<!-- doctest: run
append: job.iterations=2
output: ^rlforge run a\\.yaml job\\.iterations=2$
output: ^rlforge run b\\.yaml k=v job\\.iterations=2$
file: runs/out.txt
-->
```
rlforge run a.yaml
for x in b; do rlforge run $x.yaml k=v; done
mkdir -p runs && echo done > runs/out.txt
```

<!-- doctest: run
exit: 3 0
as-shown
-->
```
$ rlforge fail 3
rlforge fail 3
$ echo '{"state": "finished", "n": 4}' > status.json
```

<!-- doctest: run
id: bg
background: bg
ready: ^serving$
exit: 143
json: status.json n >= 4
-->
```
rlforge serve
```

<!-- doctest: run
after: bg
replace: PORT => {port:web}
output: ^rlforge status \\d+$
stop: bg SIGTERM
-->
```
rlforge status PORT
```

<!-- doctest: covered-by doctest_self_test -->
```
somebody else's command
```

<!-- doctest: skip needs a cluster -->
```
kubectl apply -f tests/doc_test.py
```
"""

UNCLASSIFIED = """# A page

```
rlforge run x.yaml
```
"""

WRONG = """# A page

<!-- doctest: run
json: status.json state == finished
-->
```
echo '{"state": "failed"}' > status.json
```

<!-- doctest: run
output: ^never printed$
-->
```
rlforge run x.yaml
```

<!-- doctest: skip names a path that is gone -->
```
tools/no_such_tool.py
```
"""

FAKE_RLFORGE = """#!/bin/bash
case "$1" in
  fail) echo "rlforge fail $2"; exit "$2" ;;
  serve) trap 'exit 143' TERM; echo serving; while true; do sleep 0.1; done ;;
  *) echo "rlforge $*" ;;
esac
"""


def harness(root, page_text, name="page.md"):
    with open(os.path.join(root, "src", name), "w") as f:
        f.write(page_text)
    out = subprocess.run([sys.executable, HARNESS, "--rlforge",
                          os.path.join(root, "bin", "rlforge"), "--source",
                          os.path.join(root, "src"), "--work", os.path.join(root, "work"), name],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return out.returncode, out.stdout


def expect(cond, what, out):
    if not cond:
        print(out)
        raise SystemExit(f"FAILED: {what}")


def main():
    with tempfile.TemporaryDirectory() as root:
        for d in ("src/tools", "src/tests", "bin", "work"):
            os.makedirs(os.path.join(root, d))
        with open(os.path.join(root, "src/tests/doc_test.py"), "w") as f:
            f.write("# stands in for the harness\n")
        with open(os.path.join(root, "src/tests/CMakeLists.txt"), "w") as f:
            f.write("add_test(NAME doctest_self_test COMMAND true)\n")
        rlforge = os.path.join(root, "bin", "rlforge")
        with open(rlforge, "w") as f:
            f.write(FAKE_RLFORGE)
        os.chmod(rlforge, 0o755)

        code, out = harness(root, PASSING)
        expect(code == 0, "the passing page passes", out)
        expect("page.md: 4 runnable blocks run, 4 passed; 1 covered by other tests "
               "(doctest_self_test); 1 skipped; 1 non-command blocks" in out, "its counts", out)

        code, out = harness(root, UNCLASSIFIED)
        expect(code == 1, "an unclassified block fails", out)
        expect("FAIL page.md:3: a fenced block that is neither annotated runnable" in out,
               "the unclassified block's line", out)

        code, out = harness(root, WRONG)
        expect(code == 1, "a skipped block naming a missing path fails", out)
        expect("FAIL page.md:18: skipped block names tools/no_such_tool.py" in out,
               "the skipped block's missing path", out)
        # Classification problems stop a page before it runs; without that block the run
        # blocks' checks fail, naming what differed:
        code, out = harness(root, WRONG.split("<!-- doctest: skip")[0])
        expect(code == 1, "a wrong outcome fails", out)
        expect("FAIL page.md:6: json: status.json state = 'failed', the doc says == finished"
               in out, "the json check names the value", out)
        expect("FAIL page.md:13: no line of its output matches /^never printed$/" in out,
               "the output check names its regex", out)
    print("doc_test_test: OK")


if __name__ == "__main__":
    main()
