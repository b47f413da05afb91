//! `neve demo`, the README's main job, leaves a mirror to query: it prints
//! where neve serves, example calls with their answers and the head-to-head
//! table, then keeps neve following until Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use neve_upstream::RpcClient;

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
        "eth_call is shown going to the node: {printed}"
    );
    assert!(
        printed.contains("| workload |"),
        "the head-to-head table: {printed}"
    );

    // The mirror answers while the demo runs, and keeps following.
    let client = RpcClient::new(&format!("http://{listen}")).unwrap();
    let first: String = client.call("eth_chainId", ()).await.unwrap();
    assert_eq!(first, "0x539");
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
