//! The checklist of docs/adding-a-collector.md, kept by a test. Every collector's
//! registration (`nodemedic_collect::registry`) lists the fixture trees it reads (where it
//! must be active), the series it puts in the golden expositions (`tests/golden`) and the
//! fuzz targets of its parsers (`Checks`), and this test checks each claim:
//!
//! - a registration without its `checks` does not compile;
//! - a tree where the collector is not active, a series no golden file holds (or a golden
//!   file that does not show the collector succeeding), or a fuzz target missing from any of
//!   its four places fails here;
//! - a collector with no fixture, golden series or fuzz target says why, in its entry, where
//!   a reviewer reads it, and names the test that covers it instead ([`Instead`]): a file and
//!   a `#[test]` function in it, which must exist, so an opt-out cannot outlive its test.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use nodemedic_collect::registry::{self, declarations, Fixtures, Fuzz, Golden, Instead};
use nodemedic_collect::{CollectorName, CollectorState, Paths};
use nodemedic_engine::{Engine, EngineConfig, NicLimitsFrom};
use nodemedic_testkit::{fixture, workspace_root};

/// Every collector's state after two samples of the tree `tree` through the real engine,
/// configured as the daemon is on fixture trees (channels and rings from the tree's files).
fn states(tree: &str) -> Vec<(CollectorName, CollectorState)> {
    let mut config = EngineConfig {
        paths: Paths::under(fixture(tree)),
        ..Default::default()
    };
    config.tuning.nic_limits = NicLimitsFrom::Files;
    let mut engine = Engine::new(config);
    engine.sample_at(Duration::from_secs(100));
    let sample = engine.sample_at(Duration::from_secs(105));
    sample
        .collectors
        .into_iter()
        .map(|c| (c.name, c.state))
        .collect()
}

#[test]
fn every_collector_has_fixtures_golden_series_and_fuzz_targets() {
    // Those registered outside nodemedic-collect are here too: a registration the linker
    // dropped would pass every check below unchecked.
    for name in [nodemedic_probe::PERF_PROBES, nodemedic_kube::POD_NAMES] {
        assert!(
            registry::find(name.as_str()).is_some(),
            "{name}: not registered"
        );
    }
    let mut wrong = Vec::new();
    let mut trees: std::collections::BTreeMap<&str, Vec<(CollectorName, CollectorState)>> =
        Default::default();
    for d in declarations() {
        let (c, entry) = (d.name, &d.checks);
        match &entry.fixtures {
            Fixtures::Trees(names) => {
                if names.is_empty() {
                    wrong.push(format!("{c}: no fixture tree"));
                }
                for tree in names.iter() {
                    let got = trees.entry(tree).or_insert_with(|| states(tree));
                    let state = got.iter().find(|(n, _)| *n == c).map(|(_, s)| s);
                    if state != Some(&CollectorState::Active) {
                        wrong.push(format!("{c}: not active on fixture {tree}: {state:?}"));
                    }
                }
            }
            Fixtures::NotFiles(i) => wrong.extend(covered(i, c, "fixtures").err()),
        }
        // A collector that reads files has them broken by the fault injection.
        if matches!(entry.fixtures, Fixtures::Trees(_)) && d.faults.is_empty() {
            wrong.push(format!(
                "{c}: reads fixture files but declares no fault kind"
            ));
        }
        match &entry.golden {
            Golden::Series(series) => {
                if series.is_empty() {
                    wrong.push(format!("{c}: no golden series"));
                }
                for (file, start) in series.iter() {
                    wrong.extend(golden_holds(c, file, start).err());
                }
            }
            Golden::None(i) => wrong.extend(covered(i, c, "golden").err()),
        }
        match &entry.fuzz {
            Fuzz::Targets(targets) => {
                if targets.is_empty() {
                    wrong.push(format!("{c}: no fuzz target"));
                }
                for t in targets.iter() {
                    wrong.extend(
                        fuzz_target_wired(t)
                            .into_iter()
                            .map(|e| format!("{c}: {e}")),
                    );
                }
            }
            Fuzz::NoParser(i) => wrong.extend(covered(i, c, "fuzz").err()),
        }
    }
    assert!(
        wrong.is_empty(),
        "the collector checklist:\n{}",
        wrong.join("\n")
    );
}

/// The opt-out says why, and its test exists: `file` holds a `fn test(` whose attributes
/// include `#[test]`.
fn covered(i: &Instead, c: CollectorName, claim: &str) -> Result<(), String> {
    {
        let Instead { why, file, test } = i;
        if why.is_empty() {
            return Err(format!("{c}: the {claim} opt-out gives no reason"));
        }
        let path = workspace_root().join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "{c}: the {claim} opt-out's test {file}::{test}: {}: {e}",
                path.display()
            )
        })?;
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let head = format!("fn {test}(");
        let at = lines
            .iter()
            .position(|l| l.starts_with(&head))
            .ok_or_else(|| {
                format!("{c}: the {claim} opt-out's test: {file} has no `fn {test}(`")
            })?;
        // The attributes and doc comments right above the function.
        let is_test = lines[..at]
            .iter()
            .rev()
            .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
            .any(|l| *l == "#[test]");
        if !is_test {
            return Err(format!(
                "{c}: the {claim} opt-out's test: `fn {test}` in {file} is not a #[test]"
            ));
        }
        Ok(())
    }
}

