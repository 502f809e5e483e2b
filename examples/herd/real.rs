//! The herd over loopback sockets: an axum server and reqwest clients with `stagger::RetryMiddleware`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use http::{Response, StatusCode};
use stagger::{RetryInfo, RetryMiddleware};
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
    run_rows(&scenario.rows(false), |row| {
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
    let figures = run_rows(&scenario.retry_after_rows(), |row| {
        runtime.block_on(over_sockets(row, &scenario))
    });
    // Real time on a shared machine: a scheduling hiccup bunches arrivals, so no verdict here.
    compare_spread(&figures[0].1, &figures[1].1, false);
    println!("\nwall time {:.2?}", wall.elapsed());
}

/// Runs each row, one after the other (they share the loopback), printing its line as soon as it
/// is done.
fn run_rows(rows: &[Row], mut run: impl FnMut(&Row) -> Figures) -> Vec<(&'static str, Figures)> {
    print_header();
    (rows.iter())
        .map(|row| {
            let figures = run(row);
            print_row(row.name, &figures);
            (row.name, figures)
        })
        .collect()
}

/// The server, and the instant its outage starts, which is when the clients send.
type Shared = Arc<Mutex<(Server, Instant)>>;

async fn handler(State(shared): State<Shared>) -> Response<Body> {
    let mut shared = shared.lock().expect("the server's lock");
    let now = shared.1.elapsed();
    shared.0.answer(now).to_response()
}

async fn over_sockets(row: &Row, scenario: &Scenario) -> Figures {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("an address");
    let shared: Shared = Arc::new(Mutex::new((Server::new(scenario.server), Instant::now())));
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
        let policy = row.policy(client_seed(scenario.seed, client));
        // One connection pool per client, as separate processes would have, with its connection
        // already open: the herd measures retries, not two hundred simultaneous handshakes.
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("a reqwest client");
        let warm_up = http.get(format!("http://{address}/warm-up")).send().await;
        warm_up.expect("the server is up");
        clients.push(
            reqwest_middleware::ClientBuilder::new(http)
                .with(RetryMiddleware::new(policy))
                .build(),
        );
    }

    // Everyone, the server's outage included, starts at one instant shortly ahead, whatever it
    // takes to spawn them.
    let start = Instant::now() + Duration::from_millis(50);
    shared.lock().expect("the server's lock").1 = start;
    let url = format!("http://{address}/");
    let clients: Vec<_> = (clients.into_iter())
        .map(|client| {
            let url = url.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start).await;
                let result = client.get(&url).send().await;
                let at = start.elapsed();
                match result {
                    Ok(response) => Finish {
                        at,
                        ok: response.status() == StatusCode::OK,
                        attempts: (response.extensions().get::<RetryInfo>())
                            .map_or(0, RetryInfo::attempts),
                    },
                    // Handed back as it came: a connection error, say. Counted as a give-up.
                    Err(_) => Finish {
                        at,
                        ok: false,
                        attempts: 0,
                    },
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
    let arrivals = std::mem::take(&mut shared.lock().expect("the server's lock").0.arrivals);
    Figures::new(arrivals, &finishes)
}
