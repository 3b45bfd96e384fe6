#!/usr/bin/env bash
# Checks nodemedic's dependencies with cargo-deny (deny.toml; docs/dependencies.md says what
# and why): RustSec advisories against a local snapshot of the database (nothing is fetched),
# licences against the list deny.toml states, sources (crates.io only), duplicate versions
# (warnings). Run by .ci/run.
#
#   deploy/check-deps.sh
#
# The advisory database is the first of: $NODEMEDIC_ADVISORY_DB; ../shared/advisory-db beside
# this checkout; the same beside the main checkout when this is a git worktree. Without one it
# fails, before installing anything, and names the places it looked. Offline, a developer
# can check the rest without it: NODEMEDIC_ALLOW_NO_ADVISORY_DB=1, refused when CI is set.
set -euo pipefail
ROOT=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/..")
cd "$ROOT"
# shellcheck source=deploy/bootstrap.sh
. deploy/bootstrap.sh

# Where the advisory database may be, one a line, in the order they are tried.
advisory_db_candidates() {
    local common
    [ -n "${NODEMEDIC_ADVISORY_DB:-}" ] && echo "$NODEMEDIC_ADVISORY_DB"
    echo "$ROOT/../shared/advisory-db"
    if common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
        echo "$(dirname "$common")/../shared/advisory-db"
    fi
}

advisory_db() {
    local c
    while read -r c; do
        if [ -d "$c/crates" ]; then
            readlink -f "$c"
            return 0
        fi
    done < <(advisory_db_candidates)
    return 1
}

in_ci() { case "${CI:-}" in "" | 0 | false) return 1 ;; esac; }

if DB=$(advisory_db); then
    :
elif [ "${NODEMEDIC_ALLOW_NO_ADVISORY_DB:-}" = 1 ] && ! in_ci; then
    DB=
else
    {
        echo "[check-deps] FAILED: no RustSec advisory database (a directory with crates/ in it)."
        echo "[check-deps] Expected at ../shared/advisory-db beside the checkout; looked at:"
        advisory_db_candidates | while read -r c; do echo "[check-deps]   $(readlink -m "$c")"; done
        echo "[check-deps] Put a snapshot there or point NODEMEDIC_ADVISORY_DB at one."
        if in_ci; then
            echo "[check-deps] CI is set (CI=$CI): advisories must be checked, no opt-out."
        else
            echo "[check-deps] Offline, NODEMEDIC_ALLOW_NO_ADVISORY_DB=1 checks the rest without it."
        fi
    } >&2
    exit 1
fi

ensure_rust
# cargo-deny, installed once into the cache every checkout on the machine shares.
deny=$(ensure_cargo_tool cargo-deny 0.20.2)
DENY=("$deny" --frozen)

if [ -n "$DB" ]; then
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
# [check-deps] NO ADVISORY DATABASE, and NODEMEDIC_ALLOW_NO_ADVISORY_DB=1: known
# vulnerabilities are NOT checked in this run. Licences, sources and duplicates
# are.
################################################################################
EOF
    cargo fetch --locked >/dev/null
    "${DENY[@]}" check licenses bans sources
fi