/// The golden file `file` has a series line starting with `start`, and shows `c` succeeding.
fn golden_holds(c: CollectorName, file: &str, start: &str) -> Result<(), String> {
    let path = workspace_root()
        .join("tests/golden")
        .join(format!("{file}.prom"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{c}: golden file {}: {e}", path.display()))?;
    if !text
        .lines()
        .any(|l| !l.starts_with('#') && l.starts_with(start))
    {
        return Err(format!("{c}: no series `{start}…` in {}", path.display()));
    }
    // A daemon's exposition shows the collector succeeding; perf-probes.prom is rendered from
    // a made-up snapshot, without collectors' statuses.
    let success = format!("nodemedic_scrape_collector_success{{collector=\"{c}\"}} 1");
    let from_daemon = text.contains("\nnodemedic_scrape_collector_success{");
    if from_daemon && !text.lines().any(|l| l == success) {
        return Err(format!("{c}: {} has no `{success}`", path.display()));
    }
    Ok(())
}

/// The fuzz target `name` in its two places: `nodemedic_fuzz_logic::TARGETS` (which the one
/// fuzz binary runs by name) and a non-empty corpus.
fn fuzz_target_wired(name: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let fuzz = workspace_root().join("fuzz");
    if nodemedic_fuzz_logic::target(name).is_none() {
        wrong.push(format!(
            "fuzz target {name} is not in nodemedic_fuzz_logic::TARGETS"
        ));
    }
    let corpus = fuzz.join("corpus").join(name);
    let seeds = std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0);
    if seeds == 0 {
        wrong.push(format!(
            "fuzz target {name} has no seed in {}",
            corpus.display()
        ));
    }
    wrong
}

/// The `[[bin]]` names of fuzz/Cargo.toml.
fn fuzz_bins(fuzz: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
    let doc: toml::Table = text.parse().unwrap();
    doc.get("bin")
        .and_then(|b| b.as_array())
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("name").and_then(|n| n.as_str()).map(str::to_string))
        .collect()
}

/// Fuzz targets of parsers no collector runs, each with its reader.
const OUTSIDE_COLLECTORS: &[(&str, &str)] = &[
    (
        "pid_stat",
        "the daemon's own /proc/self/stat, for process_* (nodemedic-collect's self_stats.rs)",
    ),
    (
        "lsm",
        "the daemon's own /proc/self/attr and /sys/kernel/security/lsm, read once at start, and \
         the D-Bus errors of remediation (nodemedic-collect's host_access.rs, nodemedic-remedy's \
         actuator.rs)",
    ),
];

/// The other direction: every fuzz target belongs to some collector's entry (or to
/// [`OUTSIDE_COLLECTORS`]), and every corpus directory is a target, so none is orphaned by a
/// rename; the one fuzz binary runs them all.
#[test]
fn every_fuzz_target_belongs_to_a_collector() {
    let claimed: BTreeSet<&str> = declarations()
        .iter()
        .flat_map(|d| match &d.checks.fuzz {
            Fuzz::Targets(t) => t.to_vec(),
            Fuzz::NoParser(_) => Vec::new(),
        })
        .chain(OUTSIDE_COLLECTORS.iter().map(|(name, _)| *name))
        .collect();
    let targets: BTreeSet<&str> = nodemedic_fuzz_logic::TARGETS
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let orphans: Vec<_> = targets.difference(&claimed).collect();
    assert!(
        orphans.is_empty(),
        "fuzz targets no collector claims: {orphans:?}"
    );
    // One fuzz binary runs every target by name: no file or [[bin]] per target to forget.
    let fuzz = workspace_root().join("fuzz");
    let bins = fuzz_bins(&fuzz);
    assert_eq!(
        bins,
        BTreeSet::from(["parsers".to_string()]),
        "fuzz/Cargo.toml's [[bin]]s"
    );
    let files: Vec<String> = std::fs::read_dir(fuzz.join("fuzz_targets"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["parsers.rs"], "fuzz/fuzz_targets/");
    let parsers = std::fs::read_to_string(fuzz.join("fuzz_targets/parsers.rs")).unwrap();
    assert!(
        parsers.contains("nodemedic_fuzz_logic::selected()"),
        "fuzz_targets/parsers.rs does not run the selected target"
    );
    // tests/fuzz.sh fuzzes one target per corpus directory: each target has one, and each
    // directory is a target.
    let corpora: BTreeSet<String> = std::fs::read_dir(fuzz.join("corpus"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let corpora: BTreeSet<&str> = corpora.iter().map(String::as_str).collect();
    assert_eq!(
        corpora, targets,
        "fuzz/corpus/'s directories against TARGETS"
    );
}

/// Each collector `[collectors]` can switch off has its commented line in the shipped
/// configuration, and no other key is there.
#[test]
fn the_shipped_configuration_lists_every_switch() {
    let path = workspace_root().join("deploy/nodemedic.toml");
    let doc: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let keys: BTreeSet<&str> = doc["collectors"]
        .as_table()
        .expect("[collectors]")
        .keys()
        .map(String::as_str)
        .collect();
    let switches: BTreeSet<&str> = registry::switch_keys().iter().copied().collect();
    assert_eq!(keys, switches, "{}'s [collectors]", path.display());
}

/// Series of the README's metrics table that no golden exposition holds, and why.
const README_NOT_IN_GOLDEN: &[(&str, &str)] = &[
    (
        "nodemedic_irq_cpu_interrupts_total",
        "opt-in (metrics.per_irq_per_cpu); the goldens are the defaults",
    ),
    (
        "nodemedic_remediation_actions_total",
        "only after a remediation decision: crates/nodemedic/tests/remediation_real.rs",
    ),
    (
        "nodemedic_remediation_last_action_timestamp_seconds",
        "only after a remediation action: crates/nodemedic/tests/remediation_real.rs",
    ),
    (
        "nodemedic_host_writable_mounts",
        "only where the mounts were checked, a container with its mountinfo (the fixture trees \
         have none): nodemedic-export's metrics test, crates/nodemedic/tests/check.rs",
    ),
];

/// One name of the README's metrics table as a pattern: `{a,b}` expanded (each alternative a
/// name of its own), `*` one or more characters of a name.
fn expand_braces(name: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (name.find('{'), name.find('}')) else {
        return vec![name.to_string()];
    };
    name[open + 1..close]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &name[..open], &name[close + 1..])))
        .collect()
}

