//! gRPC's C-core as a reference, through Python's grpcio: `server.py` as a child of the test (a free
//! port, its log read back to assert what the server saw), and `client.py`, C-core's own client with
//! its own retries (A6) turned on, run once per call. Without python3 or grpcio, the harness reports a
//! test ignored, naming what is missing, unless `CI=true`, where it fails.

#![allow(dead_code)] // each test binary that includes this uses part of it

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

const SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/grpc_reference/server.py"
);
const CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/grpc_reference/client.py"
);
const DIR_PREFIX: &str = "stagger-grpc-reference-";

/// A running reference server (`server.py`); killed, its directory removed, on drop.
pub struct Reference {
    child: Child,
    /// Held open: the server exits when its stdin reaches EOF.
    _stdin: ChildStdin,
    addr: SocketAddr,
    log: PathBuf,
    dir: PathBuf,
}

impl Reference {
    /// The reference server, started. The harness runs a test only when python3 with grpcio is
    /// there ([`missing`]).
    pub async fn start() -> Reference {
        let dir = fresh_dir();
        let log = dir.join("server.log");
        let stderr = dir.join("server.stderr");
        let mut command = Command::new(python());
        command
            .arg(SERVER)
            .args(["--port", "0", "--log"])
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        // SAFETY: prctl is async-signal-safe, and nothing else runs between fork and exec. The kernel
        // kills the server if the thread that started it dies first, as when the test binary is killed
        // before its guards drop; its stdin reaching EOF ends it too.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let mut child = command.spawn().expect("python3 starts server.py");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        // The first line of stdout, read on a thread of its own, which then drains the rest.
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next().and_then(Result::ok));
            lines.for_each(drop);
        });
        let mut reference = Reference {
            child,
            _stdin: stdin,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            log,
            dir,
        };
        let line = tokio::time::timeout(Duration::from_secs(10), rx).await;
        let port = match &line {
            Ok(Ok(Some(line))) => line
                .strip_prefix("PORT ")
                .and_then(|p| p.parse::<u16>().ok()),
            _ => None,
        };
        let Some(port) = port else {
            let _ = reference.child.kill();
            let status = reference.child.wait();
            panic!(
                "server.py did not print `PORT <n>` within 10 s (first line: {line:?}, exit: \
                 {status:?}); its stderr:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        reference.addr.set_port(port);
        reference
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for a tonic `Endpoint`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The log lines of `id`, parsed, in the order the server wrote them.
    pub fn log(&self, id: &str) -> Vec<Logged> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .map(|line| Logged::parse(line).unwrap_or_else(|| panic!("server log line: {line}")))
            .filter(|logged| logged.id == id)
            .collect()
    }

    /// The log lines of `id` once `done` says they hold what was expected, or after `within`: for
    /// calls whose handlers end on their own time (a cancelled call, a deadline passed).
    pub async fn log_when(
        &self,
        id: &str,
        within: Duration,
        done: impl Fn(&[Logged]) -> bool,
    ) -> Vec<Logged> {
        let deadline = Instant::now() + within;
        loop {
            let log = self.log(id);
            if done(&log) || Instant::now() > deadline {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "the reference server's log is kept in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One line of the server's log (see the top of `server.py`).
#[derive(Debug, Clone)]
pub struct Logged {
    /// `"arrive"` (C-core handed the call to the application, before its request was read) or
    /// `"end"` (the handler is done with it).
    pub event: String,
    pub id: String,
    /// The full path, `/ref.Reference/Unary`.
    pub method: String,
    /// The server's `time.monotonic()`, in seconds: compare lines with each other only.
    pub t: f64,
    /// 1-based: how many calls of this id had arrived, this one included.
    pub attempt: u32,
    /// The request's `grpc-previous-rpc-attempts`.
    pub previous_attempts: Option<u32>,
    /// `"end"` only: the deadline the handler had when it started (C-core keeps `grpc-timeout` out of
    /// the metadata); `None` without one.
    pub time_remaining: Option<Duration>,
    /// `"end"` only: `"OK"`, the status name it failed with, `"DEADLINE_EXCEEDED"` or `"CANCELLED"`.
    pub outcome: Option<String>,
    /// `"end"` only: the response messages sent.
    pub sent: Option<u32>,
    /// `"arrive"` only: the request metadata as grpcio shows it (`-bin` values in base64).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl Logged {
    fn parse(line: &str) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        let text = |key: &str| value.get(key)?.as_str().map(str::to_owned);
        let number = |key: &str| value.get(key)?.as_u64().and_then(|n| u32::try_from(n).ok());
        Some(Self {
            event: text("event")?,
            id: text("id")?,
            method: text("method")?,
            t: value.get("t")?.as_f64()?,
            attempt: number("attempt")?,
            previous_attempts: number("previous_attempts"),
            time_remaining: value
                .get("time_remaining")
                .and_then(serde_json::Value::as_f64)
                .map(|s| Duration::from_secs_f64(s.max(0.0))),
            outcome: text("outcome"),
            sent: number("sent"),
            metadata: value
                .get("metadata")
                .and_then(serde_json::Value::as_object)
                .cloned()
                .unwrap_or_default(),
        })
    }

    pub fn is_arrival(&self) -> bool {
        self.event == "arrive"
    }
}

/// One call of C-core's own client (`client.py`), retries on: what [`c_core_call`] runs.
#[derive(Debug, Clone)]
pub struct CCoreCall<'a> {
    /// The method's name in `ref.Reference`: `Unary`, `Echo`, `Stream` or `StreamFail`.
    pub method: &'a str,
    /// Sent as `x-id`.
    pub id: &'a str,
    /// More request metadata: the script (`x-fail`, `x-code`, ...).
    pub meta: &'a [(&'a str, &'a str)],
    /// The call's deadline.
    pub timeout: Option<Duration>,
    /// The request message's size (zero bytes).
    pub request_bytes: usize,
    /// The service config's `retryableStatusCodes`, by name.
    pub retry_codes: &'a [&'a str],
    /// `maxAttempts` (C-core caps it at 5).
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub multiplier: f64,
    /// No `retryPolicy` at all: the method is not retried (A6's transparent retries aside).
    pub no_retry_policy: bool,
}

impl Default for CCoreCall<'_> {
    /// `Unary`, no metadata, no deadline, an empty request; `UNAVAILABLE` retried, at most 5
    /// attempts, backoff 100 ms doubling up to 1 s.
    fn default() -> Self {
        Self {
            method: "Unary",
            id: "",
            meta: &[],
            timeout: None,
            request_bytes: 0,
            retry_codes: &["UNAVAILABLE"],
            max_attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            multiplier: 2.0,
            no_retry_policy: false,
        }
    }
}

