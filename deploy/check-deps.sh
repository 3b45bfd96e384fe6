#!/usr/bin/env bash
# Checks nodemedic's dependencies with cargo-deny (deny.toml; docs/dependencies.md says what
# and why): RustSec advisories against a local snapshot of the database (nothing is fetched),
# licences against the list deny.toml states, sources (crates.io only), duplicate versions
# (warnings). Run by .ci/run.
#
#   deploy/check-deps.sh
#
# The advisory database is the first of: $NODEMEDIC_ADVISORY_DB; ../shared/advisory-db beside
# this checkout; the same beside the main checkout when this is a git worktree. Without one,
# the advisories are NOT checked: it says so loudly and checks the rest.
set -euo pipefail
ROOT=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/..")
cd "$ROOT"
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh
ensure_rust

# cargo-deny, installed once into the cache every checkout on the machine shares.
deny=$(ensure_cargo_tool cargo-deny 0.20.2)
DENY=("$deny" --frozen)

advisory_db() {
    local candidates=() common
    [ -n "${NODEMEDIC_ADVISORY_DB:-}" ] && candidates+=("$NODEMEDIC_ADVISORY_DB")
    candidates+=("$ROOT/../shared/advisory-db")
    if common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
        candidates+=("$(dirname "$common")/../shared/advisory-db")
    fi
    local c
    for c in "${candidates[@]}"; do
        if [ -d "$c/crates" ]; then
            readlink -f "$c"
            return 0
        fi
    done
    return 1
}

if DB=$(advisory_db); then
    snapshot=$(head -n1 "$DB/SNAPSHOT.txt" 2>/dev/null || echo 'no SNAPSHOT.txt')
    echo "[check-deps] advisories from $DB: $snapshot"
    # cargo-deny opens each database of db-urls under db-path, in a directory named after the
    # URL, and reads the date of its git HEAD to say how old it is; the snapshot is plain files
    # (and may be read-only), so a copy is committed once in a temporary repository, dated as
    # the snapshot says. --frozen: no fetch of the database, no change to Cargo.lock.
    DBS=$(mktemp -d)
    trap 'rm -rf "$DBS"' EXIT
    repo=$DBS/advisory-db-3157b0e258782691
    mkdir "$repo"
    cp -a "$DB/." "$repo/"
    date=$(sed -n 's/.*dated \([0-9-]\{10\}\).*/\1/p' "$DB/SNAPSHOT.txt" 2>/dev/null | head -n1)
    [ -n "$date" ] || date=$(date -u -r "$DB" +%F)
    (
        cd "$repo"
        rm -rf .git
        git init -q -b main
        git add -A
        GIT_AUTHOR_DATE="${date}T00:00:00Z" GIT_COMMITTER_DATE="${date}T00:00:00Z" \
            git -c user.name=advisory-db -c user.email=advisory-db@localhost \
            commit -q -m "$snapshot"
    )
    # --frozen also runs cargo metadata offline, which needs every locked crate's manifest,
    # those of other platforms too: fetched first (crates.io, as any build does).
    cargo fetch --locked >/dev/null
    NODEMEDIC_ADVISORY_DBS=$DBS "${DENY[@]}" check
else
    cat >&2 <<'EOF'
################################################################################
# [check-deps] NO ADVISORY DATABASE: ../shared/advisory-db is absent and
# NODEMEDIC_ADVISORY_DB is unset. Known vulnerabilities are NOT checked in this
# run. Licences, sources and duplicates are.
################################################################################
EOF
    cargo fetch --locked >/dev/null
    "${DENY[@]}" check licenses bans sources
fi
