//! The node's I/O tuning: kernel arguments, IOMMU domains, CPU vulnerability mitigations,
//! cpufreq and cpuidle, per-NIC queues and masks, `net.core` budgets and transparent
//! hugepages. Each is a setting that silently costs throughput; the `tuning` detector ties
//! them to a symptom on the node.
//!
//! The files are one-value sysfs/procfs files (`/sys/kernel/iommu_groups/N/type`,
//! `/sys/devices/system/cpu/vulnerabilities/*`, `cpufreq/policyN/*`, …) and `/proc/cmdline`.
//! Each parser takes the file's whole text, as the kernel writes it (one line and a newline),
//! and refuses anything else: a value cut short still looks like a value (`30` of `300`).

use std::collections::BTreeMap;
use std::sync::Arc;

use nodemedic_kernel::CpuSet;
use serde::Serialize;

/// A tuning file that is not what the kernel writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TuningError {
    #[error("empty (the kernel writes at least a newline): the file was cut short")]
    Empty,
    #[error("no final newline: the value was cut short")]
    CutShort,
    #[error("{0} lines, expected one")]
    Lines(usize),
    #[error("blank value")]
    Blank,
    #[error("{0:?} is not one word")]
    NotOneWord(String),
    #[error("{0:?} is not a decimal count")]
    NotCount(String),
    #[error("{0:?} is not 0 or 1")]
    NotFlag(String),
    #[error("unterminated quote in argument {0:?}")]
    UnterminatedQuote(String),
    #[error("NUL byte in the text")]
    Nul,
    #[error("{0:?}: expected the choices with exactly one in [brackets]")]
    Brackets(String),
}

/// The one line of a one-value file, without its newline.
pub fn one_line(text: &str) -> Result<&str, TuningError> {
    if text.is_empty() {
        return Err(TuningError::Empty);
    }
    let Some(line) = text.strip_suffix('\n') else {
        return Err(TuningError::CutShort);
    };
    if line.contains('\n') {
        return Err(TuningError::Lines(text.lines().count()));
    }
    if line.contains('\0') {
        return Err(TuningError::Nul);
    }
    Ok(line)
}

/// A one-word value (`intel_pstate`, `powersave`, `DMA-FQ`).
pub fn parse_word(text: &str) -> Result<&str, TuningError> {
    let line = one_line(text)?.trim();
    if line.is_empty() {
        return Err(TuningError::Blank);
    }
    if line.contains(char::is_whitespace) {
        return Err(TuningError::NotOneWord(line.to_string()));
    }
    Ok(line)
}

/// A one-line value that may hold spaces (`haltpoll idle`, a vulnerability's status).
pub fn parse_text(text: &str) -> Result<&str, TuningError> {
    let line = one_line(text)?.trim();
    if line.is_empty() {
        return Err(TuningError::Blank);
    }
    Ok(line)
}

/// A count as the kernel prints it (`%u`, `%d` of a non-negative value): plain digits.
pub fn parse_count(text: &str) -> Result<u64, TuningError> {
    let line = one_line(text)?.trim();
    let bad = || TuningError::NotCount(line.to_string());
    if line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    line.parse::<u64>().map_err(|_| bad())
}

/// A `0`/`1` flag (cpuidle's `disable`).
pub fn parse_flag(text: &str) -> Result<bool, TuningError> {
    match one_line(text)?.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(TuningError::NotFlag(other.to_string())),
    }
}

// ------------------------------------------------------------------------------------------
// /proc/cmdline
// ------------------------------------------------------------------------------------------

/// The kernel's command line: its arguments in order, `key` or `key=value`. Arguments after
/// a lone `--` belong to init and are not kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KernelCmdline {
    pub args: Vec<(String, Option<String>)>,
}

