//! The `nodemedic` binary: command line, configuration, and the `run` and `check` commands.

mod check;
mod cli;
mod collectors;
mod config;
mod daemon;
mod probes;
mod systemd;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};
use crate::config::Config;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // --help and --version are not errors.
            return if e.use_stderr() {
                ExitCode::from(check::EXIT_COULD_NOT_RUN)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if matches!(cli.command, Command::LoadProbes) {
        // The probes' loader, started by `run` or `check`: no configuration of its own, the
        // options come over its socket. Its log lines go to the daemon's stderr.
        init_logging(cli.global.verbose, None);
        return match probes::serve_loader() {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("nodemedic: {e:#}");
                ExitCode::from(check::EXIT_COULD_NOT_RUN)
            }
        };
    }
    // check reports every failed collector, with its reason, in its output: the engine's log
    // line about it would say it a second time. The probes' loader's line about its own memory
    // is for the daemon's log.
    init_logging(
        cli.global.verbose,
        matches!(cli.command, Command::Check(_))
            .then_some("nodemedic_engine=error,nodemedic_probe::loader=warn"),
    );
    let mut config = match Config::load(cli.global.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nodemedic: {e:#}");
            return ExitCode::from(check::EXIT_COULD_NOT_RUN);
        }
    };
    config.apply_cli(&cli.global);
    let result = match &cli.command {
        Command::Run(args) => {
            if let Some(i) = args.sample_interval {
                config.sample_interval = i;
            }
            config
                .validate()
                .and_then(|_| {
                    daemon::run(
                        config,
                        daemon::Faults {
                            hang_sampler_after: args.hang_sampler_after,
                            panic_task: args.panic_task.clone(),
                        },
                        nodemedic_webkit::FileLimit::raise(),
                    )
                })
                .map(|_| 0)
        }
        Command::Check(args) => config
            .validate()
            .and_then(|_| check::run(&config, args, nodemedic_webkit::FileLimit::raise())),
        Command::Man => {
            // The page names the release only: the revision, compiler and target of
            // `--version` would make each architecture's package carry another page.
            let command = <Cli as clap::CommandFactory>::command()
                .version(nodemedic_export::build_info::BUILD_INFO.version);
            let man = clap_mangen::Man::new(command);
            let mut out = Vec::new();
            match man.render(&mut out) {
                Ok(()) => {
                    use std::io::Write;
                    let _ = std::io::stdout().write_all(&out);
                    Ok(0)
                }
                Err(e) => Err(e.into()),
            }
        }
        Command::LoadProbes => Ok(0),
        Command::Config => config.validate().and_then(|_| {
            for note in config.adjusted() {
                eprintln!("nodemedic: note: {note}");
            }
            print!("{}", toml::to_string_pretty(&config)?);
            Ok(0)
        }),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("nodemedic: {e:#}");
            ExitCode::from(check::EXIT_COULD_NOT_RUN)
        }
    }
}

fn init_logging(verbose: u8, quieter: Option<&str>) {
    // kube's client logs every failed request at ERROR, and nodemedic logs the same failure
    // with its back-off: one line, not two, per attempt during an API outage.
    let default = match verbose {
        0 => "info,kube_client::client::builder=off",
        1 => "debug",
        _ => "trace",
    };
    let default = match quieter {
        Some(q) if verbose == 0 => format!("{default},{q}"),
        _ => default.to_string(),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only on a terminal: under systemd the journal would store escape codes.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}
