//! Pressure Stall Information: `/proc/pressure/{cpu,memory,io,irq}` and cgroup v2
//! `{cpu,memory,io}.pressure`.
//!
//! ```text
//! some avg10=0.06 avg60=0.02 avg300=0.00 total=5038883
//! full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! ```
//!
//! `some`: the share of time at least one task waited on the resource; `full`: all non-idle
//! tasks waited at once. `total` is cumulative microseconds. `irq` has only `full`; `cpu`
//! `full` is absent before Linux 5.13 (and always zero at the system level).

pub use nodemedic_kernel::psi::PsiResource;
use serde::Serialize;

/// One `some` or `full` line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PsiLine {
    /// Percent of wall time stalled, averaged over 10 s, 60 s and 300 s.
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Cumulative stall time in microseconds.
    pub total_us: u64,
}

impl PsiLine {
    pub fn total_seconds(&self) -> f64 {
        self.total_us as f64 / 1e6
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Psi {
    pub some: Option<PsiLine>,
    pub full: Option<PsiLine>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PsiError {
    #[error("no some/full line")]
    Empty,
    #[error("line {line}: {reason}")]
    BadLine { line: usize, reason: String },
}

/// Parses a PSI file. Unknown line kinds are errors: PSI's format has been the same since
/// 4.20, and a line we do not understand is more likely a wrong file than a new kernel.
///
/// A node with 500 pods has 1,500 of these files per reading, so this allocates nothing
/// unless it fails, and reads the kernel's `%lu.%02lu` averages without the general float
/// parser (to the same bits; see the tests).
pub fn parse(text: &str) -> Result<Psi, PsiError> {
    match parse_exact(text.as_bytes()) {
        Some(psi) => Ok(psi),
        None => parse_lines(text),
    }
}

/// [`parse`] line by line, for whatever [`parse_exact`] does not take. Public for the fuzz
/// targets (`fuzz/logic`), which check that both readers agree.
pub fn parse_lines(text: &str) -> Result<Psi, PsiError> {
    // A PSI file is one read; a cut line means the copy is damaged, not that the kernel
    // added something.
    let lines = nodemedic_kernel::whole_lines(text).map_err(|line| PsiError::BadLine {
        line,
        reason: nodemedic_kernel::SkipReason::CutShort.to_string(),
    })?;
    let mut psi = Psi::default();
    for (n, line) in lines {
        parse_line(&mut psi, n, line, percent_or_float)?;
    }
    if psi.some.is_none() && psi.full.is_none() {
        return Err(PsiError::Empty);
    }
    Ok(psi)
}

/// One `some` or `full` line (line number `n`) into `psi`; `float` reads the averages.
fn parse_line(
    psi: &mut Psi,
    n: usize,
    line: &str,
    float: fn(&str) -> Option<f64>,
) -> Result<(), PsiError> {
    let bad = |reason: String| PsiError::BadLine { line: n, reason };
    let mut words = line.split_whitespace();
    let kind = words.next().unwrap_or("");
    let slot = match kind {
        "some" => &mut psi.some,
        "full" => &mut psi.full,
        other => return Err(bad(format!("unknown kind {other:?}"))),
    };
    if slot.is_some() {
        return Err(bad(format!("second {kind} line")));
    }
    let mut fields = (None, None, None, None);
    for word in words {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| bad(format!("{word:?} is not key=value")))?;
        let percentage = || {
            float(value)
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(format!("{key}={value:?} is not a percentage")))
        };
        match key {
            "avg10" => fields.0 = Some(percentage()?),
            "avg60" => fields.1 = Some(percentage()?),
            "avg300" => fields.2 = Some(percentage()?),
            "total" => {
                // Plain digits, as the kernel prints them (`%llu`): `str::parse` would
                // also take a sign (`+5`), which no kernel writes.
                fields.3 = Some(
                    count(value.as_bytes())
                        .ok_or_else(|| bad(format!("total={value:?} is not a count")))?,
                )
            }
            // Tolerated: a future field beside the four we know.
            _ => {}
        }
    }
    let (Some(avg10), Some(avg60), Some(avg300), Some(total_us)) = fields else {
        return Err(bad("missing one of avg10, avg60, avg300, total".into()));
    };
    *slot = Some(PsiLine {
        avg10,
        avg60,
        avg300,
        total_us,
    });
    Ok(())
}

/// The kernel's own layout, byte by byte: every line is `some|full avg10=%lu.%02lu
/// avg60=%lu.%02lu avg300=%lu.%02lu total=%llu` and a newline, each kind at most once.
/// `None` for anything else, which [`parse`] then reads (or rejects) line by line. Whatever
/// this accepts, the line parser reads to the same values (see the tests); it is three
/// times cheaper, and 500 pods make 1,500 of these files per reading. Public for the fuzz
/// targets (`fuzz/logic`), which check that claim.
pub fn parse_exact(text: &[u8]) -> Option<Psi> {
    let mut psi = Psi::default();
    let mut rest = text;
    while !rest.is_empty() {
        let slot = match rest.get(..5)? {
            b"some " => &mut psi.some,
            b"full " => &mut psi.full,
            _ => return None,
        };
        if slot.is_some() {
            return None;
        }
        rest = &rest[5..];
        let mut avg = [0.0; 3];
        for (a, key) in avg
            .iter_mut()
            .zip([&b"avg10="[..], b" avg60=", b" avg300="])
        {
            rest = rest.strip_prefix(key)?;
            let end = rest.iter().position(|&b| b == b' ')?;
            *a = percent(&rest[..end])?;
            rest = &rest[end..];
        }
        rest = rest.strip_prefix(b" total=")?;
        let end = rest.iter().position(|&b| b == b'\n')?;
        let total_us = count(&rest[..end])?;
        rest = &rest[end + 1..];
        *slot = Some(PsiLine {
            avg10: avg[0],
            avg60: avg[1],
            avg300: avg[2],
            total_us,
        });
    }
    (psi.some.is_some() || psi.full.is_some()).then_some(psi)
}

/// Plain decimal digits that fit a `u64`; `None` for anything else.
fn count(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

fn percent_or_float(value: &str) -> Option<f64> {
    percent(value.as_bytes()).or_else(|| value.parse::<f64>().ok())
}

/// The kernel's `%lu.%02lu`: up to 9 integer digits, a dot, exactly two decimals. `None`
/// for anything else (the caller then uses the general parser). The hundredths as an
/// integer divided by 100 is one correctly rounded division, so the result has the same
/// bits as `str::parse::<f64>`.
fn percent(value: &[u8]) -> Option<f64> {
    let dot = value.iter().position(|&b| b == b'.')?;
    let (int, frac) = (&value[..dot], &value[dot + 1..]);
    if int.is_empty() || int.len() > 9 || frac.len() != 2 {
        return None;
    }
    let mut hundredths: u64 = 0;
    for &b in int.iter().chain(frac) {
        if !b.is_ascii_digit() {
            return None;
        }
        hundredths = hundredths * 10 + u64::from(b - b'0');
    }
    Some(hundredths as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use nodemedic_kernel::body;

    use super::*;

    #[test]
    fn every_resource_reads_back_from_its_name_and_sorts_by_it() {
        for r in PsiResource::ALL {
            assert_eq!(PsiResource::from_name(r.as_str()), Some(r), "{r}");
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!(PsiResource::from_name("cpu.pressure"), None);
        let mut sorted = PsiResource::ALL;
        sorted.sort();
        assert_eq!(
            sorted.map(PsiResource::as_str),
            ["cpu", "io", "irq", "memory"]
        );
    }

    /// The parser as it was before it stopped allocating: lines split by the crate's `body`,
    /// averages read by `str::parse`. The reference for `matches_the_model`.
    fn model(text: &str) -> Result<Psi, PsiError> {
        let b = body(text);
        if let Some(s) = b.skipped.first() {
            return Err(PsiError::BadLine {
                line: s.line,
                reason: s.reason.to_string(),
            });
        }
        let mut psi = Psi::default();
        for (n, line) in b.lines {
            parse_line(&mut psi, n, line, |v| v.parse::<f64>().ok())?;
        }
        if psi.some.is_none() && psi.full.is_none() {
            return Err(PsiError::Empty);
        }
        Ok(psi)
    }

    /// The parser gives the same result (values to the bit, and errors) as the reference,
    /// on valid files and on files damaged in every way a generator can think of.
    #[test]
    fn matches_the_model() {
        let mut rng = nodemedic_testkit::XorShift64::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| rng.below(n);
        let pieces = [
            "some",
            "full",
            "avg10=",
            "avg60=",
            "avg300=",
            "total=",
            " ",
            "  ",
            "\n",
            "=",
            ".",
            "0",
            "1",
            "9",
            "00",
            "99",
            "100.00",
            "12.34",
            "0.06",
            "1e3",
            "-1.00",
            "inf",
            "NaN",
            "1.5",
            "01.00",
            ".50",
            "5.",
            "18446744073709551616",
            "x",
            "\t",
            "\r",
        ];
        for _ in 0..40_000 {
            let mut text = String::new();
            if next(3) == 0 {
                // Well-formed, with random values; now and then a kind twice or out of order.
                let kinds: &[&str] = match next(8) {
                    0 => &["some", "full", "some"],
                    1 => &["full", "some"],
                    2 => &["full", "full"],
                    _ => &["some", "full"],
                };
                for kind in kinds {
                    if next(4) == 0 {
                        continue;
                    }
                    let v = |next: &mut dyn FnMut(u64) -> u64| {
                        format!("{}.{:02}", next(100_000), next(100))
                    };
                    text.push_str(&format!(
                        "{kind} avg10={} avg60={} avg300={} total={}\n",
                        v(&mut next),
                        v(&mut next),
                        v(&mut next),
                        next(u64::MAX)
                    ));
                }
                // Half of them one edit away from the kernel's layout, where the exact
                // reader hands over to the line parser.
                if next(2) == 0 && !text.is_empty() {
                    let at = next(text.len() as u64) as usize;
                    if next(2) == 0 {
                        text.remove(at);
                    } else {
                        text.insert_str(at, pieces[next(pieces.len() as u64) as usize]);
                    }
                }
            } else {
                for _ in 0..next(24) {
                    text.push_str(pieces[next(pieces.len() as u64) as usize]);
                }
            }
            let (got, want) = (parse(&text), model(&text));
            match (&got, &want) {
                (Ok(g), Ok(w)) => {
                    for (a, b) in [(g.some, w.some), (g.full, w.full)] {
                        let bits = |l: Option<PsiLine>| {
                            l.map(|l| {
                                (
                                    l.avg10.to_bits(),
                                    l.avg60.to_bits(),
                                    l.avg300.to_bits(),
                                    l.total_us,
                                )
                            })
                        };
                        assert_eq!(bits(a), bits(b), "{text:?}");
                    }
                }
                _ => assert_eq!(got, want, "{text:?}"),
            }
        }
    }

    #[test]
    fn percent_has_the_bits_of_the_float_parser() {
        for h in (0..2_000_000u64)
            .step_by(7)
            .chain([99_999_999_999, 12_345_678_901])
        {
            let text = format!("{}.{:02}", h / 100, h % 100);
            assert_eq!(
                percent(text.as_bytes()).map(f64::to_bits),
                Some(text.parse::<f64>().unwrap().to_bits()),
                "{text}"
            );
        }
        for not in [
            "1",
            "1.0",
            "1.000",
            ".10",
            "a.10",
            "1.a0",
            "1234567890.00",
            "+1.00",
        ] {
            assert_eq!(percent(not.as_bytes()), None, "{not}");
        }
    }

    #[test]
    fn some_and_full() {
        let p = parse(
            "some avg10=0.06 avg60=0.02 avg300=0.00 total=5038883\n\
             full avg10=1.50 avg60=0.25 avg300=0.10 total=12\n",
        )
        .unwrap();
        let some = p.some.unwrap();
        assert_eq!((some.avg10, some.total_us), (0.06, 5_038_883));
        assert_eq!(p.full.unwrap().avg10, 1.5);
        assert!((some.total_seconds() - 5.038883).abs() < 1e-9);
    }

    #[test]
    fn irq_has_only_full_and_old_cpu_only_some() {
        let irq = parse("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert!(irq.some.is_none() && irq.full.is_some());
        let cpu = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n").unwrap();
        assert!(cpu.full.is_none());
    }

    #[test]
    fn damage_is_an_error_with_the_line() {
        for (text, want) in [
            ("", "no some/full"),
            (
                "some avg10=0.06 avg60=0.02 avg300=0.00 total=50",
                "cut short",
            ),
            ("some avg10=x avg60=0 avg300=0 total=1\n", "line 1"),
            ("some avg10=0 avg60=0 avg300=0 total=-1\n", "total"),
            ("some avg10=0 avg60=0 avg300=0 total=+1\n", "total"),
            ("some avg10=0 avg60=0 total=1\n", "missing"),
            ("partial avg10=0 avg60=0 avg300=0 total=1\n", "unknown kind"),
            (
                "some avg10=0 avg60=0 avg300=0 total=1\nsome avg10=0 avg60=0 avg300=0 total=1\n",
                "second some",
            ),
            ("some avg10=NaN avg60=0 avg300=0 total=1\n", "percentage"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
