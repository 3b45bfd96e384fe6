//! Loads the probes and prints their counters once a second (manual checks on a real kernel).
//!   perf_probe_dump [auto|fentry|kprobe] [seconds]

use std::time::Duration;

use nodemedic_probe::{AttachMode, PerfProbes, ProbeOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let attach = match args.next().as_deref() {
        Some("fentry") => AttachMode::Fentry,
        Some("kprobe") => AttachMode::Kprobe,
        _ => AttachMode::Auto,
    };
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let opts = ProbeOptions {
        attach,
        bpf_stats: true,
        ..ProbeOptions::default()
    };
    let probes = match PerfProbes::load(&opts) {
        Ok(p) => p,
        Err(e) => {
            println!("probes down: {e}");
            std::process::exit(2);
        }
    };
    println!("attached: {:?}", probes.hooks());
    for _ in 0..secs {
        std::thread::sleep(Duration::from_secs(1));
        match probes.read() {
            Ok(r) => {
                println!("totals {:?}", r.totals());
                for o in &r.owners {
                    println!(
                        "  owner {} {:?} out={} wake={}",
                        o.tgid,
                        o.comm,
                        o.outputs(),
                        o.wakeups
                    );
                }
                println!("  programs {:?}", r.programs);
            }
            Err(e) => println!("read: {e}"),
        }
    }
}
