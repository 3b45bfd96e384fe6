"""Reads the dependency list cargo-auditable embedded in a nodemedic binary back with
rust-audit-info, and checks it against Cargo.lock and the CycloneDX SBOM shipped beside it:

- the binary has a list, whose root is nodemedic at the crate's version;
- every crate in it is locked in Cargo.lock at that version and from that source (crates.io, or
  the workspace);
- every crate of the SBOM is in the binary's list, every crate the list marks as linked in
  (runtime) is in the SBOM, and what the SBOM leaves out only build scripts use.

    tests/sbom_check.py --audit-info BIN --binary NODEMEDIC --sbom SBOM.json --lock Cargo.lock --version V

Run by tests/image.sh on the image's binary. Exits 1 naming what differs.
"""

import argparse
import json
import subprocess
import sys
import tomllib

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def fail(msg):
    sys.exit(f"sbom_check: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--audit-info", required=True)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--sbom", required=True)
    ap.add_argument("--lock", required=True)
    ap.add_argument("--version", required=True)
    args = ap.parse_args()

    run = subprocess.run([args.audit_info, args.binary], capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"{args.audit_info} {args.binary}: {run.stderr.strip() or run.returncode}"
             " (built without cargo auditable?)")
    packages = json.loads(run.stdout)["packages"]
    roots = [p for p in packages if p.get("root")]
    if [(p["name"], p["version"]) for p in roots] != [("nodemedic", args.version)]:
        fail(f"the binary's root package is {roots}, not nodemedic {args.version}")

    with open(args.lock, "rb") as f:
        lock = tomllib.load(f)["package"]
    locked = {(p["name"], p["version"]): p.get("source") for p in lock}
    for p in packages:
        key = (p["name"], p["version"])
        if key not in locked:
            fail(f"{p['name']} {p['version']} is in the binary but not in Cargo.lock")
        want = CRATES_IO if p.get("source") == "crates.io" else None
        if p.get("source") not in ("crates.io", "local"):
            fail(f"{p['name']} {p['version']} comes from {p.get('source')!r}")
        if locked[key] != want:
            fail(f"{p['name']} {p['version']}: binary says {p.get('source')}, Cargo.lock {locked[key]}")

    everything = {(p["name"], p["version"]) for p in packages}
    runtime = {(p["name"], p["version"]) for p in packages if p.get("kind", "runtime") == "runtime"}
    with open(args.sbom) as f:
        sbom = json.load(f)
    meta = sbom["metadata"]["component"]
    listed = {(c["name"], c["version"]) for c in sbom.get("components", [])}
    listed.add((meta["name"], meta["version"]))
    # The SBOM is what the nodemedic package reaches over normal edges (procedural macros
    # included, which cargo-auditable records as build-time when nothing else needs them); the
    # binary's list adds what only build scripts use.
    problems = []
    if listed - everything:
        problems.append(f"in the SBOM, not in the binary: {sorted(listed - everything)}")
    if runtime - listed:
        problems.append(f"linked into the binary, not in the SBOM: {sorted(runtime - listed)}")
    if problems:
        fail("; ".join(problems))
    build_only = sorted(everything - listed)
    print(f"sbom_check: the binary lists {len(packages)} crates, all in Cargo.lock at their "
          f"versions and sources; the SBOM's {len(listed)} are all among them, with every crate "
          f"linked in; only build scripts use the other {len(build_only)}: "
          + ", ".join(n for n, _ in build_only))

if __name__ == "__main__":
    main()
