//! Recorded runs cannot go stale: tests/recorded-runs.toml holds every run outside CI (its
//! command and document) and a record of each time it ran (version, commit, date, result,
//! checks). The newest version of CHANGELOG.md must have a passing record of each required
//! run, every record's commit must be in the history and carry the version the record names,
//! and no record may be dated before its commit. So a version bump fails this test until each
//! required run has passed again on the new version.
//!
//! The history is read with git. A checkout without a record's commit (a shallow clone)
//! fetches its remote's history first; when the commit is still missing the test fails if
//! `CI` is set, and otherwise says what it could not check.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::history::{fetch_history, git, has_commit, in_ci};
use common::{changelog_newest_version, workspace_root};
use serde::Deserialize;

const RECORDS: &str = "tests/recorded-runs.toml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    runs: BTreeMap<String, Run>,
    record: Vec<Record>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Run {
    required: bool,
    command: String,
    doc: String,
    section: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    run: String,
    version: String,
    commit: String,
    /// YYYY-MM-DD, UTC.
    date: String,
    result: String,
    /// passed/total.
    checks: String,
    found: String,
}

/// What a commit says of itself: the workspace's version there and its commit date (UTC day).
struct CommitFacts {
    version: String,
    date: String,
}

/// The file's problems, each a sentence; none when every required run passed at `newest`.
/// `facts` answers for a commit, or `None` when it is not in the history.
fn problems(
    file: &File,
    newest: &str,
    facts: &dyn Fn(&str) -> Option<CommitFacts>,
    doc_text: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, run) in &file.runs {
        if run.command.trim().is_empty() {
            out.push(format!("run {name}: no command"));
        }
        match doc_text(&run.doc) {
            None => out.push(format!(
                "run {name}: its document {} does not exist",
                run.doc
            )),
            Some(text) => {
                if let Some(section) = &run.section {
                    let heading = text.lines().any(|l| {
                        l.starts_with('#') && l.trim_start_matches('#').trim().starts_with(section)
                    });
                    if !heading {
                        out.push(format!(
                            "run {name}: {} has no heading {section:?}",
                            run.doc
                        ));
                    }
                }
            }
        }
    }
    for r in &file.record {
        let at = format!("record of {} at {}", r.run, r.commit);
        if !file.runs.contains_key(&r.run) {
            out.push(format!("{at}: no [runs.{}]", r.run));
        }
        if !is_day(&r.date) {
            out.push(format!("{at}: date {:?} is not YYYY-MM-DD", r.date));
        }
        if r.found.trim().is_empty() {
            out.push(format!("{at}: says nothing of what it found"));
        }
        match checks(&r.checks) {
            None => out.push(format!("{at}: checks {:?} is not passed/total", r.checks)),
            Some((passed, total)) => match r.result.as_str() {
                "passed" if passed != total => out.push(format!(
                    "{at}: result passed with {passed} of {total} checks passed"
                )),
                "failed" if passed == total => out.push(format!(
                    "{at}: result failed with every one of its {total} checks passed"
                )),
                "passed" | "failed" => {}
                other => out.push(format!(
                    "{at}: result {other:?} is neither passed nor failed"
                )),
            },
        }
        match facts(&r.commit) {
            None => out.push(format!("{at}: the commit is not in the history")),
            Some(f) => {
                if f.version != r.version {
                    out.push(format!(
                        "{at}: names version {} but Cargo.toml there is {}",
                        r.version, f.version
                    ));
                }
                if is_day(&r.date) && r.date < f.date {
                    out.push(format!(
                        "{at}: dated {} before its commit ({})",
                        r.date, f.date
                    ));
                }
            }
        }
    }
    for (name, run) in file.runs.iter().filter(|(_, r)| r.required) {
        let passed = file
            .record
            .iter()
            .any(|r| &r.run == name && r.version == newest && r.result == "passed");
        if !passed {
            let last = file.record.iter().rev().find(|r| &r.run == name);
            out.push(format!(
                "run {name} has no passing record at {newest}, CHANGELOG.md's newest version \
                 (its last: {}); run `{}` and add its record",
                last.map_or("none".into(), |r| format!(
                    "{} at {} ({}), {}",
                    r.result, r.commit, r.version, r.date
                )),
                run.command
            ));
        }
    }
    out
}

