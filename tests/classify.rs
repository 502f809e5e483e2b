//! The default classifier against the errors of real failures on loopback, through real reqwest clients:
//! a connection closed before the response, a TLS handshake cut short, a SOCKS5 proxy's refusal, a
//! certificate the client does not trust, and HTTP/2 `GOAWAY` from the server and from the client.
//!
//! Each test asserts what [`DefaultClassifier::error`](stagger::classify::DefaultClassifier::error) says of the real error, that the error is the one
//! the test is about (by the words of the library that made it), and, through `RetryMiddleware`, how many
//! times the server saw the request. Only the features `reqwest` and `reqwest-middleware` are needed: what
//! the README's quick start enables.
#![cfg(feature = "reqwest")]

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::Method;
use stagger::classify::DefaultClassifier;
use stagger::{Outcome, Reason};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How many connections, handshakes or requests a fake server has seen.
#[derive(Clone, Default)]
struct Seen(Arc<AtomicUsize>);

impl Seen {
    fn one(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// The count so far, starting again from zero.
    fn take(&self) -> usize {
        self.0.swap(0, Ordering::SeqCst)
    }
}

/// Serves every connection to a fresh loopback port with `handle`.
async fn serve<F, Fut>(handle: F) -> (SocketAddr, Seen)
where
    F: Fn(TcpStream, Seen) -> Fut + Send + 'static,
    Fut: Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let counter = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(handle(stream, counter.clone()));
        }
    });
    (addr, seen)
}

fn client() -> reqwest::ClientBuilder {
    // A proxy from the environment must not stand between the client and the loopback server.
    reqwest::Client::builder().no_proxy()
}

