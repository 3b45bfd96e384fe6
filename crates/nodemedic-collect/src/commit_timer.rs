//! The disk commit latency timer ("the disk commit probe" of the `[disk_probe]` section, its
//! metrics and logs; not an eBPF probe): how long a WAL-entry-sized write plus `fdatasync` takes in
//! a directory, measured the way etcd's WAL commits. etcd-backed control planes time out
//! ("request timed out", leader elections) when its WAL fsync p99 passes ~10 ms; this shows
//! it on any node, with or without etcd, before that happens.
//!
//! A thread writes one block every `interval` (the rate bound) into one file that never
//! grows past `max_file_bytes` (the byte bound: writes wrap to offset 0), then fdatasyncs it.
//! With io_uring the write and the sync are one linked submission (`IORING_OP_WRITE` then
//! `IORING_OP_FSYNC` with `IORING_FSYNC_DATASYNC`); without it, plain `pwrite` +
//! `fdatasync`. The file is removed when the timer stops. The collector
//! ([`CommitTimerCollector`]) copies the histogram into each snapshot; it never waits for
//! the disk.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nodemedic_exposition::{Encoder, Kind};
use nodemedic_sample::Snapshot;
use serde::Serialize;

use crate::registry::Render;
use crate::uring::Ring;
use crate::{CollectError, Collected, Collector, Ctx};

/// etcd's `wal_fsync_duration_seconds` buckets: 1 ms doubling to 8.192 s
/// (`prometheus.ExponentialBuckets(0.001, 2, 14)`), so the two histograms compare bucket by
/// bucket.
pub const WAL_FSYNC_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192,
];

/// How the disk commit probe writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitBackend {
    /// One io_uring submission: the write, then `fdatasync` linked after it.
    IoUring,
    /// `pwrite` and `fdatasync` (io_uring unavailable, refused or abandoned).
    #[default]
    Syscalls,
}

impl CommitBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IoUring => "io_uring",
            Self::Syscalls => "syscalls",
        }
    }
}

/// Latency of write + `fdatasync` of a WAL-entry-sized block, cumulative since the probe
/// started (a Prometheus histogram).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CommitLatency {
    /// The directory written to.
    pub directory: String,
    /// How the probe writes.
    pub backend: CommitBackend,
    /// Why it writes with syscalls although io_uring was asked for (a seccomp profile,
    /// `kernel.io_uring_disabled`, a ring abandoned after a failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
    /// Commits at or under each bound of [`WAL_FSYNC_BUCKETS`] (cumulative, as Prometheus).
    pub buckets: [u64; 14],
    pub count: u64,
    pub sum_seconds: f64,
    /// Writes or syncs that failed (not counted in the histogram).
    pub errors: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

impl CommitLatency {
    /// Records one commit that took `seconds`.
    pub fn observe(&mut self, seconds: f64) {
        for (bound, n) in WAL_FSYNC_BUCKETS.iter().zip(self.buckets.iter_mut()) {
            if seconds <= *bound {
                *n += 1;
            }
        }
        self.count += 1;
        self.sum_seconds += seconds;
    }
}

/// An etcd WAL entry's typical size.
pub const DEFAULT_BLOCK_BYTES: usize = 2300;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitTimerConfig {
    /// Where to write: the filesystem whose commit latency matters (etcd's data dir).
    pub directory: PathBuf,
    /// Time between commits.
    pub interval: Duration,
    /// Bytes per commit.
    pub block_bytes: usize,
    /// The timer's file never grows past this.
    pub max_file_bytes: u64,
    /// Use io_uring when available (else plain syscalls).
    pub io_uring: bool,
}

