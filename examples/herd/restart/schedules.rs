//! The peers' restart schedules, each computed here from the formula its documentation or source
//! gives, with `n` the restarts since the failures began: four of them are not Rust, and the fifth,
//! task-supervisor, runs its tasks itself rather than computing delays another loop could sleep.
//!
//! - Kubernetes' CrashLoopBackOff: the kubelet restarts a container that exited for the first time at
//!   once, then after 10 s, 20 s, 40 s, … capped at 300 s, from the time the container finished, with
//!   no jitter; it starts over once a container ran 10 minutes (`doBackOff` in
//!   pkg/kubelet/kuberuntime/kuberuntime_manager.go over `flowcontrol.Backoff`, which the kubelet
//!   builds without jitter: initial 10 s, `MaxContainerBackOff` 300 s; "Container restart policy" in
//!   the Pod lifecycle docs).
//! - systemd's `RestartSteps=`: restart `i` (from 1) waits `RestartSec · (RestartMaxDelaySec /
//!   RestartSec)^((i−1)/RestartSteps)`, `RestartMaxDelaySec` past the last step, no jitter
//!   (`service_restart_usec_next` in src/core/service.c; systemd.service(5)). It has no default for
//!   the steps or the cap, so here: `RestartSec=1s`, `RestartSteps=5`, `RestartMaxDelaySec=30s`, the
//!   span of the others, 1 s to 30 s.
//! - task-supervisor 0.5: "the backoff delay doubles with each restart inside the window", from
//!   `base_restart_delay` 1 s to `max_restart_delay` 30 s, with `restart_jitter` 0.1, a random ±10 %
//!   of the delay; its `restart_limit`, 5 restarts in 60 s, declares a task dead past it (the
//!   defaults table of `SupervisorBuilder`). The row restarts past the limit, as
//!   `with_unlimited_restarts()` does ("the window still drives the backoff delay"), and counts the
//!   workers its default limit would have declared dead.
//! - Akka's `RestartSource.withBackoff` / `BackoffSupervisor`: restart `n` (from 0) waits
//!   `min(maxBackoff, minBackoff · 2^n) · (1 + U[0, 1) · randomFactor)` (`calculateDelay` in
//!   akka.pattern.BackoffSupervisor), with its docs' example settings, `minBackoff` 3 s, `maxBackoff`
//!   30 s, `randomFactor` 0.2.
//! - gRPC's connection backoff: a connection that was up and is lost is reconnected at once; then
//!   `ConnectWithBackoff` starts the next attempt `current_backoff` after the start of the one
//!   before, `current_backoff` 1 s, then `min(current_backoff · 1.6, 120 s)`, each with
//!   `UniformRandom(−0.2, 0.2) · current_backoff` added (doc/connection-backoff.md: INITIAL_BACKOFF
//!   1 s, MULTIPLIER 1.6, MAX_BACKOFF 120 s, JITTER 0.2).

use std::collections::VecDeque;
use std::time::Duration;

use rand::RngExt;
use rand::rngs::SmallRng;
use tokio::time::Instant;

/// A peer whose schedule a row follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    Kubernetes,
    Systemd,
    TaskSupervisor,
    Akka,
    Grpc,
}

impl Peer {
    /// Whether its delays are drawn at random.
    pub(crate) fn jittered(self) -> bool {
        !matches!(self, Self::Kubernetes | Self::Systemd)
    }
}

/// task-supervisor's default restart limit: more than 5 restarts within 60 s.
const TASK_SUPERVISOR_LIMIT: usize = 5;
const TASK_SUPERVISOR_WINDOW: Duration = Duration::from_secs(60);

/// One worker's restarts under a peer's schedule, with its own jitter.
pub(crate) struct Schedule {
    peer: Peer,
    rng: SmallRng,
    /// Restarts since the failures began.
    restarts: u32,
    /// task-supervisor: when its restarts happened, within its window.
    recent: VecDeque<Instant>,
    /// task-supervisor: whether its default limit would have declared the worker dead.
    pub(crate) over_limit: bool,
    /// gRPC: the current backoff, and when the next attempt starts.
    grpc: Option<(Duration, Instant)>,
}

impl Schedule {
    pub(crate) fn new(peer: Peer, rng: SmallRng) -> Self {
        Self {
            peer,
            rng,
            restarts: 0,
            recent: VecDeque::new(),
            over_limit: false,
            grpc: None,
        }
    }

