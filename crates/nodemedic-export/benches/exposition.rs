//! Exposition and collection cost on a real 256-CPU snapshot (`cargo bench -p nodemedic-export`).
//!
//! 1. `CollectorSet::all().sample` on `tests/fixtures/<fixture>` (default `256cpu-collapsed`):
//!    what the daemon's background sampler pays every `sample_interval`, split by collector.
//! 2. `CollapseDetector::observe` on those snapshots (also paid per sample).
//! 3. `nodemedic_export::render` of the last snapshot and its verdicts: what a scrape pays.
//! 4. The same series built and encoded with the `prometheus` crate (0.14, text encoder), in
//!    the same process and run: our text output is parsed back into (family, labels, value)
//!    and fed to
//!    - `proto build + encode`: `prometheus::proto::MetricFamily`s built directly (what a
//!      custom `Collector` would do on every scrape) + `TextEncoder::encode_utf8`;
//!    - `encode only`: `TextEncoder::encode_utf8` of those families, prebuilt;
//!    - `registry update + gather + encode`: a `Registry` of `GaugeVec`/`CounterVec`
//!      registered once; per scrape every series is set (`with_label_values().set()`,
//!      counters `reset()` + `inc_by()`), then `gather()` + encode;
//!    - `registry gather + encode`: the same registry, values unchanged;
//!    - `registry rebuild + set + gather + encode`: a fresh `Registry` per scrape (no stale
//!      series after an IRQ vanishes, as nodemedic's rebuild-from-snapshot gives).
//!
//! All of it is done twice: default metrics options, and `per_irq_per_cpu = true` (the opt-in
//! IRQ × CPU matrix, the cardinality node_exporter's interrupts collector exposes).
//!
//! Environment: `NODEMEDIC_BENCH_ITERS` (default 200), `NODEMEDIC_BENCH_FIXTURE`
//! (default `256cpu-collapsed`). Output: Markdown tables on stdout. No criterion: plain
//! `Instant`, median / p90 / min over the iterations after one warm-up run.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::sources::irq_affinity::IrqAffinities;
use nodemedic_collect::{CollectorSet, CollectorStatus, Paths};
use nodemedic_detect::{CollapseConfig, CollapseDetector, GroupVerdict, HurtingConfig};
use nodemedic_export::{render, ExportInput, Format, MetricsOptions, ProcessStats};
use nodemedic_sample::Snapshot;
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{CounterVec, GaugeVec, Opts, Registry, TextEncoder};