fn glob_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, post)) => {
            name.len() > pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
}

/// The README's metrics table: for each name it spells, the patterns it stands for (a
/// `_suffix` entry after `nodemedic_softnet_processed_total` stands for the row's first name
/// cut at each of its underscores, then the suffix).
fn readme_metric_patterns() -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Metrics\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the README's Metrics section");
    let name_like = |t: &str| {
        t.bytes().all(|b| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'_' | b'*' | b'{' | b'}' | b',')
        })
    };
    let mut out = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split('|').nth(1).unwrap_or("");
        let names: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        let Some(first) = names
            .first()
            .filter(|n| name_like(n) && (n.starts_with("nodemedic_") || n.starts_with("process_")))
        else {
            continue;
        };
        for name in names.iter().filter(|n| name_like(n)) {
            let patterns = if name.starts_with('_') {
                first
                    .match_indices('_')
                    .flat_map(|(i, _)| expand_braces(&format!("{}{name}", &first[..i])))
                    .collect()
            } else {
                expand_braces(name)
            };
            out.push((name.to_string(), patterns));
        }
    }
    out
}

/// Every series of the golden expositions, as Prometheus stores it: the names of the sample
/// lines, and each family by its `# TYPE` line (a counter's with `_total`, as exposed).
fn golden_series() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut series, mut families) = (BTreeSet::new(), BTreeSet::new());
    for entry in std::fs::read_dir(workspace_root().join("tests/golden")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split_whitespace();
                let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                    continue;
                };
                families.insert(if kind == "counter" && !name.ends_with("_total") {
                    format!("{name}_total")
                } else {
                    name.to_string()
                });
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                series.insert(line[..end].to_string());
            }
        }
    }
    (series, families)
}

/// The README's metrics table and the expositions, checked both ways. Each name the table
/// spells (counters with `_total`, info metrics with `_info`, though the encoder adds those
/// suffixes) is a series of some golden exposition, or is listed in [`README_NOT_IN_GOLDEN`]
/// with the reason. And each family a golden exposition holds is in the table, so a new
/// series cannot ship undocumented.
#[test]
fn the_readme_names_series_as_they_are_exposed() {
    let table = readme_metric_patterns();
    let (exposed, families) = golden_series();
    let known = |pattern: &str| {
        exposed.iter().any(|s| glob_matches(pattern, s))
            || README_NOT_IN_GOLDEN.iter().any(|(n, _)| *n == pattern)
    };
    let wrong: Vec<&str> = table
        .iter()
        .filter(|(_, patterns)| !patterns.iter().any(|p| known(p)))
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(
        table.len() > 60,
        "only {} names read from the README's table",
        table.len()
    );
    assert!(
        wrong.is_empty(),
        "README metrics names that no golden exposition holds (spell them as exposed, with \
         _total/_info; or list them in README_NOT_IN_GOLDEN with the reason): {wrong:?}"
    );
    let undocumented: Vec<&String> = families
        .iter()
        .filter(|f| {
            !table
                .iter()
                .any(|(_, patterns)| patterns.iter().any(|p| glob_matches(p, f)))
        })
        .collect();
    assert!(
        families.len() > 60,
        "only {} families read from the goldens",
        families.len()
    );
    assert!(
        undocumented.is_empty(),
        "series the goldens expose that the README's metrics table does not name: \
         {undocumented:?}"
    );
}
