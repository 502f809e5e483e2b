//! What a scenario needs from the machine, and what it does when the machine lacks it: on a developer's
//! laptop it prints `SKIP <test>: <why>` and returns; in CI (`CI=true`) a missing tool or permission
//! fails the test, since a suite that skips everything there would pass while testing nothing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Something a scenario cannot run without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// An `nginx` binary (Debian: `nginx-light`).
    Nginx,
    /// Root, `ip` (iproute2) and `iptables`, and a kernel that lets us add a network namespace.
    Netns,
}

/// Whether the running test may go ahead. When a need is missing, prints `SKIP` and returns `false`,
/// or panics under `CI=true`.
#[must_use]
pub fn ready(needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(|&need| missing(need)).collect();
    if missing.is_empty() {
        return true;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a real-server test")
        .to_owned();
    let why = missing.join("; ");
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!(
            "{test}: {why}. CI=true, so the real-server suite must run: .ci/run installs \
             nginx-light, iptables and iproute2, and the suite needs root"
        );
    }
    eprintln!("SKIP {test}: {why}");
    false
}

/// Why `need` is not met, or `None`. Each check runs once per test binary.
fn missing(need: Need) -> Option<String> {
    static NGINX: OnceLock<Option<String>> = OnceLock::new();
    static NETNS: OnceLock<Option<String>> = OnceLock::new();
    match need {
        Need::Nginx => NGINX.get_or_init(|| {
            let Some(nginx) = tool("nginx") else {
                return Some("no nginx on PATH (apt-get install nginx-light)".to_owned());
            };
            let runs = Command::new(&nginx).arg("-v").output();
            match runs {
                Ok(output) if output.status.success() => None,
                other => Some(format!("{} -v failed: {other:?}", nginx.display())),
            }
        }),
        Need::Netns => NETNS.get_or_init(|| {
            // SAFETY: geteuid has no preconditions and cannot fail.
            if unsafe { libc::geteuid() } != 0 {
                return Some("not root: network namespaces and iptables need it".to_owned());
            }
            for (name, package) in [("ip", "iproute2"), ("iptables", "iptables")] {
                if tool(name).is_none() {
                    return Some(format!("no {name} on PATH (apt-get install {package})"));
                }
            }
            super::netns::probe().err()
        }),
    }
    .clone()
}

/// Where `name` is: on `PATH`, or in the sbin directories a non-login root shell may leave off it.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Runs `program` with `args` to completion; its stdout, or why it failed with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let path = tool(program).ok_or_else(|| format!("no {program} on PATH"))?;
    let output = Command::new(path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Whether `name` is `prefix` followed by the PID of a process that is gone: what a run of this suite
/// that crashed (or was killed) left behind. Never this process's, never a live run's.
pub fn left_by_a_dead_run(name: &str, prefix: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix) else {
        return false;
    };
    let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
    !pid.is_empty()
        && pid != std::process::id().to_string()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}
