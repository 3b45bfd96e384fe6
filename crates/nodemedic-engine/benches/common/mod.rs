//! What both benches say about the sample they measured (`mod common;` in each).

use nodemedic_collect::sources::cgroups::Cgroups;
use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_sample::Sample;

/// "N CPUs, M IRQs, K cgroups": the shape of the tree a sample read. Names on stderr the
/// collectors that did not succeed, so that a figure taken with one failing says so.
pub fn shape(case: &str, s: &Sample) -> String {
    let cpus = s.snapshot.get::<Interrupts>().map_or(0, |i| i.cpus.len());
    let irqs = s.snapshot.get::<Interrupts>().map_or(0, |i| i.irqs.len());
    let cgroups = s.snapshot.get::<Cgroups>().map_or(0, |c| c.groups.len());
    let failed: Vec<String> = s
        .collectors
        .iter()
        .filter(|c| !c.is_success())
        .map(|c| c.name.to_string())
        .collect();
    if !failed.is_empty() {
        eprintln!("note: {case}: collectors not succeeding: {failed:?}");
    }
    format!("{cpus} CPUs, {irqs} IRQs, {cgroups} cgroups")
}
