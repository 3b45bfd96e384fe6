//! A direct writer of the Prometheus text format (0.0.4) and OpenMetrics 1.0, a toolkit that
//! knows nothing of nodemedic: whatever renders a source's series uses it.
//!
//! Written by hand rather than through the `prometheus` crate: nodemedic rebuilds every series
//! from a fresh snapshot each time. Measured on the 256-CPU fixture (nodemedic-export's
//! `benches/exposition.rs`, BENCHMARKS.md), writing the text directly takes 0.5–0.9 ms for
//! ~3,500 series against 1–1.6 ms for the crate's metric objects plus encoder and 2–8 ms
//! through a registry; for the opt-in IRQ × CPU matrix (111k series) 5–9 ms against 44–509 ms.
//! The crate's vectors also key series by label values joined without a separator, which
//! merged distinct series (`{irq="1",cpu="23"}` and `{irq="12",cpu="3"}`) in that measurement.

use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`
    Text,
    /// `application/openmetrics-text; version=1.0.0`
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// Picks the format from an HTTP `Accept` header: OpenMetrics only when asked for.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// A constant-1 series whose labels carry information; its name ends in `_info`. A gauge
    /// in the text format, OpenMetrics' `info` type otherwise.
    Info,
    /// Samples `_bucket{le}`, `_sum` and `_count`, written with [`Encoder::sample_suffixed`].
    Histogram,
}

pub struct Encoder {
    format: Format,
    out: String,
    /// Name of the family being written, including `_total` for counters.
    sample_name: String,
    series: usize,
}

impl Encoder {
    pub fn new(format: Format) -> Self {
        Self::with_capacity(format, 64 * 1024)
    }

    /// An encoder whose output starts with room for `bytes`: the whole exposition, when the
    /// caller can tell its size, is one allocation rather than a doubling per 64 KiB.
    pub fn with_capacity(format: Format, bytes: usize) -> Self {
        Self::with_buffer(format, Vec::new(), bytes)
    }

    /// [`Encoder::with_capacity`] writing into `buf`, emptied first: the buffer of a past
    /// exposition, which has the room already.
    pub fn with_buffer(format: Format, mut buf: Vec<u8>, bytes: usize) -> Self {
        buf.clear();
        buf.reserve(bytes);
        // Empty, so valid UTF-8 whatever it held.
        let out = String::from_utf8(buf).unwrap_or_default();
        Self {
            format,
            out,
            // Longer than any family name: never grown.
            sample_name: String::with_capacity(128),
            series: 0,
        }
    }

    /// Starts a metric family. `name` is the family name without `_total` or `_info`; counters
    /// and info metrics get the suffix on their samples (and, in the text format, in
    /// HELP/TYPE as Prometheus expects). Written straight into the output: no `String` per
    /// family (BENCHMARKS.md, "Allocations per sample and per render").
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let (meta_suffix, kind_str) = match (kind, self.format) {
            (Kind::Counter, Format::Text) => ("_total", "counter"),
            (Kind::Counter, Format::OpenMetrics) => ("", "counter"),
            (Kind::Info, Format::Text) => ("_info", "gauge"),
            (Kind::Info, Format::OpenMetrics) => ("", "info"),
            (Kind::Gauge, _) => ("", "gauge"),
            (Kind::Histogram, _) => ("", "histogram"),
        };
        self.sample_name.clear();
        self.sample_name.push_str(name);
        self.sample_name.push_str(match kind {
            Kind::Counter => "_total",
            Kind::Info => "_info",
            Kind::Gauge | Kind::Histogram => "",
        });
        for (line, text) in [("# HELP ", help), ("# TYPE ", kind_str)] {
            self.out.push_str(line);
            self.out.push_str(name);
            self.out.push_str(meta_suffix);
            self.out.push(' ');
            escape_help_into(&mut self.out, text);
            self.out.push('\n');
        }
    }

    /// Writes one sample of the current family.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.sample_suffixed("", labels, value);
    }

    /// Writes one sample named the family's name plus `suffix` (`_bucket`, `_sum`, `_count`).
    pub fn sample_suffixed(&mut self, suffix: &str, labels: &[(&str, &str)], value: f64) {
        push_short(&mut self.out, &self.sample_name);
        // Most samples have no suffix; a copy of nothing is still a call into the C library.
        if !suffix.is_empty() {
            self.out.push_str(suffix);
        }
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                push_short(&mut self.out, k);
                self.out.push_str("=\"");
                escape_label_into(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        write_value(&mut self.out, value);
        self.out.push('\n');
        self.series += 1;
    }

    pub fn series(&self) -> usize {
        self.series
    }

    pub fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }
}

fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
        // Most values are counters: `itoa` writes them without the formatting machinery.
        push_short(out, itoa::Buffer::new().format(v as i64));
    } else {
        let _ = write!(out, "{v}");
    }
}

/// `out.push_str(s)` without a call to the C library's `memcpy` for the short strings an
/// exposition is made of (names, label names and values, numbers: most are 2-40 bytes, about
/// six per series). A string of 4 to 64 bytes is written as two copies of a fixed size that
/// overlap in the middle, which the compiler turns into plain loads and stores; shorter ones
/// byte by byte. musl's `memcpy` is a call that starts `rep movsq` for any copy of 8 bytes or
/// more, and was 5-9% of the shipped build's CPU per sample (BENCHMARKS.md).
#[inline]
fn push_short(out: &mut String, s: &str) {
    let n = s.len();
    let done = match n {
        0 => true,
        1..4 if s.is_ascii() => {
            for b in s.bytes() {
                out.push(char::from(b));
            }
            true
        }
        4..8 => push_overlapping::<4>(out, s),
        8..16 => push_overlapping::<8>(out, s),
        16..32 => push_overlapping::<16>(out, s),
        32..=64 => push_overlapping::<32>(out, s),
        _ => false,
    };
    if !done {
        out.push_str(s);
    }
}

/// `s` (at least `K` bytes) as its first `K` bytes, then its last `K` over the end of those:
/// two copies whose size the compiler knows. False, with nothing written, when either cut is
/// not at a character boundary.
#[inline]
fn push_overlapping<const K: usize>(out: &mut String, s: &str) -> bool {
    let n = s.len();
    let (Some(head), Some(tail)) = (s.get(..K), s.get(n - K..)) else {
        return false;
    };
    let at = out.len();
    out.push_str(head);
    out.truncate(at + n - K);
    out.push_str(tail);
    true
}

/// HELP text escaped as the text format wants it: `\\` and `\n`.
fn escape_help_into(out: &mut String, s: &str) {
    if !s.bytes().any(|b| matches!(b, b'\\' | b'\n')) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A label value escaped: `\\`, `"` and `\n`. Nearly every value needs none, and is then
