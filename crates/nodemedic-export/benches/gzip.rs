//! What gzip costs per scrape (the endpoint compresses `/metrics` when the client asks, as
//! Prometheus does), at default cardinality and with the IRQ × CPU matrix, on the 256-CPU
//! fixture: render time, gzip time and sizes, at flate2's fast and default levels. `cargo bench -p nodemedic-export --bench gzip`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::time::{Duration, Instant};

use nodemedic_collect::{CollectorSet, Paths};
use nodemedic_detect::{CollapseConfig, CollapseDetector, HurtingConfig};
use nodemedic_export::{render, ExportInput, Format, MetricsOptions};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let root = nodemedic_testkit::fixture("256cpu-collapsed");
    let mut set = CollectorSet::all();
    let mut detector = CollapseDetector::new(CollapseConfig::default(), HurtingConfig::default());
    let mut snap = None;
    let mut verdicts = Vec::new();
    for i in 0..5u64 {
        let (s, _) = set.sample(&Paths::under(&root), Duration::from_millis(200 * i));
        verdicts = detector.observe(&s);
        snap = Some(s);
    }
    let snap = snap.expect("a snapshot");
    println!("| cardinality | series | text bytes | render ms | gzip level | gzip bytes | ratio | gzip ms |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, opts, rounds) in [
        ("default", MetricsOptions::default(), 200),
        (
            "IRQ × CPU matrix",
            MetricsOptions {
                per_irq_per_cpu: true,
                ..Default::default()
            },
            20,
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
        for (level_name, level) in [
            ("1 (fast, what nodemedic uses)", flate2::Compression::fast()),
            ("6 (default)", flate2::Compression::default()),
        ] {
            let mut gzips = Vec::new();
            let mut zlen = 0;
            for _ in 0..rounds {
                let t = Instant::now();
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), level);
                gz.write_all(body.as_bytes()).unwrap();
                zlen = gz.finish().unwrap().len();
                gzips.push(t.elapsed());
            }
            println!(
                "| {name} | {series} | {} | {render_ms:.2} | {level_name} | {zlen} | {:.1}× | {:.2} |",
                body.len(),
                body.len() as f64 / zlen as f64,
                median(gzips)
            );
        }
    }
}
