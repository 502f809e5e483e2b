//! [`Rule`]: which calls a fault goes to: every one, a share drawn from a seed, the n-th of a script,
//! those a request's own Envoy headers ask for; any of them only for the requests a predicate picks.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode};

use super::fault::Fault;
use crate::classify::{GrpcCode, RequestView};
use crate::engine::rng::splitmix64;
use crate::error::ConfigError;

type Predicate = dyn Fn(&RequestView<'_>) -> bool + Send + Sync;

/// Which calls get a [`Fault`]: every call, a share of them (drawn from the chaos's seed, so a test
/// sees the same calls picked on every run), the n-th calls of a script, or those whose request asks
/// for one in Envoy's fault headers; with [`when`](Rule::when), only among the requests it picks.
///
/// Each rule counts the calls it is asked about (those its predicate picks) on its own: a script's
/// third step is the third call *it* sees, and a rate's draw for its n-th call is the same whatever
/// the other rules did. When several rules would inject, the first one in the
/// [builder](crate::chaos::ChaosBuilder::rule)'s order does.
///
/// ```
/// use std::time::Duration;
/// use http::{Method, StatusCode};
/// use stagger::chaos::{Fault, Rule};
///
/// // 5 % of the calls answered 503.
/// let some = Rule::rate(0.05, Fault::status(StatusCode::SERVICE_UNAVAILABLE))?;
/// // The first two calls refused, the third answered 429 asking for 2 s, the rest sent.
/// let script = Rule::script([
///     Fault::refused(),
///     Fault::refused(),
///     Fault::retry_after(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(2)),
/// ]);
/// // Every POST to /payments reset.
/// let payments = Rule::always(Fault::reset())
///     .when(|request| request.method() == Method::POST && request.path() == Some("/payments"));
/// # let _ = (some, script, payments);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Rule {
    when: Option<Arc<Predicate>>,
    pick: Pick,
}

#[derive(Debug, Clone)]
enum Pick {
    Always(Fault),
    Rate(f64, Fault),
    Script(Arc<[Option<Fault>]>),
    Envoy,
}

impl Rule {
    /// Every call gets `fault`.
    pub fn always(fault: Fault) -> Self {
        Self {
            when: None,
            pick: Pick::Always(fault),
        }
    }

    /// A share `rate` of the calls gets `fault`: each call's draw comes from the chaos's
    /// [seed](crate::chaos::ChaosBuilder::seed) and the call's number, so the same seed picks the
    /// same calls, in any run and at any speed.
    ///
    /// A rate outside `0.0..=1.0`, or NaN, is refused ([`ConfigError::InjectionRate`]): a share, not
    /// a percentage.
    ///
    /// ```
    /// use stagger::ConfigError;
    /// use stagger::chaos::{Fault, Rule};
    ///
    /// assert!(Rule::rate(0.05, Fault::reset()).is_ok());
    /// assert_eq!(Rule::rate(5.0, Fault::reset()).unwrap_err(), ConfigError::InjectionRate(5.0));
    /// ```
    pub fn rate(rate: f64, fault: Fault) -> Result<Self, ConfigError> {
        if !(0.0..=1.0).contains(&rate) {
            return Err(ConfigError::InjectionRate(rate));
        }
        Ok(Self {
            when: None,
            pick: Pick::Rate(rate, fault),
        })
    }

