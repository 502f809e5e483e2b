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
#[inline]
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// A span of a request named `$name`, of kind `$kind`, with the request's fields as `$view` shows
/// it (a gRPC call's as A45 names it, `$prefix.<service>/<method>`), `http.request.resend_count`
/// declared, then `$extra` fields; `$parent` is `parent: span,` or nothing, for the current span.
macro_rules! request_span {
    ($name:literal, $kind:literal, $prefix:literal, $view:expr, [$($parent:tt)*], $($extra:tt)*) => {
        match $view {
            None => tracing::info_span!(
                target: TARGET,
                $($parent)*
                $name,
                otel.kind = $kind,
                http.request.resend_count = Empty,
                $($extra)*
            ),
            Some(view) => match view.grpc_method() {
                Some(method) => tracing::info_span!(
                    target: TARGET,
                    $($parent)*
                    $name,
                    otel.name = format!(concat!($prefix, ".{}"), method),
                    otel.kind = $kind,
                    rpc.system.name = "grpc",
                    rpc.method = %method,
                    server.address = view.host().unwrap_or_default(),
                    http.request.resend_count = Empty,
                    $($extra)*
                ),
                None => tracing::info_span!(
                    target: TARGET,
                    $($parent)*
                    $name,
                    otel.name = %view.method(),
                    otel.kind = $kind,
                    http.request.method = %view.method(),
                    server.address = view.host().unwrap_or_default(),
                    url.path = view.path().unwrap_or_default(),
                    http.request.resend_count = Empty,
                    $($extra)*
                ),
            },
        }
    };
}

/// The span of one call, its attempts and its sleeps, with the request as `view` shows it.
pub(crate) fn call<'a>(view: impl FnOnce() -> Option<RequestView<'a>>) -> Span {
    if !enabled() {
        return Span::none();
    }
    request_span!("stagger.call", "internal", "Sent", view().as_ref(), [],)
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
    let span = request_span!(
        "stagger.attempt",
        "client",
        "Attempt",
        view().as_ref(),
        [parent: parent,],
        http.response.status_code = Empty,
    );
    if let Some(count) = resend {
        span.record("http.request.resend_count", i64::from(count.get()));
    }
    span
}

/// Records a call's resend count on the caller's span, when it declares the field.
pub(crate) fn resends(caller: &Span, attempts: u32) {
    // Set if and only if the request was sent again, as OpenTelemetry's conventions ask.
    if attempts > 1 {
        caller.record(
            "http.request.resend_count",
            i64::from(attempts.saturating_sub(1)),
        );
    }
}

/// Records an attempt's answer on its span.
pub(crate) fn answered(span: &Span, status: http::StatusCode) {
    span.record("http.response.status_code", i64::from(status.as_u16()));
}
