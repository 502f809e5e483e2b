//! The settings of [`RetryPolicyBuilder`] for a backend that is refusing or overloaded: the schedule
//! throttling waits on, the host cooldown and adaptive throttling.

use std::time::Duration;

use crate::engine::backoff::Backoff;
use crate::engine::builder::RetryPolicyBuilder;

impl RetryPolicyBuilder {
    /// Sets the schedule of a throttled attempt, one the server refused to limit the client's rate
    /// rather than because it failed: a `429`, or a `503` with a rate-limit header (see
    /// [`server_delay`](crate::server_delay)) that does not say quota remains (a
    /// `X-RateLimit-Remaining: 4999`, sent on every response by some APIs, does not make a `503`
    /// throttling), that gives no usable delay. Defaults to
    /// [`RetryPolicy::DEFAULT_THROTTLE_BACKOFF`](crate::RetryPolicy::DEFAULT_THROTTLE_BACKOFF): exponential from 500 ms, base 2, 20 s cap, equal
    /// jitter (250–500 ms, 0.5–1 s, 1–2 s, …).
    ///
    /// A transient failure (a `503` without such a header, a reset) is over in a moment, and the
    /// backoff's 100 ms suits it; a rate limit is counted over a window, most often a second or more,
    /// and a retry 0–100 ms later meets the same limit and spends another request of the quota. So
    /// throttling has its own schedule, as the AWS SDKs (a 500 ms base delay for throttling errors
    /// against 100 ms for others, equal jitter) and gRPC (which tells `RESOURCE_EXHAUSTED` from
    /// `UNAVAILABLE`) do. Equal jitter keeps a floor under the first wait, which full jitter would not.
    /// A server delay, when there is one, is used instead, as for any retry.
    ///
    /// The throttle schedule counts its own retries: the `n`-th throttled retry waits on its `c(n)`,
    /// whatever transient failures came between.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, RetryPolicy};
    ///
    /// // A quota counted per minute: back off in seconds, not milliseconds.
    /// let policy = RetryPolicy::builder()
    ///     .throttle_backoff(Backoff::exponential(Duration::from_secs(2)).with_max_delay(Duration::from_secs(60)))
    ///     .build()?;
    /// assert_eq!(policy.throttle_backoff().initial(), Duration::from_secs(2));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn throttle_backoff(mut self, backoff: Backoff) -> Self {
        self.settings.throttle_backoff = backoff;
        self
    }

    /// Sets whether a host that refuses holds, then paces, every request to it, not only the retries
    /// of the request it refused. Defaults to `false`.
    ///
    /// With it on, a `429` (or a `503` that carries a server delay: `Retry-After`, `retry-after-ms`, a
    /// rate-limit header; see [`server_delay`](crate::server_delay)), or any response whose rate-limit
    /// headers say the quota is spent (`RateLimit: "name";r=0;t=30`, `X-RateLimit-Remaining: 0`), puts
    /// its host (name and port) in the policy's cooldown, shared by every clone of the layer or the
    /// middleware:
    ///
    /// 1. **Held** for the delay asked: every later request to the host waits before its attempt
    ///    until the delay has passed, plus a uniform share of a window as long as the delay
    ///    (`RetryAfterMode::Spread`'s rule), and a retry waits at least until it ends.
    /// 2. **Probed**: the waiters go out, and the host's answers measure the rate at which it admits
    ///    requests (the gaps between the requests it accepts once it has refused one).
    /// 3. **Paced**: every request to the host then takes its turn, one interval after the last, so
    ///    that a process asking more than the host admits queues in the client instead of being
    ///    refused by the server. A refusal slows the pace at once, back to the fastest one known to
    ///    go through; rounds without one search down towards the host's rate. When the host states its
    ///    rate (`RateLimit-Policy: "name";q=100;w=60`), that is the pace from the first refusal on.
    ///    A host that has refused nothing for 10 s and has nobody waiting leaves the cooldown.
    ///
    /// A wait (the hold, or a turn) that would outlast `max_retry_after` or the time left before the
    /// deadline is not waited for: the request is not sent, and the call fails at once with a
    /// [`Rejected`](crate::Rejected) error whose [`RetryInfo`](crate::RetryInfo) says
    /// [`StopReason::Cooldown`](crate::StopReason::Cooldown). The time waited before the first attempt
    /// is [`RetryInfo::cooldown`](crate::RetryInfo::cooldown). A hold lasts at most 5 minutes, whatever
    /// the host asked: one response saying `Retry-After: 999999999`, from a buggy proxy or a hostile
    /// server, does not disable a host until the process restarts. Once a host is probed or paced, only
    /// a wait of more than 10 s holds it again (a fixed window's reset, a penalty box); a shorter one
    /// is a rate limiter's refusal, which the pace answers, and holds only the request refused.
    ///
    /// What it saves: after a `429`, the stampede that matters is not the retries but the new requests
    /// the same process keeps sending while the server has said to wait; each is refused and spends the
    /// server's quota or capacity again. The AWS SDKs hold and pace new requests in their adaptive
    /// mode. What it costs: a client asking steadily for more than its quota waits instead of failing,
    /// and every request to a host in the cooldown takes a lock. Releasing the waiters all at once
    /// when the delay ends, or spread over it, fails against a limiter that admits a steady rate
    /// (nginx's `limit_req`): the first gets through, the next, milliseconds later, is refused and holds
    /// the host again. The repository's `docs/ratelimit.md` and `docs/real-servers.md` have the figures.
    ///
    /// Why it is off by default: a host is not always one quota. GitHub counts search, the core API
    /// and GraphQL separately on one host, and many APIs limit per endpoint or per key; a pause asked
    /// for by one endpoint would then hold requests the server would have served. Turn it on for an
    /// API with one quota per host, or give such an endpoint a policy of its own (policies do not
    /// share their cooldowns). The memory it takes is bounded: at most 4 096 hosts. A policy with it
    /// on and no host in the cooldown costs one atomic load per request.
    ///
    /// ```
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder().host_cooldown(true).build()?;
    /// assert!(policy.host_cooldown());
    /// assert!(!RetryPolicy::default().host_cooldown());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn host_cooldown(mut self, enabled: bool) -> Self {
        self.host_cooldown = enabled;
        self
    }

    /// Turns on client-side adaptive throttling, with multiplier `k`: an attempt to a backend that has
    /// been refusing most of what this client sends is rejected locally, without reaching it, with
    /// probability `max(0, (requests − k·accepts) / (requests + 1))` over the last
    /// [`adaptive_throttle_window`](Self::adaptive_throttle_window) (Google SRE book, "Handling
    /// Overload"). Off by default; `k = 2.0` is the book's choice.
    ///
    /// *Requests* are the attempts the client was about to send, those rejected locally included;
    /// *accepts* are the attempts the backend answered with anything but a reason to retry (a success,
    /// or a fatal answer such as a `404`): a `503`, a timeout or a refused connection is not an accept.
    /// So a client sends at most about `k` times what its backend accepts. When the backend is
    /// overloaded — answering slowly, timing out, refusing — the load it sees falls towards `k` times
    /// its capacity instead of every client's whole demand plus its retries, which is what lets it
    /// recover from a metastable overload; when it is healthy, accepts equal requests and nothing is
    /// rejected. It lets go as the window slides past the overload: with the default 10 s window, a
    /// client offering 500 requests a second to a backend of capacity 50 sends 100 of them (2 × 50);
    /// once the backend recovers, 19 % get through in the first second, then more each second, and
    /// all of them once the accepts of the last window are half its requests, about 11 s later
    /// (`tests/overload.rs`). Each host (its name, in any case, and port; a request in origin form
    /// is known by its `Host` header) has its own throttle, kept by every clone of the policy: at most
    /// 4 096 of them, each dropped only once its window is empty, new hosts past that sharing one.
    ///
    /// With [`hedge_after`](Self::hedge_after), a race counts as what it is to the backend. Its hedge
    /// is a request, admitted or rejected like a retry, but judged without the attempt it races,
    /// whose answer is not in yet. When an answer that is not worth retrying wins, the other attempt,
    /// dropped while it ran, counts as accepted: the backend refused it nothing. So a race won counts
    /// as many accepts as it sent requests, as a call that was not hedged does, and hedging adds no
    /// local rejections of its own; an attempt of the race that got a `503` counts one refusal, as it
    /// would have had the call retried it instead. Attempts cut by a time limit count as refused,
    /// hedged or not.
    ///
    /// A first attempt rejected locally ends the call at once with [`Rejected`](crate::Rejected)
    /// ([`StopReason::Throttled`](crate::StopReason::Throttled), no attempt made); a retry rejected
    /// locally ends the call with the last result received, like a spent budget. `k` must be finite and
    /// at least `1.0` (below it, a healthy backend would be throttled), or
    /// [`build`](Self::build) returns [`ConfigError::AdaptiveThrottle`](crate::ConfigError::AdaptiveThrottle).
    ///
    /// Why it is off by default: it rejects requests the backend might have served, so its gain shows
    /// only under overload, and the retry budget already keeps retries from adding more than 20 % to
    /// the load of a failing backend. Turn it on for a client whose own first attempts can overload its
    /// backend: many clients, no admission control at the server.
    ///
    /// ```
    /// use stagger::{ConfigError, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder().adaptive_throttle(2.0).build()?;
    /// assert_eq!(policy.adaptive_throttle(), Some(2.0));
    /// assert_eq!(
    ///     RetryPolicy::builder().adaptive_throttle(0.5).build().unwrap_err(),
    ///     ConfigError::AdaptiveThrottle(0.5)
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn adaptive_throttle(mut self, k: impl Into<Option<f64>>) -> Self {
        self.adaptive_throttle = k.into();
        self
    }

    /// Sets the window over which adaptive throttling counts requests and accepts. Defaults to 10 s
    /// ([`RetryPolicy::DEFAULT_ADAPTIVE_THROTTLE_WINDOW`](crate::RetryPolicy::DEFAULT_ADAPTIVE_THROTTLE_WINDOW)); valid from 1 s to 300 s.
    ///
    /// The window is how long the throttle remembers: a longer one reacts more slowly to an overload
    /// and lets go of it more slowly once the backend recovers (the SRE book keeps two minutes; Envoy's
    /// admission control, the same formula, 30 s). 10 s matches the retry budget's window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder()
    ///     .adaptive_throttle(2.0)
    ///     .adaptive_throttle_window(Duration::from_secs(30))
    ///     .build()?;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn adaptive_throttle_window(mut self, window: Duration) -> Self {
        self.adaptive_throttle_window = window;
        self
    }
}
