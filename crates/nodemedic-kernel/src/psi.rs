//! The resources Pressure Stall Information reports on: the vocabulary of the pressure
//! collector, the cgroups collector and the pressure verdict (the parser is the pressure
//! collector's, `nodemedic_collect::sources::pressure`).

use serde::Serialize;

/// A resource that PSI reports stalls on: the name of its file under `/proc/pressure` (and,
/// but for `irq`, of the cgroup's `<resource>.pressure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PsiResource {
    Cpu,
    Memory,
    Io,
    /// Only `full`, and only with `CONFIG_IRQ_TIME_ACCOUNTING` (Linux 6.1 and later).
    Irq,
}

impl PsiResource {
    pub const ALL: [Self; 4] = [Self::Cpu, Self::Memory, Self::Io, Self::Irq];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Io => "io",
            Self::Irq => "irq",
        }
    }

    /// The resource whose file is named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl std::fmt::Display for PsiResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// By name, so that maps keyed by resource list them as the files sort (`cpu`, `io`, `irq`,
/// `memory`).
impl Ord for PsiResource {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for PsiResource {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for PsiResource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
