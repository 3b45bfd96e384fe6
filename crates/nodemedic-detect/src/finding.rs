use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// Something an operator should know, with what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable machine-readable kind (`irq_collapsed`, `irq_hurting`, `collector_failed`).
    pub kind: String,
    pub severity: Severity,
    /// What the finding is about (a device group, a collector).
    pub subject: String,
    pub message: String,
}
