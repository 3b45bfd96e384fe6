//! "The parsers never panic", checked on the stable toolchain with std only.
//!
//! 1. Every file of the cargo-fuzz seed corpus (`fuzz/corpus/<target>/`, which also holds the
//!    regression inputs of past crashes) is replayed through the matching entry point of
//!    [`nodemedic_fuzz_logic`]. A target without a non-empty corpus directory fails the test,
//!    so it cannot pass vacuously.
//! 2. Each corpus file is cut at every byte offset (files under 4 KiB) or around every line
//!    end (larger files).
//! 3. A bounded, deterministic mutation loop (seeded xorshift; bit flips, byte and token
//!    inserts, deletes, duplications, splices between corpus files, truncations) runs every
//!    target on `ITERATIONS` inputs derived from its corpus.
//!
//! The real fuzzing runs under nightly with libFuzzer (`tests/fuzz.sh`); this is the floor that
//! `cargo test` always enforces. A failing input is written under `CARGO_TARGET_TMPDIR` and its
//! path printed, ready to be copied into the corpus as a regression seed.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use nodemedic_fuzz_logic::TARGETS;

/// Mutated inputs per target.
const ITERATIONS: usize = 20_000;
/// Corpus files below this size are truncated at every byte offset.
const EVERY_OFFSET_BELOW: usize = 4096;
/// Mutation bases larger than this are cut down to a window of whole lines (plus the header
/// line) first, so the loop stays fast in debug builds.
const MAX_BASE: usize = 8192;

type Target = fn(&[u8]);

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus")
}

/// The files of `fuzz/corpus/<name>/`, sorted by name. Panics if the directory is missing or
/// holds no file.
fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_root().join(name);
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "fuzz target {name:?} has no corpus directory {}: {e}",
            dir.display()
        )
    });
    let mut files: Vec<(String, Vec<u8>)> = entries
        .map(|e| e.expect("read corpus dir entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let data = fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), data)
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "corpus directory {} is empty",
        dir.display()
    );
    files
}

/// Runs `target` on `data`; on a panic, saves the input and fails with where it is.
fn run(name: &str, target: Target, data: &[u8], what: &dyn Fn() -> String) {
    if catch_unwind(AssertUnwindSafe(|| target(data))).is_err() {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-corpus-failures");
        let _ = fs::create_dir_all(&dir);
        let file = dir.join(format!("{name}-{:016x}", fnv1a(data)));
        let saved = match fs::write(&file, data) {
            Ok(()) => format!("saved to {}", file.display()),
            Err(e) => format!("could not save it: {e}"),
        };
        let preview = String::from_utf8_lossy(&data[..data.len().min(300)]).into_owned();
        panic!(
            "fuzz target {name:?} panicked on {} ({} bytes, {saved}); input starts {preview:?}",
            what(),
            data.len()
        );
    }
}

#[test]
fn every_target_has_a_corpus_and_replays_it() {
    let root = corpus_root();
    for (name, target) in TARGETS {
        let files = corpus(name);
        let mut replayed = 0;
        for (file, data) in &files {
            run(name, *target, data, &|| format!("corpus file {file}"));
            replayed += 1;
        }
        assert!(replayed > 0, "no corpus file replayed for {name}");
        eprintln!("{name}: replayed {replayed} corpus files");
    }
    // The reverse direction: a corpus directory whose target was renamed or removed would
    // otherwise be silently ignored.
    for entry in fs::read_dir(&root).expect("read fuzz/corpus") {
        let entry = entry.expect("read fuzz/corpus entry");
        let dir_name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            assert!(
                TARGETS.iter().any(|(n, _)| *n == dir_name),
                "fuzz/corpus/{dir_name} matches no nodemedic_fuzz_logic::TARGETS entry"
            );
        }
    }
}

#[test]
fn truncations_of_every_corpus_file() {
    std::thread::scope(|s| {
        for (name, target) in TARGETS {
            s.spawn(move || {
                for (file, data) in corpus(name) {
                    let cuts: Vec<usize> = if data.len() < EVERY_OFFSET_BELOW {
                        (0..=data.len()).collect()
                    } else {
                        // Around every line end: just before, at, and just after the newline.
                        let mut cuts: Vec<usize> = data
                            .iter()
                            .enumerate()
                            .filter(|(_, b)| **b == b'\n')
                            .flat_map(|(i, _)| [i.saturating_sub(1), i, i + 1])
                            .chain([0, 1, data.len()])
                            .filter(|&i| i <= data.len())
                            .collect();
                        cuts.dedup();
                        cuts
                    };
                    for cut in cuts {
                        run(name, *target, &data[..cut], &|| {
                            format!("{file} cut at byte {cut}")
                        });
                    }
                }
            });
        }
    });
}

#[test]
fn deterministic_mutations() {
    std::thread::scope(|s| {
        for (name, target) in TARGETS {
            s.spawn(move || mutate_target(name, *target));
        }
    });
}