/// Parses `/proc/cmdline`. Double quotes group spaces into one argument, as the kernel's own
/// `next_arg` does (`dyndbg="file x.c +p"`); they are removed from the value.
pub fn parse_cmdline(text: &str) -> Result<KernelCmdline, TuningError> {
    let line = one_line(text)?;
    let mut args = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let mut in_quote = false;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            if c == '"' {
                in_quote = !in_quote;
            } else if !in_quote && c.is_ascii_whitespace() {
                end = i;
                break;
            }
        }
        let token = &rest[..end];
        if in_quote {
            return Err(TuningError::UnterminatedQuote(token.to_string()));
        }
        rest = rest[end..].trim_start();
        if token == "--" {
            break;
        }
        let unquoted = token.replace('"', "");
        match unquoted.split_once('=') {
            Some((k, v)) => args.push((k.to_string(), Some(v.to_string()))),
            None => args.push((unquoted, None)),
        }
    }
    Ok(KernelCmdline { args })
}

/// What the command line asks of the IOMMU's DMA domains, before the kernel's own defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IommuRequest {
    Strict,
    Lazy,
    Passthrough,
    /// `iommu=off`, `intel_iommu=off`, `amd_iommu=off`.
    Off,
}

impl KernelCmdline {
    /// The value of the last `key=` (the kernel applies them in order, so the last wins);
    /// `Some(None)` for a bare `key`.
    pub fn get(&self, key: &str) -> Option<Option<&str>> {
        self.args
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_deref())
    }

    /// The arguments among `keys` that are present, as written (`iommu.strict=1`).
    pub fn spelled(&self, keys: &[&str]) -> Vec<String> {
        self.args
            .iter()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => k.clone(),
            })
            .collect()
    }

    /// The IOMMU mode these arguments ask for: `iommu.passthrough=`, `iommu=pt|nopt|off`,
    /// `iommu.strict=`, `intel_iommu=strict|off`, `amd_iommu=fullflush|off`. `None` when they
    /// leave it to the kernel's build-time default.
    pub fn iommu_request(&self) -> Option<IommuRequest> {
        let mut mode = None;
        // In command-line order: a later argument overrides an earlier one.
        for (k, v) in &self.args {
            let v = v.as_deref().unwrap_or("");
            let opts = || v.split(',').map(str::trim);
            match k.as_str() {
                "iommu.strict" => match kernel_bool(v) {
                    Some(true) => mode = Some(IommuRequest::Strict),
                    Some(false) => mode = Some(IommuRequest::Lazy),
                    None => {}
                },
                "iommu.passthrough" if kernel_bool(v) == Some(true) => {
                    mode = Some(IommuRequest::Passthrough);
                }
                "iommu" => {
                    for o in opts() {
                        match o {
                            "pt" => mode = Some(IommuRequest::Passthrough),
                            "off" => mode = Some(IommuRequest::Off),
                            _ => {}
                        }
                    }
                }
                "intel_iommu" => {
                    for o in opts() {
                        match o {
                            "strict" => mode = Some(IommuRequest::Strict),
                            "off" => mode = Some(IommuRequest::Off),
                            _ => {}
                        }
                    }
                }
                "amd_iommu" => {
                    for o in opts() {
                        match o {
                            "fullflush" => mode = Some(IommuRequest::Strict),
                            "off" => mode = Some(IommuRequest::Off),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        mode
    }
}

/// The kernel's `kstrtobool` for the spellings it accepts on the command line.
fn kernel_bool(v: &str) -> Option<bool> {
    match v.as_bytes().first()? {
        b'1' | b'y' | b'Y' => Some(true),
        b'0' | b'n' | b'N' => Some(false),
        b'o' | b'O' => match v.as_bytes().get(1)? {
            b'n' | b'N' => Some(true),
            b'f' | b'F' => Some(false),
            _ => None,
        },
        _ => None,
    }
}

// ------------------------------------------------------------------------------------------
// IOMMU groups
// ------------------------------------------------------------------------------------------

/// An IOMMU group's default domain, from `/sys/kernel/iommu_groups/N/type`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IommuDomain {
    /// `DMA`: every unmap flushes the IOTLB before it returns.
    Strict,
    /// `DMA-FQ`: unmaps are flushed in batches from a queue.
    Lazy,
    /// `identity`: DMA is not translated.
    Passthrough,
    /// `blocked`: no DMA at all.
    Blocked,
    /// `unmanaged`: owned by a user (VFIO).
    Unmanaged,
    /// Anything else, as the kernel spelled it.
    Unknown(String),
}

impl IommuDomain {
    /// The label nodemedic exports (`strict`, `lazy`, `passthrough`, …, `unknown`).
    pub fn as_str(&self) -> &str {
        match self {
            IommuDomain::Strict => "strict",
            IommuDomain::Lazy => "lazy",
            IommuDomain::Passthrough => "passthrough",
            IommuDomain::Blocked => "blocked",
            IommuDomain::Unmanaged => "unmanaged",
            IommuDomain::Unknown(_) => "unknown",
        }
    }

    /// The kernel's own word for it.
    pub fn kernel_name(&self) -> &str {
        match self {
            IommuDomain::Strict => "DMA",
            IommuDomain::Lazy => "DMA-FQ",
            IommuDomain::Passthrough => "identity",
            IommuDomain::Blocked => "blocked",
            IommuDomain::Unmanaged => "unmanaged",
            IommuDomain::Unknown(s) => s,
        }
    }
}

pub fn parse_iommu_group_type(text: &str) -> Result<IommuDomain, TuningError> {
    Ok(match parse_word(text)? {
        "DMA" => IommuDomain::Strict,
        "DMA-FQ" => IommuDomain::Lazy,
        "identity" => IommuDomain::Passthrough,
        "blocked" => IommuDomain::Blocked,
        "unmanaged" => IommuDomain::Unmanaged,
        other => IommuDomain::Unknown(other.to_string()),
    })
}

/// One IOMMU group: its number, default domain and the devices in it (PCI addresses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IommuGroup {
    pub id: u32,
    pub domain: IommuDomain,
    pub devices: Vec<String>,
}

// ------------------------------------------------------------------------------------------
// CPU vulnerabilities
// ------------------------------------------------------------------------------------------

/// A vulnerability file's text as the kernel wrote it (`Mitigation: Safe RET`).
pub fn parse_vulnerability(text: &str) -> Result<&str, TuningError> {
    parse_text(text)
}

/// The state of the Speculative Return Stack Overflow mitigation
/// (`/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow`), which the kernel
/// spells differently across versions (`Mitigation: safe RET` in 6.5, `Mitigation: Safe RET`
/// later): matched without regard to case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SrsoState {
    NotAffected,
    /// `Mitigation: Safe RET`: every return goes through a safe thunk (the costly one).
    SafeRet,
    /// `Vulnerable: Safe RET, no microcode`: the thunk is paid for, but without the
    /// microcode it does not fully protect.
    SafeRetNoMicrocode,
    /// `Mitigation: IBPB` (and `IBPB on VMEXIT only`): a barrier on kernel entry or VM exit.
    Ibpb,
    /// `Mitigation: Microcode` (old kernels) and `Vulnerable: Microcode, no safe RET`
    /// (`spec_rstack_overflow=microcode`): the microcode's part only, cheaper.
    Microcode,
    /// `Mitigation: Reduced Speculation` (Zen 5's BP_SPEC_REDUCE).
    ReducedSpeculation,
    /// `Vulnerable`, `Vulnerable: No microcode`: unmitigated (`spec_rstack_overflow=off`).
    Vulnerable,
    /// A string this build does not know.
    Unknown,
}

impl SrsoState {
    pub fn classify(kernel: &str) -> SrsoState {
        let s = kernel.trim().to_ascii_lowercase();
        let has = |w: &str| s.contains(w);
        if s == "not affected" {
            SrsoState::NotAffected
        } else if s.starts_with("mitigation:") {
            if has("safe ret") {
                SrsoState::SafeRet
            } else if has("ibpb") {
                SrsoState::Ibpb
            } else if has("microcode") {
                SrsoState::Microcode
            } else if has("reduced speculation") {
                SrsoState::ReducedSpeculation
            } else {
                SrsoState::Unknown
            }
        } else if s.starts_with("vulnerable") {
            if has("safe ret, no microcode") {
                SrsoState::SafeRetNoMicrocode
            } else if has("microcode, no safe ret") {
                SrsoState::Microcode
            } else {
                SrsoState::Vulnerable
            }
        } else {
            SrsoState::Unknown
        }
    }

    /// Whether the CPU pays for a mitigation on kernel entries or returns.
    pub fn costs(self) -> bool {
        matches!(
            self,
            SrsoState::SafeRet
                | SrsoState::SafeRetNoMicrocode
                | SrsoState::Ibpb
                | SrsoState::Microcode
        )
    }
}

// ------------------------------------------------------------------------------------------
// cpufreq and cpuidle
// ------------------------------------------------------------------------------------------

/// One cpufreq policy (`/sys/devices/system/cpu/cpufreq/policyN`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpufreqPolicy {
    pub policy: u32,
    /// `affected_cpus`: the online CPUs this policy drives.
    pub cpus: Option<CpuSet>,
    pub driver: Option<String>,
    pub governor: Option<String>,
    /// `energy_performance_preference`: intel_pstate and amd-pstate-epp only.
    pub energy_performance_preference: Option<String>,
    pub cur_khz: Option<u64>,
    pub max_khz: Option<u64>,
}