/// copied whole rather than a character at a time.
fn escape_label_into(out: &mut String, v: &str) {
    if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        push_short(out, v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_are_appended_as_push_str_appends_them() {
        // Every length around the copy sizes, ASCII and with multi-byte characters at every
        // place (where a cut would fall inside a character), after any prefix.
        let mut cases: Vec<String> = Vec::new();
        for n in 0..100 {
            let ascii: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            cases.push(ascii.clone());
            for at in 0..n {
                for wide in ["é", "€"] {
                    let mut s = ascii.clone();
                    s.replace_range(at..at + 1, wide);
                    cases.push(s);
                }
            }
        }
        for prefix in ["", "x", "a_b{c=\""] {
            for s in &cases {
                let mut got = String::from(prefix);
                push_short(&mut got, s);
                assert_eq!(got, format!("{prefix}{s}"), "{s:?}");
            }
        }
    }

    #[test]
    fn text_format() {
        let mut e = Encoder::new(Format::Text);
        e.family("x_interrupts", Kind::Counter, "Interrupts.\nSecond line");
        e.sample(&[("cpu", "0"), ("name", "a\"b\\c\nd")], 12.0);
        e.family("x_share", Kind::Gauge, "Share.");
        e.sample(&[], 0.25);
        e.sample(&[], f64::NAN);
        assert_eq!(e.series(), 3);
        assert_eq!(
            e.finish(),
            "# HELP x_interrupts_total Interrupts.\\nSecond line\n# TYPE x_interrupts_total counter\n\
             x_interrupts_total{cpu=\"0\",name=\"a\\\"b\\\\c\\nd\"} 12\n\
             # HELP x_share Share.\n# TYPE x_share gauge\nx_share 0.25\nx_share NaN\n"
        );
    }

    #[test]
    fn openmetrics_format() {
        let mut e = Encoder::new(Format::OpenMetrics);
        e.family("x_interrupts", Kind::Counter, "Interrupts.");
        e.sample(&[], 1.0);
        e.family("x_build", Kind::Info, "Build.");
        e.sample(&[("version", "1")], 1.0);
        assert_eq!(
            e.finish(),
            "# HELP x_interrupts Interrupts.\n# TYPE x_interrupts counter\nx_interrupts_total 1\n\
             # HELP x_build Build.\n# TYPE x_build info\nx_build_info{version=\"1\"} 1\n# EOF\n"
        );
        let mut e = Encoder::new(Format::Text);
        e.family("x_build", Kind::Info, "Build.");
        assert_eq!(
            e.finish(),
            "# HELP x_build_info Build.\n# TYPE x_build_info gauge\n"
        );
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text; version=1.0.0,text/plain;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(Some("*/*")), Format::Text);
    }
}