/// Every error in the chain, outermost first, as they display.
fn chain(error: &(dyn Error + 'static)) -> String {
    std::iter::successors(Some(error), |&e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" <- ")
}

/// Asserts that some error in the chain displays as `words` say, so that the test is about that error.
fn assert_says(error: &(dyn Error + 'static), words: &str) {
    let chain = chain(error);
    assert!(chain.contains(words), "{words:?} in {chain:?}");
}

/// The h2 error in the chain.
fn h2_error<'a>(error: &'a (dyn Error + 'static)) -> &'a h2::Error {
    std::iter::successors(Some(error), |&e| e.source())
        .find_map(|e| e.downcast_ref::<h2::Error>())
        .unwrap_or_else(|| panic!("an h2 error in {:?}", chain(error)))
}

async fn send(client: &reqwest::Client, method: Method, url: &str) -> reqwest::Error {
    match client.request(method, url).body("x").send().await {
        Ok(response) => panic!("an error, not {response:?}"),
        Err(e) => e,
    }
}

#[cfg(feature = "reqwest-middleware")]
mod through_the_middleware {
    use std::time::Duration;

    use reqwest::Method;
    use stagger::{Backoff, RetryMiddleware, RetryPolicy, RetryReport};

    /// Sends one request through `RetryMiddleware` (two retries, 1 ms apart, no budget) and expects it to
    /// fail.
    pub async fn send(client: reqwest::Client, method: Method, url: &str) {
        let policy = RetryPolicy::builder()
            .backoff(Backoff::fixed(Duration::from_millis(1)))
            .budget(None)
            .max_retries(2)
            .build()
            .unwrap();
        let client = reqwest_middleware::ClientBuilder::new(client)
            .with(RetryMiddleware::new(policy))
            .build();
        let result = client.request(method, url).body("x").send().await;
        assert!(result.is_err(), "an error, not {result:?}");
    }

    /// Sends one GET through `RetryMiddleware` (as [`send`] does) and returns the attempts it made,
    /// expecting it to fail.
    pub async fn attempts(client: reqwest::Client, url: &str) -> u32 {
        let policy = RetryPolicy::builder()
            .backoff(Backoff::fixed(Duration::from_millis(1)))
            .budget(None)
            .max_retries(2)
            .build()
            .unwrap();
        let client = reqwest_middleware::ClientBuilder::new(client)
            .with(RetryMiddleware::new(policy))
            .build();
        let report = RetryReport::new();
        let result = client.get(url).with_extension(report.clone()).send().await;
        assert!(result.is_err(), "an error, not {result:?}");
        report.get().expect("the report is written").attempts()
    }
}

/// Reads an HTTP/1.1 request, head and `Content-Length` body, so that closing the connection afterwards
/// is a clean close (FIN) rather than a reset.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut received = Vec::new();
    let mut buf = [0; 1024];
    let head_end = loop {
        if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        received.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |value| value.trim().parse().unwrap());
    let mut rest = vec![0; (head_end + length).saturating_sub(received.len())];
    stream.read_exact(&mut rest).await?;
    Ok(())
}

#[tokio::test]
async fn a_connection_closed_before_the_response_is_retried_for_a_get_and_not_for_a_post() {
    let (addr, requests) = serve(|mut stream, requests| async move {
        read_request(&mut stream).await?;
        requests.one();
        stream.shutdown().await
    })
    .await;
    let url = format!("http://{addr}/");

    let error = send(&client().build().unwrap(), Method::GET, &url).await;
    // hyper's `IncompleteMessage`, under reqwest's and hyper-util's errors.
    assert_says(&error, "connection closed before message completed");
    assert_eq!(
        DefaultClassifier::error(&error),
        Outcome::RetryIfIdempotent(Reason::ConnectionClosed)
    );
    assert_eq!(requests.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(client().build().unwrap(), Method::GET, &url).await;
        assert_eq!(requests.take(), 3, "a GET is retried");
        through_the_middleware::send(client().build().unwrap(), Method::POST, &url).await;
        assert_eq!(requests.take(), 1, "a POST without Idempotency-Key is not");
    }
}

/// Reads one TLS record (the ClientHello) and closes, as a server restarting mid-handshake does.
async fn read_client_hello(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut header = [0; 5];
    stream.read_exact(&mut header).await?;
    assert_eq!(header[0], 22, "a handshake record");
    let mut hello = vec![0; u16::from_be_bytes([header[3], header[4]]).into()];
    stream.read_exact(&mut hello).await?;
    Ok(())
}

#[tokio::test]
async fn a_tls_handshake_cut_short_is_a_connect_error_safe_to_retry() {
    let (addr, handshakes) = serve(|mut stream, handshakes| async move {
        read_client_hello(&mut stream).await?;
        handshakes.one();
        stream.shutdown().await
    })
    .await;
    let url = format!("https://{addr}/");

    let error = send(&client().build().unwrap(), Method::GET, &url).await;
    // tokio-rustls's words for the peer closing the connection during the handshake.
    assert_says(&error, "tls handshake eof");
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(
        DefaultClassifier::error(&error),
        Outcome::RetrySafe(Reason::Connect)
    );
    assert_eq!(handshakes.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(client().build().unwrap(), Method::GET, &url).await;
        assert_eq!(handshakes.take(), 3);
        // Nothing was sent: even a POST is retried.
        through_the_middleware::send(client().build().unwrap(), Method::POST, &url).await;
        assert_eq!(handshakes.take(), 3);
    }
}

/// What a fake SOCKS5 proxy does.
#[derive(Clone, Copy)]
enum Socks5 {
    /// Accepts "no authentication", then refuses the CONNECT (RFC 1928, REP `0x05`).
    RefuseConnect,
    /// Reads the greeting and closes, as a proxy restarting mid-negotiation does.
    CloseAfterGreeting,
}

async fn socks5_proxy(mut stream: TcpStream, seen: Seen, then: Socks5) -> std::io::Result<()> {
    let mut greeting = [0; 2];
    stream.read_exact(&mut greeting).await?;
    assert_eq!(greeting[0], 5, "SOCKS version 5");
    let mut methods = vec![0; greeting[1].into()];
    stream.read_exact(&mut methods).await?;
    assert!(
        methods.contains(&0),
        "offers no authentication: {methods:?}"
    );
    if let Socks5::CloseAfterGreeting = then {
        seen.one();
        return stream.shutdown().await;
    }
    stream.write_all(&[5, 0]).await?;

    let mut request = [0; 4];
    stream.read_exact(&mut request).await?;
    assert_eq!(request[..3], [5, 1, 0], "CONNECT");
    let address = match request[3] {
        1 => 4,
        4 => 16,
        3 => usize::from(stream.read_u8().await?),
        other => panic!("address type {other}"),
    };
    let mut address_and_port = vec![0; address + 2];
    stream.read_exact(&mut address_and_port).await?;
    seen.one();
    stream.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
    stream.shutdown().await
}

/// A client through a fake SOCKS5 proxy, the number of times it was asked to connect, and a URL: the
/// proxy fails before anything is connected to it.
async fn through_socks5(then: Socks5) -> (impl Fn() -> reqwest::Client, Seen, &'static str) {
    let (proxy, seen) = serve(move |stream, seen| socks5_proxy(stream, seen, then)).await;
    let client = move || {
        client()
            .proxy(reqwest::Proxy::all(format!("socks5://{proxy}")).unwrap())
            .build()
            .unwrap()
    };
    (client, seen, "http://127.0.0.1:9/")
}

#[tokio::test]
async fn a_socks5_proxys_refusal_is_a_connect_error_safe_to_retry() {
    let (socks, connects, url) = through_socks5(Socks5::RefuseConnect).await;

    let error = send(&socks(), Method::GET, url).await;
    // hyper-util's words for REP 0x05.
    assert_says(&error, "SOCKS error: connection refused");
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(
        DefaultClassifier::error(&error),
        Outcome::RetrySafe(Reason::Connect)
    );
    assert_eq!(connects.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(socks(), Method::GET, url).await;
        assert_eq!(connects.take(), 3);
    }
}

#[tokio::test]
async fn a_socks5_negotiation_cut_short_is_a_connect_error_safe_to_retry() {
    let (socks, greetings, url) = through_socks5(Socks5::CloseAfterGreeting).await;

    let error = send(&socks(), Method::GET, url).await;
    // hyper-util's words for any I/O error while negotiating with the proxy.
    assert_says(&error, "SOCKS error: io error during SOCKS handshake");
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(
        DefaultClassifier::error(&error),
        Outcome::RetrySafe(Reason::Connect)
    );
    assert_eq!(greetings.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(socks(), Method::POST, url).await;
        assert_eq!(
            greetings.take(),
            3,
            "nothing was sent: even a POST is retried"
        );
    }
}

/// A self-signed server certificate for 127.0.0.1, valid until 2126, made for this test with
/// `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500
/// -subj "/CN=stagger test (self-signed)" -addext "subjectAltName=IP:127.0.0.1"
/// -addext "basicConstraints=critical,CA:FALSE" -addext "extendedKeyUsage=serverAuth"
/// -addext "keyUsage=critical,digitalSignature"` (and `openssl pkcs8 -topk8 -nocrypt` for the key). Not
/// a CA's, so that the only thing wrong with it is that no one the client trusts issued it.
const SELF_SIGNED_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIB1zCCAXygAwIBAgIUcUIm2m0u5GTfx2tXVsN/O3oiFW4wCgYIKoZIzj0EAwIw
JTEjMCEGA1UEAwwac3RhZ2dlciB0ZXN0IChzZWxmLXNpZ25lZCkwIBcNMjYxMjA0
MTQzMTQ2WhgPMjEyNjExMTAxNDMxNDZaMCUxIzAhBgNVBAMMGnN0YWdnZXIgdGVz
dCAoc2VsZi1zaWduZWQpMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE1v3Va9wB
r3tEiM6I6n93Jt728UqTNmtaaXahk91m8dUe1NAaHlEA6gCz08lbk2zC1wMmZ9uk
N4qdnCuNvqepEaOBhzCBhDAdBgNVHQ4EFgQUJxzihwyTqGYoRbtWGt+v2o3pfeYw
HwYDVR0jBBgwFoAUJxzihwyTqGYoRbtWGt+v2o3pfeYwDwYDVR0RBAgwBocEfwAA
ATAMBgNVHRMBAf8EAjAAMBMGA1UdJQQMMAoGCCsGAQUFBwMBMA4GA1UdDwEB/wQE
AwIHgDAKBggqhkjOPQQDAgNJADBGAiEA+HkmqynWFvSKT5LKV3gGKuDWjM/7ZQnb
2yxURsdplT0CIQCbdItcazpJrlHTmheRiRwHuKjorRWGYjWTYwRAfb7v5w==
-----END CERTIFICATE-----
";

/// The private key of [`SELF_SIGNED_CERT`] (PKCS #8).
const SELF_SIGNED_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgXVHuJimJlZiLbX1x
vm5GkfINWLQEnYKjGxOYKlq4B36hRANCAATW/dVr3AGve0SIzojqf3cm3vbxSpM2
a1ppdqGT3Wbx1R7U0BoeUQDqALPTyVuTbMLXAyZn26Q3ip2cK42+p6kR
-----END PRIVATE KEY-----
";

fn self_signed_acceptor() -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls::ServerConfig;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let cert = CertificateDer::from_pem_slice(SELF_SIGNED_CERT.as_bytes()).unwrap();
    let key = PrivateKeyDer::from_pem_slice(SELF_SIGNED_KEY.as_bytes()).unwrap();
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[tokio::test]
async fn a_certificate_the_client_does_not_trust_is_fatal_and_sent_once() {
    let acceptor = self_signed_acceptor();
    let (addr, handshakes) = serve(move |stream, handshakes| {
        let acceptor = acceptor.clone();
        async move {
            handshakes.one();
            // The client aborts the handshake with an alert.
            let _ = acceptor.accept(stream).await;
            Ok(())
        }
    })
    .await;
    let url = format!("https://{addr}/");

    let error = send(&client().build().unwrap(), Method::GET, &url).await;
    // rustls's words for `InvalidCertificate(UnknownIssuer)`, inside an `io::Error`.
    assert_says(&error, "invalid peer certificate: UnknownIssuer");
    // Why the certificate rule must come before the connect rule.
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(DefaultClassifier::error(&error), Outcome::Fatal);
    assert_eq!(handshakes.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(client().build().unwrap(), Method::GET, &url).await;
        assert_eq!(handshakes.take(), 1, "one handshake, not retried");
    }
}

/// What a fake HTTP/2 server does once it has read the `HEADERS` of the client's first stream (id 1).
#[derive(Clone, Copy)]
enum AfterHeaders {
    /// `GOAWAY` with this error code and last-stream-id 0: stream 1 was not processed. Then waits for the
    /// client to close.
    GoAwayUnprocessed(u32),
    /// `GOAWAY(NO_ERROR)` with last-stream-id 1: stream 1 may still be answered; then closes without.
    GoAwayProcessedThenClose,
    /// A `PING` frame of 7 bytes, which the client must answer with its own `GOAWAY(PROTOCOL_ERROR)`.
    MalformedPing,
}

/// One HTTP/2 frame: length, type, flags, stream id, payload (RFC 9113 §4.1).
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = Vec::from(&length[1..]);
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

const SETTINGS: u8 = 0x4;
const HEADERS: u8 = 0x1;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const ACK: u8 = 0x1;

const NO_ERROR: u32 = 0x0;
const INTERNAL_ERROR: u32 = 0x2;

fn goaway(last_stream_id: u32, code: u32) -> Vec<u8> {
    let mut payload = last_stream_id.to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    frame(GOAWAY, 0, 0, &payload)
}

/// Reads until the peer closes, so that closing afterwards does not reset what it has yet to read.
async fn drain(stream: &mut (impl AsyncRead + Unpin)) {
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut sink)).await;
}

