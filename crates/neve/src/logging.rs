//! Where log lines go and what they look like: a filter (a level, or
//! per-module directives as `RUST_LOG` takes them) and a format (text for
//! people, JSON lines for Loki, Elasticsearch and the like). Every event's
//! values (height, hash, upstream, durations) are fields, so the JSON form
//! carries them as keys rather than inside the message.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// The filter when neither `--log-level` nor `RUST_LOG` gives one.
const DEFAULT_FILTER: &str = "info";

#[derive(Args, Clone, Debug, Default)]
pub struct LogArgs {
    /// What to log: a level (error, warn, info, debug, trace) or
    /// directives per module as RUST_LOG takes them
    /// (`info,neve_ingest=debug`). Without it RUST_LOG is read. Default is
    /// info.
    #[arg(long, value_name = "FILTER", help_heading = "Logging")]
    pub log_level: Option<String>,
    /// `text` for a terminal or journald; `json`: one object a line with
    /// timestamp, level, target, message and the event's fields as keys.
    /// Default is text.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, help_heading = "Logging")]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    #[default]
    Text,
    /// JSON lines.
    Json,
}

/// Installs the global subscriber, writing to stderr.
pub fn init(args: &LogArgs) -> anyhow::Result<()> {
    let filter = match &args.log_level {
        Some(directives) => EnvFilter::try_new(directives)
            .map_err(|e| anyhow::anyhow!("--log-level {directives:?}: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
                .map_err(|e| anyhow::anyhow!("RUST_LOG={directives:?}: {e}"))?,
            _ => EnvFilter::new(DEFAULT_FILTER),
        },
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
    Ok(())
}
