//! Where `neve serve`'s settings come from, first that gives one: a flag,
//! its `NEVE_*` environment variable (`--retain-blocks` is
//! `NEVE_RETAIN_BLOCKS`), a key of the TOML file named by `--config` (or
//! `NEVE_CONFIG`; keys are the flags' long names), then the default.
//! `neve config` prints the result, key by key, with where each came from.
//!
//! The file is read before clap parses: each key neither a flag nor an
//! environment variable gives becomes a flag, so clap validates every value
//! the same way whatever its source. An unknown key is an error that names
//! it.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// Subcommands that take `neve serve`'s settings.
const SETTINGS_SUBCOMMANDS: [&str; 2] = ["serve", "config"];

/// The flag naming the file; not itself a key of it.
const CONFIG_KEY: &str = "config";

/// The environment variable of the flag `--long`.
pub(crate) fn env_name(long: &str) -> String {
    format!("NEVE_{}", long.to_uppercase().replace('-', "_"))
}

/// `command` with an environment variable for every setting of `serve`
/// and `config`.
pub(crate) fn with_env(command: Command) -> Command {
    SETTINGS_SUBCOMMANDS.iter().fold(command, |command, name| {
        command.mut_subcommand(*name, |sub| {
            let longs: Vec<(String, String)> = sub
                .get_arguments()
                .filter_map(|a| Some((a.get_id().to_string(), a.get_long()?.to_string())))
                .filter(|(_, long)| long != "help" && long != "version")
                .collect();
            longs.into_iter().fold(sub, |sub, (id, long)| {
                // clap keeps 'static names; these live as long as the process.
                let env: &'static str = Box::leak(env_name(&long).into_boxed_str());
                sub.mut_arg(id, |arg| arg.env(env))
            })
        })
    })
}

/// The settings the file gave (by long name), for `neve config`.
pub(crate) type FromFile = BTreeSet<String>;

/// `argv` with a flag added for each key of the settings file that neither
/// a flag nor an environment variable gives.
pub(crate) fn expand(argv: Vec<OsString>, command: &Command) -> Result<(Vec<OsString>, FromFile)> {
    let Some(sub_name) = argv.get(1).and_then(|a| a.to_str()) else {
        return Ok((argv, FromFile::new()));
    };
    let Some(sub) = command
        .get_subcommands()
        .find(|s| s.get_name() == sub_name && SETTINGS_SUBCOMMANDS.contains(&sub_name))
    else {
        return Ok((argv, FromFile::new()));
    };
    let given = |long: &str| {
        argv[2..].iter().any(|a| {
            a.to_str()
                .and_then(|a| a.strip_prefix("--"))
                .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
        })
    };
    let path = match flag_value(&argv[2..], CONFIG_KEY) {
        Some(path) => PathBuf::from(path),
        None => match std::env::var_os(env_name(CONFIG_KEY)) {
            Some(path) => PathBuf::from(path),
            None => return Ok((argv, FromFile::new())),
        },
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the settings file {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("parsing the settings file {}", path.display()))?;
    let mut added = Vec::new();
    let mut from_file = FromFile::new();
    for (key, value) in table {
        let known = sub
            .get_arguments()
            .any(|a| a.get_long() == Some(key.as_str()));
        if !known || key == CONFIG_KEY {
            let dashed = key.replace('_', "-");
            let hint = if sub
                .get_arguments()
                .any(|a| a.get_long() == Some(dashed.as_str()))
            {
                format!(" (did you mean `{dashed}`?)")
            } else {
                String::new()
            };
            bail!(
                "unknown key `{key}` in {}{hint}: keys are the long flags of `neve serve --help` \
                 without their dashes (retain-blocks, upstream, …)",
                path.display()
            );
        }
        let scalar = |value: toml::Value| match value {
            toml::Value::String(s) => Ok(s),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            _ => Err(anyhow::anyhow!(
                "`{key}` in {} takes one value",
                path.display()
            )),
        };
        // A repeatable flag (upstream-header) takes an array: one flag each.
        let repeatable = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()))
            .is_some_and(|a| matches!(a.get_action(), clap::ArgAction::Append));
        let values = match value {
            toml::Value::Array(items) if repeatable => {
                items.into_iter().map(scalar).collect::<Result<Vec<_>>>()?
            }
            value => vec![scalar(value)?],
        };
        if given(&key) || std::env::var_os(env_name(&key)).is_some() {
            continue;
        }
        for value in values {
            added.push(OsString::from(format!("--{key}")));
            added.push(OsString::from(value));
        }
        from_file.insert(key);
    }
    let mut argv = argv;
    argv.splice(2..2, added);
    Ok((argv, from_file))
}

