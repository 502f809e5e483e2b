//! `tracing` spans: one for each call, and one for each of its attempts inside it, with
//! OpenTelemetry's names (a span `tracing-opentelemetry` exports takes `otel.name` and `otel.kind`).
//!
//! An attempt's span is named after the method, as OpenTelemetry's HTTP client spans are, and is of
//! kind `client`; it carries `http.request.method`, `server.address`, `url.path` (the path, not
//! `url.full`: a query may hold secrets, and the events carry the same three), and
//! `http.request.resend_count` on resends only; `http.response.status_code` once answered. A gRPC
//! call's spans follow gRPC's A45: `Sent.<service>/<method>` for the call, `Attempt.<service>/<method>`
//! for each attempt, with `rpc.method`. The call's span is `internal`: the caller's own span (a web
//! framework's, reqwest-tracing's above the middleware) is the request's. With no subscriber, or one
//! that does not want them, a span costs its callsite's check and nothing else.

use tracing::Span;
use tracing::field::Empty;

use crate::attempt::ResendCount;
use crate::classify::RequestView;

/// The spans' target, to filter them (`stagger::span=info`).
pub(crate) const TARGET: &str = "stagger::span";

/// Whether a subscriber wants stagger's spans: the callsite's cached interest, so that a call nobody
/// traces makes no view of its request for them.
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// The span of one call, its attempts and its sleeps, with the request as `view` shows it.
pub(crate) fn call<'a>(view: impl FnOnce() -> Option<RequestView<'a>>) -> Span {
    if !enabled() {
        return Span::none();
    }
    let view = view();
    let Some(view) = view.as_ref() else {
        return tracing::info_span!(
            target: TARGET,
            "stagger.call",
            otel.kind = "internal",
            http.request.resend_count = Empty,
        );
    };
    match view.grpc_method() {
        Some(method) => tracing::info_span!(
            target: TARGET,
            "stagger.call",
            otel.name = format!("Sent.{method}"),
            otel.kind = "internal",
            rpc.system.name = "grpc",
            rpc.method = %method,
            server.address = view.host().unwrap_or_default(),
            http.request.resend_count = Empty,
        ),
        None => tracing::info_span!(
            target: TARGET,
            "stagger.call",
            otel.name = %view.method(),
            otel.kind = "internal",
            http.request.method = %view.method(),
            server.address = view.host().unwrap_or_default(),
            url.path = view.path().unwrap_or_default(),
            http.request.resend_count = Empty,
        ),
    }
}

/// The span of one attempt, or hedge, of a call, inside the call's (`parent`), with the request as
/// `view` shows it.
pub(crate) fn attempt<'a>(
    parent: &Span,
    view: impl FnOnce() -> Option<RequestView<'a>>,
    resend: Option<ResendCount>,
) -> Span {
    if !enabled() || parent.is_disabled() {
        return Span::none();
    }
    let view = view();
    let span = match view.as_ref() {
        None => tracing::info_span!(
            target: TARGET,
            parent: parent,
            "stagger.attempt",
            otel.kind = "client",
            http.request.resend_count = Empty,
        ),
        Some(view) => match view.grpc_method() {
            Some(method) => tracing::info_span!(
                target: TARGET,
                parent: parent,
                "stagger.attempt",
                otel.name = format!("Attempt.{method}"),
                otel.kind = "client",
                rpc.system.name = "grpc",
                rpc.method = %method,
                server.address = view.host().unwrap_or_default(),
                http.request.resend_count = Empty,
                http.response.status_code = Empty,
            ),
            None => tracing::info_span!(
                target: TARGET,
                parent: parent,
                "stagger.attempt",
                otel.name = %view.method(),
                otel.kind = "client",
                http.request.method = %view.method(),
                server.address = view.host().unwrap_or_default(),
                url.path = view.path().unwrap_or_default(),
                http.request.resend_count = Empty,
                http.response.status_code = Empty,
            ),
        },
    };
    if let Some(count) = resend {
        span.record("http.request.resend_count", i64::from(count.get()));
    }
    span
}

/// Records a call's resend count on the caller's span, when it declares the field.
pub(crate) fn resends(caller: &Span, attempts: u32) {
    caller.record(
        "http.request.resend_count",
        i64::from(attempts.saturating_sub(1)),
    );
}

/// Records an attempt's answer on its span.
pub(crate) fn answered(span: &Span, status: http::StatusCode) {
    span.record("http.response.status_code", i64::from(status.as_u16()));
}