    /// When the next run starts, the last having failed at `ended`.
    pub(crate) fn next(&mut self, ended: Instant) -> Instant {
        let n = self.restarts;
        self.restarts += 1;
        match self.peer {
            Peer::Kubernetes => ended + kubernetes(n),
            Peer::Systemd => ended + systemd(n + 1),
            Peer::TaskSupervisor => {
                while (self.recent.front())
                    .is_some_and(|&at| ended.duration_since(at) >= TASK_SUPERVISOR_WINDOW)
                {
                    self.recent.pop_front();
                }
                let in_window = self.recent.len();
                if in_window >= TASK_SUPERVISOR_LIMIT {
                    self.over_limit = true;
                }
                let delay = task_supervisor(in_window as u32, self.rng.random::<f64>());
                let at = ended + delay;
                self.recent.push_back(at);
                at
            }
            Peer::Akka => ended + akka(n, self.rng.random::<f64>()),
            Peer::Grpc => match self.grpc {
                // The lost connection: reconnected at once, the next attempt 1 s after this one's
                // start.
                None => {
                    self.grpc = Some((GRPC_INITIAL, ended + GRPC_INITIAL));
                    ended
                }
                Some((backoff, deadline)) => {
                    let start = deadline.max(ended);
                    let backoff = grpc_backoff(backoff);
                    let next = start + grpc_jittered(backoff, self.rng.random::<f64>());
                    self.grpc = Some((backoff, next));
                    start
                }
            },
        }
    }
}

/// Kubernetes: the `n`-th restart (from 0) after the first exit: at once, then 10 s · 2^(n−1), capped
/// at 300 s.
pub(crate) fn kubernetes(n: u32) -> Duration {
    match n {
        0 => Duration::ZERO,
        n => (Duration::from_secs(10) * 2u32.saturating_pow(n - 1).min(30))
            .min(Duration::from_secs(300)),
    }
}

/// systemd: restart `i` (from 1) with `RestartSec=1s`, `RestartSteps=5`, `RestartMaxDelaySec=30s`.
pub(crate) fn systemd(i: u32) -> Duration {
    const RESTART_SEC: f64 = 1.0;
    const MAX_DELAY_SEC: f64 = 30.0;
    const STEPS: u32 = 5;
    if i <= 1 {
        return Duration::from_secs_f64(RESTART_SEC);
    }
    if i > STEPS {
        return Duration::from_secs_f64(MAX_DELAY_SEC);
    }
    let ratio = MAX_DELAY_SEC / RESTART_SEC;
    Duration::from_secs_f64(RESTART_SEC * ratio.powf(f64::from(i - 1) / f64::from(STEPS)))
}

/// task-supervisor: 1 s doubled for each of the `in_window` restarts of the last 60 s, capped at 30 s,
/// then ±10 % from `unit`, a draw in `[0, 1)`.
pub(crate) fn task_supervisor(in_window: u32, unit: f64) -> Duration {
    let delay = (Duration::from_secs(1) * 2u32.saturating_pow(in_window.min(30)))
        .min(Duration::from_secs(30));
    delay.mul_f64(1.0 + 0.1 * (2.0 * unit - 1.0))
}

/// Akka: restart `n` (from 0) with `minBackoff` 3 s, `maxBackoff` 30 s, `randomFactor` 0.2, from
/// `unit`, a draw in `[0, 1)`.
pub(crate) fn akka(n: u32, unit: f64) -> Duration {
    let delay =
        (Duration::from_secs(3) * 2u32.saturating_pow(n.min(30))).min(Duration::from_secs(30));
    delay.mul_f64(1.0 + unit * 0.2)
}

/// gRPC's INITIAL_BACKOFF.
const GRPC_INITIAL: Duration = Duration::from_secs(1);

/// gRPC: the backoff after `backoff`: × 1.6, capped at 120 s.
pub(crate) fn grpc_backoff(backoff: Duration) -> Duration {
    backoff.mul_f64(1.6).min(Duration::from_secs(120))
}

/// gRPC: `backoff` with `UniformRandom(−0.2 · backoff, 0.2 · backoff)` added, from `unit`, a draw in
/// `[0, 1)`.
pub(crate) fn grpc_jittered(backoff: Duration, unit: f64) -> Duration {
    backoff.mul_f64(1.0 + 0.2 * (2.0 * unit - 1.0))
}
