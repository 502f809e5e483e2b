//! How the default classifier reads an error without a response: the source chain walked outwards in,
//! each link recognised by type (`reqwest`, `hyper-util`, `hyper`, `h2`, timeouts, `io::Error` kinds).

use std::error::Error;
use std::io;

use super::{DefaultClassifier, Outcome, Reason};

impl DefaultClassifier {
    /// The default classification of an error without a response: what [`DefaultClassifier`] makes of
    /// an attempt that failed before any response.
    ///
    /// The chain is walked from the outermost error inwards, and the first error that is recognised decides.
    /// An error nothing in the chain explains is fatal: retrying what we do not understand is how retry storms
    /// start.
    ///
    /// ```
    /// use std::io;
    /// use stagger::classify::DefaultClassifier;
    /// use stagger::{Outcome, Reason};
    ///
    /// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
    /// assert_eq!(DefaultClassifier::error(&refused), Outcome::RetrySafe(Reason::Connect));
    /// let reset = io::Error::from(io::ErrorKind::ConnectionReset);
    /// assert_eq!(DefaultClassifier::error(&reset), Outcome::RetryIfIdempotent(Reason::ConnectionClosed));
    /// // Unrecognised: not retried.
    /// assert_eq!(DefaultClassifier::error(&io::Error::other("quota exceeded")), Outcome::Fatal);
    /// ```
    pub fn error(error: &(dyn Error + 'static)) -> Outcome {
        for e in chain(error) {
            if let Some(outcome) = recognise(e) {
                return outcome;
            }
        }
        Outcome::Fatal
    }
}

fn chain<'a>(error: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&e| e.source())
}