/// The cpuidle driver and the deepest idle state still enabled (of the first online CPU:
/// drivers register the same states on every CPU).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpuIdle {
    pub driver: Option<String>,
    pub governor: Option<String>,
    pub deepest_enabled: Option<IdleState>,
    /// States the CPU has, enabled or not.
    pub states: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IdleState {
    /// `stateN`.
    pub index: u32,
    pub name: String,
    /// `latency`: the exit latency in microseconds.
    pub exit_latency_us: u64,
}

/// cpufreq's `affected_cpus`/`related_cpus`: CPU ids separated by spaces (`0 1 2 3`), not
/// the list format of other CPU files.
pub fn parse_cpu_words(text: &str) -> Result<CpuSet, TuningError> {
    let line = one_line(text)?;
    let mut set = CpuSet::new();
    for word in line.split_ascii_whitespace() {
        let bad = || TuningError::NotCount(word.to_string());
        if !word.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let cpu: u32 = word.parse().map_err(|_| bad())?;
        if cpu >= nodemedic_kernel::cpuset::MAX_CPUS {
            return Err(bad());
        }
        set.insert(cpu);
    }
    Ok(set)
}

/// The index of a `stateN` or `policyN` directory name with the given prefix.
pub fn parse_indexed(name: &str, prefix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

// ------------------------------------------------------------------------------------------
// network interfaces
// ------------------------------------------------------------------------------------------

/// A queue directory under `/sys/class/net/X/queues/`: `rx-N` or `tx-N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum QueueName {
    Rx(u32),
    Tx(u32),
}

