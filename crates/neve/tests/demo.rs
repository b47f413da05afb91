//! `neve demo`, the README's main job, leaves a mirror to query: it prints
//! where neve serves, example calls with their answers and the head-to-head
//! table, then keeps neve following until Ctrl-C. Its examples, sent again
//! as printed, are real answers (or the 421 they are shown to be).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use neve_upstream::RpcClient;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_leaves_a_mirror_to_query_until_ctrl_c() {
    let [port] = neve_devnet::free_ports();
    let listen = format!("127.0.0.1:{port}");
    let out = tempfile::tempdir().unwrap();
    let mut demo = Command::new(env!("CARGO_BIN_EXE_neve"))
        .args([
            "demo",
            "--seconds",
            "3",
            "--duration",
            "0.3",
            "--listen",
            &listen,
        ])
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = demo.stdout.take().unwrap();
    let printed = tokio::task::spawn_blocking(move || {
        let mut printed = String::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            printed.push_str(&line);
            printed.push('\n');
            if line.contains("Ctrl-C to stop") {
                break;
            }
        }
        printed
    });
    let printed = tokio::time::timeout(Duration::from_secs(240), printed)
        .await
        .expect("the demo reaches its last step")
        .unwrap();
    assert!(
        printed.contains(&format!("serves at http://{listen}")),
        "{printed}"
    );
    assert!(printed.contains("$ curl -s"), "{printed}");
    assert!(printed.contains("HTTP 200"), "{printed}");
    assert!(
        printed.contains("HTTP 421"),
        "eth_sendRawTransaction is shown going to the node: {printed}"
    );
    assert!(
        printed.contains("| workload |"),
        "the head-to-head table: {printed}"
    );
    let examples = printed_examples(&printed);
    let methods: Vec<&str> = examples
        .iter()
        .map(|(body, ..)| body["method"].as_str().unwrap())
        .collect();
    for method in [
        "eth_getTransactionReceipt",
        "eth_getBalance",
        "eth_call",
        "eth_simulateV1",
        "eth_sendRawTransaction",
    ] {
        assert!(methods.contains(&method), "{method}: {printed}");
    }

    // The mirror answers while the demo runs, and keeps following.
    let client = RpcClient::new(&format!("http://{listen}")).unwrap();
    let first: String = client.call("eth_chainId", ()).await.unwrap();
    assert_eq!(first, "0x539");

    // Each example, sent again as printed: a result (eth_call's executed
    // here, and eth_simulateV1's), but eth_sendRawTransaction's 421.
    for (body, printed_status, printed_answer) in &examples {
        let params = body["params"].as_array().unwrap();
        assert!(
            !params.iter().any(|p| p.as_str() == Some("")),
            "an empty parameter: {body}"
        );
        let (status, answer) = client.post(body.to_string().into()).await.unwrap();
        if body["method"] == "eth_sendRawTransaction" {
            assert_eq!((*printed_status, status.as_u16()), (421, 421), "{body}");
            continue;
        }
        assert!(
            printed_answer.contains(r#""result":"#) && !printed_answer.contains(r#""error""#),
            "{body}: {printed_answer}"
        );
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            (*printed_status, status.as_u16()),
            (200, 200),
            "{body} {answer}"
        );
        assert!(answer.get("error").is_none(), "{body} {answer}");
        assert!(
            answer.get("result").is_some_and(|r| !r.is_null()),
            "{body} {answer}"
        );
    }
    let start = Instant::now();
    let height = || async {
        let head: Result<String, _> = client.call("eth_blockNumber", ()).await;
        head.ok()
            .and_then(|h| neve_upstream::parse_quantity(&h))
            .unwrap_or(0)
    };
    let was = height().await;
    while height().await <= was {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "neve keeps following"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Ctrl-C stops it all.
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(demo.id() as libc::pid_t, libc::SIGINT);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = demo.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the demo did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(
        std::net::TcpStream::connect(&listen).is_err(),
        "neve stopped too"
    );
}

/// The demo's example calls, from its output: each `$ curl … -d 'BODY'`
/// line's request, and the HTTP status and (shortened) answer printed on
/// the line after it.
fn printed_examples(printed: &str) -> Vec<(Value, u16, String)> {
    let lines: Vec<&str> = printed.lines().collect();
    let mut examples = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with("$ curl -s ") {
            continue;
        }
        let body = line
            .split_once(" -d '")
            .and_then(|(_, rest)| rest.strip_suffix('\''))
            .unwrap_or_else(|| panic!("no request body: {line}"));
        let (status, answer) = lines
            .get(i + 1)
            .and_then(|l| l.strip_prefix("HTTP "))
            .and_then(|l| l.split_once(' '))
            .and_then(|(status, answer)| Some((status.parse::<u16>().ok()?, answer.to_owned())))
            .unwrap_or_else(|| panic!("no status after {line}:\n{printed}"));
        examples.push((serde_json::from_str::<Value>(body).unwrap(), status, answer));
    }
    examples
}
