#!/usr/bin/python3
"""Browser test of the dashboard: Debian's headless chromium, driven by selenium.

Starts a real `rlforge run`, loads the dashboard page while the run goes, waits
until the charts show points and the actor table lists every actor the
controller started, and saves a screenshot. Exits 77 (ctest's skip code) with a
clear message where chromium, chromedriver or python3-selenium is absent.

  /usr/bin/python3 tests/dashboard_browser_test.py --rlforge build/rlforge \
      --screenshot /tmp/dashboard.png [--config configs/echo.yaml] [override ...]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


def skip(why):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(SKIP)


def find(names):
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    return None


def wait_for(pred, timeout, what, proc=None, log=None):
    until = time.time() + timeout
    while time.time() < until:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"FAILED: rlforge exited ({proc.returncode}) while waiting for {what}\n"
                             + (open(log).read() if log else ""))
        time.sleep(0.2)
    raise SystemExit(f"FAILED: timed out after {timeout} s waiting for {what}"
                     + ("\n" + open(log).read() if log else ""))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlforge", required=True)
    ap.add_argument("--config", default=os.path.join(here, "..", "configs", "echo.yaml"))
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--min-points", type=int, default=3, help="points every chart must show")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--window", default="1400,1900", help="browser window WIDTH,HEIGHT")
    ap.add_argument("overrides", nargs="*",
                    default=["job.iterations=40", "echo.requests_per_iteration=1",
                             "echo.payload_bytes=4096", "echo.work_micros=250000"])
    args = ap.parse_args()

    chromium = find(["chromium", "chromium-browser", "google-chrome"])
    driver_bin = find(["chromedriver"]) or ("/usr/bin/chromedriver"
                                            if os.path.exists("/usr/bin/chromedriver") else None)
    if chromium is None:
        skip("no chromium on this machine (apt-get install chromium chromium-driver "
             "python3-selenium; launch/setup.sh lists them)")
    if driver_bin is None:
        skip("no chromedriver on this machine (apt-get install chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip("python3-selenium is not installed (apt-get install python3-selenium)")

    work = tempfile.mkdtemp(prefix="rlforge_browser_")
    log = os.path.join(work, "output.txt")
    cmd = [args.rlforge, "run", args.config, f"job.run_root={work}", "job.name=browser",
           "dashboard.linger_s=60"] + args.overrides
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    driver = None
    try:
        text = lambda: open(log).read()
        m = wait_for(lambda: re.search(r"dashboard at (http://\S+/)", text()), 60,
                     "the dashboard URL", proc, log)
        url = m.group(1)
        wait_for(lambda: "all " in text() and "actors registered" in text(), 60,
                 "every actor to register", proc, log)
        actors = sorted(set(re.findall(r"started (\S+) \(pid \d+\)", text())))
        assert actors, "the controller reported starting no actors:\n" + text()

        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  f"--window-size={args.window}", "--hide-scrollbars"]:
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
        driver.get(url)

        def page_ready():
            return driver.execute_script("""
              const charts = [...document.querySelectorAll('canvas.chart')];
              const rows = [...document.querySelectorAll('#actors tr[data-actor]')]
                  .map(r => r.dataset.actor).sort();
              return {charts: charts.map(c => [c.dataset.key || c.id, +c.dataset.points]),
                      rows, state: document.getElementById('state').textContent,
                      error: document.getElementById('error').textContent};""")

        seen = {}

        def ready():
            s = page_ready()
            seen.update(s)
            ok = (len(s["charts"]) >= 2 and all(p >= args.min_points for _, p in s["charts"])
                  and s["rows"] == actors)
            return s if ok else None

        try:
            state = wait_for(ready, args.timeout,
                             "charts with points and every actor in the table", proc, None)
        except SystemExit as e:
            raise SystemExit(f"{e.code}\nlast page state: {seen}\nexpected actors: {actors}")
        time.sleep(0.3)  # let the last draw settle before the picture
        driver.save_screenshot(args.screenshot)
        print(f"charts: {len(state['charts'])} ({', '.join(k for k, _ in state['charts'])})")
        print(f"points per chart: min {min(p for _, p in state['charts'])}")
        print(f"actor rows: {', '.join(state['rows'])}")
        print(f"run state on the page: {state['state']}")
        print(f"screenshot: {args.screenshot}")
        if state["state"] != "running":
            raise SystemExit(f"FAILED: the page was ready only once the run was "
                             f"{state['state']}; it must show a live run")
        if state["error"]:
            raise SystemExit(f"FAILED: the page reports: {state['error']}")
        print("PASSED")
    finally:
        if driver is not None:
            driver.quit()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