/// An HTTP/2 server (prior knowledge, no TLS) written frame by frame, so that what it sends and when is
/// exact: a server library would process the stream, or not, on its own schedule.
async fn h2_server(
    mut stream: TcpStream,
    requests: Seen,
    then: AfterHeaders,
) -> std::io::Result<()> {
    let mut preface = [0; 24];
    stream.read_exact(&mut preface).await?;
    assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    stream.write_all(&frame(SETTINGS, 0, 0, &[])).await?;
    loop {
        let mut header = [0; 9];
        stream.read_exact(&mut header).await?;
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]);
        let mut payload = vec![0; length as usize];
        stream.read_exact(&mut payload).await?;
        match (header[3], header[4]) {
            (SETTINGS, flags) if flags & ACK == 0 => {
                stream.write_all(&frame(SETTINGS, ACK, 0, &[])).await?;
            }
            (HEADERS, _) => break,
            _ => {}
        }
    }
    requests.one();
    match then {
        AfterHeaders::GoAwayUnprocessed(code) => {
            stream.write_all(&goaway(0, code)).await?;
            drain(&mut stream).await;
        }
        AfterHeaders::GoAwayProcessedThenClose => {
            stream.write_all(&goaway(1, NO_ERROR)).await?;
            stream.shutdown().await?;
            drain(&mut stream).await;
        }
        AfterHeaders::MalformedPing => {
            stream.write_all(&frame(PING, 0, 0, &[0; 7])).await?;
            drain(&mut stream).await;
        }
    }
    Ok(())
}

