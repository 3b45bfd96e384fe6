use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// `tests/fixtures`, where tests/fixtures/generate.py writes the fixture trees.
pub fn fixtures_dir() -> PathBuf {
    workspace_root().join("tests/fixtures")
}

/// The fixture tree (or file) `name`, a path under `tests/fixtures`; panics if it is missing,
/// so that a typo fails as such and not as an empty tree.
pub fn fixture(name: &str) -> PathBuf {
    let path = fixtures_dir().join(name);
    assert!(
        path.exists(),
        "no fixture {} (rerun python3 tests/fixtures/generate.py?)",
        path.display()
    );
    path
}

/// A copy of the fixture tree `name` that a test may change: the returned directory is the
/// tree's root, removed when dropped. `cp -a` keeps the sysfs symlinks the collectors follow.
pub fn copy_fixture(name: &str) -> tempfile::TempDir {
    let src = fixture(name);
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let status = Command::new("cp")
        .arg("-a")
        .arg(src.join("."))
        .arg(dir.path())
        .status()
        .expect("running cp");
    assert!(
        status.success(),
        "cp -a {} {}: {status}",
        src.display(),
        dir.path().display()
    );
    dir
}

/// Every path of the fixture tree `name`.
#[cfg(feature = "collect")]
pub fn fixture_paths(name: &str) -> nodemedic_collect::Paths {
    nodemedic_collect::Paths::under(fixture(name))
}

/// A fixture tree as every collector of nodemedic-collect read it: the snapshot and how each
/// collector fared. A collector that fails on a tree is its status here, not a panic, so that
/// a new collector whose files a tree lacks breaks only the tests that need it: those ask for
/// it by name with [`FixtureSnapshot::needing`].
#[cfg(feature = "collect")]
#[derive(Debug)]
pub struct FixtureSnapshot {
    /// The tree's name under `tests/fixtures`.
    pub tree: String,
    pub snapshot: nodemedic_sample::Snapshot,
    /// Each collector that ran, with its state (and for a failure, its reason).
    pub collectors: std::collections::BTreeMap<
        nodemedic_sample::CollectorName,
        nodemedic_sample::CollectorState,
    >,
}

#[cfg(feature = "collect")]
impl FixtureSnapshot {
    /// How the collector `name` fared, if it ran.
    pub fn state(
        &self,
        name: nodemedic_sample::CollectorName,
    ) -> Option<&nodemedic_sample::CollectorState> {
        self.collectors.get(&name)
    }

    /// The snapshot, once each collector in `needed` is asserted active on this tree: the
    /// test says what it depends on, and fails naming the collector and its reason when a
    /// tree stops providing it.
    pub fn needing(self, needed: &[nodemedic_sample::CollectorName]) -> nodemedic_sample::Snapshot {
        for name in needed {
            let state = self.collectors.get(name);
            assert!(
                state == Some(&nodemedic_sample::CollectorState::Active),
                "fixture {}: this test needs collector {name} active; it is {state:?}",
                self.tree
            );
        }
        self.snapshot
    }
}

/// The fixture tree `name` read by every collector of nodemedic-collect as if at `at` on the
/// monotonic clock, but the cgroups and tuning collectors (`CollectorSet::all`). A failed
/// collector is reported in [`FixtureSnapshot::collectors`], not panicked on.
#[cfg(feature = "collect")]
pub fn fixture_snapshot(name: &str, at: std::time::Duration) -> FixtureSnapshot {
    let (snapshot, runs) = nodemedic_collect::CollectorSet::all().sample(&fixture_paths(name), at);
    FixtureSnapshot {
        tree: name.to_string(),
        snapshot,
        collectors: runs.iter().map(|r| (r.name, r.status().state)).collect(),
    }
}
