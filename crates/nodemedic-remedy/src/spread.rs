//! Where to put a collapsed group's IRQs when nodemedic spreads them itself.

use nodemedic_kernel::CpuSet;

/// Assigns `irqs` round-robin over `eligible` CPUs (already NUMA-local and free of isolated,
/// `nohz_full` and banned CPUs), starting with the CPUs the group is not on yet so that the
/// hot CPU gets the fewest.
pub fn plan(irqs: &[u32], eligible: &CpuSet, current: &CpuSet) -> Vec<(u32, u32)> {
    let mut cpus: Vec<u32> = eligible.iter().filter(|c| !current.contains(*c)).collect();
    cpus.extend(eligible.iter().filter(|c| current.contains(*c)));
    if cpus.is_empty() {
        return Vec::new();
    }
    let mut sorted = irqs.to_vec();
    sorted.sort_unstable();
    sorted
        .into_iter()
        .enumerate()
        .map(|(i, irq)| (irq, cpus[i % cpus.len()]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_over_eligible_cpus_new_ones_first() {
        let eligible = CpuSet::parse_list("0-5").unwrap();
        let current = CpuSet::parse_list("4-5").unwrap();
        let p = plan(&[34, 27, 28, 29, 30, 31, 32, 33], &eligible, &current);
        assert_eq!(
            p,
            vec![
                (27, 0),
                (28, 1),
                (29, 2),
                (30, 3),
                (31, 4),
                (32, 5),
                (33, 0),
                (34, 1)
            ]
        );
        assert!(plan(&[1], &CpuSet::new(), &current).is_empty());
    }
}
