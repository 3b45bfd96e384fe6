#!/usr/bin/env bash
# Regenerates what the tests compare against, in one command: the fixture trees
# (tests/fixtures/generate.py) and then the golden expositions (tests/golden, by the
# exposition tests with UPDATE_GOLDEN=1, which read the new trees). Review the diff after:
#
#   tests/regenerate.sh && git status --short tests/fixtures tests/golden
#
# The goldens need promtool (tests/run-all.sh installs it, as ensure_test_deps does).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== tests/fixtures: python3 tests/fixtures/generate.py"
/usr/bin/python3 tests/fixtures/generate.py

echo "== tests/golden: UPDATE_GOLDEN=1 cargo test -p nodemedic --test exposition"
UPDATE_GOLDEN=1 cargo test --locked -p nodemedic --test exposition -- --test-threads="${TEST_THREADS:-2}"

echo "== changed:"
git status --short tests/fixtures tests/golden
