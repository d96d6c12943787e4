//! `check`: validate a config, print its safety warnings, bind nothing.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

pub(super) fn check(config: Option<PathBuf>, strict: bool) -> anyhow::Result<ExitCode> {
    let path = config.context("check needs --config FILE")?;
    match crate::config::load(&path) {
        Ok(config) => {
            for warning in &config.warnings {
                say_err!("warning: {}: {warning}", config.source);
            }
            if strict && !config.warnings.is_empty() {
                let count = config.warnings.len();
                let noun = if count == 1 { "warning" } else { "warnings" };
                say_err!(
                    "error: {}: {count} {noun}, and --strict makes them errors",
                    config.source
                );
                return Ok(ExitCode::FAILURE);
            }
            say!(
                "{}: OK ({} routes, {} upstreams)",
                config.source,
                config.routes.len(),
                config.upstreams.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            say_err!("{error}");
            Ok(ExitCode::FAILURE)
        }
    }
}
