//! The settings of [`RetryPolicyBuilder`] for gRPC calls: the codes retried, and each method's rule.

use crate::classify::{GrpcCodes, GrpcMethod};
use crate::engine::builder::RetryPolicyBuilder;

impl RetryPolicyBuilder {
    /// Sets the gRPC status codes retried when a gRPC call fails before any message (a Trailers-Only
    /// response). Defaults to [`GrpcCodes::DEFAULT`]: `UNAVAILABLE`, and `RESOURCE_EXHAUSTED` when
    /// the server names a delay; every other code is fatal. This is A6's `retryableStatusCodes`, for
    /// every method without a rule of its own ([`grpc_method`](Self::grpc_method)).
    ///
    /// `RESOURCE_EXHAUSTED` is retried only when its answer says when to come back
    /// (`grpc-retry-pushback-ms`, a `google.rpc.RetryInfo`), after that delay, wherever it is listed:
    /// otherwise it is a quota that may not come back for hours, or a request over the server's
    /// message limit, which no retry fixes (AIP-194), and it is returned at once.
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

    /// Sets the rule of one gRPC method, by its full name: `/package.Service/Method` (the path of its
    /// requests, as gRPC writes it) or `package.Service/Method` (grpc-java's `getFullMethodName()`,
    /// OpenTelemetry's `rpc.method`), the same name either way. Opt it out of retries on its status
    /// ([`GrpcMethod::no_retries`]), give it codes of its own ([`GrpcMethod::retry_on`]), or mark it
    /// safe to send twice, which also lets it be hedged ([`GrpcMethod::idempotent`]). Defaults to
    /// none: every method retries the policy's codes ([`grpc_retry_on`](Self::grpc_retry_on)). A
    /// second rule for a method replaces the first.
    ///
    /// The rule applies to every call of the method: a call is matched by the method tonic names in
    /// the request (`tonic::GrpcMethod`, which generated clients set), or else by the last two
    /// segments of its path, so that a client sending under a path prefix
    /// (`Grpc::with_origin(channel, "http://gateway/grpc".parse()?)`) is matched all the same.
    /// [`build`](Self::build) refuses any other name with [`ConfigError::GrpcMethodName`], rather
    /// than keep a rule no call could match.
    ///
    /// Opt out a method that is not idempotent and whose server may answer `UNAVAILABLE` after acting
    /// on the call (a handler that failed midway and reported its dependency's outage): a retry would
    /// act twice.
    ///
    /// ```
    /// use stagger::classify::GrpcMethod;
    /// use stagger::{ConfigError, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder()
    ///     .grpc_method("/shop.Payments/Charge", GrpcMethod::no_retries())
    ///     .build()?;
    /// # let _ = policy;
    /// let typo = RetryPolicy::builder().grpc_method("/shop.Payments.Charge", GrpcMethod::no_retries());
    /// assert_eq!(
    ///     typo.build().unwrap_err(),
    ///     ConfigError::GrpcMethodName("/shop.Payments.Charge".to_owned())
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    ///
    /// [`ConfigError::GrpcMethodName`]: crate::ConfigError::GrpcMethodName
    pub fn grpc_method(mut self, full_name: impl Into<String>, rule: GrpcMethod) -> Self {
        self.grpc_methods.push((full_name.into(), rule));
        self
    }

    /// Sets whether `max_elapsed` is also a gRPC call's deadline on the wire: sent to the server as
    /// `grpc-timeout` (what is left of it at each attempt), so that the server stops the call, a
    /// stream included, when the client's deadline passes. Defaults to `false`.
    ///
    /// By default only the caller's own deadline goes on the wire (`tonic::Request::set_timeout`, a
    /// generated client's `grpc-timeout`): `max_elapsed` bounds the retries, which end once a response
    /// arrives, while a gRPC server takes `grpc-timeout` as the deadline of the whole call; a server
    /// stream that outlives the retries would be cut. `attempt_timeout`, the client's limit on a
    /// response's head, never goes on the wire.
    ///
    /// ```
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder().grpc_send_max_elapsed(true).build()?;
    /// assert!(policy.grpc_send_max_elapsed());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn grpc_send_max_elapsed(mut self, send: bool) -> Self {
        self.settings.grpc_send_max_elapsed = send;
        self
    }
}
