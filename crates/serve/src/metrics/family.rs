//! Prometheus families built from values read at scrape time, and the
//! text `/metrics` answers with. Every part of neve's output (serving's
//! counters, the store's and state layer's figures, ingest's, the build's)
//! is a list of the library's `MetricFamily`, and [`encode`] writes them
//! all: the library owns the format, its escaping and its metric types;
//! neve only reads its atomics into them.

use prometheus::TextEncoder;
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

/// The content type of [`encode`]'s text: Prometheus' text format 0.0.4.
pub(crate) const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// `/metrics`' text: `families` in Prometheus' text format, empty ones
/// (a method never called yet) left out, as the encoder refuses them.
///
/// tikv's `prometheus` rather than `prometheus-client`: its encoder writes
/// the classic text format with names as given, where the OpenMetrics one
/// appends `_total` and `# EOF`, which would rename series the dashboard
/// and the alerts query. Either way the families are filled from neve's
/// own atomics at scrape time, so recording stays one relaxed add
/// (`prometheus-client`'s histogram locks on each observation).
pub(crate) fn encode(families: Vec<MetricFamily>) -> String {
    let families: Vec<MetricFamily> = families
        .into_iter()
        .filter(|family| !family.get_metric().is_empty())
        .collect();
    let mut text = String::with_capacity(16 * 1024);
    // Only an empty or unnamed family fails, and neither is passed on.
    if let Err(error) = TextEncoder::new().encode_utf8(&families, &mut text) {
        tracing::error!(%error, "/metrics could not be encoded whole");
    }
    text
}

/// A family of `kind` named `name`, of `samples`.
pub(crate) fn family(
    name: &str,
    help: &str,
    kind: MetricType,
    samples: Vec<Metric>,
) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_string());
    family.set_help(help.to_string());
    family.set_field_type(kind);
    family.set_metric(samples);
    family
}

/// One value without labels: a counter when its name ends in `_total`
/// (Prometheus' naming, which every such name of neve follows), a gauge
/// otherwise.
pub(crate) fn figure(name: &str, help: &str, value: f64) -> MetricFamily {
    let kind = if name.ends_with("_total") {
        MetricType::COUNTER
    } else {
        MetricType::GAUGE
    };
    family(name, help, kind, vec![sample(kind, &[], value)])
}

/// A counter's or gauge's sample of `value` under `labels`.
pub(crate) fn sample(kind: MetricType, labels: &[(&str, &str)], value: f64) -> Metric {
    let mut metric = Metric::from_label(label_pairs(labels));
    if kind == MetricType::COUNTER {
        let mut counter = Counter::default();
        counter.set_value(value);
        metric.set_counter(counter);
    } else {
        let mut gauge = Gauge::default();
        gauge.set_value(value);
        metric.set_gauge(gauge);
    }
    metric
}

/// A histogram's sample under `labels`: `buckets` pairs each upper bound
/// with the observations at or under it (cumulative); the encoder adds
/// the `+Inf` bucket, of `count`.
pub(crate) fn histogram_sample(
    labels: &[(&str, &str)],
    buckets: impl IntoIterator<Item = (f64, u64)>,
    count: u64,
    sum: f64,
) -> Metric {
    let mut histogram = Histogram::default();
    histogram.set_bucket(
        buckets
            .into_iter()
            .map(|(upper_bound, cumulative)| {
                let mut bucket = Bucket::default();
                bucket.set_upper_bound(upper_bound);
                bucket.set_cumulative_count(cumulative);
                bucket
            })
            .collect(),
    );
    histogram.set_sample_count(count);
    histogram.set_sample_sum(sum);
    let mut metric = Metric::from_label(label_pairs(labels));
    metric.set_histogram(histogram);
    metric
}

fn label_pairs(labels: &[(&str, &str)]) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.to_string());
            pair
        })
        .collect()
}
