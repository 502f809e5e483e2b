//! The herd over loopback sockets: an axum server and reqwest clients with `stagger::RetryMiddleware`,
//! and reqwest 0.13's own retry (`reqwest::retry`) alone and beneath stagger, driven by reqwest itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use http::{HeaderMap, Response, StatusCode};
use stagger::RetryMiddleware;
use tokio::time::Instant;

use crate::args::Args;
use crate::outage::{Row, Scenario, client_seed};
use crate::report::{Figures, Finish, compare_spread, print_header, print_row};
use crate::server::{OUTAGE, RETRY_AFTER_SECONDS, Server, ServerConfig};

pub(crate) fn run(args: &Args) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let scenario = Scenario {
        clients: args.clients,
        max_delay: Duration::from_millis(500),
        server: ServerConfig {
            rate: 400.0,
            burst: 4.0,
            retry_after: false,
        },
        seed: args.seed,
    };
    println!(
        "Herd over loopback: {} reqwest clients at t = 0, axum server down for {} ms, then {} \
         requests/s (burst {}).",
        scenario.clients,
        OUTAGE.as_millis(),
        scenario.server.rate,
        scenario.server.burst
    );
    println!(
        "Each client: its own RetryMiddleware, initial 10 ms, cap {} ms. Real time.\n",
        scenario.max_delay.as_millis()
    );
    let wall = std::time::Instant::now();
    let rows = scenario.rows(false);
    run_rows(&stagger_rows(&rows), |row| {
        runtime.block_on(over_sockets(row, &scenario))
    });
    println!(
        "\nreqwest's own retry over the same outage: every reqwest 0.13 Client retries by itself \
         (reqwest::retry), at once, with no delay.\nAttempts counted by the server, per client.\n"
    );
    let full_jitter = (rows.iter())
        .find(|row| row.name == "full jitter")
        .expect("a full jitter row");
    run_rows(&reqwest_rows(full_jitter), |row| {
        runtime.block_on(over_sockets(row, &scenario))
    });
    let scenario = Scenario {
        server: ServerConfig {
            retry_after: true,
            ..scenario.server
        },
        ..scenario
    };
    println!(
        "\nRetry-After herd over loopback: the outage answers 503 with Retry-After: \
         {RETRY_AFTER_SECONDS}.\n"
    );
    let figures = run_rows(&stagger_rows(&scenario.retry_after_rows()), |row| {
        runtime.block_on(over_sockets(row, &scenario))
    });
    // Real time on a shared machine: a scheduling hiccup bunches arrivals, so no verdict here.
    compare_spread(&figures[0].1, &figures[1].1, false);
    println!("\nwall time {:.2?}", wall.elapsed());
}

/// Which retry reqwest itself does beneath the client's stagger middleware, if any.
#[derive(Debug, Clone, Copy)]
enum ReqwestRetry {
    /// A `reqwest::Client::builder()` as it comes: HTTP/2 `REFUSED_STREAM` and a graceful `GOAWAY`
    /// retried, up to 2 times, no budget; nothing an HTTP/1 `503` ever triggers.
    Defaults,
    /// `reqwest::retry::for_host(host)` with a classifier that retries a `503`, as reqwest's docs show
    /// it: a 20 % budget (10 s window, 10 retries a second in reserve), up to 2 retries, no delay.
    ForHost503,
}

impl ReqwestRetry {
    fn builder(self, host: &str) -> reqwest::ClientBuilder {
        let builder = reqwest::Client::builder().no_proxy();
        match self {
            ReqwestRetry::Defaults => builder,
            ReqwestRetry::ForHost503 => builder.retry(
                reqwest::retry::for_host(host.to_owned()).classify_fn(|attempt| {
                    if attempt.status() == Some(StatusCode::SERVICE_UNAVAILABLE) {
                        attempt.retryable()
                    } else {
                        attempt.success()
                    }
                }),
            ),
        }
    }
}

/// One line of a table over sockets: stagger's middleware (or none) over a reqwest client.
struct Client<'a> {
    name: &'static str,
    stagger: Option<&'a Row>,
    reqwest: ReqwestRetry,
}

/// stagger's rows over a reqwest client as it comes.
fn stagger_rows(rows: &[Row]) -> Vec<Client<'_>> {
    (rows.iter())
        .map(|row| Client {
            name: row.name,
            stagger: Some(row),
            reqwest: ReqwestRetry::Defaults,
        })
        .collect()
}

