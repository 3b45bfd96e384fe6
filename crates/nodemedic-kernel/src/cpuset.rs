//! CPU sets: the kernel's two spellings of them (lists such as `0-3,8` and hex masks such as
//! `ffffffff,00000000`) and the set operations the detectors need.

use std::fmt;

/// CPU ids at or above this are rejected. Linux's `NR_CPUS` tops out at 8192 on every
/// architecture; a larger id in a file means the file is not what it claims to be, and
/// refusing it bounds the memory a hostile or corrupt file can make us allocate.
pub const MAX_CPUS: u32 = 8192;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("invalid CPU list element {0:?}")]
    BadListElement(String),
    #[error("CPU range {0}-{1} runs backwards")]
    BackwardsRange(u32, u32),
    #[error("CPU id {0} exceeds the supported maximum of {MAX_CPUS}")]
    TooLarge(u64),
    #[error("invalid hex mask group {0:?}")]
    BadMaskGroup(String),
}

/// A set of CPU ids, stored as a bitmap.
#[derive(Default, Eq)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// `clone_from` copies into the set's own storage (the derived one allocates a new set).
impl Clone for CpuSet {
    fn clone(&self) -> Self {
        CpuSet {
            words: self.words.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        self.words.clone_from(&source.words);
    }
}

/// The words compared in a loop the compiler inlines: the derived `==` compares them with
/// the C library's `memcmp`, byte by byte in musl, twice per IRQ per sample (its masks
/// against the last sample's).
impl PartialEq for CpuSet {
    fn eq(&self, other: &Self) -> bool {
        self.words.len() == other.words.len()
            && self.words.iter().zip(&other.words).all(|(a, b)| a == b)
    }
}

impl std::hash::Hash for CpuSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.words.hash(state);
    }
}

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> Self {
        let mut set = Self::new();
        for cpu in cpus {
            set.insert(cpu);
        }
        set
    }

    /// Inserts `cpu`. Ids at or above [`MAX_CPUS`] are ignored: parsers reject them before
    /// they get here, and callers build sets from ids those parsers produced.
    pub fn insert(&mut self, cpu: u32) {
        if cpu >= MAX_CPUS {
            return;
        }
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    pub fn remove(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
        }
        self.trim();
    }

    /// Drops trailing zero words so that equal sets are equal (`PartialEq`, `Hash`).
    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        // Set bits only, lowest first: a sparse set on 1024 CPUs costs its members, not 1024.
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let b = rest.trailing_zeros();
                    rest &= rest - 1;
                    i as u32 * 64 + b
                })
            })
        })
    }

    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.word(i) | other.word(i))
            .collect::<Vec<_>>();
        CpuSet { words }
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().min(other.words.len());
        let mut set = CpuSet {
            words: (0..n).map(|i| self.word(i) & other.word(i)).collect(),
        };
        set.trim();
        set
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut set = CpuSet {
            words: (0..self.words.len())
                .map(|i| self.word(i) & !other.word(i))
                .collect(),
        };
        set.trim();
        set
    }

    /// Whether every CPU of `self` is in `other` (without building the difference: the
    /// collapse detector and the exporter ask it of every IRQ's affinity every sample).
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.word(i) == 0)
    }

    /// Empties the set, keeping its storage.
    pub fn clear(&mut self) {
        self.words.clear();
    }

    /// Keeps only the CPUs of `self` that are in `other`, in place.
    pub fn intersect_with(&mut self, other: &CpuSet) {
        self.words.truncate(other.words.len());
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w &= o;
        }
        self.trim();
    }

    /// Adds every CPU of `other` to `self`, in place.
    pub fn union_with(&mut self, other: &CpuSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    /// Parses a kernel CPU list (`0-3,8,10-11`; empty or blank means the empty set).
    ///
    /// `(null)` is the empty set too: it is what `%*pbl` prints for a cpumask the kernel never
    /// allocated, as `/sys/devices/system/cpu/nohz_full` reads on a kernel built with
    /// `CONFIG_NO_HZ_FULL` (Debian's) and booted without `nohz_full=`.
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuSetError> {
        let mut set = CpuSet::new();
        let text = text.trim();
        if text.is_empty() || text == "(null)" {
            return Ok(set);
        }
        for element in text.split(',') {
            let element = element.trim();
            let bad = || CpuSetError::BadListElement(element.to_string());
            let (lo, hi) = match element.split_once('-') {
                Some((lo, hi)) => (parse_id(lo).ok_or_else(bad)?, parse_id(hi).ok_or_else(bad)?),
                None => {
                    let id = parse_id(element).ok_or_else(bad)?;
                    (id, id)
                }
            };
            if lo.max(hi) >= u64::from(MAX_CPUS) {
                return Err(CpuSetError::TooLarge(lo.max(hi)));
            }
            if lo > hi {
                return Err(CpuSetError::BackwardsRange(lo as u32, hi as u32));
            }
            for cpu in lo..=hi {
                set.insert(cpu as u32);
            }
        }
        Ok(set)
    }

    /// Parses a kernel hex CPU mask: comma-separated groups of up to 8 hex digits (32 CPUs
    /// each), most significant group first, as in `/proc/irq/N/smp_affinity`.
    pub fn parse_mask(text: &str) -> Result<CpuSet, CpuSetError> {
        let mut set = CpuSet::new();
        set.parse_mask_into(text)?;
        Ok(set)
    }

    /// [`CpuSet::parse_mask`] into `self`, reusing its storage: a reader that parses the same
    /// masks every sample allocates nothing once its sets are as wide as the masks. On an
    /// error `self` is left empty.
    pub fn parse_mask_into(&mut self, text: &str) -> Result<(), CpuSetError> {
        self.words.clear();
        let text = text.trim();
        let b = text.as_bytes();
        let groups = b.iter().filter(|&&c| c == b',').count() as u64 + 1;
        if groups * 32 > u64::from(MAX_CPUS) {
            return Err(CpuSetError::TooLarge(groups * 32));
        }
        // One pass from the end (the lowest CPUs): groups of up to 8 hex digits, two per
        // word. A mask of every CPU on a 1024-CPU node is 288 bytes and one allocation.
        let words = &mut self.words;
        words.resize(groups.div_ceil(2) as usize, 0);
        let bad = |from: usize, to: usize| {
            CpuSetError::BadMaskGroup(text.get(from..to).unwrap_or("").trim().to_string())
        };
        let mut end = b.len();
        for group in 0..groups as usize {
            let start = b[..end]
                .iter()
                .rposition(|&c| c == b',')
                .map_or(0, |i| i + 1);
            let digits = &b[start..end];
            let digits = digits.trim_ascii();
            // A group of no CPUs, most of a wide node's mask: one word compare.
            if <[u8; 8]>::try_from(digits).is_ok_and(|d| d == *b"00000000") {
                end = start.saturating_sub(1);
                continue;
            }
            if digits.is_empty() || digits.len() > 8 {
                words.clear();
                return Err(bad(start, end));
            }
            let mut value = 0u64;
            for &c in digits {
                let nibble = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    b'A'..=b'F' => c - b'A' + 10,
                    _ => {
                        words.clear();
                        return Err(bad(start, end));
                    }
                };
                value = value << 4 | u64::from(nibble);
            }
            if let Some(w) = words.get_mut(group / 2) {
                *w |= value << (32 * (group % 2));
            }
            end = start.saturating_sub(1);
        }
        self.trim();
        Ok(())
    }

    /// The kernel's list spelling: `0-3,8`.
    pub fn to_list_string(&self) -> String {
        ranges_string(self.iter())
    }

    /// The kernel's mask spelling, as accepted by `/proc/irq/N/smp_affinity`.
    pub fn to_mask_string(&self) -> String {
        let last = self.iter().last().unwrap_or(0);
        let groups = last / 32 + 1;
        let mut parts = Vec::with_capacity(groups as usize);
        for g in (0..groups).rev() {
            let mut value = 0u32;
            for bit in 0..32 {
                if self.contains(g * 32 + bit) {
                    value |= 1 << bit;
                }
            }
            if parts.is_empty() {
                parts.push(format!("{value:x}"));
            } else {
                parts.push(format!("{value:08x}"));
            }
        }
        parts.join(",")
    }
}

