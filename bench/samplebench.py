"""Runs the engine's `sample` bench (the binary `cargo bench -p nodemedic-engine --bench sample
--no-run` prints) and reads its table. Imported by bench/sample-ab.py and bench/daemon-cost.py
(run as scripts from any directory: Python puts bench/ on sys.path)."""

import os
import re
import subprocess

# | case | shape | wall median ms | wall p90 ms | CPU ms/sample | peak RSS MiB |
ROW = re.compile(r"^\| (?P<case>[^|]+?) \| [^|]+ \| (?P<wall>[\d.]+) \| [\d.]+ \| (?P<cpu>[\d.]+) \| (?P<rss>[\d.]+) \|$")


def run(binary, samples, case=None, pause_ms=None):
    """{case: (CPU ms per sample, wall median ms, peak RSS MiB)} of one run of the bench:
    `samples` samples per case, only `case` ($NODEMEDIC_BENCH_CASE) when given, and
    `pause_ms` ms between samples ($NODEMEDIC_BENCH_PAUSE_MS) when given."""
    env = dict(os.environ, NODEMEDIC_BENCH_SAMPLES=str(samples))
    if case is not None:
        env["NODEMEDIC_BENCH_CASE"] = case
    if pause_ms is not None:
        env["NODEMEDIC_BENCH_PAUSE_MS"] = str(pause_ms)
    out = subprocess.run([binary], env=env, capture_output=True, text=True, check=True)
    # A fixture case whose collectors fail measures nothing: the binary looks for the fixture
    # trees where its checkout was when it was built (testkit's CARGO_MANIFEST_DIR), and a
    # moved or removed checkout makes every reader fail in microseconds.
    broken = [
        line for line in out.stderr.splitlines()
        if "collectors not succeeding" in line and not line.startswith("note: this machine")
    ]
    if broken:
        raise SystemExit(
            f"{binary}: fixture cases with failing collectors (is the checkout it was built in "
            f"still there?):\n" + "\n".join(broken)
        )
    rows = {}
    for line in out.stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[m["case"]] = (float(m["cpu"]), float(m["wall"]), float(m["rss"]))
    return rows
