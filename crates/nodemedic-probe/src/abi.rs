//! The probes' map values and ring buffer records, decoded from the layouts in
//! `ebpf/perf_wakeup.h`. aya reads map values as `Pod` types; plain `u64` arrays are `Pod`
//! already, so decoding them here keeps the crate free of `unsafe impl Pod`.

use std::fmt;

/// `struct nm_cpu_counts`, as the `u64` words aya reads from the per-CPU array.
pub type RawCpuCounts = [u64; 9];
/// `struct nm_owner`: three counters and a 16-byte comm.
pub type RawOwner = [u64; 5];
/// `sizeof(struct nm_event)`.
pub const EVENT_SIZE: usize = 48;

/// One CPU's counters (monotonic since the probes were loaded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuCounts {
    pub bpf_outputs: u64,
    pub sample_outputs: u64,
    pub wakeups: u64,
    pub untracked: u64,
    pub events_emitted: u64,
    pub events_dropped: u64,
}

impl CpuCounts {
    /// The probe-side state words (window start, window count, storming) are not counters and
    /// are left out.
    pub fn from_raw(raw: &RawCpuCounts) -> Self {
        Self {
            bpf_outputs: raw[0],
            sample_outputs: raw[1],
            wakeups: raw[2],
            untracked: raw[3],
            events_emitted: raw[4],
            events_dropped: raw[5],
        }
    }

    pub fn outputs(&self) -> u64 {
        self.bpf_outputs.saturating_add(self.sample_outputs)
    }

    pub fn add(&mut self, other: &CpuCounts) {
        self.bpf_outputs = self.bpf_outputs.wrapping_add(other.bpf_outputs);
        self.sample_outputs = self.sample_outputs.wrapping_add(other.sample_outputs);
        self.wakeups = self.wakeups.wrapping_add(other.wakeups);
        self.untracked = self.untracked.wrapping_add(other.untracked);
        self.events_emitted = self.events_emitted.wrapping_add(other.events_emitted);
        self.events_dropped = self.events_dropped.wrapping_add(other.events_dropped);
    }
}

/// The process that opened a perf event (`event->owner`, or its parent event's for an
/// inherited event), as the probe saw it first: tgid 0 is the kernel's own events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerCounts {
    pub tgid: u32,
    pub comm: String,
    pub bpf_outputs: u64,
    pub sample_outputs: u64,
    pub wakeups: u64,
}

impl OwnerCounts {
    pub fn from_raw(tgid: u32, raw: &RawOwner) -> Self {
        let mut comm = [0u8; 16];
        comm[..8].copy_from_slice(&raw[3].to_ne_bytes());
        comm[8..].copy_from_slice(&raw[4].to_ne_bytes());
        Self {
            tgid,
            comm: comm_to_string(&comm),
            bpf_outputs: raw[0],
            sample_outputs: raw[1],
            wakeups: raw[2],
        }
    }

    pub fn outputs(&self) -> u64 {
        self.bpf_outputs.saturating_add(self.sample_outputs)
    }
}

/// A task's comm is NUL-padded bytes, usually ASCII; anything else is shown lossily.
pub fn comm_to_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    NewOwner,
    StormStart,
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventKind::NewOwner => "new_owner",
            EventKind::StormStart => "storm_start",
        })
    }
}

/// A ring buffer record (`struct nm_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeEvent {
    pub kind: EventKind,
    pub tgid: u32,
    pub cpu: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// STORM_START: wakeups counted on that CPU in the window that crossed the threshold.
    pub value: u64,
    pub comm: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventDecodeError {
    #[error("ring buffer record of {0} bytes, expected {EVENT_SIZE}")]
    Size(usize),
    #[error("ring buffer record of unknown kind {0}")]
    Kind(u32),
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(w)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(w)
}

impl ProbeEvent {
    pub fn decode(bytes: &[u8]) -> Result<Self, EventDecodeError> {
        if bytes.len() != EVENT_SIZE {
            return Err(EventDecodeError::Size(bytes.len()));
        }
        let kind = match u32_at(bytes, 0) {
            1 => EventKind::NewOwner,
            2 => EventKind::StormStart,
            other => return Err(EventDecodeError::Kind(other)),
        };
        Ok(Self {
            kind,
            tgid: u32_at(bytes, 4),
            cpu: u32_at(bytes, 8),
            ts_ns: u64_at(bytes, 16),
            value: u64_at(bytes, 24),
            comm: comm_to_string(&bytes[32..48]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comm_words(s: &str) -> [u64; 2] {
        let mut b = [0u8; 16];
        b[..s.len()].copy_from_slice(s.as_bytes());
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&b[..8]);
        hi.copy_from_slice(&b[8..]);
        [u64::from_ne_bytes(lo), u64::from_ne_bytes(hi)]
    }

    #[test]
    fn owner_decodes_counts_and_comm() {
        let [lo, hi] = comm_words("agent-perf-io");
        let o = OwnerCounts::from_raw(4242, &[10, 5, 12, lo, hi]);
        assert_eq!(o.comm, "agent-perf-io");
        assert_eq!((o.bpf_outputs, o.sample_outputs, o.wakeups), (10, 5, 12));
        assert_eq!(o.outputs(), 15);
    }

    #[test]
    fn full_length_comm_has_no_nul() {
        let [lo, hi] = comm_words("0123456789abcdef");
        assert_eq!(
            OwnerCounts::from_raw(1, &[0, 0, 0, lo, hi]).comm,
            "0123456789abcdef"
        );
    }

    #[test]
    fn cpu_counts_skip_state_words() {
        let c = CpuCounts::from_raw(&[1, 2, 3, 4, 5, 6, 999, 998, 1]);
        assert_eq!(c.outputs(), 3);
        assert_eq!(
            (c.wakeups, c.untracked, c.events_emitted, c.events_dropped),
            (3, 4, 5, 6)
        );
    }

    #[test]
    fn event_round_trip_and_rejects() {
        let mut b = vec![0u8; EVENT_SIZE];
        b[0..4].copy_from_slice(&2u32.to_ne_bytes());
        b[4..8].copy_from_slice(&77u32.to_ne_bytes());
        b[8..12].copy_from_slice(&3u32.to_ne_bytes());
        b[16..24].copy_from_slice(&123u64.to_ne_bytes());
        b[24..32].copy_from_slice(&5000u64.to_ne_bytes());
        b[32..36].copy_from_slice(b"gen\0");
        let e = ProbeEvent::decode(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.kind, EventKind::StormStart);
        assert_eq!((e.tgid, e.cpu, e.ts_ns, e.value), (77, 3, 123, 5000));
        assert_eq!(e.comm, "gen");
        assert_eq!(
            ProbeEvent::decode(&b[..40]),
            Err(EventDecodeError::Size(40))
        );
        b[0..4].copy_from_slice(&9u32.to_ne_bytes());
        assert_eq!(ProbeEvent::decode(&b), Err(EventDecodeError::Kind(9)));
    }
}