/// Sorted ids in the kernel's range spelling (`0-3,8,10-11`); also used for IRQ numbers.
pub fn ranges_string(sorted: impl IntoIterator<Item = u32>) -> String {
    let mut out = String::new();
    let mut iter = sorted.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
    }
    out
}

fn parse_id(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list_string())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list_string())
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<T: IntoIterator<Item = u32>>(iter: T) -> Self {
        CpuSet::from_cpus(iter)
    }
}

#[cfg(test)]
mod tests {
    /// The one-pass mask parser against the plainest reading of the format: split at commas,
    /// each group a hex u32, the last group the lowest 32 CPUs.
    #[test]
    fn mask_parser_agrees_with_a_plain_split_and_parse() {
        fn plain(text: &str) -> Option<Vec<u32>> {
            let mut cpus = Vec::new();
            for (i, g) in text.trim().rsplit(',').enumerate() {
                let g = g.trim();
                if g.is_empty() || g.len() > 8 {
                    return None;
                }
                let v = u32::from_str_radix(g, 16).ok()?;
                cpus.extend(
                    (0..32)
                        .filter(|b| v & (1 << b) != 0)
                        .map(|b| i as u32 * 32 + b),
                );
            }
            Some(cpus)
        }
        let mut rng = nodemedic_testkit::XorShift64::new(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.next_u64();
        let alphabet = b"0123456789abcdefABCDEF,, xg";
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char)
                .collect();
            let got = CpuSet::parse_mask(&text)
                .ok()
                .map(|s| s.iter().collect::<Vec<_>>());
            assert_eq!(got, plain(&text), "{text:?}");
        }
        for text in [
            "ff",
            "00000001,00000000",
            "ffffffff,ffffffff,ffffffff",
            "1,0,0,0",
        ] {
            assert_eq!(
                CpuSet::parse_mask(text)
                    .ok()
                    .map(|s| s.iter().collect::<Vec<_>>()),
                plain(text),
                "{text:?}"
            );
        }
    }

    use super::*;

    #[test]
    fn list_round_trips() {
        let set = CpuSet::parse_list("0-3,8,10-11\n").unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(set.to_list_string(), "0-3,8,10-11");
        assert!(CpuSet::parse_list("\n").unwrap().is_empty());
    }

    /// Debian 12's kernel (CONFIG_NO_HZ_FULL, no `nohz_full=`) prints the unallocated mask as
    /// `(null)`; it was a collector warning on every sample of the QEMU guest node.
    #[test]
    fn list_of_an_unallocated_mask_is_empty() {
        assert!(CpuSet::parse_list("(null)\n").unwrap().is_empty());
        assert!(CpuSet::parse_list("(null),1").is_err());
        assert!(CpuSet::parse_list("null").is_err());
    }

    #[test]
    fn list_rejects_garbage_and_huge_ids() {
        assert!(matches!(
            CpuSet::parse_list("0-x"),
            Err(CpuSetError::BadListElement(_))
        ));
        assert!(matches!(
            CpuSet::parse_list("5-2"),
            Err(CpuSetError::BackwardsRange(5, 2))
        ));
        assert!(matches!(
            CpuSet::parse_list("0-4294967296"),
            Err(CpuSetError::TooLarge(_))
        ));
        assert!(CpuSet::parse_list("-1").is_err());
        assert!(CpuSet::parse_list("1,,2").is_err());
    }

    #[test]
    fn mask_with_32_bit_groups() {
        let set = CpuSet::parse_mask("00000001,00000000,00000030\n").unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![4, 5, 64]);
        assert_eq!(set.to_mask_string(), "1,00000000,00000030");
        assert_eq!(CpuSet::parse_mask("ff").unwrap().len(), 8);
        assert_eq!(
            CpuSet::parse_mask(
                "ffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff,ffffffff"
            )
            .unwrap()
            .len(),
            256
        );
    }

    #[test]
    fn mask_rejects_garbage() {
        assert!(CpuSet::parse_mask("").is_err());
        assert!(CpuSet::parse_mask("fg").is_err());
        assert!(CpuSet::parse_mask("123456789").is_err());
        assert!(CpuSet::parse_mask(&"0,".repeat(300)).is_err());
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse_list("0-7").unwrap();
        let b = CpuSet::parse_list("4-5,70").unwrap();
        assert_eq!(a.intersection(&b).to_list_string(), "4-5");
        assert_eq!(a.difference(&b).to_list_string(), "0-3,6-7");
        assert_eq!(a.union(&b).to_list_string(), "0-7,70");
        assert!(a.intersection(&b).is_subset(&a));
        assert_eq!(a.difference(&a), CpuSet::new(), "equal sets compare equal");
        assert_eq!(
            b.intersection(&CpuSet::parse_list("0-3").unwrap()),
            CpuSet::new()
        );
        let mut d = CpuSet::from_cpus([70]);
        d.remove(70);
        assert_eq!(d, CpuSet::new());
        assert!(!b.is_subset(&a));
        let mut c = a.clone();
        c.remove(0);
        assert_eq!(c.first(), Some(1));
    }

    proptest::proptest! {
        /// The list and mask formats read back to the set that wrote them, for sets of up to
        /// 8192 CPUs, empty included.
        #[test]
        fn list_and_mask_round_trip(cpus in proptest::collection::btree_set(0u32..8192, 0..300)) {
            let set = CpuSet::from_cpus(cpus.iter().copied());
            proptest::prop_assert_eq!(set.iter().collect::<Vec<_>>(), cpus.iter().copied().collect::<Vec<_>>());
            proptest::prop_assert_eq!(CpuSet::parse_list(&set.to_list_string()).ok(), Some(set.clone()));
            proptest::prop_assert_eq!(CpuSet::parse_mask(&set.to_mask_string()).ok(), Some(set));
        }

        /// The in-place forms agree with the ones that build a new set: a mask parsed into a
        /// set that held another, a union into a set, a subset test without the difference.
        #[test]
        fn in_place_forms_agree(
            a in proptest::collection::btree_set(0u32..1100, 0..40),
            b in proptest::collection::btree_set(0u32..1100, 0..40),
        ) {
            let (a, b) = (CpuSet::from_cpus(a), CpuSet::from_cpus(b));
            let mut reused = b.clone();
            proptest::prop_assert!(reused.parse_mask_into(&a.to_mask_string()).is_ok());
            proptest::prop_assert_eq!(&reused, &a);
            let mut union = a.clone();
            union.union_with(&b);
            proptest::prop_assert_eq!(union, a.union(&b));
            let mut common = a.clone();
            common.intersect_with(&b);
            proptest::prop_assert_eq!(common, a.intersection(&b));
            proptest::prop_assert_eq!(a.is_subset(&b), a.difference(&b).is_empty());
            proptest::prop_assert!(a.intersection(&b).is_subset(&b));
        }
    }

    #[test]
    fn a_bad_mask_parsed_in_place_leaves_the_set_empty() {
        let mut set = CpuSet::parse_list("0-7").unwrap();
        assert!(set.parse_mask_into("ff,zz").is_err());
        assert_eq!(set, CpuSet::new());
        assert!(set.parse_mask_into("0f,00000000").is_ok());
        assert_eq!(set.to_list_string(), "32-35");
    }
}
