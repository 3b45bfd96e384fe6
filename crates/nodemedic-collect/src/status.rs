use serde::Serialize;

use crate::{CollectorName, CollectorRun};

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

/// Most warnings kept per collector: a corrupt file can produce one per line.
const MAX_WARNINGS: usize = 20;

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

    pub fn from_run(run: &CollectorRun) -> Self {
        let (state, warnings) = match &run.outcome {
            Ok(c) => {
                let mut w: Vec<String> = c.warnings.iter().take(MAX_WARNINGS).cloned().collect();
                if c.warnings.len() > MAX_WARNINGS {
                    w.push(format!("… and {} more", c.warnings.len() - MAX_WARNINGS));
                }
                let state = match &c.unavailable {
                    Some(reason) => CollectorState::Unavailable {
                        reason: reason.clone(),
                    },
                    None => CollectorState::Active,
                };
                (state, w)
            }
            Err(e) => (
                CollectorState::Failed {
                    reason: e.to_string(),
                },
                Vec::new(),
            ),
        };
        Self {
            name: run.name,
            state,
            warnings,
            last_duration_seconds: run.duration.as_secs_f64(),
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
