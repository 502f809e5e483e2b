//! The classic herd again, each library as it comes: the peers' defaults, their delays computed by
//! their own crates ([`peers`](crate::peers)), beside stagger's defaults.

use std::cell::RefCell;
use std::rc::Rc;

use http::{Request, StatusCode, Uri};
use stagger::{Backoff, RetryBudget, RetryLayer, RetryPolicy};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use super::{Scenario, client_seed, tally};
use crate::args::Args;
use crate::peers::{Peer, PeerClient};
use crate::report::{Figures, Finish, print_header, print_row};
use crate::server::Server;
use crate::sim::{Network, SimulatedServer, mix, run_in_parallel};

/// The stream of the peers' jitter seeds, apart from stagger's.
const PEER_JITTER: u64 = 3;

struct Row {
    name: &'static str,
    kind: Kind,
}

enum Kind {
    Peer(Peer),
    /// stagger's `RetryLayer`, one per client, with the policy built from the client's seed.
    Stagger(fn(u64) -> RetryPolicy),
}

fn rows() -> Vec<Row> {
    let peer = |name, peer| Row {
        name,
        kind: Kind::Peer(peer),
    };
    vec![
        peer("3 retries at once", Peer::AtOnce),
        peer("reqwest-retry 0.9 defaults", Peer::ReqwestRetry),
        peer("tower 0.5 backoff, 3 retries", Peer::Tower),
        peer("backon 1 defaults", Peer::Backon),
        Row {
            name: "stagger defaults",
            kind: Kind::Stagger(|seed| {
                let builder = RetryPolicy::builder().seed(seed);
                builder.build().expect("a valid policy")
            }),
        },
        // The defaults before they were measured against real outages: three retries.
        Row {
            name: "stagger, max_retries(3)",
            kind: Kind::Stagger(|seed| {
                let builder = RetryPolicy::builder().max_retries(3).seed(seed);
                builder.build().expect("a valid policy")
            }),
        },
        // Fewer attempts and a lower peak here, for a longer tail.
        Row {
            name: "stagger, base 3",
            kind: Kind::Stagger(|seed| {
                let backoff =
                    Backoff::exponential(RetryPolicy::DEFAULT_INITIAL_DELAY).with_base(3.0);
                let builder = RetryPolicy::builder().backoff(backoff).seed(seed);
                builder.build().expect("a valid policy")
            }),
        },
        // The metastable scenario's budget without its floor: what it costs a client of one request.
        Row {
            name: "stagger budget, no floor",
            kind: Kind::Stagger(|seed| {
                let budget = RetryBudget::builder().min_per_second(0).build();
                let builder = RetryPolicy::builder().budget(budget.expect("a budget"));
                builder.seed(seed).build().expect("a valid policy")
            }),
        },
        Row {
            name: "stagger adaptive_throttle(2.0)",
            kind: Kind::Stagger(|seed| {
                let builder = RetryPolicy::builder().adaptive_throttle(2.0).seed(seed);
                builder.build().expect("a valid policy")
            }),
        },
    ]
}

/// Runs the herd of `scenario` with each library's defaults and prints its table. Returns how many
/// rows were simulated.
pub(super) fn run(args: &Args, scenario: &Scenario) -> usize {
    println!(
        "\nDefaults herd: the same herd, each client with a library's defaults (the peers' 3 retries; \
         stagger's 10, its budget and 10 s attempt timeout as they come); the peers' delays from their \
         own crates.\n"
    );
    if args.peer_rng {
        println!("The peers' jitter: their crates' own generators, different in every run.\n");
    }
    let rows = rows();
    print_header();
    let simulate =
        |runtime: &Runtime, row: &Row| runtime.block_on(simulate(row, scenario, args.peer_rng));
    run_in_parallel(&rows, args.threads, simulate, |index, figures| {
        print_row(rows[index].name, &figures);
    });
    rows.len()
}

/// Runs every client of one row against a fresh server, in virtual time.
async fn simulate(row: &Row, scenario: &Scenario, peer_rng: bool) -> Figures {
    let start = Instant::now();
    let network = Rc::new(RefCell::new(Network::new(
        Server::new(scenario.server),
        start,
        scenario.seed,
    )));
    let finishes = Rc::new(RefCell::new(Vec::with_capacity(scenario.clients)));
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            let clients: Vec<_> = (0..scenario.clients)
                .map(|client| {
                    let seed = client_seed(scenario.seed, client);
                    let server = SimulatedServer::connect(&network);
                    let uri = Uri::from_static("http://herd.example/");
                    let finishes = Rc::clone(&finishes);
                    match row.kind {
                        Kind::Stagger(policy) => {
                            let service = RetryLayer::new(policy(seed)).layer(server);
                            let mut request = Request::new(());
                            *request.uri_mut() = uri;
                            tokio::task::spawn_local(async move {
                                let response = (service.oneshot(request).await)
                                    .expect("the server always answers within the time limits");
                                finishes.borrow_mut().push(Finish::new(start, &response));
                            })
                        }
                        Kind::Peer(peer) => {
                            let seed = mix(seed ^ PEER_JITTER);
                            let peer = PeerClient::new(peer, (!peer_rng).then_some(seed));
                            tokio::task::spawn_local(async move {
                                let ended = peer.call(server, &uri, None).await;
                                finishes.borrow_mut().push(Finish {
                                    at: start.elapsed(),
                                    ok: ended.status == Some(StatusCode::OK),
                                    attempts: ended.attempts,
                                });
                            })
                        }
                    }
                })
                .collect();
            for client in clients {
                client.await.expect("a client");
            }
            net.abort();
        })
        .await;
    tally(&network, &finishes)
}
