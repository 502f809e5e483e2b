//! What a scenario needs from the machine, and what the machine lacks of it: the harness reports a test
//! that lacks something as ignored, naming it, on a developer's laptop; in CI (`CI=true`) a missing tool
//! or permission fails the test, since a suite that skips everything there would pass while testing
//! nothing.

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

/// What the machine lacks of `needs`, said for a person (`no nginx on PATH (apt-get install
/// nginx-light)`), or `None` when it has it all. The harness (`tests/common/harness.rs`) reports a test
/// that lacks something as ignored, with this reason, or, under `CI=true`, fails it.
pub fn missing(needs: &[Need]) -> Option<String> {
    let missing: Vec<String> = needs.iter().filter_map(|&need| lacks(need)).collect();
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Why `need` is not met, or `None`. Each check runs once per test binary.
fn lacks(need: Need) -> Option<String> {
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