fn is_day(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

fn checks(s: &str) -> Option<(u32, u32)> {
    let (p, t) = s.split_once('/')?;
    let (p, t) = (p.parse().ok()?, t.parse().ok()?);
    (p <= t && t > 0).then_some((p, t))
}

fn commit_facts(commit: &str) -> Option<CommitFacts> {
    let cargo = git(&["show", &format!("{commit}:Cargo.toml")])?;
    let cargo: toml::Value = toml::from_str(&cargo).ok()?;
    let version = cargo["workspace"]["package"]["version"]
        .as_str()?
        .to_string();
    // The committer's date in the committer's zone (UTC here), as YYYY-MM-DD.
    let date = git(&["log", "-1", "--format=%cI", commit])?;
    Some(CommitFacts {
        version,
        date: date.trim().get(..10)?.to_string(),
    })
}

fn read_doc(path: &str) -> Option<String> {
    std::fs::read_to_string(workspace_root().join(path)).ok()
}

fn load() -> File {
    let text = std::fs::read_to_string(workspace_root().join(RECORDS)).unwrap();
    toml::from_str(&text).unwrap_or_else(|e| panic!("{RECORDS}: {e}"))
}

#[test]
fn every_required_recorded_run_passed_on_the_newest_version() {
    let file = load();
    let changelog = std::fs::read_to_string(workspace_root().join("CHANGELOG.md")).unwrap();
    let newest = changelog_newest_version(&changelog);
    let missing: Vec<&str> = file
        .record
        .iter()
        .map(|r| r.commit.as_str())
        .filter(|c| !has_commit(c))
        .collect();
    if !missing.is_empty() {
        let fetched = fetch_history();
        let still: Vec<&&str> = missing.iter().filter(|c| !has_commit(c)).collect();
        if !still.is_empty() {
            let why = format!(
                "the records' commits {still:?} are not in this checkout's history ({})",
                fetched
                    .err()
                    .unwrap_or_else(|| "fetched, still missing".into())
            );
            assert!(
                !in_ci(),
                "{why}\nCI is set: the records may not go unchecked"
            );
            eprintln!("SKIPPED (CI is not set): {why}");
            return;
        }
    }
    let found = problems(&file, newest, &commit_facts, &read_doc);
    assert!(
        found.is_empty(),
        "{RECORDS}, against CHANGELOG.md's newest version {newest}:\n  {}",
        found.join("\n  ")
    );
}

/// The judge fails on each way a record can be stale or wrong: checked against made-up
/// records and commits, so that each failure is known to be caught.
#[test]
fn stale_or_wrong_records_are_each_named() {
    let file: File = toml::from_str(
        r#"
        [runs.a]
        required = true
        command = "run a"
        doc = "a.md"
        section = "Run A"
        [runs.b]
        required = false
        command = "run b"
        doc = "b.md"
        [[record]]
        run = "a"
        version = "1.0.0"
        commit = "c1"
        date = "2026-01-02"
        result = "passed"
        checks = "3/3"
        found = "all"
        "#,
    )
    .unwrap();
    let facts = |c: &str| {
        (c == "c1").then(|| CommitFacts {
            version: "1.0.0".into(),
            date: "2026-01-02".into(),
        })
    };
    let docs = |p: &str| match p {
        "a.md" => Some("# Top\n## Run A, as root\n".to_string()),
        "b.md" => Some(String::new()),
        _ => None,
    };
    assert_eq!(
        problems(&file, "1.0.0", &facts, &docs),
        Vec::<String>::new()
    );

    // A new version: the required run is stale, the optional one is not asked for.
    let stale = problems(&file, "1.1.0", &facts, &docs);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(
        stale[0].starts_with("run a has no passing record at 1.1.0"),
        "{stale:?}"
    );

    // Each malformed or dishonest record, one at a time.
    // The required run's missing pass, which an edit may add, is beside the point here.
    let bad = |edit: fn(&mut Record), says: &str| {
        let mut f = file.clone();
        edit(&mut f.record[0]);
        let p = problems(&f, "1.0.0", &facts, &docs);
        assert!(p.iter().any(|l| l.contains(says)), "{says}: {p:?}");
    };
    bad(|r| r.checks = "2/3".into(), "result passed with 2 of 3");
    bad(
        |r| r.result = "failed".into(),
        "result failed with every one",
    );
    bad(|r| r.result = "ok".into(), "neither passed nor failed");
    bad(|r| r.checks = "3".into(), "is not passed/total");
    bad(
        |r| r.version = "0.9.0".into(),
        "but Cargo.toml there is 1.0.0",
    );
    bad(|r| r.date = "2026-01-01".into(), "before its commit");
    bad(|r| r.date = "yesterday".into(), "is not YYYY-MM-DD");
    bad(|r| r.commit = "c2".into(), "not in the history");
    bad(|r| r.run = "z".into(), "no [runs.z]");
    bad(|r| r.found = " ".into(), "says nothing");

    // A run whose document or section is gone.
    let mut f = file;
    f.runs.get_mut("a").unwrap().section = Some("Run B".into());
    f.runs.get_mut("b").unwrap().doc = "gone.md".into();
    let p = problems(&f, "1.0.0", &facts, &docs);
    assert!(
        p.iter().any(|l| l.contains("has no heading \"Run B\"")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|l| l.contains("gone.md does not exist")),
        "{p:?}"
    );
}