fn main() {
    let iters: usize = std::env::var("NODEMEDIC_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(200);
    let fixture =
        std::env::var("NODEMEDIC_BENCH_FIXTURE").unwrap_or_else(|_| "256cpu-collapsed".into());
    let root = nodemedic_testkit::fixtures_dir().join(&fixture);
    let root = root.canonicalize().unwrap_or_else(|e| {
        eprintln!("fixture {}: {e}", root.display());
        std::process::exit(2)
    });
    let paths = Paths {
        procfs: root.join("proc"),
        sysfs: root.join("sys"),
        cgroupfs: root.join("sys/fs/cgroup"),
        rootfs: root.clone(),
    };
    println!(
        "# exposition bench: fixture `{fixture}`, {iters} iterations per row (after 1 warm-up)\n"
    );

    // ---- 1+2: collect and detect ----
    let mut set = CollectorSet::all();
    let mut detector = CollapseDetector::new(CollapseConfig::default(), HurtingConfig::default());
    let (snap0, _) = set.sample(&paths, Duration::ZERO); // warm-up (page cache, allocator)
    let _ = detector.observe(&snap0);
    let mut collect = Vec::with_capacity(iters);
    let mut detect = Vec::with_capacity(iters);
    let mut per_collector: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    let mut last: Option<(Snapshot, Vec<CollectorStatus>, Vec<GroupVerdict>)> = None;
    for i in 0..iters {
        // Snapshots 200 ms apart, as the daemon's sampler with sample_interval = 200ms.
        let at = Duration::from_millis(200 * (i as u64 + 1));
        let t = Instant::now();
        let (snap, runs) = set.sample(&paths, at);
        collect.push(t.elapsed());
        for r in &runs {
            per_collector
                .entry(r.name.as_str())
                .or_default()
                .push(r.duration);
        }
        let t = Instant::now();
        let verdicts = detector.observe(&snap);
        detect.push(t.elapsed());
        let statuses: Vec<CollectorStatus> = runs.iter().map(|r| r.status()).collect();
        last = Some((snap, statuses, verdicts));
    }
    let Some((snap, statuses, verdicts)) = last else {
        return;
    };
    for s in &statuses {
        if !s.is_success() {
            eprintln!("WARNING: collector {} failed: {:?}", s.name, s.state);
        }
    }
    println!("## collect + detect (per sample; the daemon pays this every sample_interval)\n");
    header();
    row(
        "CollectorSet::all().sample (all collectors)",
        &mut collect,
        None,
        None,
    );
    for (name, d) in per_collector.iter_mut() {
        row(&format!("  collector `{name}`"), d, None, None);
    }
    row("CollapseDetector::observe", &mut detect, None, None);
    println!(
        "\nSnapshot: {} CPUs in /proc/interrupts, {} numbered IRQs, {} affinity entries; {} groups, {} collapsed.\n",
        snap.get::<Interrupts>().map(|i| i.cpus.len()).unwrap_or(0),
        snap.get::<Interrupts>().map(|i| i.irqs.len()).unwrap_or(0),
        snap.get::<IrqAffinities>().map_or(0, |a| a.len()),
        verdicts.len(),
        verdicts.iter().filter(|v| v.collapsed).count(),
    );

    // ---- 3+4: exposition ----
    let input = ExportInput {
        snapshot: Some(&snap),
        verdicts: &verdicts,
        collectors: &statuses,
        samples_total: iters as u64 + 1,
        process: Some(ProcessStats {
            cpu_seconds: 12.34,
            resident_memory_bytes: 9_437_184.0,
            virtual_memory_bytes: 123_456_789.0,
            start_time_seconds: 1_735_689_600.0,
            open_fds: 11.0,
        }),
        remediation: None,
        pressure: None,
        host: None,
    };
    let default_opts = MetricsOptions::default();
    let matrix_opts = MetricsOptions {
        per_irq_per_cpu: true,
        ..MetricsOptions::default()
    };
    exposition("default metrics options", &input, &default_opts, iters);
    // The matrix is ~50x the series; fewer iterations keep the run short.
    exposition(
        "per_irq_per_cpu = true (IRQ x CPU matrix)",
        &input,
        &matrix_opts,
        (iters / 10).max(5),
    );
}

fn exposition(title: &str, input: &ExportInput<'_>, opts: &MetricsOptions, iters: usize) {
    let (text, series) = render(input, opts, Format::Text);
    let families = parse_text(&text);
    let parsed: usize = families.iter().map(|f| f.samples.len()).sum();
    assert_eq!(parsed, series, "parsed series != rendered series");

    println!(
        "## exposition, {title}: {series} series, {} families, {} bytes\n",
        families.len(),
        text.len()
    );
    header();

    let mut t = time(iters, || render(input, opts, Format::Text).0.len());
    row(
        "nodemedic_export::render (Text)",
        &mut t,
        Some(series),
        Some(text.len()),
    );
    let mut t = time(iters, || render(input, opts, Format::OpenMetrics).0.len());
    row(
        "nodemedic_export::render (OpenMetrics)",
        &mut t,
        Some(series),
        None,
    );

    let enc = TextEncoder::new();
    let built = build_protos(&families);
    let mut out = String::new();
    if let Err(e) = enc.encode_utf8(&built, &mut out) {
        eprintln!("prometheus encode failed: {e}");
        return;
    }
    let prom_series = out
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();

    let mut t = time(iters, || {
        let mfs = build_protos(&families);
        let mut s = String::with_capacity(out.len());
        let _ = enc.encode_utf8(&mfs, &mut s);
        s.len()
    });
    row(
        "prometheus: proto build + encode",
        &mut t,
        Some(prom_series),
        Some(out.len()),
    );
    let mut t = time(iters, || {
        let mut s = String::with_capacity(out.len());
        let _ = enc.encode_utf8(&built, &mut s);
        s.len()
    });
    row(
        "prometheus: encode only (prebuilt protos)",
        &mut t,
        Some(prom_series),
        None,
    );

    let Some(reg) = Registered::new(&families) else {
        return;
    };
    reg.update(&families);
    let gathered = reg.registry.gather();
    let reg_series: usize = gathered.iter().map(|f| f.get_metric().len()).sum();
    let mut t = time(iters, || {
        reg.update(&families);
        let mfs = reg.registry.gather();
        let mut s = String::with_capacity(out.len());
        let _ = enc.encode_utf8(&mfs, &mut s);
        s.len()
    });
    row(
        "prometheus: registry update + gather + encode",
        &mut t,
        Some(reg_series),
        None,
    );
    let mut t = time(iters, || {
        let mfs = reg.registry.gather();
        let mut s = String::with_capacity(out.len());
        let _ = enc.encode_utf8(&mfs, &mut s);
        s.len()
    });
    row(
        "prometheus: registry gather + encode",
        &mut t,
        Some(reg_series),
        None,
    );
    let mut t = time(iters, || {
        let Some(r) = Registered::new(&families) else {
            return 0;
        };
        r.update(&families);
        let mfs = r.registry.gather();
        let mut s = String::with_capacity(out.len());
        let _ = enc.encode_utf8(&mfs, &mut s);
        s.len()
    });
    row(
        "prometheus: registry rebuild + set + gather + encode",
        &mut t,
        Some(reg_series),
        None,
    );
    if reg_series != series {
        // prometheus 0.14 MetricVec keys its children by an FNV hash of the label values
        // written back to back with no separator (vec.rs `hash_label_values`), so
        // {irq="1",cpu="23"} and {irq="12",cpu="3"} are the same child: series merge silently.
        println!(
            "\nNOTE: the registry holds {reg_series} series, not {series}: prometheus' MetricVec \
             merged {} label sets whose values concatenate to the same string.",
            series.saturating_sub(reg_series)
        );
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// timing helpers

fn time(iters: usize, mut f: impl FnMut() -> usize) -> Vec<Duration> {
    black_box(f());
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed()
        })
        .collect()
}

fn header() {
    println!("| what | iters | series | bytes | median | p90 | min |");
    println!("|---|---|---|---|---|---|---|");
}

fn row(what: &str, d: &mut [Duration], series: Option<usize>, bytes: Option<usize>) {
    if d.is_empty() {
        return;
    }
    d.sort();
    let pick = |q: f64| d[((q * d.len() as f64).ceil() as usize).clamp(1, d.len()) - 1];
    let opt = |o: Option<usize>| o.map(|n| n.to_string()).unwrap_or_default();
    println!(
        "| {what} | {} | {} | {} | {} | {} | {} |",
        d.len(),
        opt(series),
        opt(bytes),
        fmt(pick(0.5)),
        fmt(pick(0.9)),
        fmt(d[0]),
    );
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

// ---------------------------------------------------------------------------------------------
// parsing our own text output back into families

struct Family {
    name: String,
    help: String,
    counter: bool,
    label_names: Vec<String>,
    samples: Vec<(Vec<String>, f64)>,
}

fn unescape_help(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses `name{a="x",b="y"} value` (label values may hold `\\`, `\"`, `\n`, `,`, `}`).
/// A parsed sample line: metric name, (label, value) pairs, value.
type ParsedSample = (String, Vec<(String, String)>, f64);

fn parse_sample(line: &str) -> Option<ParsedSample> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let mut labels = Vec::new();
    let mut rest = rest;
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices();
        let mut key = String::new();
        let end;
        loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => {
                    end = i + 1;
                    break;
                }
                ',' => {}
                '=' => {
                    let (_, q) = chars.next()?;
                    if q != '"' {
                        return None;
                    }
                    let mut val = String::new();
                    loop {
                        let (_, c) = chars.next()?;
                        match c {
                            '"' => break,
                            '\\' => match chars.next()?.1 {
                                'n' => val.push('\n'),
                                o => val.push(o),
                            },
                            o => val.push(o),
                        }
                    }
                    labels.push((std::mem::take(&mut key), val));
                }
                o => key.push(o),
            }
        }
        rest = &r[end..];
    }
    let v = rest.trim();
    let value = match v {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => v.parse().ok()?,
    };
    Some((name.to_string(), labels, value))
}

