//! Whether an irqbalance version is one of the releases whose load rebalancing never runs
//! (the version itself is read by the `irqbalance_config` collector).

/// irqbalance 1.7.0 and 1.8.0 never rebalance by load (fixed in 1.9.0): after a CPU is
/// saturated, IRQs placed on it stay there until irqbalance restarts.
pub fn has_rebalance_bug(version: &str) -> bool {
    // Debian versions look like `1.8.0-1` or `1:1.8.0-1ubuntu2`.
    let upstream = version
        .split_once(':')
        .map_or(version, |(_, v)| v)
        .split(['-', '~', '+'])
        .next()
        .unwrap_or("");
    let mut parts = upstream.split('.').map(|p| p.parse::<u32>().ok());
    matches!(
        (
            parts.next().flatten(),
            parts.next().flatten(),
            parts.next().flatten()
        ),
        (Some(1), Some(7), _) | (Some(1), Some(8), Some(0) | None)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buggy_versions() {
        for v in ["1.7.0", "1.7.0-3", "1.8.0-1", "1:1.8.0-1ubuntu2", "1.8"] {
            assert!(has_rebalance_bug(v), "{v}");
        }
        for v in ["1.9.0", "1.9.2-1", "1.6.0", "1.8.1", "2.0", "garbage", ""] {
            assert!(!has_rebalance_bug(v), "{v}");
        }
    }
}
