//! C-core's client under a service config given as it is (`grpc_reference/config_client.py`):
//! whether it accepts a document, and what a plan of calls on one channel comes to.

use std::process::Stdio;
use std::time::Duration;

use super::reference::Reference;

const CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/grpc_reference/config_client.py"
);

/// `$STAGGER_PYTHON`, or `python3`.
fn python() -> String {
    std::env::var("STAGGER_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// What C-core made of a document: accepted, or refused with the fields it names (empty for a
/// text that is not JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Refused(Vec<String>),
}

async fn run(args: &[&str], files: &[(&str, String)]) -> Vec<serde_json::Value> {
    let dir = tempdir();
    let mut command = tokio::process::Command::new(python());
    command.arg(CLIENT).args(args);
    for (flag, contents) in files {
        let file = dir.join(flag.trim_start_matches('-'));
        std::fs::write(&file, contents).unwrap();
        command.arg(flag).arg(&file);
    }
    let output = command
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("python3 runs config_client.py");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "config_client.py {args:?}: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("stagger-service-config-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// C-core's verdict on each of `documents`, set on a channel to `reference`.
pub async fn verdicts(reference: &Reference, documents: &[&str]) -> Vec<Verdict> {
    let list = serde_json::to_string(documents).unwrap();
    let target = reference.addr().to_string();
    let lines = run(&["--target", &target], &[("--validate", list)]).await;
    lines
        .iter()
        .map(|line| {
            let status = line["status"].as_str().unwrap();
            let details = line["details"].as_str().unwrap();
            let refused = status == "INVALID_ARGUMENT"
                && (details.contains("service config") || details.contains("JSON"));
            if !refused {
                return Verdict::Accepted;
            }
            let fields = details
                .split("field:")
                .skip(1)
                .filter_map(|rest| rest.split(" error:").next())
                .map(str::to_owned)
                .collect();
            Verdict::Refused(fields)
        })
        .collect()
}

/// One call of a plan: a method of `ref.Reference` (or `ref.Other/Unary`), its `x-id`, its
/// script and its deadline.
#[derive(Debug, Clone)]
pub struct Planned<'a> {
    pub method: &'a str,
    pub id: String,
    pub meta: Vec<(&'a str, String)>,
    pub timeout: Option<Duration>,
}

/// How a call of C-core's client ended: its status, and how long it took.
#[derive(Debug, Clone)]
pub struct Ended {
    pub status: String,
    pub elapsed: Duration,
}

/// Runs `plan`, call after call on one channel of C-core's client with `config` as its service
/// config.
pub async fn run_plan(reference: &Reference, config: &str, plan: &[Planned<'_>]) -> Vec<Ended> {
    let plan_json: Vec<_> = plan
        .iter()
        .map(|call| {
            let meta: serde_json::Map<String, serde_json::Value> = call
                .meta
                .iter()
                .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(v.clone())))
                .collect();
            serde_json::json!({
                "method": call.method,
                "id": call.id,
                "meta": meta,
                "timeout_ms": call.timeout.map(|t| t.as_secs_f64() * 1000.0),
            })
        })
        .collect();
    let target = reference.addr().to_string();
    let files = [
        ("--service-config", config.to_owned()),
        ("--plan", serde_json::to_string(&plan_json).unwrap()),
    ];
    run(&["--target", &target], &files)
        .await
        .iter()
        .map(|line| Ended {
            status: line["status"].as_str().unwrap().to_owned(),
            elapsed: Duration::from_secs_f64(line["elapsed_ms"].as_f64().unwrap() / 1000.0),
        })
        .collect()
}
