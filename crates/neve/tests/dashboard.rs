//! The operator's dashboard (`deploy/grafana/neve.json`) and alerts
//! (`deploy/prometheus/alerts.yml`) against a real Prometheus (Debian's
//! package, installed by scripts/install-deps.sh) scraping a live neve that
//! follows geth: every query of every panel returns data, the rules load and
//! evaluate, and none of them fires, or is even pending, for this healthy
//! neve. Also the dashboard's shape: unique panel ids, panels inside the grid
//! and not overlapping, every query on the `datasource` variable and
//! filtered by the `instance` variable; and every alert unit-tested both
//! firing and through a fresh backfill.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use neve_devnet::{GethDev, GethDevOptions, NodeProcess};
use neve_upstream::RpcClient;
use serde_json::{Value, json};
use support::*;

/// What `$__rate_interval` stands for in the queries sent here: Grafana
/// makes it at least four scrape intervals; a few tens of 1 s scrapes.
const RATE_INTERVAL: &str = "30s";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn dashboard() -> Value {
    read_json(&deploy_dir().join("grafana/neve.json"))
}

/// Every panel, the panels nested in (collapsed) rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// (panel title, query) of every target of every panel.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    panels(dashboard)
        .into_iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap_or("?").to_string();
            panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap_or("").to_string()))
        })
        .collect()
}

/// A query as Grafana sends it with every instance selected.
fn as_sent(expr: &str) -> String {
    expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("${instance}", ".*")
        .replace("$instance", ".*")
}

/// The metric names starting with `neve_` in a query or rule, each with
/// what follows it.
fn neve_metrics(text: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
        if word(bytes[i]) && (i == 0 || !word(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            if text[start..i].starts_with("neve_") {
                found.push((&text[start..i], &text[i..]));
            }
        } else {
            i += 1;
        }
    }
    found
}

/// The alert names of alerts.yml.
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn the_dashboard_is_well_formed() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "neve");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"))
    };
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    let instance = variable("instance");
    assert_eq!(instance["type"], "query");
    assert_eq!(
        instance["definition"],
        "label_values(neve_build_info, instance)"
    );
    assert_eq!(instance["datasource"]["uid"], "${datasource}");

    let all = panels(&dashboard);
    let mut ids = BTreeSet::new();
    for panel in &all {
        let id = panel["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} is used twice");
    }
    // Inside the 24 columns, and no two panels on the same cells.
    let cells: Vec<(&str, [u64; 4])> = all
        .iter()
        .map(|p| {
            let g = &p["gridPos"];
            let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().expect("gridPos"));
            (p["title"].as_str().unwrap(), [x, y, w, h])
        })
        .collect();
    for (i, (a, [x, y, w, h])) in cells.iter().enumerate() {
        assert!(x + w <= 24 && *w > 0 && *h > 0, "{a}: outside the grid");
        for (b, [x2, y2, w2, h2]) in &cells[i + 1..] {
            let apart = x + w <= *x2 || x2 + w2 <= *x || y + h <= *y2 || y2 + h2 <= *y;
            assert!(apart, "panels {a:?} and {b:?} overlap");
        }
    }
    for panel in all.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap();
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let mut ref_ids = BTreeSet::new();
        for target in targets {
            assert!(ref_ids.insert(target["refId"].as_str().unwrap()), "{title}");
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            let expr = target["expr"].as_str().unwrap();
            assert!(expr.contains("$instance"), "{title}: {expr}");
            for (metric, rest) in neve_metrics(expr) {
                assert!(
                    rest.starts_with("{instance=~\"$instance\""),
                    "{title}: {metric} is not filtered by instance in {expr}"
                );
            }
            assert!(!as_sent(expr).contains('$'), "{title}: {expr}");
        }
    }
}

/// Every alert is unit-tested firing (a block-style `exp_alerts:` with its
/// labels) and in the fresh-backfill scenario (firing nothing).
#[test]
fn every_alert_has_unit_tests() {
    let dir = deploy_dir().join("prometheus");
    let rules = std::fs::read_to_string(dir.join("alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("alerts.test.yml")).unwrap();
    let names = alert_names(&rules);
    assert!(names.len() >= 13, "{names:?}");
    for name in &names {
        assert!(
            tests.contains(&format!(
                "alertname: {name}\n        exp_alerts:\n          - exp_labels:"
            )),
            "{name}: no unit test where it fires"
        );
        let quiet = format!("alertname: {name}, exp_alerts: []}}");
        assert!(
            tests.matches(&quiet).count() >= 3,
            "{name}: not checked silent through the fresh backfill"
        );
    }
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Prometheus scraping one neve every second and evaluating alerts.yml
/// every second; killed on drop.
struct Prometheus {
    process: NodeProcess,
    addr: String,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let rules = deploy_dir()
            .join("prometheus/alerts.yml")
            .canonicalize()
            .unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: neve\n    static_configs:\n      - targets: ['{target}']\n",
                rules.display()
            ),
        )
        .unwrap();
        let [port] = neve_devnet::free_ports();
        let addr = format!("127.0.0.1:{port}");
        let args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address={addr}"),
        ];
        let process = NodeProcess::spawn("prometheus", Path::new("prometheus"), &args, dir).expect(
            "prometheus (Debian's prometheus package, installed by scripts/install-deps.sh)",
        );
        let prometheus = Prometheus { process, addr };
        prometheus.wait("ready", |p| {
            http_get(&p.addr, "/-/ready").is_some_and(|(status, _)| status == 200)
        });
        prometheus
    }

    /// `GET path`, parsed.
    fn get(&self, path: &str) -> Value {
        let (status, body) = http_get(&self.addr, path)
            .unwrap_or_else(|| panic!("Prometheus did not answer {path}:\n{}", self.log()));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {status} {e}: {body}"))
    }

    /// An instant query now: the whole answer.
    fn query(&self, expr: &str) -> Value {
        self.get(&format!("/api/v1/query?query={}", encode(expr)))
    }

    /// The first value of an instant query, if any.
    fn value(&self, expr: &str) -> Option<f64> {
        self.query(expr)["data"]["result"][0]["value"][1]
            .as_str()?
            .parse()
            .ok()
    }

    /// Polls `done` every 200 ms for up to 60 s.
    fn wait(&self, what: &str, done: impl Fn(&Prometheus) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            assert!(
                self.process.exit_status().is_none() && Instant::now() < deadline,
                "Prometheus: not {what}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        self.process.log_tail(30)
    }
}

