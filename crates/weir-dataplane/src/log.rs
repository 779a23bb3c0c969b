//! Logs: `tracing` events to stderr, one line each with structured fields, at the level
//! `WEIR_LOG` names (`error`, `warn`, `info` (the default), `debug`, or a `tracing` filter).
//! Under systemd (`JOURNAL_STREAM` set) the lines carry no timestamp: journald adds its own.

use tracing_subscriber::EnvFilter;

/// Start logging (once; later calls change nothing).
pub fn init() {
    let filter = EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false);
    let _ = if journald {
        b.without_time().try_init()
    } else {
        b.try_init()
    };
}
