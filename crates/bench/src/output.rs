//! What a run writes: the ceiling's files, a wrk script, and the results
//! with their plots.

use std::path::Path;

use bytes::Bytes;
use neve_upstream::RpcClient;

use crate::error::BenchError;
use crate::plot;
use crate::report::Results;
use crate::workload::Workload;

/// Writes the reference target's answer to each member of the pool as
/// `<dir>/<slug>/<i>.json`.
pub(crate) async fn write_ceiling_files(
    dir: &Path,
    workload: &Workload,
    reference: &RpcClient,
) -> Result<(), BenchError> {
    let sub = dir.join(&workload.slug);
    std::fs::create_dir_all(&sub).map_err(BenchError::io(&sub))?;
    for (i, body) in workload.requests.iter().enumerate() {
        let (_, answer) = reference
            .post(body.clone())
            .await
            .map_err(|e| BenchError::Target("reference".into(), e.to_string()))?;
        let path = sub.join(format!("{i}.json"));
        std::fs::write(&path, &answer).map_err(BenchError::io(&path))?;
    }
    // A thousand answers of 100 KB are 100 MB of dirty pages: written back
    // by the kernel a few seconds later, they took CPU from whichever
    // target was measured first (its ratio 10-20 % lower than in a round
    // where it went second). Written back now, they cost no cell anything.
    sync_file_system(&sub).map_err(BenchError::io(&sub))
}

/// Writes back every dirty page of the file system holding `dir`.
fn sync_file_system(dir: &Path) -> std::io::Result<()> {
    let handle = std::fs::File::open(dir)?;
    // SAFETY: syncfs only reads the descriptor, which `handle` keeps open.
    let done = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&handle)) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A wrk script that posts uniformly random members of `bodies` to `path`:
/// the same work `neve bench` sends, for cross-checking with wrk.
pub fn wrk_lua(path: &str, bodies: &[Bytes]) -> String {
    let mut lua = String::from(
        "-- written by neve bench: the same request pool it sends\nlocal bodies = {\n",
    );
    for body in bodies {
        lua.push_str("[==[");
        lua.push_str(&String::from_utf8_lossy(body));
        lua.push_str("]==],\n");
    }
    // Each request is formatted once, in `init` (wrk has set the Host header
    // by then): formatting per request in Lua costs wrk's one thread more
    // than neve answering it, so wrk would measure itself.
    lua.push_str(&format!(
        "}}\nwrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
         local requests = {{}}\n\
         init = function(args)\n  \
           for i, body in ipairs(bodies) do requests[i] = wrk.format(\"POST\", \"{path}\", nil, body) end\n\
         end\n\
         request = function() return requests[math.random(#requests)] end\n"
    ));
    lua
}

/// Writes `results.json`, `results.md` and the plots; returns notes to show.
pub(crate) fn write_results(
    dir: &Path,
    results: &Results,
    workloads: &[Workload],
) -> Result<Vec<String>, BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io(dir))?;
    let json = dir.join("results.json");
    std::fs::write(
        &json,
        serde_json::to_vec_pretty(results).expect("results serialise"),
    )
    .map_err(BenchError::io(&json))?;
    let md = dir.join("results.md");
    std::fs::write(&md, results.render()).map_err(BenchError::io(&md))?;
    let mut notes = vec![format!("wrote {} and {}", json.display(), md.display())];
    for (run, workload) in results.workloads.iter().zip(workloads) {
        match plot::sweep(dir, &workload.slug, run) {
            Ok((files, note)) => {
                if !files.is_empty() {
                    notes.push(format!(
                        "plots: {}",
                        files
                            .iter()
                            .map(|f| f.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                notes.extend(note);
            }
            Err(e) => notes.push(format!("plot for {} failed: {e}", run.workload)),
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrk_script_carries_the_pool_verbatim() {
        let bodies = vec![
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x1",false]}"#),
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#),
        ];
        let lua = wrk_lua("/ext/bc/C/rpc", &bodies);
        assert!(
            lua.contains(r#"[==[{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}]==],"#)
        );
        assert!(lua.contains(r#"wrk.format("POST", "/ext/bc/C/rpc", nil, body)"#));
        assert!(lua.contains("request = function() return requests[math.random(#requests)] end"));
    }
}
