//! `lidarxdp run` and `lidarxdp check-config`: the flags, merged over the configuration file
//! (`crate::daemon::config`: one typed record per subsystem), validated into the plan before
//! anything is touched; the daemon itself is [`crate::daemon`].

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::daemon::config::{self, CpuList, Plan, Ros2Env, Settings};

/// `lidarxdp run` arguments: every setting is a flag and a key of the `--config` file's
/// section of the same subsystem (`crate::daemon::config`); flags given on the command line
/// win, field by field.
#[derive(clap::Args)]
pub struct RunArgs {
    /// TOML file with any of these settings in sections (`[capture]`, `[[sensors]]`,
    /// `[[queues]]`, `[process]`, `[tcp]`, `[ros2]`, `[zenoh]`, `[dds]`, `[foxglove]`,
    /// `[view]`, `[metrics]`, `[recording]`; docs/deploy.md); relative paths in it are
    /// relative to the file. Validate it with `check-config`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Pin the capture threads, one CPU each, in configuration order (e.g. `--cpus 2,3`).
    #[arg(long, value_name = "LIST")]
    cpus: Option<CpuList>,
    /// The settings.
    #[command(flatten)]
    settings: Settings,
}

/// The flags over the file (when given), validated into the plan.
fn plan(settings: Settings, file: Option<&std::path::Path>, cpus: Option<CpuList>) -> Result<Plan> {
    let merged = match file {
        Some(path) => settings.over(config::read_file(path)?),
        None => settings,
    };
    let plan = config::build(merged, cpus.map(|c| c.0), &Ros2Env::from_process());
    match file {
        Some(path) => plan.with_context(|| format!("config {}", path.display())),
        None => plan,
    }
}

/// The `--user` account, looked up (it must exist before anything is touched).
fn user(plan: &Plan) -> Result<Option<lidarxdp::privs::User>> {
    plan.process
        .user
        .as_deref()
        .map(|name| lidarxdp::privs::lookup_user(name).with_context(|| format!("--user {name}")))
        .transpose()
}

/// `lidarxdp check-config FILE`: validates the file as `lidarxdp run --config FILE` would
/// (ranges, names, filter keys, the `--user` account, every calibration file) and prints the
/// effective configuration, every section, as TOML. Touches no network interface.
///
/// Errors: the first invalid field (named as in the file, with its value and valid range), or
/// a calibration file that cannot be read or parsed.
pub fn check_config(path: PathBuf) -> Result<()> {
    let plan = plan(Settings::default(), Some(&path), None)?;
    let ctx = || format!("config {}", path.display());
    user(&plan).with_context(ctx)?;
    for s in plan.sensors() {
        crate::daemon::pipeline(s).with_context(ctx)?;
    }
    println!(
        "# Effective configuration of {} (every default filled in; a summary for reading, not \
         a loadable file).",
        path.display()
    );
    print!(
        "{}",
        toml::to_string_pretty(&plan).context("print the effective configuration")?
    );
    eprintln!(
        "check-config: {} OK: {} sensor(s) on {} capture thread(s), backend {}",
        path.display(),
        plan.sensors().count(),
        plan.queues.len(),
        plan.capture.backend.name()
    );
    Ok(())
}

/// `lidarxdp run`: merges the flags over the configuration file, validates them into a plan,
/// and runs the daemon ([`crate::daemon::run`]) until SIGTERM/SIGINT.
///
/// Errors: the first invalid flag or configuration field (named, with its valid range), then
/// those of [`crate::daemon::run`].
pub fn run(args: RunArgs) -> Result<()> {
    let plan = plan(args.settings, args.config.as_deref(), args.cpus)?;
    let user = user(&plan)?;
    crate::daemon::run(&plan, user)
}
