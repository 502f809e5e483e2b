//! nginx as a child of the test: its configuration generated into a fresh directory of its own, a
//! free port, one process (`master_process off`, so that its PID is the whole server), killed and
//! reaped on drop; and its access log read back, to assert what the server saw.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use super::netns::Netns;
use super::skip::{left_by_a_dead_run, tool};

/// What each access-log line holds, one request per line, fields without spaces up to the last
/// (`$upstream_status` lists every upstream tried, ", "-separated). Written as each request ends:
/// `$msec` is when nginx finished with it, to the millisecond.
const LOG_FORMAT: &str = "$msec $status $request_method $request_uri $http_x_request_id \
                          $http_idempotency_key $request_time $bytes_sent $upstream_status";

/// A running nginx; killed, its directory removed, on drop.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Nginx {
    /// nginx on loopback with one `server` block holding `server` (its `listen` and `root` are set
    /// here: `/ok.txt` is a static file holding `ok`).
    pub async fn start(server: &str) -> Self {
        Self::launch("", server, None, None).await
    }

    /// The same, with `http` directives before the `server` block (zones, maps).
    pub async fn start_with(http: &str, server: &str) -> Self {
        Self::launch(http, server, None, None).await
    }

    /// nginx inside `netns`, listening on its address.
    pub async fn start_in(netns: &Netns, server: &str) -> Self {
        Self::launch("", server, Some(netns), None).await
    }

    /// nginx inside `netns` on `port`: a server that starts where clients were already knocking.
    pub async fn start_in_on(netns: &Netns, port: u16, server: &str) -> Self {
        Self::launch("", server, Some(netns), Some(port)).await
    }

    /// nginx on `port`, or on a port found free.
    async fn launch(http: &str, server: &str, netns: Option<&Netns>, port: Option<u16>) -> Self {
        let nginx = tool("nginx").expect("nginx is on PATH (checked by skip::ready)");
        let ip = netns.map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |n| IpAddr::V4(n.addr));
        // A port found free may be taken before nginx binds it: then nginx exits, and another is tried.
        // A port given is tried once.
        let tries = if port.is_some() { 1 } else { 5 };
        let mut failures = Vec::new();
        for _ in 0..tries {
            let addr = SocketAddr::new(ip, port.unwrap_or_else(|| free_port(ip)));
            let dir = fresh_dir();
            let config = config(&dir, addr, http, server);
            std::fs::write(dir.join("nginx.conf"), config).unwrap();
            let mut command = match netns {
                Some(netns) => netns.command(&nginx),
                None => Command::new(&nginx),
            };
            command
                .arg("-p")
                .arg(&dir)
                .arg("-c")
                .arg(dir.join("nginx.conf"))
                .arg("-e")
                .arg(dir.join("error.log"))
                .args(["-g", "daemon off;"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: prctl is async-signal-safe, and nothing else runs between fork and exec. The
            // kernel kills nginx if the thread that started it dies first, as when a test binary is
            // killed before its guards drop; PR_SET_PDEATHSIG survives `ip netns exec`'s exec.
            unsafe {
                command.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
            let child = command.spawn().expect("nginx starts");
            let mut nginx = Self { child, dir, addr };
            match nginx.accepting().await {
                Ok(()) => return nginx,
                Err(why) => failures.push(why),
            }
        }
        panic!("nginx did not start:\n{}", failures.join("\n"));
    }

    /// Waits (at most 5 s) until this nginx listens on its port and accepts connections; its error
    /// log if it exited first, or failed to bind.
    ///
    /// A connection accepted on the port does not say that this nginx took it: two probes of
    /// `free_port` at once may be handed the same port, and an nginx that cannot bind it tries
    /// again for 2.5 s (5 times, 500 ms apart) before it exits, while the server that has the port
    /// accepts. Taking that one for this nginx sent one test's calls to another test's server (CI
    /// saw a `limit_req` run's 10 000 calls in the breaker's nginx). nginx writes its pid file once
    /// its listening sockets are bound, never before: the fresh directory holds none until then.
    async fn accepting(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let pid = self.dir.join("nginx.pid");
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("nginx exited ({status}): {}", self.error_log()));
            }
            let bound = std::fs::read_to_string(&pid).is_ok_and(|pid| !pid.trim().is_empty());
            if bound && tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                // Killed by the drop that follows, before another port is tried.
                return Err(format!(
                    "nginx not listening on {} after 5 s: {}",
                    self.addr,
                    self.error_log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of `path` (with its query) on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The requests nginx has finished with, in the order it logged them.
    pub fn access_log(&self) -> Vec<Logged> {
        let text = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        text.lines()
            .map(|line| Logged::parse(line).unwrap_or_else(|| panic!("access log line: {line}")))
            .collect()
    }

    /// The access log once `done` says it holds what was expected, or after `within`.
    pub async fn access_log_when(
        &self,
        within: Duration,
        done: impl Fn(&[Logged]) -> bool,
    ) -> Vec<Logged> {
        let deadline = Instant::now() + within;
        loop {
            let log = self.access_log();
            if done(&log) || Instant::now() > deadline {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The access log once no line was added for `quiet`, or after `within`: for requests whose
    /// connections end on their own time (a client gone, packets lost and retransmitted).
    pub async fn settled_access_log(&self, quiet: Duration, within: Duration) -> Vec<Logged> {
        let deadline = Instant::now() + within;
        let mut last = (self.access_log().len(), Instant::now());
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let log = self.access_log();
            if log.len() != last.0 {
                last = (log.len(), Instant::now());
            } else if last.1.elapsed() >= quiet || Instant::now() > deadline {
                return log;
            }
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // The configuration and the logs of a failed test, to read.
            eprintln!("nginx's files are kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn config(dir: &Path, addr: SocketAddr, http: &str, server: &str) -> String {
    let dir = dir.display();
    format!(
        "master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format stagger '{LOG_FORMAT}';
    # No buffer: each line is written as its request ends, so the test reads it at once.
    access_log {dir}/access.log stagger;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    {http}
    server {{
        listen {addr};
        root {dir}/www;
        {server}
    }}
}}
"
    )
}

/// Where each nginx keeps its files: in memory (`/dev/shm`) where the machine has it, else the
/// temporary directory.
///
/// nginx runs here as one process (`master_process off`), and writes each access log line, and an
/// error log line per request `limit_req` refuses, as the request ends: on a disk busy writing a
/// build's gigabytes back, one write may block it for seconds, during which it answers no one, and
/// a client that saw it answer in microseconds rightly finds it down (its silence is the breaker's
/// evidence). The suite tests the client, not the machine's disk.
fn base_dir() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let writable = |dir: &Path| {
            let probe = dir.join(format!("stagger-probe-{}", std::process::id()));
            let made = std::fs::create_dir_all(&probe).is_ok();
            let _ = std::fs::remove_dir(&probe);
            made
        };
        if shm.is_dir() && writable(&shm) {
            shm
        } else {
            std::env::temp_dir()
        }
    })
    .clone()
}

/// A fresh directory for one nginx, with its document root and `/ok.txt`. The first one of a run
/// deletes the directories that runs that crashed left behind.
fn fresh_dir() -> PathBuf {
    const PREFIX: &str = "stagger-nginx-";
    static LEFTOVERS: Once = Once::new();
    LEFTOVERS.call_once(|| {
        let entries = std::fs::read_dir(base_dir()).into_iter().flatten();
        for entry in entries.flatten() {
            if left_by_a_dead_run(&entry.file_name().to_string_lossy(), PREFIX) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = base_dir().join(format!("{PREFIX}{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/ok.txt"), "ok").unwrap();
    dir
}

/// A port nothing listens on at `ip` now: bound, read and released. On a namespace's address, which
/// the root namespace cannot bind, any port is free: nothing else runs there.
pub fn free_port(ip: IpAddr) -> u16 {
    match std::net::TcpListener::bind((ip, 0)) {
        Ok(listener) => listener.local_addr().unwrap().port(),
        Err(_) => std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port(),
    }
}

/// One access-log line.
#[derive(Debug, Clone)]
pub struct Logged {
    /// When nginx finished with the request, since the Unix epoch, to the millisecond.
    pub at: Duration,
    pub status: u16,
    pub method: String,
    pub uri: String,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// From the request's first byte to the log line: how long nginx had it.
    pub request_time: Duration,
    /// Bytes sent to the client, head included.
    pub bytes_sent: u64,
    pub upstream_status: String,
}

impl Logged {
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.splitn(9, ' ');
        let mut next = || fields.next();
        let at = millis(next()?)?;
        let status = next()?.parse().ok()?;
        let method = next()?.to_owned();
        let uri = next()?.to_owned();
        // nginx logs an absent header as "-".
        let header = |value: &str| (value != "-").then(|| value.to_owned());
        let request_id = header(next()?);
        let idempotency_key = header(next()?);
        let request_time = millis(next()?)?;
        let bytes_sent = next()?.parse().ok()?;
        let upstream_status = next()?.to_owned();
        Some(Self {
            at,
            status,
            method,
            uri,
            request_id,
            idempotency_key,
            request_time,
            bytes_sent,
            upstream_status,
        })
    }
}

/// "1712345678.123" (seconds, three decimals) as a duration, exactly.
fn millis(text: &str) -> Option<Duration> {
    let (seconds, fraction) = text.split_once('.')?;
    let millis: u64 = format!("{fraction:0<3}")[..3].parse().ok()?;
    Some(Duration::from_secs(seconds.parse().ok()?) + Duration::from_millis(millis))
}

/// The log's lines for `request_id`, in the order nginx finished them.
pub fn of<'a>(log: &'a [Logged], request_id: &str) -> Vec<&'a Logged> {
    log.iter()
        .filter(|line| line.request_id.as_deref() == Some(request_id))
        .collect()
}
