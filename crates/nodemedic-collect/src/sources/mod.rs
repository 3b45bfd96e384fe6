//! The collectors, one module per kernel source. Each registers itself in its module
//! ([`crate::registry`]), with its place in the run.

pub mod cgroups;
pub mod interrupts;
pub mod irq_affinity;
pub mod irqbalance;
pub mod pci;
pub mod pressure;
pub mod softirqs;
pub mod softnet;
pub mod topology;
pub mod tuning;

use std::path::Path;
use std::sync::Mutex;

use nodemedic_kernel::CpuSet;

pub use cgroups::{CgroupSelection, CgroupsCollector};
pub use interrupts::InterruptsCollector;
pub use irq_affinity::{IrqAffinityCollector, DEFAULT_AFFINITY_REFRESH};
pub use irqbalance::IrqbalanceConfigCollector;
pub use pci::PciDevicesCollector;
pub use pressure::PressureCollector;
pub use softirqs::SoftirqsCollector;
pub use softnet::SoftnetCollector;
pub use topology::TopologyCollector;
pub use tuning::{
    netlink_sees_host, EthtoolNetlink, ForeignInterfaces, NicLimits, NicLimitsFiles,
    NicLimitsSource, NicLimitsUnavailable, TuningCollector, ETHTOOL_NETLINK_UNSUPPORTED,
};

use crate::{CollectError, ReadError, Reader};

/// What a collector read at the last rescan (and the warnings it gave), put into every
/// snapshot until the next rescan. A failed read is not cached: it is retried next sample.
struct RescanCache<T>(Mutex<Option<(T, Vec<String>)>>);

impl<T> Default for RescanCache<T> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

impl<T: Clone> RescanCache<T> {
    /// `f` of the cached value, if any.
    fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cached.as_ref().map(|(v, _)| f(v))
    }

    /// The cached value, or `read()`'s when `fresh` is true or nothing is cached.
    fn get(
        &self,
        fresh: bool,
        read: impl FnOnce() -> Result<(T, Vec<String>), CollectError>,
    ) -> Result<(T, Vec<String>), CollectError> {
        let mut cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !fresh {
            if let Some(v) = cached.as_ref() {
                return Ok(v.clone());
            }
        }
        let v = read()?;
        *cached = Some(v.clone());
        Ok(v)
    }
}

/// A CPU set file (`mask`: hex mask such as `smp_affinity`; else a list such as `0-3,8`).
/// `Ok(None)` when the file does not exist.
fn cpuset_file(reader: &Reader, path: &Path, mask: bool) -> Result<Option<CpuSet>, ReadError> {
    let Some(text) = reader.read_optional(path)? else {
        return Ok(None);
    };
    let text = complete(path, &text)?;
    let parsed = if mask {
        CpuSet::parse_mask(text)
    } else {
        CpuSet::parse_list(text)
    };
    parsed.map(Some).map_err(|e| ReadError::parse(path, e))
}

/// A one-value sysfs or procfs file as the kernel writes it: never empty (an empty CPU list is
/// a lone newline) and always ending in a newline. Anything else was cut short (a truncated
/// copy, a short read), and `0000` cut from `00000010` still parses: it is refused, naming the
/// file, rather than trusted.
fn complete<'a>(path: &Path, text: &'a str) -> Result<&'a str, ReadError> {
    if text.is_empty() {
        return Err(ReadError::parse(
            path,
            "empty (the kernel writes at least a newline): the file was cut short",
        ));
    }
    if !text.ends_with('\n') {
        return Err(ReadError::parse(
            path,
            "no final newline: the value was cut short",
        ));
    }
    Ok(text)
}

fn skipped_warnings(path: &Path, skipped: &[nodemedic_kernel::SkippedLine]) -> Vec<String> {
    skipped
        .iter()
        .map(|s| format!("{}:{}: skipped: {}", path.display(), s.line, s.reason))
        .collect()
}
