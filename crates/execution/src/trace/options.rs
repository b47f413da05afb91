//! geth's trace configuration (`TraceConfig`: the struct logger's fields,
//! `tracer`, `tracerConfig`, `timeout`), read as geth reads it, and the
//! tracer it names. A tracer neve does not run (JavaScript, or a native
//! one it does not know) and options it does not follow are not refused
//! in neve's words: they are the node's ([`Unsupported`]).

use std::time::Duration;

use alloy_rpc_types_trace::geth::mux::MuxConfig;
use alloy_rpc_types_trace::geth::{
    CallConfig, GethDebugBuiltInTracerType, GethDebugTracerConfig, GethDebugTracerType,
    GethDebugTracingOptions, PreStateConfig,
};
use serde::Deserialize;
use serde_json::value::RawValue;

/// A trace option neve does not follow: the node's to answer (421).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub &'static str);

/// geth's `TraceConfig`, as sent: fields absent or `null` are geth's
/// zero values.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceConfig {
    #[serde(default)]
    enable_memory: Option<bool>,
    #[serde(default)]
    disable_stack: Option<bool>,
    #[serde(default)]
    disable_storage: Option<bool>,
    #[serde(default)]
    enable_return_data: Option<bool>,
    #[serde(default)]
    limit: Option<i64>,
    /// Chain config overrides: the node's.
    #[serde(default)]
    overrides: Option<Box<RawValue>>,
    #[serde(default)]
    tracer: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    tracer_config: Option<Box<RawValue>>,
    /// `debug_traceCall`'s state overrides.
    #[serde(default)]
    pub state_overrides: Option<crate::args::StateOverride>,
    /// `debug_traceCall`'s block overrides.
    #[serde(default)]
    pub block_overrides: Option<crate::args::BlockOverrides>,
    /// `debug_traceCall`'s `txIndex`: the call runs in the block, after
    /// its transactions before this one (geth's `hexutil.Uint`).
    #[serde(default, deserialize_with = "crate::args::quantity::u64")]
    pub tx_index: Option<alloy_primitives::U64>,
}

/// The struct logger's options (geth's `logger.Config`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoggerConfig {
    /// Memory, as 32-byte words, on each step.
    pub enable_memory: bool,
    /// No stack on the steps.
    pub disable_stack: bool,
    /// No storage on `SLOAD` and `SSTORE` steps.
    pub disable_storage: bool,
    /// The last call's return data on each step.
    pub enable_return_data: bool,
    /// Bytes of steps past which no more are written (0: no limit; below
    /// 0, as geth compares it, none at all).
    pub limit: i64,
}

/// Which tracer runs, with its configuration.
#[derive(Clone, Debug)]
pub enum Tracer {
    /// geth's default: a log of every step (`structLogs`).
    StructLogger(LoggerConfig),
    /// One of geth's native tracers, as revm-inspectors writes it.
    Native(GethDebugTracingOptions),
    /// `flatCallTracer`: geth's `callTracer` flattened as geth does it.
    FlatCall(super::flat::FlatConfig),
}

/// What a trace asks for.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// The tracer.
    pub tracer: Tracer,
    /// geth's `timeout` (5 s when not given); neve's own bound caps it.
    pub timeout: Duration,
}

/// Every key of the native tracers' configurations neve reads.
const TRACER_CONFIG_KEYS: &[&str] = &[
    "onlyTopCall",
    "withLog",
    "diffMode",
    "disableCode",
    "disableStorage",
    "includeEmpty",
    "convertParityErrors",
    "includePrecompiles",
];

/// geth's default trace timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `text`, a JSON object, names its keys as neve reads them:
/// Go matches keys without regard to case and lets the last of two win,
/// serde neither; an object that would read otherwise in geth than here
/// (a key in other case, one given twice) is the node's.
pub fn keys_read_alike(text: &str, known: &[&str]) -> bool {
    struct Keys(Vec<String>);
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            mut self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                self.0.push(key);
            }
            Ok(self.0)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let Ok(keys) = serde::Deserializer::deserialize_any(&mut de, Keys(Vec::new())) else {
        // Not an object: its own parse says how.
        return true;
    };
    let mut seen = std::collections::HashSet::new();
    keys.iter().all(|key| {
        let folded = key.to_ascii_lowercase();
        let other_case = !known.contains(&key.as_str())
            && known.iter().any(|k| k.to_ascii_lowercase() == folded);
        seen.insert(folded) && !other_case
    })
}

/// The keys of geth's `TraceCallConfig` (`TraceConfig`'s among them).
pub const TRACE_CONFIG_KEYS: &[&str] = &[
    "enableMemory",
    "disableStack",
    "disableStorage",
    "enableReturnData",
    "limit",
    "overrides",
    "tracer",
    "timeout",
    "tracerConfig",
    "stateOverrides",
    "blockOverrides",
    "txIndex",
];