    /// The n-th call gets the n-th step: a [`Fault`], or `None` for a call sent as it is. The calls
    /// after the last step are sent as they are.
    ///
    /// ```
    /// use http::StatusCode;
    /// use stagger::chaos::{Fault, Rule};
    ///
    /// // "503 twice, then the real answer":
    /// let twice = Rule::script(vec![Fault::status(StatusCode::SERVICE_UNAVAILABLE); 2]);
    /// // The second call reset, the others sent:
    /// let second = Rule::script([None, Some(Fault::reset())]);
    /// # let _ = (twice, second);
    /// ```
    pub fn script<I>(steps: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Option<Fault>>,
    {
        Self {
            when: None,
            pick: Pick::Script(steps.into_iter().map(Into::into).collect()),
        }
    }

    /// The faults a request asks for itself, in the headers of Envoy's fault filter, so that a test
    /// driving a deployment decides per request what its calls meet:
    ///
    /// | header | fault |
    /// |---|---|
    /// | `x-envoy-fault-abort-request: 503` | an answer with that status (200 to 599) |
    /// | `x-envoy-fault-abort-grpc-request: 14` | a gRPC answer with that code (0 to 16) |
    /// | `x-envoy-fault-abort-request-percentage: 25` | the abort for 25 % of such requests (default 100) |
    /// | `x-envoy-fault-delay-request: 500` | that many milliseconds of latency first |
    /// | `x-envoy-fault-delay-request-percentage: 25` | the delay for 25 % of such requests (default 100) |
    ///
    /// As in Envoy, a delay comes before the abort when both are drawn; a value that is not a number
    /// in range is ignored, as if absent. The headers go on to the upstream with the request.
    /// Envoy's throughput limit (`x-envoy-fault-throughput-response`) is not read.
    ///
    /// ```
    /// use stagger::chaos::{Chaos, Rule};
    ///
    /// let chaos = Chaos::new(Rule::envoy_headers());
    /// # let _ = chaos;
    /// ```
    pub fn envoy_headers() -> Self {
        Self {
            when: None,
            pick: Pick::Envoy,
        }
    }

    /// Only for the requests `predicate` picks, by their method, host, path, headers or gRPC
    /// method ([`RequestView`]); the others are not counted by this rule.
    ///
    /// ```
    /// use stagger::chaos::{Fault, Rule};
    ///
    /// // Envoy's header matching, by hand: only requests that carry `x-chaos: on`.
    /// let flagged = Rule::always(Fault::refused()).when(|request| {
    ///     request.headers().and_then(|headers| headers.get("x-chaos")).is_some_and(|v| v == "on")
    /// });
    /// # let _ = flagged;
    /// ```
    pub fn when(
        mut self,
        predicate: impl Fn(&RequestView<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.when = Some(Arc::new(predicate));
        self
    }

    /// Whether the rule asks about `request`: its predicate picks it, or it has none.
    pub(crate) fn applies_to(&self, request: &RequestView<'_>) -> bool {
        self.when.as_ref().is_none_or(|when| when(request))
    }

    /// The fault of the `n`-th call this rule is asked about (from 0), if it gets one; `seed` is the
    /// rule's own.
    pub(crate) fn pick(&self, seed: u64, n: u64, request: &RequestView<'_>) -> Option<Fault> {
        match &self.pick {
            Pick::Always(fault) => Some(fault.clone()),
            Pick::Rate(rate, fault) => (draw(seed, n) < *rate).then(|| fault.clone()),
            Pick::Script(steps) => usize::try_from(n)
                .ok()
                .and_then(|n| steps.get(n))
                .cloned()
                .flatten(),
            Pick::Envoy => envoy(seed, n, request.headers()?),
        }
    }
}

/// A number in `[0, 1)` for the `n`-th draw of `seed`: the same for the same two, whatever else runs.
fn draw(seed: u64, n: u64) -> f64 {
    let bits = splitmix64(seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    // The top 53 bits, a double's mantissa: every value a multiple of 2^-53.
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// What a request's Envoy fault headers ask of its `n`-th call.
fn envoy(seed: u64, n: u64, headers: &HeaderMap) -> Option<Fault> {
    let number = |name: &str| -> Option<u64> { headers.get(name)?.to_str().ok()?.parse().ok() };
    // Percentages as Envoy's headers give them: whole numbers out of 100, the default 100.
    let drawn = |name: &str, draw_of: u64| -> bool {
        let percent = match headers.get(name) {
            None => 100,
            Some(_) => match number(name) {
                Some(percent) => percent.min(100),
                None => return false,
            },
        };
        draw(seed, draw_of) * 100.0 < percent as f64
    };
    // Two draws a call, one for the abort and one for the delay, so that neither moves the other.
    let abort = || -> Option<Fault> {
        if let Some(status) = number("x-envoy-fault-abort-request") {
            let status = u16::try_from(status)
                .ok()
                .filter(|s| (200..600).contains(s))?;
            let status = StatusCode::from_u16(status).ok()?;
            return Some(Fault::status(status));
        }
        let code = number("x-envoy-fault-abort-grpc-request")?;
        let code = GrpcCode::from_code(u32::try_from(code).ok()?)?;
        Some(Fault::grpc(code))
    };
    let abort =
        abort().filter(|_| drawn("x-envoy-fault-abort-request-percentage", n.wrapping_mul(2)));
    let delay = number("x-envoy-fault-delay-request")
        .map(Duration::from_millis)
        .filter(|_| {
            drawn(
                "x-envoy-fault-delay-request-percentage",
                n.wrapping_mul(2).wrapping_add(1),
            )
        });
    match (abort, delay) {
        (Some(abort), Some(delay)) => Some(abort.after(delay)),
        (Some(abort), None) => Some(abort),
        (None, Some(delay)) => Some(Fault::latency(delay)),
        (None, None) => None,
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("when", &self.when.as_ref().map(|_| "a predicate"))
            .field("pick", &self.pick)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_enough_and_repeat_for_a_seed() {
        let below = (0..100_000).filter(|n| draw(7, *n) < 0.25).count();
        assert!((24_000..26_000).contains(&below), "{below}");
        assert_eq!(draw(7, 12), draw(7, 12));
        assert_ne!(draw(7, 12), draw(8, 12));
    }

    #[test]
    fn envoy_headers_ask_for_an_abort_a_delay_or_both() {
        let request = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().unwrap());
            }
            headers
        };
        let fault = |pairs| envoy(1, 0, &request(pairs)).map(|f| f.to_string());
        assert_eq!(
            fault(&[("x-envoy-fault-abort-request", "503")]),
            Some("503 Service Unavailable".into())
        );
        assert_eq!(
            fault(&[("x-envoy-fault-abort-grpc-request", "14")]),
            Some("gRPC UNAVAILABLE".into())
        );
        assert_eq!(
            fault(&[
                ("x-envoy-fault-abort-request", "429"),
                ("x-envoy-fault-delay-request", "1500")
            ]),
            Some("429 Too Many Requests after 1.5s".into())
        );
        assert_eq!(
            fault(&[("x-envoy-fault-delay-request", "20")]),
            Some("latency of 20ms".into())
        );
        // Out of range, or not a number: as if absent.
        assert_eq!(fault(&[("x-envoy-fault-abort-request", "700")]), None);
        assert_eq!(fault(&[("x-envoy-fault-abort-grpc-request", "17")]), None);
        assert_eq!(fault(&[("x-envoy-fault-delay-request", "soon")]), None);
        assert_eq!(
            fault(&[
                ("x-envoy-fault-abort-request", "503"),
                ("x-envoy-fault-abort-request-percentage", "0")
            ]),
            None
        );
        assert_eq!(fault(&[]), None);
    }

    #[test]
    fn an_envoy_percentage_picks_its_share() {
        let mut headers = HeaderMap::new();
        headers.insert("x-envoy-fault-abort-request", "503".parse().unwrap());
        headers.insert(
            "x-envoy-fault-abort-request-percentage",
            "30".parse().unwrap(),
        );
        let picked = (0..10_000)
            .filter(|n| envoy(3, *n, &headers).is_some())
            .count();
        assert!((2_800..3_200).contains(&picked), "{picked}");
    }
}