fn parse_text(text: &str) -> Vec<Family> {
    let mut fams: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(r) = line.strip_prefix("# HELP ") {
            let (name, help) = r.split_once(' ').unwrap_or((r, ""));
            fams.push(Family {
                name: name.to_string(),
                help: unescape_help(help),
                counter: false,
                label_names: Vec::new(),
                samples: Vec::new(),
            });
        } else if let Some(r) = line.strip_prefix("# TYPE ") {
            if let (Some(f), Some((_, ty))) = (fams.last_mut(), r.split_once(' ')) {
                f.counter = ty == "counter";
            }
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else if let (Some(f), Some((name, labels, value))) = (fams.last_mut(), parse_sample(line))
        {
            debug_assert_eq!(name, f.name);
            if f.samples.is_empty() {
                f.label_names = labels.iter().map(|(k, _)| k.clone()).collect();
            }
            f.samples
                .push((labels.into_iter().map(|(_, v)| v).collect(), value));
        }
    }
    fams
}

// ---------------------------------------------------------------------------------------------
// the same series through the prometheus crate

fn build_protos(families: &[Family]) -> Vec<MetricFamily> {
    families
        .iter()
        .map(|f| {
            let mut mf = MetricFamily::default();
            mf.set_name(f.name.clone());
            mf.set_help(f.help.clone());
            mf.set_field_type(if f.counter {
                MetricType::COUNTER
            } else {
                MetricType::GAUGE
            });
            let metrics = f
                .samples
                .iter()
                .map(|(values, v)| {
                    let labels = f
                        .label_names
                        .iter()
                        .zip(values)
                        .map(|(k, val)| {
                            let mut lp = proto::LabelPair::default();
                            lp.set_name(k.clone());
                            lp.set_value(val.clone());
                            lp
                        })
                        .collect();
                    let mut m = proto::Metric::from_label(labels);
                    if f.counter {
                        let mut c = proto::Counter::default();
                        c.set_value(*v);
                        m.set_counter(c);
                    } else {
                        let mut g = proto::Gauge::default();
                        g.set_value(*v);
                        m.set_gauge(g);
                    }
                    m
                })
                .collect();
            mf.set_metric(metrics);
            mf
        })
        .collect()
}

