"""The CycloneDX SBOM of nodemedic's binary: every crate compiled into it, from cargo's
resolution of the lockfile for the target the release is built for (normal dependencies of the
nodemedic package, procedural macros included, build scripts' dependencies not), with
each crate's licence, its crates.io checksum from Cargo.lock, and who depends on whom.

    python sbom.py OUTPUT [--target TRIPLE]     (run by bootstrap.sh's build_sbom)

Written with cyclonedx-python-lib (CycloneDX's own library, from PyPI) and validated against
the CycloneDX 1.5 JSON schema before it is written. Reproducible: the serial number is derived
from the version, revision and target, and the timestamp is SOURCE_DATE_EPOCH (the commit's).
tests/image.sh checks it against the dependency list cargo-auditable embedded in the binary.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tomllib
import uuid

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import LicenseExpression
from cyclonedx.output import make_outputter
from cyclonedx.schema import OutputFormat, SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def cargo_metadata(target):
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", target],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def lock_checksums():
    with open(os.path.join(ROOT, "Cargo.lock"), "rb") as f:
        lock = tomllib.load(f)
    return {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}


def binary_packages(meta):
    """The nodemedic package and what it reaches over normal (not build, not dev) edges:
    procedural macros included, which run in the compiler but write code into the binary."""
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"]
                if p["name"] == "nodemedic" and p["source"] is None)
    seen, todo, edges = {root}, [root], {}
    while todo:
        pid = todo.pop()
        deps = []
        for d in nodes[pid]["deps"]:
            if any(k["kind"] is None for k in d["dep_kinds"]):
                deps.append(d["pkg"])
                if d["pkg"] not in seen:
                    seen.add(d["pkg"])
                    todo.append(d["pkg"])
        edges[pid] = sorted(set(deps))
    return root, seen, edges


def revision():
    r = os.environ.get("NODEMEDIC_REVISION", "").strip()
    if r:
        return r
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def component(pkg, checksums, kind):
    purl = PackageURL("cargo", name=pkg["name"], version=pkg["version"])
    hashes = []
    checksum = checksums.get((pkg["name"], pkg["version"]))
    if checksum:
        hashes.append(HashType(alg=HashAlgorithm.SHA_256, content=checksum))
    licenses = [LicenseExpression(pkg["license"])] if pkg.get("license") else []
    props = []
    if pkg["source"] is None:
        props.append(Property(name="nodemedic:source", value="workspace"))
    elif pkg["source"] != CRATES_IO:
        props.append(Property(name="nodemedic:source", value=pkg["source"]))
    return Component(
        name=pkg["name"], version=pkg["version"], type=kind, bom_ref=purl.to_string(),
        purl=purl, hashes=hashes, licenses=licenses, properties=props,
        description=(pkg.get("description") or "").strip() or None,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("output")
    ap.add_argument("--target", default="x86_64-unknown-linux-musl")
    args = ap.parse_args()

    meta = cargo_metadata(args.target)
    checksums = lock_checksums()
    packages = {p["id"]: p for p in meta["packages"]}
    root, reached, edges = binary_packages(meta)
    rev = revision()

    components = {}
    for pid in sorted(reached):
        kind = ComponentType.APPLICATION if pid == root else ComponentType.LIBRARY
        components[pid] = component(packages[pid], checksums, kind)
    app = components[root]
    app.properties.add(Property(name="nodemedic:revision", value=rev))
    app.properties.add(Property(name="nodemedic:target", value=args.target))

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    bom = Bom(serial_number=uuid.uuid5(
        uuid.NAMESPACE_URL, f"nodemedic/{app.version}/{rev}/{args.target}"))
    bom.metadata.timestamp = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    bom.metadata.component = app
    for pid, c in components.items():
        if pid != root:
            bom.components.add(c)
    for pid, deps in edges.items():
        bom.register_dependency(components[pid], [components[d] for d in deps])

    text = make_outputter(bom, OutputFormat.JSON, SchemaVersion.V1_5).output_as_string(indent=2)
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
    if error:
        sys.exit(f"the SBOM does not validate against CycloneDX 1.5: {error}")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text + "\n")
    print(f"{args.output}: {len(components) - 1} crates besides nodemedic", file=sys.stderr)


if __name__ == "__main__":
    main()
