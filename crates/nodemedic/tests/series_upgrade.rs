//! An upgrade loses no series silently: every series the previous version exported (its golden
//! expositions) and every series its alerts, recording rules and dashboard queried is still
//! exported or recorded by this one, or CHANGELOG.md names it under a "Renamed series" heading
//! of a newer version. The previous version is read from git at the commit CHANGELOG.md
//! records for it. A checkout without that commit (a shallow clone) fetches its remote's
//! history first (`git fetch --unshallow`: the repository's is a few MiB). When the commit is
//! still missing (no remote, offline, a source tarball) the test fails if `CI` is set, and
//! otherwise says it checked nothing, and why.
//!
//! This is the static half of the upgrade check. The live half is check 11 of
//! tests/k8s/node_e2e.py: `helm upgrade` from the previous release's chart and image to this
//! one's keeps the Node condition and every series the two daemons' expositions share with the
//! queries of these same files, under the same CHANGELOG.md rule.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::history::{fetch_history, git, has_commit, in_ci};
use common::promql::{
    dashboard_exprs, families, metric_names, recorded_names, PROMETHEUS_SERIES, RULE_FILES,
};
use common::{golden_dir, workspace_root};

/// The commit of the version before this one, as CHANGELOG.md's `(commit …)` records it.
fn previous_commit(changelog: &str) -> String {
    let mut versions = changelog.lines().filter(|l| l.starts_with("## ["));
    versions.next().expect("CHANGELOG.md has no version");
    let previous = versions
        .next()
        .expect("CHANGELOG.md has no previous version");
    previous
        .split_once("(commit ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(c, _)| c.to_string())
        .unwrap_or_else(|| panic!("`{previous}` records no `(commit …)`"))
}

/// The series names CHANGELOG.md lists as renamed or removed: the backticked names before
/// the arrow of each line under a "### Renamed series" heading of a version newer than the
/// previous one.
fn renamed_in_changelog(changelog: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut versions = 0;
    let mut in_section = false;
    for line in changelog.lines() {
        if line.starts_with("## [") {
            versions += 1;
            in_section = false;
        } else if line.starts_with("### ") {
            in_section = versions == 1 && line.trim() == "### Renamed series";
        } else if in_section {
            if let Some((old, _)) = line.split_once('→') {
                out.extend(old.split('`').skip(1).step_by(2).map(str::to_string));
            }
        }
    }
    out
}

#[derive(serde::Deserialize)]
struct Rules {
    groups: Vec<Group>,
}
#[derive(serde::Deserialize)]
struct Group {
    rules: Vec<serde_yaml_ng::Value>,
}

#[test]
fn no_series_of_the_previous_version_disappears_unless_the_changelog_names_it() {
    let changelog = std::fs::read_to_string(workspace_root().join("CHANGELOG.md")).unwrap();
    let commit = previous_commit(&changelog);
    if !has_commit(&commit) {
        let fetched = fetch_history();
        if !has_commit(&commit) {
            let why = fetched.err().unwrap_or_else(|| {
                "the fetch succeeded, and the remote's history does not hold it either".into()
            });
            let missing = format!(
                "commit {commit} (the previous version, per CHANGELOG.md) is not in this \
                 checkout's git history, and fetching it failed: {why}"
            );
            assert!(
                !in_ci(),
                "{missing}\nCI is set: the upgrade check may not be skipped"
            );
            eprintln!("SKIPPED (CI is not set): {missing}");
            return;
        }
        eprintln!("fetched the git history up to {commit} (the previous version)");
    }
    let show = |path: &str| {
        git(&["show", &format!("{commit}:{path}")])
            .unwrap_or_else(|| panic!("{commit}:{path} is missing"))
    };

    // What the previous version exported, and what its rules and dashboard queried.
    let mut before: BTreeSet<String> = BTreeSet::new();
    let goldens = git(&["ls-tree", "--name-only", &commit, "tests/golden/"]).unwrap();
    for path in goldens.lines().filter(|p| p.ends_with(".prom")) {
        before.extend(families(&show(path)));
    }
    assert!(before.len() > 50, "{} families at {commit}", before.len());
    let mut queries = Vec::new();
    for file in RULE_FILES {
        let rules: Rules = serde_yaml_ng::from_str(&show(file)).unwrap();
        for rule in rules.groups.iter().flat_map(|g| &g.rules) {
            queries.push(rule["expr"].as_str().unwrap().to_string());
        }
    }
    let dash: serde_json::Value =
        serde_json::from_str(&show("deploy/grafana/nodemedic.json")).unwrap();
    dashboard_exprs(&dash, &mut queries);
    for q in &queries {
        before.extend(metric_names(q));
    }

    // What this version exports and records.
    let mut now: BTreeSet<String> = BTreeSet::new();
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "prom") {
            now.extend(families(&std::fs::read_to_string(path).unwrap()));
        }
    }
    now.extend(recorded_names());
    now.extend(PROMETHEUS_SERIES.iter().map(|s| s.to_string()));

    let named = renamed_in_changelog(&changelog);
    let gone: Vec<&String> = before
        .iter()
        .filter(|n| !now.contains(*n) && !named.contains(*n))
        .collect();
    assert!(
        gone.is_empty(),
        "series of the previous version ({commit}) that this one neither exports nor records, \
         and CHANGELOG.md's Renamed series does not name: {gone:?}"
    );
    eprintln!(
        "{} series of {commit} checked; renamed per CHANGELOG.md: {named:?}",
        before.len()
    );
}