fn mutate_target(name: &str, target: Target) {
    let started = std::time::Instant::now();
    let files = corpus(name);
    let mut rng = Rng::new(0x6e6f_6465_6d65_6469 ^ fnv1a(name.as_bytes()));
    for i in 0..ITERATIONS {
        let (file, base) = &files[rng.below(files.len())];
        let mut data = window(&mut rng, base);
        for _ in 0..1 + rng.below(4) {
            let (_, other) = &files[rng.below(files.len())];
            mutate(&mut rng, &mut data, other);
        }
        run(name, target, &data, &|| format!("mutation {i} of {file}"));
    }
    eprintln!("{name}: {ITERATIONS} mutations in {:?}", started.elapsed());
}

/// `base`, or for large files its first line plus a random run of whole lines, at most
/// `MAX_BASE` bytes (or the first line alone when it is longer than that).
fn window(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    if base.len() <= MAX_BASE {
        return base.to_vec();
    }
    let header_end = base
        .iter()
        .position(|b| *b == b'\n')
        .map_or(base.len(), |i| i + 1);
    let mut out = base[..header_end.min(MAX_BASE)].to_vec();
    let rest = &base[header_end..];
    if rest.is_empty() {
        return out;
    }
    let mut start = rng.below(rest.len());
    // Back up to the start of the line, most of the time.
    if rng.below(4) != 0 {
        start = rest[..start]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
    }
    let budget = MAX_BASE.saturating_sub(out.len()).max(256);
    let mut end = (start + budget).min(rest.len());
    if let Some(nl) = rest[start..end].iter().rposition(|b| *b == b'\n') {
        if rng.below(4) != 0 {
            end = start + nl + 1;
        }
    }
    out.extend_from_slice(&rest[start..end]);
    out
}

/// Tokens the parsers care about, including Unicode whitespace (which `str::trim` and
/// `split_whitespace` honour but ASCII-only scans do not) and numbers at type boundaries.
const TOKENS: &[&str] = &[
    "\n",
    "\r\n",
    " ",
    "\t",
    ":",
    ",",
    "-",
    "=",
    "#",
    "\"",
    "'",
    "@",
    ".",
    "\u{a0}",
    "\u{85}",
    "\u{2028}",
    "\u{3000}",
    "é",
    "\u{fffd}",
    "0",
    "1",
    "8191",
    "8192",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "ffffffff",
    "fffffffff",
    "00000000,",
    "+1",
    "-1",
    "CPU",
    "CPU0",
    "CPU8191",
    "CPU8192",
    "CPU4294967296",
    " CPU0 CPU1\n",
    "IPI0:",
    "ERR:",
    "NMI:",
    "  0:",
    "99999999999:",
    "-edge",
    "Level",
    "Edge",
    "PCI-MSI",
    "PCI-MSIX-0000:3b:00.0",
    "IR-PCI-MSI",
    " 1572864-edge",
    "0000:00:00.0",
    "@pci:",
    "mlx5_comp0@pci:0000:3b:00.0",
    "virtio",
    "virtio1-input.0",
    "nvme0q",
    "-TxRx-",
    "ice-ens1f0-TxRx-",
    "eth0-rx-",
    "NET_RX",
    "0-8191",
    "5-2",
    "export ",
    "IRQBALANCE_BANNED_CPULIST=",
    "IRQBALANCE_BANNED_CPUS=",
];

fn mutate(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    let len = data.len();
    match rng.below(10) {
        // Flip a bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Overwrite a byte with a random or an interesting one.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = match rng.below(3) {
                0 => rng.next() as u8,
                1 => b" \n:,-0123456789abcdefCPU"[rng.below(24)],
                _ => [0x00, 0x7f, 0x80, 0xc2, 0xe2, 0xff][rng.below(6)],
            };
        }
        // Insert a token.
        2 | 3 => {
            let tok = TOKENS[rng.below(TOKENS.len())].as_bytes();
            let at = rng.below(len + 1);
            data.splice(at..at, tok.iter().copied());
        }
        // Delete a range.
        4 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            data.drain(at..at + n);
        }
        // Duplicate a range in place.
        5 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(256));
            let chunk = data[at..at + n].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, chunk);
        }
        // Splice in a chunk of another corpus file (insert or overwrite).
        6 | 7 if !other.is_empty() => {
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(512));
            let chunk = &other[from..from + n];
            let at = rng.below(len + 1);
            let replace = if rng.below(2) == 0 {
                0
            } else {
                n.min(len - at)
            };
            data.splice(at..at + replace, chunk.iter().copied());
        }
        // Truncate.
        8 => {
            let at = rng.below(len + 1);
            data.truncate(at);
        }
        // Repeat a byte, to make long numbers, runs of spaces or separators.
        _ if len > 0 => {
            let at = rng.below(len);
            let byte = data[at];
            let n = 1 + rng.below(32);
            data.splice(at..at, vec![byte; n]);
        }
        _ => data.push(rng.next() as u8),
    }
}

/// xorshift64* — deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n`; `n` must be > 0.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