/// What C-core's client made of one call.
#[derive(Debug, Clone)]
pub struct CCoreResult {
    /// `"OK"` or the status name.
    pub status: String,
    pub details: String,
    /// Response messages received (1 for a unary OK).
    pub messages: u32,
    /// From the call's start to its end, as the client timed it (the first call of a channel connects).
    pub elapsed: Duration,
    /// The trailing metadata the application saw, as a JSON object.
    pub trailing: serde_json::Value,
}

/// Runs `client.py` once against `reference`; panics with its stderr if it does not print its line.
pub async fn c_core_call(reference: &Reference, args: &CCoreCall<'_>) -> CCoreResult {
    let millis = |d: Duration| format!("{}", d.as_secs_f64() * 1000.0);
    let mut command = tokio::process::Command::new(python());
    command
        .arg(CLIENT)
        .args(["--target", &reference.addr.to_string()])
        .args(["--method", args.method, "--id", args.id])
        .args(["--request-bytes", &args.request_bytes.to_string()])
        .args(["--retry-codes", &args.retry_codes.join(",")])
        .args(["--max-attempts", &args.max_attempts.to_string()])
        .args(["--initial-backoff-ms", &millis(args.initial_backoff)])
        .args(["--max-backoff-ms", &millis(args.max_backoff)])
        .args(["--multiplier", &args.multiplier.to_string()])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (key, value) in args.meta {
        command.arg("--meta").arg(format!("{key}={value}"));
    }
    if let Some(timeout) = args.timeout {
        command.args(["--timeout-ms", &millis(timeout)]);
    }
    if args.no_retry_policy {
        command.arg("--no-retry-policy");
    }
    let output = command.output().await.expect("python3 runs client.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let parsed = stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok());
    let result = parsed.as_ref().and_then(|value| {
        Some(CCoreResult {
            status: value.get("status")?.as_str()?.to_owned(),
            details: value.get("details")?.as_str()?.to_owned(),
            messages: u32::try_from(value.get("messages")?.as_u64()?).ok()?,
            elapsed: Duration::from_secs_f64(value.get("elapsed_ms")?.as_f64()? / 1000.0),
            trailing: value.get("trailing_metadata")?.clone(),
        })
    });
    result.unwrap_or_else(|| {
        panic!(
            "client.py {args:?} ({}): stdout {stdout:?}, stderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A unique id for one scenario run (`name`, this process, a counter).
pub fn fresh_id(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{name}-{}-{n}", std::process::id())
}

/// `$STAGGER_PYTHON`, or `python3`.
fn python() -> String {
    std::env::var("STAGGER_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// What the reference needs of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// python3 (or `$STAGGER_PYTHON`) with grpcio.
    Grpcio,
}

/// What the machine lacks of `needs`, or `None`: the harness (`tests/common/harness.rs`) reports a test
/// that lacks it as ignored, naming it, or, under `CI=true`, fails it.
pub fn missing(needs: &[Need]) -> Option<String> {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    if needs.is_empty() {
        return None;
    }
    MISSING
        .get_or_init(|| {
            let python = python();
            let probe = Command::new(&python)
                .args(["-c", "import grpc; print(grpc.__version__)"])
                .stdin(Stdio::null())
                .output();
            match probe {
                Ok(output) if output.status.success() => None,
                Ok(output) => Some(format!(
                    "{python} has no grpcio (pip install -r tests/grpc_reference/requirements.txt): \
                     `import grpc` failed ({}) {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )),
                Err(e) => Some(format!(
                    "no {python} ({e}); set STAGGER_PYTHON to another interpreter"
                )),
            }
        })
        .clone()
}

/// A fresh directory for one server. The first one of a run deletes the directories that runs that
/// crashed left behind (their PID is gone).
fn fresh_dir() -> PathBuf {
    static LEFTOVERS: Once = Once::new();
    LEFTOVERS.call_once(|| {
        let entries = std::fs::read_dir(std::env::temp_dir())
            .into_iter()
            .flatten();
        for entry in entries.flatten() {
            if left_by_a_dead_run(&entry.file_name().to_string_lossy()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn left_by_a_dead_run(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(DIR_PREFIX) else {
        return false;
    };
    let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
    !pid.is_empty()
        && pid != std::process::id().to_string()
        && !Path::new(&format!("/proc/{pid}")).exists()
}
