//! Equality and order of short byte strings, eight bytes at a time.
//!
//! `==` and `cmp` on `str` and `[u8]` call the C library's `bcmp`/`memcmp`. The shipped
//! build links musl, whose `memcmp` is a loop over single bytes behind a function call:
//! about 6,500 calls a sample on the 256-CPU tree (a path per kept file, a PCI address per
//! IRQ, an IRQ's chip and handlers against the last sample's), 3.6% of the musl build's CPU
//! where glibc's vector `memcmp` took 1.4% of the glibc build's (BENCHMARKS.md, "The
//! shipped build against glibc"). These compare whole words in plain code that the compiler
//! inlines, for the comparisons made on every sample; elsewhere `==` stays.

use std::cmp::Ordering;

/// `a == b`.
#[inline]
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (aw, at) = a.as_chunks::<8>();
    let (bw, bt) = b.as_chunks::<8>();
    aw.iter()
        .zip(bw)
        .all(|(x, y)| u64::from_ne_bytes(*x) == u64::from_ne_bytes(*y))
        && at.iter().zip(bt).all(|(x, y)| x == y)
}

/// `a == b` for lists of numbers (IRQ columns and counts). `==` on a slice of integers is a
/// call to `bcmp` too.
#[inline]
pub fn eq_items<T: Copy + Eq>(a: &[T], b: &[T]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// `a == b` for text.
#[inline]
pub fn eq_str(a: &str, b: &str) -> bool {
    eq(a.as_bytes(), b.as_bytes())
}

/// `a.cmp(b)`: byte-wise lexicographic, a prefix before what extends it.
#[inline]
pub fn cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (aw, _) = a.as_chunks::<8>();
    let (bw, _) = b.as_chunks::<8>();
    for (x, y) in aw.iter().zip(bw) {
        // Big-endian: the first byte that differs decides, as in byte order.
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    // Equal up to the shorter one's last whole word: the rest, byte by byte.
    let done = aw.len().min(bw.len()) * 8;
    let (ar, br) = (&a[done..], &b[done..]);
    for (x, y) in ar.iter().zip(br) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// The lines of `text` as `str::lines` gives them: split at `\n`, a `\r` just before it
/// dropped, no empty line after a final newline. Each end is found with `memchr`, where
/// `str::lines` checks each candidate through `bcmp` (a call per line to musl's `memcmp`:
/// 256 a sample for `softnet_stat` on 256 CPUs).
pub fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let now = rest.filter(|r| !r.is_empty())?;
        let (line, after) = match memchr::memchr(b'\n', now.as_bytes()) {
            // `\n` is ASCII: both sides are on character boundaries.
            Some(i) => {
                let line = now.get(..i)?;
                let line = match line.as_bytes().last() {
                    Some(b'\r') => line.get(..line.len() - 1)?,
                    _ => line,
                };
                (line, now.get(i + 1..))
            }
            None => (now, None),
        };
        rest = after;
        Some(line)
    })
}

/// The position of the first `byte` in `s`.
#[inline]
pub fn find(s: &str, byte: u8) -> Option<usize> {
    s.bytes().position(|b| b == byte)
}

/// `s` split around its first `byte` (an ASCII byte), like `str::split_once` with a `char`,
/// which compares each candidate through `bcmp`.
#[inline]
pub fn split_once(s: &str, byte: u8) -> Option<(&str, &str)> {
    debug_assert!(byte.is_ascii());
    let i = find(s, byte)?;
    Some((s.get(..i)?, s.get(i + 1..)?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn equal_ordered_and_split_as_std() {
        let words = [
            "",
            "a",
            "/proc/irq/12/smp_affinity_list",
            "/proc/irq/12/smp_affinity_lisu",
            "/proc/irq/12/smp_affinity",
            "PCI-MSIX-0000:00:04.0",
            "PCI-MSIX-0000:00:04.1",
            "0000:00:04.0",
            "0000:00:04.0\u{e9}",
        ];
        for a in words {
            for b in words {
                assert_eq!(eq_str(a, b), a == b, "{a:?} {b:?}");
                assert_eq!(cmp(a.as_bytes(), b.as_bytes()), a.cmp(b), "{a:?} {b:?}");
                let text = format!("{a}\n\r\n{b}\r{a}\n\n{b}");
                let half = text.get(..text.len() / 2).unwrap_or("");
                for t in [
                    text.as_str(),
                    half,
                    a,
                    "\n",
                    "\r",
                    "x\r\n",
                    "\r\n\r",
                    "\n\n",
                ] {
                    let std: Vec<&str> = t.lines().collect();
                    assert_eq!(lines(t).collect::<Vec<_>>(), std, "{t:?}");
                }
            }
            assert_eq!(split_once(a, b':'), a.split_once(':'));
            assert_eq!(split_once(a, b'-'), a.split_once('-'));
        }
    }

    proptest! {
        /// `lines` splits any text of newlines, carriage returns and other characters as
        /// `str::lines` does.
        #[test]
        fn lines_as_std(chars in proptest::collection::vec(
            proptest::sample::select(vec!['a', '\n', '\r', '\u{e9}', ' ']), 0..40)) {
            let t: String = chars.into_iter().collect();
            prop_assert_eq!(lines(&t).collect::<Vec<_>>(), t.lines().collect::<Vec<_>>());
        }

        #[test]
        fn as_std_on_any_bytes(a in proptest::collection::vec(0u8..4, 0..40),
                               b in proptest::collection::vec(0u8..4, 0..40)) {
            prop_assert_eq!(eq(&a, &b), a == b);
            prop_assert_eq!(cmp(&a, &b), a.cmp(&b));
            // The same bytes behind a common prefix of any length.
            let mut pa = vec![7u8; a.len() % 19];
            let mut pb = pa.clone();
            pa.extend_from_slice(&a);
            pb.extend_from_slice(&b);
            prop_assert_eq!(eq(&pa, &pb), pa == pb);
            prop_assert_eq!(cmp(&pa, &pb), pa.cmp(&pb));
            // As lists of numbers.
            let (wa, wb): (Vec<u64>, Vec<u64>) = (
                a.iter().map(|x| u64::from(*x) << 40).collect(),
                b.iter().map(|x| u64::from(*x) << 40).collect(),
            );
            prop_assert_eq!(eq_items(&wa, &wb), wa == wb);
        }
    }
}