impl Default for CommitTimerConfig {
    fn default() -> Self {
        Self {
            directory: PathBuf::from("/var/lib/nodemedic"),
            interval: Duration::from_secs(1),
            block_bytes: DEFAULT_BLOCK_BYTES,
            max_file_bytes: 1 << 20,
            io_uring: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CommitTimerError {
    #[error("{}: cannot create the probe file: {source}", .path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("block_bytes ({block}) must be between 1 and max_file_bytes ({max})")]
    Bounds { block: usize, max: u64 },
    #[error("cannot start the probe thread: {0}")]
    Thread(io::Error),
}

/// A running timer. Dropping it stops the thread and removes the file.
pub struct CommitTimer {
    latest: Arc<Mutex<CommitLatency>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

/// The timer's file name in the directory (`.nodemedic-commit-probe.<pid>`, as always); one per process, so two daemons never share one.
fn file_name() -> String {
    format!(".nodemedic-commit-probe.{}", std::process::id())
}

/// How commits are written.
enum Writer {
    Uring(Box<Ring>),
    Syscalls,
}

impl Writer {
    fn new(io_uring: bool) -> (Writer, Option<String>) {
        if !io_uring {
            return (Writer::Syscalls, None);
        }
        match Ring::new() {
            Ok(r) => (Writer::Uring(Box::new(r)), None),
            Err(reason) => (Writer::Syscalls, Some(reason.to_string())),
        }
    }

    fn backend(&self) -> CommitBackend {
        match self {
            Writer::Uring(_) => CommitBackend::IoUring,
            Writer::Syscalls => CommitBackend::Syscalls,
        }
    }

    fn commit(&mut self, file: &File, block: &[u8], offset: u64) -> io::Result<()> {
        match self {
            Writer::Uring(ring) => match ring.write_then_fdatasync(file, block, offset) {
                Ok(()) => Ok(()),
                Err(e) if e.abandons_ring() => {
                    // The ring leaked what it may still use; commits go on without it.
                    tracing::warn!(error = %e, "commit probe: io_uring failed, using write + fdatasync from now on");
                    *self = Writer::Syscalls;
                    Err(io::Error::other(e))
                }
                Err(e) => Err(io::Error::other(e)),
            },
            Writer::Syscalls => {
                file.write_all_at(block, offset)?;
                file.sync_data()
            }
        }
    }
}

impl CommitTimer {
    /// Creates the timer's file and starts committing to it.
    pub fn start(config: &CommitTimerConfig) -> Result<CommitTimer, CommitTimerError> {
        if config.block_bytes == 0 || config.block_bytes as u64 > config.max_file_bytes {
            return Err(CommitTimerError::Bounds {
                block: config.block_bytes,
                max: config.max_file_bytes,
            });
        }
        let path = config.directory.join(file_name());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|source| CommitTimerError::Create {
                path: path.clone(),
                source,
            })?;
        let (mut writer, fallback) = Writer::new(config.io_uring);
        if let Some(reason) = &fallback {
            tracing::warn!(%reason, "commit probe: io_uring unavailable, using write + fdatasync");
        }
        let latest = Arc::new(Mutex::new(CommitLatency {
            directory: config.directory.display().to_string(),
            backend: writer.backend(),
            fallback_reason: fallback.clone(),
            ..CommitLatency::default()
        }));
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let shared = Arc::clone(&latest);
        let cfg = config.clone();
        let thread = std::thread::Builder::new()
            .name("commit-probe".into())
            .spawn(move || {
                // Not all zeros: a filesystem could skip or compress a zero block.
                let block: Vec<u8> = (0..cfg.block_bytes).map(|i| (i % 251) as u8).collect();
                let slots = (cfg.max_file_bytes / cfg.block_bytes as u64).max(1);
                let mut slot = 0u64;
                loop {
                    let offset = slot * cfg.block_bytes as u64;
                    slot = (slot + 1) % slots;
                    let start = Instant::now();
                    let result = writer.commit(&file, &block, offset);
                    let took = start.elapsed().as_secs_f64();
                    {
                        let mut l = shared.lock().unwrap_or_else(|p| p.into_inner());
                        if l.backend != writer.backend() {
                            l.backend = writer.backend();
                            l.fallback_reason = result.as_ref().err().map(|e| e.to_string());
                        }
                        match result {
                            Ok(()) => l.observe(took),
                            Err(e) => {
                                l.errors += 1;
                                l.last_error = Some(e.to_string());
                            }
                        }
                    }
                    match stop_rx.recv_timeout(cfg.interval) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            })
            .map_err(CommitTimerError::Thread)?;
        Ok(CommitTimer {
            latest,
            stop: Some(stop_tx),
            thread: Some(thread),
            path,
        })
    }

    /// The histogram so far.
    pub fn latest(&self) -> CommitLatency {
        self.latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The timer's file (removed when the timer is dropped).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CommitTimer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "commit probe: cannot remove its file");
            }
        }
    }
}

/// Puts the timer's histogram into every snapshot. A timer that could not start fails this
/// collector with its reason.
pub struct CommitTimerCollector {
    timer: Result<CommitTimer, Arc<CommitTimerError>>,
}

impl CommitTimerCollector {
    pub fn start(config: &CommitTimerConfig) -> Self {
        Self {
            timer: CommitTimer::start(config).map_err(Arc::new),
        }
    }
}

/// The disk commit latency probe.
pub const NAME: crate::CollectorName = crate::CollectorName::new("disk_commit");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 72,
    switch: crate::registry::Switch::Elsewhere("[disk_probe] enabled"),
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::NotFiles(crate::registry::Instead::new(
            "it times its own write + fdatasync of a real file",
            "crates/nodemedic/tests/exposition.rs",
            "disk_commit_probe_histogram",
        )),
        golden: crate::registry::Golden::None(crate::registry::Instead::new(
            "its histogram holds this machine's real fsync latencies and directory: the \
             test checks its buckets and promtool",
            "crates/nodemedic/tests/exposition.rs",
            "disk_commit_probe_histogram",
        )),
        fuzz: crate::registry::Fuzz::NoParser(crate::registry::Instead::new(
            "it reads no file; it measures its own writes",
            "crates/nodemedic/tests/exposition.rs",
            "disk_commit_probe_histogram",
        )),
    },
    faults: &[],
    render: Some(render),
    build: crate::registry::Build::Here(|settings| {
        let timer = settings.commit_timer?;
        Some(Box::new(CommitTimerCollector::start(timer)))
    }),
});

