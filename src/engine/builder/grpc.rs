//! The settings of [`RetryPolicyBuilder`] for gRPC calls: the codes retried, and each method's rule.

use crate::classify::{GrpcCodes, GrpcMethod};
use crate::engine::builder::RetryPolicyBuilder;

impl RetryPolicyBuilder {
    /// Sets the gRPC status codes retried when a gRPC call fails before any message (a Trailers-Only
    /// response). Defaults to [`GrpcCodes::DEFAULT`]: `UNAVAILABLE`, and `RESOURCE_EXHAUSTED` as
    /// throttling (on the [`throttle_backoff`](Self::throttle_backoff) schedule); every other code is
    /// fatal. This is A6's `retryableStatusCodes`, for every method without a rule of its own
    /// ([`grpc_method`](Self::grpc_method)).
    ///
    /// A code listed here is retried whatever the method: A6 leaves it to the service's owner to say
    /// which codes mean "not processed". A gRPC call is an HTTP `POST`, and is not held to HTTP's rule
    /// for it (a `POST` is replayed after an ambiguous failure only with an `Idempotency-Key`), because
    /// a Trailers-Only status is an answer, not an ambiguity: the server ran the method and chose the
    /// code. What is ambiguous — an attempt that timed out, a connection that closed midway — is not
    /// retried for a gRPC call, as A6 does not, unless its method is marked
    /// [`GrpcMethod::idempotent`].
    ///
    /// ```
    /// use stagger::classify::{GrpcCode, GrpcCodes};
    /// use stagger::RetryPolicy;
    ///
    /// let codes = GrpcCodes::new(&[GrpcCode::Unavailable, GrpcCode::Aborted]);
    /// let policy = RetryPolicy::builder().grpc_retry_on(codes).build()?;
    /// assert_eq!(policy.grpc_retry_on(), codes);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn grpc_retry_on(mut self, codes: GrpcCodes) -> Self {
        self.settings.grpc.codes = codes;
        self
    }

    /// Sets the rule of one gRPC method, by its full name (`/package.Service/Method`, the path of its
    /// requests): opt it out of retries on its status ([`GrpcMethod::no_retries`]), give it codes of
    /// its own ([`GrpcMethod::retry_on`]), or mark it safe to send twice, which also lets it be hedged
    /// ([`GrpcMethod::idempotent`]). Defaults to none: every method retries the policy's codes
    /// ([`grpc_retry_on`](Self::grpc_retry_on)). A second rule for a method replaces the first.
    ///
    /// Opt out a method that is not idempotent and whose server may answer `UNAVAILABLE` after acting
    /// on the call (a handler that failed midway and reported its dependency's outage): a retry would
    /// act twice.
    ///
    /// ```
    /// use stagger::classify::GrpcMethod;
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder()
    ///     .grpc_method("/shop.Payments/Charge", GrpcMethod::no_retries())
    ///     .build()?;
    /// # let _ = policy;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn grpc_method(mut self, full_name: impl Into<String>, rule: GrpcMethod) -> Self {
        let name: Box<str> = full_name.into().into_boxed_str();
        let methods = &mut self.settings.grpc.methods;
        methods.retain(|(known, _)| *known != name);
        methods.push((name, rule));
        self
    }
}