pub fn parse_queue_name(name: &str) -> Option<QueueName> {
    if let Some(n) = parse_indexed(name, "rx-") {
        return Some(QueueName::Rx(n));
    }
    parse_indexed(name, "tx-").map(QueueName::Tx)
}

/// An RPS or XPS mask file (`rps_cpus`, `xps_cpus`): a hex CPU mask, `0` when off.
pub fn parse_queue_mask(text: &str) -> Result<CpuSet, TuningQueueError> {
    let line = one_line(text)?;
    CpuSet::parse_mask(line).map_err(TuningQueueError::Mask)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TuningQueueError {
    #[error(transparent)]
    File(#[from] TuningError),
    #[error(transparent)]
    Mask(nodemedic_kernel::CpuSetError),
}

/// A NIC's channels as ethtool reports them (`ethtool -l`): current counts and maximums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Channels {
    pub rx: u32,
    pub tx: u32,
    pub other: u32,
    pub combined: u32,
    pub rx_max: u32,
    pub tx_max: u32,
    pub other_max: u32,
    pub combined_max: u32,
}

impl Channels {
    /// Channels that receive: combined ones plus RX-only ones.
    pub fn rx_in_use(&self) -> u32 {
        self.combined.saturating_add(self.rx)
    }

    /// The most receiving channels the driver allows. Drivers report combined and RX-only
    /// maximums separately, and many cannot use both at once, so the larger one is the
    /// ceiling that can surely be reached.
    pub fn rx_max(&self) -> u32 {
        self.combined_max.max(self.rx_max)
    }
}

/// A NIC's ring sizes (`ethtool -g`): current and maximum entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rings {
    pub rx: u32,
    pub rx_max: u32,
    pub tx: u32,
    pub tx_max: u32,
}