/// HTTP status and answer of one call.
async fn call(client: &RpcClient, method: &str, params: Value) -> (u16, Value) {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    let (status, bytes) = client.post(body.into()).await.unwrap();
    (status.as_u16(), serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_answers_every_panel_and_no_alert_goes_off() {
    // A block a second, so both heads move as in production.
    let geth = GethDev::start(GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", geth.ws_url()],
        2,
    )
    .await;
    let prometheus = Prometheus::start(&neve.addr);

    // Traffic while Prometheus scrapes, so every rate has samples: answered
    // calls (blocks, a state read, logs), 421s (a block far above the head)
    // and errors (a block number that is none), a few a second: under every
    // alert's traffic floor.
    let client = RpcClient::new(&neve.url).unwrap();
    let nobody = "0x00000000000000000000000000000000000c0ffe";
    for _ in 0..6 {
        for (method, params) in [
            ("eth_blockNumber", json!([])),
            ("eth_getBlockByNumber", json!(["0x1", false])),
            (
                "eth_getLogs",
                json!([{"fromBlock": "0x1", "toBlock": "0x2"}]),
            ),
        ] {
            let (status, answer) = call(&client, method, params).await;
            assert_eq!(status, 200, "{method}: {answer}");
        }
        // Fetched through from geth, then held: the state panels' figures.
        call(&client, "eth_getBalance", json!([nobody, "latest"])).await;
        let (status, answer) =
            call(&client, "eth_getBlockByNumber", json!(["0xffffff", false])).await;
        assert_eq!(status, 421, "{answer}");
        let (_, answer) = call(&client, "eth_getBlockByNumber", json!(["nope", false])).await;
        assert!(answer.get("error").is_some(), "{answer}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Enough scrapes for rates over RATE_INTERVAL, and every rule evaluated.
    prometheus.wait("scraping neve", |p| {
        p.value(r#"count_over_time(up{job="neve"}[1m])"#)
            .is_some_and(|n| n >= 8.0)
    });
    let alerts = std::fs::read_to_string(deploy_dir().join("prometheus/alerts.yml")).unwrap();
    let expected: BTreeSet<String> = alert_names(&alerts).into_iter().collect();
    prometheus.wait("evaluating every rule", |p| {
        let rules = p.get("/api/v1/rules");
        let loaded: Vec<&Value> = rules["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        for rule in &loaded {
            assert_ne!(rule["health"], "err", "{rule}");
        }
        let names: BTreeSet<String> = loaded
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect();
        names == expected && loaded.iter().all(|r| r["health"] == "ok")
    });

    // Every panel's every query: a valid query with data.
    let (_, metrics) = neve.get("/metrics").unwrap();
    let exported: BTreeSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let dashboard = dashboard();
    let queries = queries(&dashboard);
    assert!(queries.len() > 40, "{}", queries.len());
    let mut failures = Vec::new();
    for (panel, expr) in &queries {
        for (metric, _) in neve_metrics(expr) {
            if !exported.contains(metric) {
                failures.push(format!("{panel}: neve exports no {metric}"));
            }
        }
        let sent = as_sent(expr);
        let answer = prometheus.query(&sent);
        if answer["status"] != "success" {
            failures.push(format!("{panel}: {sent}\n  {answer}"));
        } else if answer["data"]["result"]
            .as_array()
            .is_none_or(|r| r.is_empty())
        {
            failures.push(format!("{panel}: no data for {sent}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} dashboard queries failed:\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n")
    );

    // The traffic shows as sent, and the build as built.
    let outcomes = prometheus.query(r#"sum by (outcome) (neve_rpc_requests_total{job="neve"})"#);
    let seen: BTreeSet<&str> = outcomes["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["metric"]["outcome"].as_str())
        .collect();
    assert_eq!(seen, BTreeSet::from(["ok", "miss", "error"]), "{outcomes}");
    let build = prometheus.query("neve_build_info");
    assert_eq!(
        build["data"]["result"][0]["metric"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{build}"
    );

    // A healthy neve sets off nothing, not even a pending alert.
    let alerts = prometheus.get("/api/v1/alerts");
    let raised: Vec<&Value> = alerts["data"]["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .collect();
    assert!(raised.is_empty(), "alerts for a healthy neve: {raised:?}");
    assert_eq!(
        prometheus.value(r#"count(ALERTS{alertname=~"Neve.*"}) or vector(0)"#),
        Some(0.0)
    );
}
