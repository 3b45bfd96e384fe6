//! What gzip costs per scrape (the endpoint compresses `/metrics` when the client asks, as
//! Prometheus does), on this node's real files and on the 256-CPU fixture (default cardinality
//! and the IRQ × CPU matrix): render time, sizes, and gzip time three ways: the endpoint's
//! compressor ([`Gzip`], level 1, kept between scrapes) and a new encoder per scrape at flate2's
//! fast and default levels. `cargo bench -p nodemedic-export --bench gzip`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::time::{Duration, Instant};

use nodemedic_collect::{CollectorSet, Paths};
use nodemedic_detect::{CollapseConfig, CollapseDetector, HurtingConfig};
use nodemedic_export::endpoint::Gzip;
use nodemedic_export::{render, ExportInput, Format, MetricsOptions};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    println!("| tree | cardinality | series | text bytes | render ms | gzip | gzip bytes | ratio | gzip ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let fixture = nodemedic_testkit::fixture("256cpu-collapsed");
    for (tree, paths) in [
        ("this node", Paths::default()),
        ("256 CPUs", Paths::under(&fixture)),
    ] {
        table(tree, &paths);
    }
}

fn table(tree: &str, paths: &Paths) {
    let mut set = CollectorSet::all();
    let mut detector = CollapseDetector::new(CollapseConfig::default(), HurtingConfig::default());
    let mut snap = None;
    let mut verdicts = Vec::new();
    for i in 0..5u64 {
        let (s, _) = set.sample(paths, Duration::from_millis(200 * i));
        verdicts = detector.observe(&s);
        snap = Some(s);
    }
    let snap = snap.expect("a snapshot");
    for (name, opts, rounds) in [
        ("default", MetricsOptions::default(), 400),
        (
            "IRQ × CPU matrix",
            MetricsOptions {
                per_irq_per_cpu: true,
                ..Default::default()
            },
            40,
        ),
    ] {
        let input = ExportInput {
            snapshot: Some(&snap),
            verdicts: &verdicts,
            collectors: &[],
            samples_total: 5,
            process: None,
            remediation: None,
            pressure: None,
            host: None,
        };
        let mut renders = Vec::new();
        let mut body = String::new();
        let mut series = 0;
        for _ in 0..rounds {
            let t = Instant::now();
            (body, series) = render(&input, &opts, Format::Text);
            renders.push(t.elapsed());
        }
        let render_ms = median(renders);
        let row = |how: &str, zlen: usize, times: Vec<Duration>| {
            println!(
                "| {tree} | {name} | {series} | {} | {render_ms:.3} | {how} | {zlen} | {:.1}× | {:.3} |",
                body.len(),
                body.len() as f64 / zlen as f64,
                median(times)
            );
        };
        let kept = Gzip::default();
        let mut out = Vec::new();
        let mut times = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            out = kept.compress_into(body.as_bytes(), out).expect("gzip");
            times.push(t.elapsed());
        }
        row("the endpoint's (level 1, kept)", out.len(), times);
        for (level_name, level) in [
            ("level 1, new per scrape", flate2::Compression::fast()),
            ("level 6, new per scrape", flate2::Compression::default()),
        ] {
            let mut times = Vec::new();
            let mut zlen = 0;
            for _ in 0..rounds {
                let t = Instant::now();
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), level);
                gz.write_all(body.as_bytes()).unwrap();
                zlen = gz.finish().unwrap().len();
                times.push(t.elapsed());
            }
            row(level_name, zlen, times);
        }
    }
}