/// A value read from the driver through ethtool netlink, or why it is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Queried<T> {
    Read(T),
    /// Not available, with the reason (no ethtool netlink family, the driver does not
    /// report it, the interface vanished).
    Absent(String),
}

impl<T> Queried<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Queried::Read(v) => Some(v),
            Queried::Absent(_) => None,
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Queried::Read(_) => None,
            Queried::Absent(r) => Some(r),
        }
    }
}

/// A network interface's queue layout and the settings behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicSettings {
    /// PCI address behind the interface, when it has one.
    pub pci: Option<String>,
    pub rx_queues: u32,
    pub tx_queues: u32,
    /// `rx-N/rps_cpus` of every RX queue that has the file (an empty set: RPS off).
    pub rps: BTreeMap<u32, CpuSet>,
    /// `tx-N/xps_cpus` of every TX queue that has it (the kernel refuses to show it on a
    /// single-queue device).
    pub xps: BTreeMap<u32, CpuSet>,
    pub channels: Queried<Channels>,
    pub rings: Queried<Rings>,
}

impl NicSettings {
    /// Whether any RX queue steers packets to other CPUs.
    pub fn rps_enabled(&self) -> bool {
        self.rps.values().any(|m| !m.is_empty())
    }
}

/// The drop counters of `/sys/class/net/X/statistics/`, read every sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NicStats {
    pub rx_missed_errors: Option<u64>,
    pub rx_fifo_errors: Option<u64>,
    pub rx_dropped: Option<u64>,
}

/// `/proc/sys/net/core/{netdev_budget,netdev_budget_usecs,netdev_max_backlog}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NetCore {
    pub netdev_budget: Option<u64>,
    pub netdev_budget_usecs: Option<u64>,
    pub netdev_max_backlog: Option<u64>,
}

// ------------------------------------------------------------------------------------------
// transparent hugepages, virtualization
// ------------------------------------------------------------------------------------------

/// A sysfs choice file: the choices, with the one in force in brackets
/// (`always [madvise] never`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    pub selected: String,
    pub choices: Vec<String>,
}

pub fn parse_choice(text: &str) -> Result<Choice, TuningError> {
    let line = one_line(text)?;
    let bad = || TuningError::Brackets(line.to_string());
    let mut selected = None;
    let mut choices = Vec::new();
    for word in line.split_ascii_whitespace() {
        let choice = match word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
            Some(inner) => {
                if selected.is_some() {
                    return Err(bad());
                }
                selected = Some(inner.to_string());
                inner
            }
            None => word,
        };
        // The kernel lists each choice once.
        if choice.is_empty() || choice.contains(['[', ']']) || choices.iter().any(|c| c == choice) {
            return Err(bad());
        }
        choices.push(choice.to_string());
    }
    let selected = selected.ok_or_else(bad)?;
    Ok(Choice { selected, choices })
}

/// Whether `/proc/cpuinfo`'s first `flags` line names the `hypervisor` flag: x86 guests have
/// it. `None` without a `flags` line (other architectures say nothing either way).
pub fn cpuinfo_hypervisor(text: &str) -> Option<bool> {
    let line = text
        .lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim_end() == "flags"))?;
    let (_, flags) = line.split_once(':')?;
    Some(flags.split_ascii_whitespace().any(|f| f == "hypervisor"))
}