/// reqwest's own retry, alone and stacked under stagger's `row`.
fn reqwest_rows(row: &Row) -> Vec<Client<'_>> {
    vec![
        Client {
            name: "reqwest 0.13 retry defaults",
            stagger: None,
            reqwest: ReqwestRetry::Defaults,
        },
        Client {
            name: "reqwest for_host, 503 retried",
            stagger: None,
            reqwest: ReqwestRetry::ForHost503,
        },
        Client {
            name: "stagger over reqwest defaults",
            stagger: Some(row),
            reqwest: ReqwestRetry::Defaults,
        },
        Client {
            name: "stagger over for_host 503",
            stagger: Some(row),
            reqwest: ReqwestRetry::ForHost503,
        },
    ]
}

/// Runs each row, one after the other (they share the loopback), printing its line as soon as it
/// is done.
fn run_rows(
    rows: &[Client<'_>],
    mut run: impl FnMut(&Client<'_>) -> Figures,
) -> Vec<(&'static str, Figures)> {
    print_header();
    (rows.iter())
        .map(|row| {
            let figures = run(row);
            print_row(row.name, &figures);
            (row.name, figures)
        })
        .collect()
}

/// The header that names the client of a request, so that the server counts each client's attempts
/// whoever retried them.
const CLIENT: &str = "x-client";

/// What the handler shares: the server, the instant its outage starts (when the clients send), and
/// the attempts each client made.
struct Shared {
    server: Server,
    start: Instant,
    attempts: Vec<u32>,
}

async fn handler(State(shared): State<Arc<Mutex<Shared>>>, headers: HeaderMap) -> Response<Body> {
    let mut shared = shared.lock().expect("the server's lock");
    let client = (headers.get(CLIENT)).and_then(|value| value.to_str().ok()?.parse::<usize>().ok());
    if let Some(count) = client.and_then(|client| shared.attempts.get_mut(client)) {
        *count += 1;
    }
    let now = shared.start.elapsed();
    shared.server.answer(now).to_response()
}

async fn over_sockets(row: &Client<'_>, scenario: &Scenario) -> Figures {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("an address");
    let shared = Arc::new(Mutex::new(Shared {
        server: Server::new(scenario.server),
        start: Instant::now(),
        attempts: vec![0; scenario.clients],
    }));
    let app = axum::Router::new()
        .route("/", axum::routing::get(handler))
        .route("/warm-up", axum::routing::get(|| async {}))
        .with_state(Arc::clone(&shared));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });

    let mut clients = Vec::with_capacity(scenario.clients);
    for client in 0..scenario.clients {
        // One connection pool per client, as separate processes would have, with its connection
        // already open: the herd measures retries, not two hundred simultaneous handshakes.
        let http = (row.reqwest.builder(&address.ip().to_string()))
            .build()
            .expect("a reqwest client");
        let warm_up = http.get(format!("http://{address}/warm-up")).send().await;
        warm_up.expect("the server is up");
        let mut stack = reqwest_middleware::ClientBuilder::new(http);
        if let Some(stagger) = row.stagger {
            let policy = stagger.policy(client_seed(scenario.seed, client));
            stack = stack.with(RetryMiddleware::new(policy));
        }
        clients.push(stack.build());
    }

    // Everyone, the server's outage included, starts at one instant shortly ahead, whatever it
    // takes to spawn them.
    let start = Instant::now() + Duration::from_millis(50);
    shared.lock().expect("the server's lock").start = start;
    let url = format!("http://{address}/");
    let clients: Vec<_> = (clients.into_iter())
        .enumerate()
        .map(|(index, client)| {
            let url = url.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start).await;
                let result = client.get(&url).header(CLIENT, index).send().await;
                // Handed back as it came, a connection error say, is a give-up. Attempts are
                // filled in from the server's count.
                let ok = result.is_ok_and(|response| response.status() == StatusCode::OK);
                Finish {
                    at: start.elapsed(),
                    ok,
                    attempts: 0,
                }
            })
        })
        .collect();
    let mut finishes = Vec::with_capacity(clients.len());
    for client in clients {
        finishes.push(client.await.expect("a client task"));
    }
    let _ = stop.send(());
    let _ = server.await;
    let mut shared = shared.lock().expect("the server's lock");
    for (finish, attempts) in finishes.iter_mut().zip(&shared.attempts) {
        finish.attempts = *attempts;
    }
    Figures::new(std::mem::take(&mut shared.server.arrivals), &finishes)
}