enum Vec_ {
    Gauge(GaugeVec),
    Counter(CounterVec),
}

struct Registered {
    registry: Registry,
    vecs: Vec<Vec_>,
}

impl Registered {
    fn new(families: &[Family]) -> Option<Self> {
        let registry = Registry::new();
        let mut vecs = Vec::with_capacity(families.len());
        for f in families {
            let opts = Opts::new(f.name.clone(), f.help.clone());
            let names: Vec<&str> = f.label_names.iter().map(String::as_str).collect();
            let v = if f.counter {
                let c = CounterVec::new(opts, &names).ok()?;
                registry.register(Box::new(c.clone())).ok()?;
                Vec_::Counter(c)
            } else {
                let g = GaugeVec::new(opts, &names).ok()?;
                registry.register(Box::new(g.clone())).ok()?;
                Vec_::Gauge(g)
            };
            vecs.push(v);
        }
        Some(Self { registry, vecs })
    }

    fn update(&self, families: &[Family]) {
        for (f, v) in families.iter().zip(&self.vecs) {
            for (values, x) in &f.samples {
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                match v {
                    Vec_::Gauge(g) => g.with_label_values(&values).set(*x),
                    Vec_::Counter(c) => {
                        let c = c.with_label_values(&values);
                        c.reset();
                        c.inc_by(*x);
                    }
                }
            }
        }
    }
}