impl TraceConfig {
    /// The tracer and timeout this configuration names.
    pub fn options(&self) -> Result<TraceOptions, Unsupported> {
        if self.overrides.as_ref().is_some_and(|o| o.get() != "null") {
            return Err(Unsupported("chain config overrides"));
        }
        let timeout = match &self.timeout {
            None => DEFAULT_TIMEOUT,
            Some(text) => go_duration(text).ok_or(Unsupported("a timeout neve does not read"))?,
        };
        let tracer = match self.tracer.as_deref() {
            None => Tracer::StructLogger(LoggerConfig {
                enable_memory: self.enable_memory.unwrap_or(false),
                disable_stack: self.disable_stack.unwrap_or(false),
                disable_storage: self.disable_storage.unwrap_or(false),
                enable_return_data: self.enable_return_data.unwrap_or(false),
                limit: self.limit.unwrap_or(0),
            }),
            _ if self
                .tracer_config
                .as_deref()
                .is_some_and(|config| !keys_read_alike(config.get(), TRACER_CONFIG_KEYS)) =>
            {
                return Err(Unsupported(
                    "tracer configuration keys geth reads otherwise",
                ));
            }
            Some("flatCallTracer") => {
                #[derive(Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Geth {
                    #[serde(default)]
                    convert_parity_errors: Option<bool>,
                    #[serde(default)]
                    include_precompiles: Option<bool>,
                }
                let text = self.tracer_config.as_deref().map_or("{}", RawValue::get);
                let geth: Geth =
                    parse(text).ok_or(Unsupported("a tracer configuration neve does not read"))?;
                Tracer::FlatCall(super::flat::FlatConfig {
                    convert_parity_errors: geth.convert_parity_errors.unwrap_or(false),
                    include_precompiles: geth.include_precompiles.unwrap_or(false),
                })
            }
            Some(name) => {
                let config = self.tracer_config.as_deref().map_or("{}", RawValue::get);
                Tracer::Native(native(name, config)?)
            }
        };
        Ok(TraceOptions { tracer, timeout })
    }
}

/// The native tracer `name` with `config` (its `tracerConfig`), as
/// revm-inspectors takes it; only the fields geth reads are read.
fn native(name: &str, config: &str) -> Result<GethDebugTracingOptions, Unsupported> {
    let builtin = builtin(name)?;
    let config = config_of(builtin, config)?;
    Ok(GethDebugTracingOptions {
        tracer: Some(GethDebugTracerType::BuiltInTracer(builtin)),
        tracer_config: config,
        ..Default::default()
    })
}

fn builtin(name: &str) -> Result<GethDebugBuiltInTracerType, Unsupported> {
    use GethDebugBuiltInTracerType::*;
    Ok(match name {
        "callTracer" => CallTracer,
        "prestateTracer" => PreStateTracer,
        "4byteTracer" => FourByteTracer,
        "flatCallTracer" => FlatCallTracer,
        "noopTracer" => NoopTracer,
        "muxTracer" => MuxTracer,
        // JavaScript, or a tracer neve does not run.
        _ => return Err(Unsupported("a tracer neve does not run")),
    })
}

/// A tracer's configuration object, with geth's fields; anything that is
/// not one (a type geth would refuse) is the node's to word.
fn config_of(
    tracer: GethDebugBuiltInTracerType,
    text: &str,
) -> Result<GethDebugTracerConfig, Unsupported> {
    use GethDebugBuiltInTracerType::*;
    let unread = Unsupported("a tracer configuration neve does not read");
    Ok(match tracer {
        CallTracer => {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Geth {
                #[serde(default)]
                only_top_call: Option<bool>,
                #[serde(default)]
                with_log: Option<bool>,
            }
            let geth: Geth = parse(text).ok_or(unread)?;
            config(&CallConfig {
                only_top_call: geth.only_top_call,
                with_log: geth.with_log,
            })
        }
        PreStateTracer => {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Geth {
                #[serde(default)]
                diff_mode: Option<bool>,
                #[serde(default)]
                disable_code: Option<bool>,
                #[serde(default)]
                disable_storage: Option<bool>,
                #[serde(default)]
                include_empty: Option<bool>,
            }
            let geth: Geth = parse(text).ok_or(unread)?;
            if geth.include_empty == Some(true) {
                return Err(Unsupported("prestateTracer's includeEmpty"));
            }
            config(&PreStateConfig {
                diff_mode: geth.diff_mode,
                disable_code: geth.disable_code,
                disable_storage: geth.disable_storage,
            })
        }
        MuxTracer => {
            // Each tracer of the mux by name, each with its own config.
            let tracers: std::collections::BTreeMap<String, Option<Box<RawValue>>> =
                parse(text).ok_or(unread)?;
            let mut mux = alloy_primitives::map::HashMap::default();
            for (name, text) in tracers {
                let inner = builtin(&name)?;
                if matches!(inner, MuxTracer | FlatCallTracer) {
                    return Err(Unsupported("a mux of a mux or a flatCallTracer"));
                }
                let text = text.as_deref().map_or("{}", RawValue::get);
                let inner_config = config_of(inner, text)?;
                // revm-inspectors takes no config for the tracers that have none.
                mux.insert(
                    GethDebugTracerType::BuiltInTracer(inner),
                    (!inner_config.is_null()).then_some(inner_config),
                );
            }
            config(&MuxConfig(mux))
        }
        FourByteTracer | NoopTracer => GethDebugTracerConfig(serde_json::Value::Null),
        _ => return Err(Unsupported("a tracer neve does not run")),
    })
}

