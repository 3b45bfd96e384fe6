/// Marsaglia's xorshift64 (shifts 13, 7, 17): a deterministic sequence for tests that try
/// many generated inputs, the same on every run so that a failure can be replayed.
pub struct XorShift64(u64);

impl XorShift64 {
    /// `seed` must not be zero, the one state xorshift never leaves.
    pub fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift64 stays at zero forever");
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// The next value reduced to `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_marsaglias() {
        // From x = 1: x ^= x << 13 gives 0x2001, x ^= x >> 7 gives 0x2041,
        // x ^= x << 17 gives 0x4082_2041.
        let mut rng = XorShift64::new(1);
        assert_eq!(rng.next_u64(), 0x4082_2041);
        let mut again = XorShift64::new(1);
        again.next_u64();
        assert_eq!(rng.next_u64(), again.next_u64());
    }
}
