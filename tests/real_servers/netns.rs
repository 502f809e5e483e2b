//! Network namespaces of the suite's own, each joined to the root namespace (where the test process,
//! the client, stays) by a veth pair with a private /30 of its own: a server inside one is reached over
//! a real link whose packets iptables can drop.
//!
//! Names carry a fixed prefix and the test process's PID (`stg-<pid>-<n>`, veth `stg<pid>-<n>h` and
//! `...n`, under the kernel's 15 characters), so that a guard deletes exactly what it made, and the
//! first namespace of a run deletes what runs that crashed left behind (their PID no longer alive) —
//! never another live run's.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

use super::skip::{left_by_a_dead_run, run, tool};

const PREFIX: &str = "stg";

/// A network namespace with one veth link to the root namespace; deleted, link included, on drop.
pub struct Netns {
    name: String,
    host_link: String,
    /// The root namespace's end of the link.
    pub host: Ipv4Addr,
    /// The namespace's end of the link: where a server inside listens.
    pub addr: Ipv4Addr,
}

impl Netns {
    /// Creates a namespace and its link, both up, with loopback up inside. Panics with the failing
    /// command's output.
    pub fn create() -> Self {
        Self::try_create().unwrap_or_else(|why| panic!("creating a network namespace: {why}"))
    }

    fn try_create() -> Result<Self, String> {
        static LEFTOVERS: Once = Once::new();
        LEFTOVERS.call_once(delete_leftovers);
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < 16, "a run has 16 namespaces' worth of addresses");
        let pid = std::process::id();
        // One /30 of 10.213.0.0/16 per namespace: 16 per process, the PID choosing the block, so that
        // two runs at once are unlikely to meet (and a route of a crashed run is deleted first).
        let subnet = ((pid % 1024) * 16 + n) * 4;
        let octets = |host: u32| {
            let a = subnet + host;
            Ipv4Addr::new(10, 213, (a >> 8) as u8, a as u8)
        };
        let netns = Self {
            name: format!("{PREFIX}-{pid}-{n}"),
            host_link: format!("{PREFIX}{pid}-{n}h"),
            host: octets(1),
            addr: octets(2),
        };
        // From here on, dropping `netns` deletes whatever was made.
        let inner_link = format!("{PREFIX}{pid}-{n}n");
        let (name, host_link) = (netns.name.as_str(), netns.host_link.as_str());
        let host_cidr = format!("{}/30", netns.host);
        let inner_cidr = format!("{}/30", netns.addr);
        run("ip", &["netns", "add", name])?;
        run(
            "ip",
            &[
                "link",
                "add",
                host_link,
                "type",
                "veth",
                "peer",
                "name",
                &inner_link,
            ],
        )?;
        run("ip", &["link", "set", &inner_link, "netns", name])?;
        run("ip", &["addr", "add", &host_cidr, "dev", host_link])?;
        run("ip", &["link", "set", host_link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", name];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        inside(&["ip", "addr", "add", &inner_cidr, "dev", &inner_link])?;
        inside(&["ip", "link", "set", &inner_link, "up"])?;
        inside(&["ip", "link", "set", "lo", "up"])?;
        Ok(netns)
    }

    /// The namespace's name (`/run/netns/<name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`, which execs it: the child's
    /// PID is the program's own).
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut command = Command::new(tool("ip").expect("ip is on PATH"));
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Runs iptables on the namespace's own tables: `rule` is its arguments (`-A ...` appends a rule,
    /// `-I ...` inserts one).
    pub fn iptables(&self, rule: &[&str]) {
        let mut args = vec!["netns", "exec", &self.name, "iptables"];
        args.extend_from_slice(rule);
        if let Err(why) = run("ip", &args) {
            panic!("iptables in {}: {why}", self.name);
        }
    }

    /// iptables' count of the packets each rule of the namespace's `chain` matched, in the chain's
    /// order, each with its target (`DROP`, `ACCEPT`).
    pub fn packets(&self, chain: &str) -> Vec<(String, u64)> {
        let args = [
            "netns", "exec", &self.name, "iptables", "-n", "-v", "-x", "-L", chain,
        ];
        let listing =
            run("ip", &args).unwrap_or_else(|why| panic!("iptables in {}: {why}", self.name));
        // "Chain INPUT (policy ...)", the column names, then "pkts bytes target prot ..." per rule.
        (listing.lines().skip(2))
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                Some((fields.get(2)?.to_string(), fields.first()?.parse().ok()?))
            })
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and so the pair; the host end is deleted
        // by name in case the namespace was never made or the pair never moved into it.
        let _ = run("ip", &["netns", "delete", &self.name]);
        let _ = run("ip", &["link", "delete", &self.host_link]);
    }
}

/// Whether a namespace can be made here: one is made and deleted.
pub fn probe() -> Result<(), String> {
    Netns::try_create().map(drop)
}

/// Deletes the namespaces and links of runs whose process is gone.
fn delete_leftovers() {
    let namespaces = run("ip", &["netns", "list"]).unwrap_or_default();
    for line in namespaces.lines() {
        // "stg-123-0 (id: 4)", or the bare name.
        let name = line.split_whitespace().next().unwrap_or_default();
        if left_by_a_dead_run(name, &format!("{PREFIX}-")) {
            eprintln!("deleting network namespace {name}, left by a run that is gone");
            let _ = run("ip", &["netns", "delete", name]);
        }
    }
    let links = run("ip", &["-o", "link", "show"]).unwrap_or_default();
    for line in links.lines() {
        // "12: stg123-0h@if11: <BROADCAST,...": the name ends at '@' or ':'.
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or_default();
        if left_by_a_dead_run(name, PREFIX) {
            eprintln!("deleting link {name}, left by a run that is gone");
            let _ = run("ip", &["link", "delete", name]);
        }
    }
}