/// `text` as a JSON object of `T`: `null` as `{}` (geth's zero value).
fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    let text = if text.trim() == "null" { "{}" } else { text };
    serde_json::from_str(text).ok()
}

/// A configuration as the JSON value revm-inspectors reads.
fn config<T: serde::Serialize>(config: &T) -> GethDebugTracerConfig {
    GethDebugTracerConfig(serde_json::to_value(config).unwrap_or_default())
}

/// A Go duration (`time.ParseDuration`): an optional sign, then one or
/// more decimal numbers each with a unit (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`); `None` for anything else, and for a negative duration.
pub fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return None;
        }
        let number: f64 = number.parse().ok()?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let nanos = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += number * nanos;
        rest = after;
    }
    // Go's durations are nanoseconds in an i64.
    (total.is_finite() && total < i64::MAX as f64).then(|| Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(json: &str) -> Result<TraceOptions, Unsupported> {
        serde_json::from_str::<TraceConfig>(json).unwrap().options()
    }

    #[test]
    fn the_struct_logger_is_the_default_with_gets_fields() {
        let TraceOptions { tracer, timeout } =
            options(r#"{"enableMemory":true,"disableStack":null,"limit":10}"#).unwrap();
        assert_eq!(timeout, DEFAULT_TIMEOUT);
        let Tracer::StructLogger(config) = tracer else {
            panic!("the struct logger")
        };
        assert!(config.enable_memory && !config.disable_stack && config.limit == 10);
        assert!(
            go_duration("3000000h").is_none(),
            "past Go's i64 nanoseconds"
        );
    }

    #[test]
    fn tracers_neve_does_not_run_are_the_nodes() {
        for json in [
            r#"{"tracer":"{step: function() {}, result: function() { return 1 }}"}"#,
            r#"{"tracer":""}"#,
            r#"{"tracer":"erc7562Tracer"}"#,
            r#"{"tracer":"prestateTracer","tracerConfig":{"includeEmpty":true}}"#,
            r#"{"tracer":"muxTracer","tracerConfig":{"bigramTracer":null}}"#,
            r#"{"overrides":{"osakaTime":0}}"#,
            r#"{"tracer":"callTracer","tracerConfig":{"withLog":"yes"}}"#,
            r#"{"tracer":"callTracer","timeout":"soon"}"#,
        ] {
            assert!(options(json).is_err(), "{json}");
        }
    }

    #[test]
    fn native_tracers_get_their_configs() {
        let TraceOptions { tracer, timeout } = options(
            r#"{"tracer":"muxTracer","timeout":"1m30s","tracerConfig":{"callTracer":{"withLog":true},"4byteTracer":null}}"#,
        )
        .unwrap();
        assert_eq!(timeout, Duration::from_secs(90));
        let Tracer::Native(options) = tracer else {
            panic!("a native tracer")
        };
        let mux = options.tracer_config.into_mux_config().unwrap();
        assert_eq!(mux.0.len(), 2);
    }

    #[test]
    fn keys_geth_would_read_otherwise_are_found() {
        let known = TRACE_CONFIG_KEYS;
        assert!(keys_read_alike(
            r#"{"tracer":"callTracer","txIndex":"0x1"}"#,
            known
        ));
        assert!(keys_read_alike("null", known));
        assert!(
            keys_read_alike(r#"{"somethingElse":1}"#, known),
            "ignored by both"
        );
        assert!(!keys_read_alike(r#"{"Tracer":"callTracer"}"#, known));
        assert!(!keys_read_alike(r#"{"tracerconfig":{}}"#, known));
        assert!(!keys_read_alike(r#"{"tracer":"a","tracer":"b"}"#, known));
        assert!(!keys_read_alike(r#"{"limit":1,"LIMIT":2}"#, known));
    }

    #[test]
    fn a_transaction_index_is_a_hex_quantity() {
        for bad in [
            r#"{"txIndex":1}"#,
            r#"{"txIndex":"1"}"#,
            r#"{"txIndex":"0x01"}"#,
        ] {
            assert!(serde_json::from_str::<TraceConfig>(bad).is_err(), "{bad}");
        }
        let config: TraceConfig = serde_json::from_str(r#"{"txIndex":"0x1f"}"#).unwrap();
        assert_eq!(config.tx_index.map(|i| i.to::<u64>()), Some(31));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(go_duration("2h45m"), Some(Duration::from_secs(9900)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "5", "-1s", "1x", "s", ".s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }
}