// ------------------------------------------------------------------------------------------
// the snapshot's view
// ------------------------------------------------------------------------------------------

/// What the `tuning` collector read. The settings change rarely and are re-read on rescans
/// only (shared, not copied, between those: a detector tells a fresh reading by
/// `Arc::ptr_eq`); the drop counters are read every sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tuning {
    pub settings: Arc<TuningSettings>,
    /// Interface → its drop counters.
    pub nic_stats: BTreeMap<String, NicStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TuningSettings {
    pub cmdline: Option<KernelCmdline>,
    /// Every IOMMU group; empty when the kernel has none (no IOMMU, or a VM without a
    /// virtual one), see `iommu_groups_present`.
    pub iommu_groups: Vec<IommuGroup>,
    /// Whether `/sys/kernel/iommu_groups` holds any group.
    pub iommu_groups_present: bool,
    /// Vulnerability file name → the kernel's text.
    pub vulnerabilities: BTreeMap<String, String>,
    /// Every cpufreq policy; empty without a cpufreq driver (see `cpufreq_present`).
    pub cpufreq: Vec<CpufreqPolicy>,
    pub cpufreq_present: bool,
    pub cpuidle: Option<CpuIdle>,
    /// Interface → its queues and settings (physical and virtual NICs; not `lo`).
    pub nics: BTreeMap<String, NicSettings>,
    pub net_core: NetCore,
    /// `/sys/kernel/mm/transparent_hugepage/enabled`.
    pub thp: Option<Choice>,
    /// `/sys/kernel/mm/transparent_hugepage/defrag`.
    pub thp_defrag: Option<Choice>,
    /// From `/proc/cpuinfo`'s `hypervisor` flag: `Some(true)` in a virtual machine.
    pub hypervisor: Option<bool>,
    /// `/proc/sys/kernel/osrelease` (`uname -r`), for the fleet's `nodemedic_node_info`.
    pub kernel_release: Option<String>,
}

impl TuningSettings {
    /// The SRSO state, when the kernel reports the vulnerability.
    pub fn srso(&self) -> Option<(SrsoState, &str)> {
        let text = self.vulnerabilities.get("spec_rstack_overflow")?;
        Some((SrsoState::classify(text), text))
    }

    /// IOMMU groups by domain label ([`IommuDomain::as_str`]), for `nodemedic_iommu_groups`.
    pub fn iommu_groups_by_type(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for g in &self.iommu_groups {
            *out.entry(g.domain.as_str()).or_insert(0) += 1;
        }
        out
    }

    /// cpufreq policies by (governor, driver), for `nodemedic_cpufreq_policies`; `unknown`
    /// where a file was unreadable.
    pub fn cpufreq_policies_by_governor(&self) -> BTreeMap<(&str, &str), usize> {
        let mut out = BTreeMap::new();
        for p in &self.cpufreq {
            let key = (
                p.governor.as_deref().unwrap_or("unknown"),
                p.driver.as_deref().unwrap_or("unknown"),
            );
            *out.entry(key).or_insert(0) += 1;
        }
        out
    }

