use serde::Serialize;

use crate::CollectorName;

/// What a collector is doing, as shown on `/status` and in metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CollectorState {
    Active,
    Disabled {
        reason: String,
    },
    /// The kernel does not provide this source (PSI switched off, no BTF): no data, and not a
    /// failure. Like node_exporter, nodemedic reports it rather than exporting zeros.
    Unavailable {
        reason: String,
    },
    Failed {
        reason: String,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct CollectorStatus {
    pub name: CollectorName,
    #[serde(flatten)]
    pub state: CollectorState,
    pub warnings: Vec<String>,
    pub last_duration_seconds: f64,
}

impl CollectorStatus {
    pub fn disabled(name: CollectorName, reason: &str) -> Self {
        Self {
            name,
            state: CollectorState::Disabled {
                reason: reason.to_string(),
            },
            warnings: Vec::new(),
            last_duration_seconds: 0.0,
        }
    }

    /// Ran without failing: active, or with nothing to read on this kernel.
    pub fn is_success(&self) -> bool {
        matches!(
            self.state,
            CollectorState::Active | CollectorState::Unavailable { .. }
        )
    }
}

/// How files are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Kept-open fds re-read with `pread`: the fastest on every file kind measured
    /// (BENCHMARKS.md, "Read layer").
    #[default]
    Pread,
    /// Open, read and close on every read, as before the read layer.
    Open,
    /// Kept-open fds; batches go through one io_uring submission of reads on registered
    /// fds. Falls back to `pread` when io_uring is unavailable.
    IoUring,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Pread => "pread",
            Backend::Open => "open",
            Backend::IoUring => "io_uring",
        }
    }
}

/// What the reader is doing, for `/status` and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReaderStatus {
    /// The backend in use (`io_uring` falls back to `pread`).
    pub backend: Backend,
    /// The configured backend, when it differs from the one in use, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
    pub open_files: usize,
    pub max_open_files: usize,
    /// Reads done with open + read + close because the bound was reached.
    pub over_limit_reads_total: u64,
    /// Kept fds dropped because a read through them failed (a freed IRQ, a removed cgroup).
    pub dropped_files_total: u64,
}
