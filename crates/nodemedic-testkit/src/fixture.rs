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

/// The fixture tree `name` read by every collector as if at `at` on the monotonic clock;
/// panics if a collector fails, since a fixture that does not read is a broken fixture.
#[cfg(feature = "collect")]
pub fn fixture_snapshot(name: &str, at: std::time::Duration) -> nodemedic_sample::Snapshot {
    let (snap, runs) = nodemedic_collect::CollectorSet::all().sample(&fixture_paths(name), at);
    for run in &runs {
        if let Err(e) = &run.outcome {
            panic!("{name}: collector {} failed: {e}", run.name);
        }
    }
    snap
}