impl Collector for CommitTimerCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, _ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let timer = self
            .timer
            .as_ref()
            .map_err(|e| CollectError::Down(e.clone()))?;
        let latest = timer.latest();
        let mut out = Collected::default();
        if let Some(e) = &latest.last_error {
            out.warnings
                .push(format!("{} failed commit(s), last: {e}", latest.errors));
        }
        snap.put(latest);
        Ok(out)
    }
}
/// The probe's histogram (etcd's `wal_fsync` buckets) and its failed writes.
fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let snap = ctx.snapshot;
    let Some(c) = snap.get::<CommitLatency>() else {
        return;
    };
    e.family(
        "nodemedic_disk_commit_duration_seconds",
        Kind::Histogram,
        "Latency of a 2,300-byte write + fdatasync in the probe's directory (etcd's wal_fsync buckets).",
    );
    let labels = [("directory", c.directory.as_str())];
    let mut le = String::new();
    for (bound, n) in crate::commit_timer::WAL_FSYNC_BUCKETS
        .iter()
        .zip(c.buckets.iter())
    {
        le.clear();
        let _ = write!(le, "{bound}");
        e.sample_suffixed("_bucket", &[labels[0], ("le", &le)], *n as f64);
    }
    e.sample_suffixed("_bucket", &[labels[0], ("le", "+Inf")], c.count as f64);
    e.sample_suffixed("_sum", &labels, c.sum_seconds);
    e.sample_suffixed("_count", &labels, c.count as f64);
    e.family(
        "nodemedic_disk_commit_errors",
        Kind::Counter,
        "Probe writes or fdatasyncs that failed (see /status for the last error).",
    );
    e.sample(&labels, c.errors as f64);
}