/// The value of `--name VALUE` or `--name=VALUE` in `args`.
fn flag_value(args: &[OsString], name: &str) -> Option<OsString> {
    let flag = format!("--{name}");
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let text = arg.to_str()?;
        if text == flag {
            return args.next().cloned();
        }
        if let Some(value) = text.strip_prefix(&format!("{flag}=")) {
            return Some(value.into());
        }
    }
    None
}

/// A URL without what could be a secret: its user and password, its path
/// (providers put API keys there: `/v3/KEY`) and its query.
pub(crate) fn redact(value: &str) -> String {
    if value.contains("://") {
        neve_upstream::RedactedUrl::of(value).to_string()
    } else {
        value.to_string()
    }
}

/// The effective settings of `matches` (the `config` subcommand's) as a
/// TOML file: each key with its help as a comment and where its value came
/// from; unset ones commented out.
pub(crate) fn render(command: &Command, matches: &ArgMatches, from_file: &FromFile) -> String {
    let sub = command
        .find_subcommand("config")
        .expect("the config subcommand exists");
    let mut out = String::from(
        "# neve serve settings: flag > NEVE_* environment > this file > default.\n\
         # Keys are the long flags of `neve serve --help`; see README.md.\n",
    );
    for arg in sub.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == CONFIG_KEY {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        out.push_str(&format!("\n# {help}\n"));
        let values: Vec<String> = matches
            .get_raw(arg.get_id().as_str())
            .map(|v| v.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        if values.is_empty() {
            out.push_str(&format!("# {long} =\n"));
            continue;
        }
        let shown: Vec<String> = values
            .iter()
            .map(|value| {
                let value = match long {
                    // A header's value is a credential; its name is not.
                    "upstream-header" => format!(
                        "{}: {}",
                        value.split(':').next().unwrap_or_default().trim(),
                        neve_upstream::MASK
                    ),
                    _ => redact(value),
                };
                if value.parse::<i64>().is_ok() {
                    value
                } else {
                    format!("{value:?}")
                }
            })
            .collect();
        // A repeatable setting given more than once is an array in the file.
        let literal = match shown.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let source = if from_file.contains(long) {
            "file"
        } else {
            match matches.value_source(arg.get_id().as_str()) {
                Some(ValueSource::CommandLine) => "flag",
                Some(ValueSource::EnvVariable) => "environment",
                _ => "default",
            }
        };
        out.push_str(&format!("{long} = {literal}  # {source}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_urls_are_redacted() {
        assert_eq!(
            redact("https://user:pw@rpc.example/v1?key=abc"),
            "https://***@rpc.example/v1?key=***"
        );
        assert_eq!(
            redact("https://mainnet.infura.io/v3/0123abcd"),
            "https://mainnet.infura.io/v3/***"
        );
        assert_eq!(redact("http://127.0.0.1:8545"), "http://127.0.0.1:8545");
        assert_eq!(redact("http://127.0.0.1:8545/"), "http://127.0.0.1:8545/");
        assert_eq!(redact("ws://h:1?token=x"), "ws://h:1?token=***");
        assert_eq!(redact("neve-data"), "neve-data");
    }

    #[test]
    fn flag_values_are_found_in_both_spellings() {
        let args: Vec<OsString> = ["--a", "1", "--config=x.toml"].map(OsString::from).into();
        assert_eq!(flag_value(&args, "config"), Some("x.toml".into()));
        assert_eq!(flag_value(&args, "a"), Some("1".into()));
        assert_eq!(flag_value(&args, "b"), None);
    }
}