async fn h2_serve(then: AfterHeaders) -> (String, Seen) {
    let (addr, requests) = serve(move |stream, requests| h2_server(stream, requests, then)).await;
    (format!("http://{addr}/"), requests)
}

fn h2_client() -> reqwest::Client {
    // reqwest itself retries a remote `GOAWAY(NO_ERROR)` and `REFUSED_STREAM` twice by default
    // (`reqwest::retry`), which would multiply the requests each test counts.
    client()
        .http2_prior_knowledge()
        .retry(reqwest::retry::never())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_servers_goaway_for_a_stream_it_did_not_process_is_safe_to_retry() {
    let (url, requests) = h2_serve(AfterHeaders::GoAwayUnprocessed(NO_ERROR)).await;

    let error = send(&h2_client(), Method::GET, &url).await;
    let h2 = h2_error(&error);
    assert!(h2.is_go_away() && h2.is_remote(), "{h2:?}");
    assert_eq!(h2.reason(), Some(h2::Reason::NO_ERROR));
    assert_eq!(
        DefaultClassifier::error(&error),
        Outcome::RetrySafe(Reason::GoAway)
    );
    assert_eq!(requests.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        // Not processed: even a POST is retried.
        through_the_middleware::send(h2_client(), Method::POST, &url).await;
        assert_eq!(requests.take(), 3);
    }
}

#[tokio::test]
async fn a_servers_goaway_with_an_error_code_is_not_retried() {
    let (url, requests) = h2_serve(AfterHeaders::GoAwayUnprocessed(INTERNAL_ERROR)).await;

    let error = send(&h2_client(), Method::GET, &url).await;
    let h2 = h2_error(&error);
    assert!(h2.is_go_away() && h2.is_remote(), "{h2:?}");
    assert_eq!(h2.reason(), Some(h2::Reason::INTERNAL_ERROR));
    assert_eq!(DefaultClassifier::error(&error), Outcome::Fatal);
    assert_eq!(requests.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(h2_client(), Method::GET, &url).await;
        assert_eq!(requests.take(), 1, "even a GET is sent once");
    }
}

#[tokio::test]
async fn a_stream_the_server_kept_through_its_goaway_and_then_dropped_is_a_closed_connection() {
    let (url, requests) = h2_serve(AfterHeaders::GoAwayProcessedThenClose).await;

    let error = send(&h2_client(), Method::GET, &url).await;
    // h2's words for a stream still open when the connection closed (`State::recv_eof`).
    assert_says(&error, "stream closed because of a broken pipe");
    assert_eq!(
        DefaultClassifier::error(&error),
        Outcome::RetryIfIdempotent(Reason::ConnectionClosed)
    );
    assert_eq!(requests.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(h2_client(), Method::GET, &url).await;
        assert_eq!(requests.take(), 3, "a GET is retried");
        through_the_middleware::send(h2_client(), Method::POST, &url).await;
        assert_eq!(
            requests.take(),
            1,
            "a POST the server may have processed is not"
        );
    }
}

#[tokio::test]
async fn a_goaway_the_client_sent_is_not_retried() {
    let (url, requests) = h2_serve(AfterHeaders::MalformedPing).await;

    let error = send(&h2_client(), Method::GET, &url).await;
    let h2 = h2_error(&error);
    assert!(h2.is_go_away() && h2.is_library(), "{h2:?}");
    assert_eq!(DefaultClassifier::error(&error), Outcome::Fatal);
    assert_eq!(requests.take(), 1);

    #[cfg(feature = "reqwest-middleware")]
    {
        through_the_middleware::send(h2_client(), Method::GET, &url).await;
        assert_eq!(requests.take(), 1, "even a GET is sent once");
    }
}

// What reqwest refuses before sending, after the exchange, or on the way, and a name that does not
// resolve.
#[path = "classify/refused.rs"]
mod refused;
