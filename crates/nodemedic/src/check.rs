//! `nodemedic check`: a one-shot diagnosis for an SRE at a terminal.

use nodemedic_engine::Engine;
use nodemedic_export::report::build_report;
use nodemedic_export::text::render_text;
use nodemedic_sample::{Sample, Severity};
use nodemedic_webkit::FileLimit;

use crate::cli::{CheckArgs, OutputFormat};
use crate::config::Config;

pub const EXIT_HEALTHY: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
pub const EXIT_COULD_NOT_RUN: u8 = 2;

/// Runs the check; returns the exit status. `files`: the process's file limit, raised once.
pub fn run(config: &Config, args: &CheckArgs, files: FileLimit) -> anyhow::Result<u8> {
    let mut engine_config = config.engine_config(&files);
    let c = &mut engine_config;
    // Two samples: collapsed means "in both", hurting is judged on the rate between them.
    (c.collapse.raise_after, c.collapse.clear_after) = (2, 1);
    (c.hurting.raise_after, c.hurting.clear_after) = (1, 1);
    (c.wakeup_storm.raise_after, c.wakeup_storm.clear_after) = (1, 1);
    // One interval: pressure verdicts are judged on the rates between the two samples, and so
    // is the tuning audit (a rising drop counter, concentrated NET_RX).
    (c.pressure.raise_after, c.pressure.clear_after) = (1, 1);
    (c.tuning.audit.raise_after, c.tuning.audit.clear_after) = (1, 1);
    // Both samples read the cgroups, however far apart they are.
    c.cgroups_interval = std::time::Duration::ZERO;
    engine_config.host = std::sync::Arc::new(config.host_access());
    let registry = crate::collectors::registry(config, crate::collectors::For::Check);
    let mut engine = Engine::with_registry(engine_config, registry);
    let first = engine.sample();
    if let Some(reason) = fatal(&first) {
        eprintln!("nodemedic check: cannot run: {reason}");
        return Ok(EXIT_COULD_NOT_RUN);
    }
    std::thread::sleep(args.interval);
    let second = engine.sample();
    if let Some(reason) = fatal(&second) {
        eprintln!("nodemedic check: cannot run: {reason}");
        return Ok(EXIT_COULD_NOT_RUN);
    }
    let mut report = build_report(&first, &second);
    report.pressure.top = args.top;
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        OutputFormat::Text => print!("{}", render_text(&report)),
    }
    Ok(
        if report
            .findings
            .iter()
            .any(|f| f.severity >= Severity::Warning)
        {
            EXIT_FINDINGS
        } else {
            EXIT_HEALTHY
        },
    )
}

/// Without `/proc/interrupts` there is nothing to diagnose.
fn fatal(sample: &Sample) -> Option<String> {
    sample
        .collectors
        .iter()
        .find(|c| c.name == nodemedic_collect::sources::interrupts::NAME && !c.is_success())
        .map(|c| match &c.state {
            nodemedic_collect::CollectorState::Failed { reason } => reason.clone(),
            other => format!("{other:?}"),
        })
}