/// A connect error is safe to retry: nothing reached the server. Unless the TLS library refused the
/// server's certificate, which also surfaces as a connect error (`reqwest::Error::is_connect()`), and which
/// no retry will make valid. Only the connect error's causes are read, never the errors wrapping it.
#[cfg(all(
    any(feature = "reqwest", feature = "hyper-util"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn connect_failure(connect: &(dyn Error + 'static)) -> Outcome {
    if chain(connect).skip(1).any(is_certificate_failure) {
        Outcome::Fatal
    } else {
        Outcome::RetrySafe(Reason::Connect)
    }
}

/// Whether `e` is a TLS library's refusal of a certificate, as found under a connect error.
///
/// rustls's errors arrive inside an `io::Error` of kind `InvalidData` (tokio-rustls), which reqwest 0.13
/// wraps in another of kind `Other`; `io::Error::source()` skips the error it wraps, so the layers are
/// opened with `get_ref()`. With the feature `rustls` (implied by `reqwest`, whose default TLS it is), a
/// `rustls::Error` found there is judged by its type: a certificate it refused (`InvalidCertificate`),
/// none presented, or a peer's alert about a certificate (a server refusing ours). Any other TLS error
/// of rustls is not a certificate's.
///
/// Another TLS library's error (native-tls: OpenSSL, Security.framework, SChannel; or a rustls of
/// another major version) is a type this crate cannot name, and `dyn Error` carries a `TypeId` but no
/// type name: there one word is read, "certificate", and only from the TLS library's own error
/// (OpenSSL's reads "certificate verify failed"; not tested here, native-tls is not a dev-dependency).
///
/// An `io::Error` of a kind this classifier recognises, at any layer (a refusal, a reset, an EOF such as
/// tokio-rustls's "tls handshake eof" when a restarting server cuts the handshake short), is the
/// transport's verdict and never a certificate's; nor is the text of the client errors recognised here,
/// which includes the URL.
#[cfg(all(
    any(feature = "reqwest", feature = "hyper-util"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn is_certificate_failure(e: &(dyn Error + 'static)) -> bool {
    if is_client_error(e) {
        return false;
    }
    let mut error = e;
    while let Some(io) = error.downcast_ref::<io::Error>() {
        if recognise_io(io.kind()).is_some() {
            return false;
        }
        match io.get_ref() {
            Some(inner) => error = inner,
            None => return false,
        }
    }
    #[cfg(feature = "rustls")]
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return is_rustls_certificate_failure(tls);
    }
    error
        .to_string()
        .to_ascii_lowercase()
        .contains("certificate")
}

/// Whether rustls refused a certificate: the server's (invalid, or none), or, by its alert, the server
/// refused ours.
#[cfg(all(
    feature = "rustls",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn is_rustls_certificate_failure(error: &rustls::Error) -> bool {
    use rustls::AlertDescription as Alert;
    match error {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => true,
        rustls::Error::AlertReceived(alert) => matches!(
            alert,
            Alert::BadCertificate
                | Alert::UnsupportedCertificate
                | Alert::CertificateRevoked
                | Alert::CertificateExpired
                | Alert::CertificateUnknown
                | Alert::UnknownCA
                | Alert::CertificateRequired
                | Alert::BadCertificateStatusResponse
                | Alert::BadCertificateHashValue
                | Alert::CertificateUnobtainable
        ),
        _ => false,
    }
}

/// Whether `e` is one of the HTTP client errors [`recognise`] knows by type.
#[cfg(all(
    any(feature = "reqwest", feature = "hyper-util"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn is_client_error(e: &(dyn Error + 'static)) -> bool {
    #[cfg(feature = "reqwest")]
    if e.is::<reqwest::Error>() {
        return true;
    }
    #[cfg(feature = "hyper-util")]
    if e.is::<hyper_util::client::legacy::Error>() {
        return true;
    }
    #[cfg(feature = "hyper")]
    if e.is::<hyper::Error>() {
        return true;
    }
    #[cfg(feature = "h2")]
    if e.is::<h2::Error>() {
        return true;
    }
    false
}

fn recognise(e: &(dyn Error + 'static)) -> Option<Outcome> {
    #[cfg(all(
        feature = "reqwest",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    if let Some(reqwest) = e.downcast_ref::<reqwest::Error>() {
        if reqwest.is_connect() {
            return Some(connect_failure(e));
        }
        if reqwest.is_timeout() {
            return Some(Outcome::RetryIfIdempotent(Reason::Timeout));
        }
        if reqwest.is_builder()
            || reqwest.is_redirect()
            || reqwest.is_decode()
            || reqwest.is_status()
        {
            return Some(Outcome::Fatal);
        }
        // `is_request`/`is_body`: the cause further down the chain decides.
        return None;
    }
    #[cfg(all(feature = "reqwest", target_arch = "wasm32", target_os = "unknown"))]
    if let Some(reqwest) = e.downcast_ref::<reqwest::Error>() {
        return recognise_fetch(reqwest);
    }
    #[cfg(all(
        feature = "hyper-util",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
        if client.is_connect() {
            return Some(connect_failure(e));
        }
        return None;
    }
    #[cfg(all(
        feature = "h2",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    if let Some(e) = e.downcast_ref::<h2::Error>() {
        return recognise_h2(e);
    }
    #[cfg(all(
        feature = "hyper",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    if let Some(e) = e.downcast_ref::<hyper::Error>() {
        if e.is_timeout() {
            return Some(Outcome::RetryIfIdempotent(Reason::Timeout));
        }
        if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
            return Some(Outcome::RetryIfIdempotent(Reason::ConnectionClosed));
        }
        return None;
    }
    #[cfg(all(
        feature = "tokio",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    if e.is::<tower::timeout::error::Elapsed>() || e.is::<tokio::time::error::Elapsed>() {
        return Some(Outcome::RetryIfIdempotent(Reason::Timeout));
    }
    // A tonic `Channel`'s own time limit (`Endpoint::timeout`, or the `grpc-timeout` the request
    // carries): an attempt that timed out, as ours do, and not a cancellation (which tonic's
    // `Status` makes of it).
    #[cfg(feature = "tonic")]
    if e.is::<tonic::TimeoutExpired>() {
        return Some(Outcome::RetryIfIdempotent(Reason::Timeout));
    }
    if let Some(e) = e.downcast_ref::<io::Error>() {
        // `io::Error::source()` skips the error an `io::Error` wraps, so a refusal wrapped in
        // `io::Error::other` (as TLS and proxy layers do) would otherwise never be seen: an
        // `io::Error` of a kind that says nothing is opened, and what it wraps is read.
        return recognise_io(e.kind()).or_else(|| {
            let inner: &(dyn Error + 'static) = e.get_ref()?;
            chain(inner).find_map(recognise)
        });
    }
    None
}

/// A reqwest error in the browser, where reqwest is `fetch`: a time limit of reqwest's own is a
/// timeout, and any other failure to fetch is the browser's "network error", which says nothing of
/// why (a refused or reset connection, an unreachable or unknown host, a request the page's CORS
/// rules blocked): the request may have been sent, so it is retried only if it is idempotent.
#[cfg(all(feature = "reqwest", target_arch = "wasm32", target_os = "unknown"))]
fn recognise_fetch(reqwest: &reqwest::Error) -> Option<Outcome> {
    if reqwest.is_timeout() {
        return Some(Outcome::RetryIfIdempotent(Reason::Timeout));
    }
    if reqwest.is_builder() || reqwest.is_redirect() || reqwest.is_decode() || reqwest.is_status() {
        return Some(Outcome::Fatal);
    }
    if reqwest.is_request() {
        return Some(Outcome::RetryIfIdempotent(Reason::NetworkError));
    }
    None
}

fn recognise_io(kind: io::ErrorKind) -> Option<Outcome> {
    use io::ErrorKind::*;
    match kind {
        ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable
        | NetworkDown => Some(Outcome::RetrySafe(Reason::Connect)),
        TimedOut | WouldBlock => Some(Outcome::RetryIfIdempotent(Reason::Timeout)),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected => {
            Some(Outcome::RetryIfIdempotent(Reason::ConnectionClosed))
        }
        _ => None,
    }
}

#[cfg(all(
    feature = "h2",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn recognise_h2(e: &h2::Error) -> Option<Outcome> {
    if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        return Some(Outcome::RetrySafe(Reason::RefusedStream));
    }
    // What h2 0.4 gives a stream when a GOAWAY is received (`Streams::recv_go_away` in
    // src/proto/streams/streams.rs): the frame becomes an error with `is_go_away()`, `is_remote()` and the
    // frame's error code, which goes to exactly the streams we opened whose id is above the frame's
    // last-stream-id, and is kept as the connection's error, which every stream opened afterwards gets
    // before anything of it is sent (`ensure_no_conn_error`). The streams at or below last-stream-id are
    // left to finish; when the connection closes under one of them it gets an I/O error instead
    // (`BrokenPipe`, "stream closed because of a broken pipe", from `State::recv_eof`), which is a closed
    // connection below: retried only if idempotent. So a remote GOAWAY on a stream means the server did not
    // process it (RFC 9113 §8.7: safe to retry, any method).
    //
    // Safe is not worth it, though, for every error code: a graceful shutdown (`NO_ERROR`: a draining
    // load balancer, a restarting server) is what a new connection fixes. A GOAWAY with an error code says
    // the connection failed; when it excludes the connection's first stream, the server refused the
    // connection before acting on anything, most likely for what the client sent, and the retry would meet
    // the same refusal. Go's net/http retries the other error-code cases, but tells that one apart by the
    // stream id, which an `h2::Error` does not carry; reqwest's own retry (`reqwest::retry`) takes
    // `NO_ERROR` only. So does this: an error-code GOAWAY is fatal.
    //
    // A GOAWAY that h2 sent itself (`is_library()`: it found a protocol error in what the server sent, so
    // the server did send something, maybe for this very stream) or that the user asked for promises
    // nothing about the stream: not retried either.
    if e.is_go_away() {
        return Some(
            if e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR) {
                Outcome::RetrySafe(Reason::GoAway)
            } else {
                Outcome::Fatal
            },
        );
    }
    if e.is_io() {
        return e.get_io().and_then(|io| recognise_io(io.kind()));
    }
    None
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;
    #[cfg(any(feature = "tokio", feature = "tonic"))]
    use crate::classify::AsError;

    #[test]
    fn io_errors_anywhere_in_the_chain() {
        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl fmt::Display for Wrapper {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("client error")
            }
        }
        impl Error for Wrapper {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let wrapped = |kind| Wrapper(io::Error::new(kind, "boom"));
        assert_eq!(
            DefaultClassifier::error(&wrapped(io::ErrorKind::ConnectionRefused)),
            Outcome::RetrySafe(Reason::Connect)
        );
        assert_eq!(
            DefaultClassifier::error(&wrapped(io::ErrorKind::ConnectionReset)),
            Outcome::RetryIfIdempotent(Reason::ConnectionClosed)
        );
        assert_eq!(
            DefaultClassifier::error(&wrapped(io::ErrorKind::TimedOut)),
            Outcome::RetryIfIdempotent(Reason::Timeout)
        );
        assert_eq!(
            DefaultClassifier::error(&wrapped(io::ErrorKind::PermissionDenied)),
            Outcome::Fatal
        );
        // An `io::Error` wrapped in another, whose `source()` skips it.
        let nested = io::Error::other(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(
            DefaultClassifier::error(&nested),
            Outcome::RetrySafe(Reason::Connect)
        );
        let nested = io::Error::other(io::Error::other(io::Error::from(
            io::ErrorKind::ConnectionReset,
        )));
        assert_eq!(
            DefaultClassifier::error(&Wrapper(nested)),
            Outcome::RetryIfIdempotent(Reason::ConnectionClosed)
        );
        let nested = io::Error::other(io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(DefaultClassifier::error(&nested), Outcome::Fatal);
        // The kind is the transport's verdict, whatever the words: a refusal is not a certificate failure.
        let refused = Wrapper(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "invalid peer certificate: UnknownIssuer",
        ));
        assert_eq!(
            DefaultClassifier::error(&refused),
            Outcome::RetrySafe(Reason::Connect)
        );
    }

    #[cfg(any(feature = "reqwest", feature = "hyper-util"))]
    #[test]
    fn only_a_tls_librarys_own_error_can_say_certificate() {
        #[derive(Debug)]
        struct Rustls;
        impl fmt::Display for Rustls {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("invalid peer certificate: UnknownIssuer")
            }
        }
        impl Error for Rustls {}
        // As tokio-rustls hands rustls's errors on, and as reqwest passes them up.
        let refused = io::Error::new(io::ErrorKind::InvalidData, Rustls);
        assert!(is_certificate_failure(&refused));
        let refused = io::Error::other(refused);
        assert!(is_certificate_failure(&refused));
        assert!(is_certificate_failure(&Rustls));
        let eof = io::Error::other(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "tls handshake eof",
        ));
        assert!(!is_certificate_failure(&eof));
        let reset = io::Error::other(io::Error::new(io::ErrorKind::ConnectionReset, Rustls));
        assert!(!is_certificate_failure(&reset));
        let other = io::Error::new(
            io::ErrorKind::InvalidData,
            "received fatal alert: HandshakeFailure",
        );
        assert!(!is_certificate_failure(&other));
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn timeouts_from_tower_are_retryable_if_idempotent() {
        let boxed: Box<dyn Error + Send + Sync> = Box::new(tower::timeout::error::Elapsed::new());
        assert_eq!(
            DefaultClassifier::error(boxed.as_error()),
            Outcome::RetryIfIdempotent(Reason::Timeout)
        );
    }

    #[cfg(feature = "tonic")]
    #[test]
    fn a_tonic_channel_s_timeout_is_a_timeout() {
        let boxed: Box<dyn Error + Send + Sync> = Box::new(tonic::TimeoutExpired(()));
        assert_eq!(
            DefaultClassifier::error(boxed.as_error()),
            Outcome::RetryIfIdempotent(Reason::Timeout)
        );
    }

    #[cfg(feature = "h2")]
    #[test]
    fn refused_streams_are_safe_to_retry_and_other_resets_are_not() {
        let refused = h2::Error::from(h2::Reason::REFUSED_STREAM);
        assert_eq!(
            DefaultClassifier::error(&refused),
            Outcome::RetrySafe(Reason::RefusedStream)
        );
        let internal = h2::Error::from(h2::Reason::INTERNAL_ERROR);
        assert_eq!(DefaultClassifier::error(&internal), Outcome::Fatal);
    }

    /// rustls's errors, as tokio-rustls and reqwest wrap them, are judged by their type: a certificate
    /// refused is a certificate failure whatever its text, and another TLS error is none even if its
    /// text says "certificate".
    #[cfg(feature = "rustls")]
    #[test]
    fn rustls_errors_are_told_by_type() {
        let wrapped =
            |tls: rustls::Error| io::Error::other(io::Error::new(io::ErrorKind::InvalidData, tls));
        let unknown_issuer =
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert!(is_certificate_failure(&wrapped(unknown_issuer)));
        assert!(is_certificate_failure(&wrapped(
            rustls::Error::NoCertificatesPresented
        )));
        let expired = rustls::Error::AlertReceived(rustls::AlertDescription::CertificateExpired);
        assert!(is_certificate_failure(&wrapped(expired)));
        assert!(!is_certificate_failure(&wrapped(
            rustls::Error::DecryptError
        )));
        let worded = rustls::Error::General("no certificate store configured".into());
        assert!(!is_certificate_failure(&wrapped(worded)));
        let closing = rustls::Error::AlertReceived(rustls::AlertDescription::CloseNotify);
        assert!(!is_certificate_failure(&wrapped(closing)));
    }
}