    /// The IOMMU group a PCI device is in.
    pub fn iommu_group_of(&self, pci: &str) -> Option<&IommuGroup> {
        self.iommu_groups
            .iter()
            .find(|g| g.devices.iter().any(|d| d == pci))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn one_value_files_must_be_whole() {
        assert_eq!(parse_word("DMA-FQ\n"), Ok("DMA-FQ"));
        assert_eq!(parse_word(""), Err(TuningError::Empty));
        assert_eq!(parse_word("DMA"), Err(TuningError::CutShort));
        assert_eq!(parse_word("a\nb\n"), Err(TuningError::Lines(2)));
        assert_eq!(parse_word("\n"), Err(TuningError::Blank));
        assert!(matches!(
            parse_word("two words\n"),
            Err(TuningError::NotOneWord(_))
        ));
        assert_eq!(parse_count("300\n"), Ok(300));
        for bad in ["+3\n", "-1\n", "3 0\n", "\n", "99999999999999999999999\n"] {
            assert!(parse_count(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_flag("1\n"), Ok(true));
        assert!(parse_flag("2\n").is_err());
        assert_eq!(parse_text("haltpoll idle\n"), Ok("haltpoll idle"));
        assert_eq!(
            parse_cpu_words("0 1 2 3 \n").unwrap().to_list_string(),
            "0-3"
        );
        assert!(parse_cpu_words("0-3\n").is_err());
        assert!(parse_cpu_words("8192\n").is_err());
    }

    #[test]
    fn cmdline_keeps_order_quotes_and_stops_at_init_args() {
        let c = parse_cmdline(
            "BOOT_IMAGE=/vmlinuz ro quiet iommu.strict=1 dyndbg=\"file x.c +p\" \
             mitigations=auto,nosmt -- --init-arg iommu=pt\n",
        )
        .unwrap();
        assert_eq!(c.get("ro"), Some(None));
        assert_eq!(c.get("dyndbg"), Some(Some("file x.c +p")));
        assert_eq!(c.get("mitigations"), Some(Some("auto,nosmt")));
        assert_eq!(c.get("iommu"), None, "after -- is init's");
        assert_eq!(c.iommu_request(), Some(IommuRequest::Strict));
        assert_eq!(c.spelled(&["iommu.strict", "iommu"]), ["iommu.strict=1"]);
        assert!(matches!(
            parse_cmdline("a=\"b c\n"),
            Err(TuningError::UnterminatedQuote(_))
        ));
        assert_eq!(parse_cmdline("\n").unwrap().args, vec![]);
    }

    #[test]
    fn iommu_requests_follow_the_last_argument() {
        let req = |s: &str| parse_cmdline(&format!("{s}\n")).unwrap().iommu_request();
        assert_eq!(req("quiet"), None);
        assert_eq!(req("iommu.strict=0"), Some(IommuRequest::Lazy));
        assert_eq!(req("iommu.strict=on"), Some(IommuRequest::Strict));
        assert_eq!(req("iommu=pt"), Some(IommuRequest::Passthrough));
        assert_eq!(req("iommu.passthrough=1"), Some(IommuRequest::Passthrough));
        assert_eq!(
            req("intel_iommu=on,strict iommu.strict=0"),
            Some(IommuRequest::Lazy)
        );
        assert_eq!(req("amd_iommu=fullflush"), Some(IommuRequest::Strict));
        assert_eq!(req("intel_iommu=off"), Some(IommuRequest::Off));
        assert_eq!(req("iommu.strict=maybe"), None);
    }

    #[test]
    fn iommu_group_types() {
        for (text, want, label) in [
            ("DMA\n", IommuDomain::Strict, "strict"),
            ("DMA-FQ\n", IommuDomain::Lazy, "lazy"),
            ("identity\n", IommuDomain::Passthrough, "passthrough"),
            ("blocked\n", IommuDomain::Blocked, "blocked"),
            ("auto\n", IommuDomain::Unknown("auto".into()), "unknown"),
        ] {
            let d = parse_iommu_group_type(text).unwrap();
            assert_eq!(d, want);
            assert_eq!(d.as_str(), label);
            assert_eq!(d.kernel_name(), text.trim());
        }
    }

    #[test]
    fn srso_strings_as_kernels_print_them() {
        for (s, want) in [
            ("Not affected", SrsoState::NotAffected),
            ("Mitigation: Safe RET", SrsoState::SafeRet),
            ("Mitigation: safe RET", SrsoState::SafeRet),
            (
                "Vulnerable: Safe RET, no microcode",
                SrsoState::SafeRetNoMicrocode,
            ),
            ("Vulnerable: Microcode, no safe RET", SrsoState::Microcode),
            ("Mitigation: Microcode", SrsoState::Microcode),
            ("Mitigation: microcode", SrsoState::Microcode),
            ("Mitigation: IBPB", SrsoState::Ibpb),
            ("Mitigation: IBPB on VMEXIT only", SrsoState::Ibpb),
            (
                "Mitigation: Reduced Speculation",
                SrsoState::ReducedSpeculation,
            ),
            ("Vulnerable", SrsoState::Vulnerable),
            ("Vulnerable: No microcode", SrsoState::Vulnerable),
            ("Something new", SrsoState::Unknown),
        ] {
            assert_eq!(SrsoState::classify(s), want, "{s}");
        }
        assert!(SrsoState::SafeRet.costs() && !SrsoState::NotAffected.costs());
        assert_eq!(
            parse_vulnerability("Mitigation: Safe RET\n"),
            Ok("Mitigation: Safe RET")
        );
    }

    #[test]
    fn queue_names_and_masks() {
        assert_eq!(parse_queue_name("rx-12"), Some(QueueName::Rx(12)));
        assert_eq!(parse_queue_name("tx-0"), Some(QueueName::Tx(0)));
        for not in ["rx-", "rx-a", "rx--1", "mq-0", "rx-1 "] {
            assert_eq!(parse_queue_name(not), None, "{not}");
        }
        assert!(parse_queue_mask("0\n").unwrap().is_empty());
        assert_eq!(
            parse_queue_mask("0000ff00\n").unwrap().to_list_string(),
            "8-15"
        );
        assert!(parse_queue_mask("zz\n").is_err());
        assert!(parse_queue_mask("ff").is_err());
    }

    #[test]
    fn bracketed_choices() {
        let c = parse_choice("always [madvise] never\n").unwrap();
        assert_eq!(c.selected, "madvise");
        assert_eq!(c.choices, ["always", "madvise", "never"]);
        for bad in [
            "always madvise never\n",
            "[always] [madvise]\n",
            "always [] never\n",
            "al[ways never\n",
            "madvise [madvise]\n",
        ] {
            assert!(parse_choice(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hypervisor_flag_from_cpuinfo() {
        let guest = "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n\nprocessor\t: 1\n";
        assert_eq!(cpuinfo_hypervisor(guest), Some(true));
        assert_eq!(
            cpuinfo_hypervisor("flags\t: fpu vme\n"),
            Some(false),
            "bare metal"
        );
        assert_eq!(cpuinfo_hypervisor("Features\t: fp asimd\n"), None);
    }

    #[test]
    fn counts_for_the_exporter() {
        let group = |id, domain| IommuGroup {
            id,
            domain,
            devices: vec![format!("0000:0{id}:00.0")],
        };
        let policy = |gov: &str| CpufreqPolicy {
            governor: Some(gov.into()),
            driver: Some("intel_pstate".into()),
            ..Default::default()
        };
        let s = TuningSettings {
            iommu_groups: vec![
                group(1, IommuDomain::Strict),
                group(2, IommuDomain::Strict),
                group(3, IommuDomain::Passthrough),
            ],
            cpufreq: vec![
                policy("powersave"),
                policy("powersave"),
                policy("performance"),
            ],
            ..Default::default()
        };
        assert_eq!(
            s.iommu_groups_by_type(),
            BTreeMap::from([("passthrough", 1), ("strict", 2)])
        );
        assert_eq!(
            s.cpufreq_policies_by_governor(),
            BTreeMap::from([
                (("performance", "intel_pstate"), 1),
                (("powersave", "intel_pstate"), 2)
            ])
        );
        assert_eq!(s.iommu_group_of("0000:03:00.0").map(|g| g.id), Some(3));
        assert!(s.iommu_group_of("0000:09:00.0").is_none());
    }

    #[test]
    fn channels_count_receiving_queues() {
        let c = Channels {
            combined: 1,
            combined_max: 8,
            ..Default::default()
        };
        assert_eq!((c.rx_in_use(), c.rx_max()), (1, 8));
    }
}
