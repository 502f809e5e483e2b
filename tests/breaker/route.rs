//! A failure in one place costs nothing elsewhere: a path of a host answered `502` is down on its
//! own, and the events of the breaker say which entry changed (`host.scope`).

use super::*;

/// A host in process that answers `502` on one path and `200` on every other: an API gateway with
/// one backend gone.
fn gateway(
    failing: &'static str,
) -> (
    Arc<Mutex<Vec<String>>>,
    impl Service<Req, Response = Res, Error = io::Error, Future: Send> + Clone,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let service = service_fn(move |request: Req| {
        let path = request.uri().path().to_owned();
        log.lock().unwrap().push(path.clone());
        async move {
            let status = if path == failing { 502 } else { 200 };
            Ok::<_, io::Error>(
                Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap(),
            )
        }
    });
    (seen, service)
}

#[tokio::test(start_paused = true)]
async fn a_path_answered_502_is_down_on_its_own_and_the_host_s_other_paths_are_sent_at_once() {
    let events = common::capture();
    for breaker in [Breaker::default(), Breaker::fail_fast()] {
        let policy = RetryPolicy::builder().breaker(breaker).build().unwrap();
        let (seen, service) = gateway("/reports");
        let layer = RetryLayer::new(policy.clone());
        // One GET /reports, retried by the defaults: its route goes down after five 502s.
        let reports = layer
            .layer(service.clone())
            .oneshot(get_path("api.test", "/reports"));
        let reports = tokio::spawn(reports);
        // Meanwhile, and after, a GET /items every 100 ms: each sent and answered at once.
        let start = Instant::now();
        for n in 0..200 {
            tokio::time::sleep_until(start + ms(100) * n).await;
            let sent = Instant::now();
            let items = layer
                .layer(service.clone())
                .oneshot(get_path("api.test", "/items"))
                .await
                .unwrap();
            assert_eq!(items.status(), 200, "{breaker:?}, call {n}");
            assert_eq!(sent.elapsed(), Duration::ZERO, "{breaker:?}, call {n}");
        }
        assert!(
            matches!(
                policy.route_state("api.test", "/reports"),
                HostState::Down { .. }
            ),
            "{:?}",
            policy.route_state("api.test", "/reports")
        );
        assert_eq!(policy.host_state("api.test"), HostState::Up { failures: 0 });
        let report = reports.await.unwrap().unwrap();
        assert_eq!(report.status(), 502, "the last answer, intact");
        let hosts = policy.hosts();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].route.as_deref(), Some("/reports"));
        let items = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == "/items")
            .count();
        assert_eq!(items, 200);
    }
    // The events name the route's entry, not the host's: one "down" per breaker, of `/reports`.
    let changes: Vec<_> = (events.stagger().into_iter())
        .filter(|event| {
            event
                .fields
                .get("host.state")
                .is_some_and(|state| state == "down")
        })
        .map(|event| {
            let scope = event.field("host.scope").to_owned();
            let evidence = event.field("host.evidence").to_owned();
            (scope, event.field("url.path").to_owned(), evidence)
        })
        .collect();
    let route = (
        "route".to_owned(),
        "/reports".to_owned(),
        "gateway".to_owned(),
    );
    assert_eq!(changes, [route.clone(), route]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn down_probing_and_up_are_events() {
    let events = common::capture();
    let policy = once(exact_probes(Breaker::fail_fast())).build().unwrap();
    let host = Host::default();
    host.set(Health::Refusing);
    for _ in 0..5 {
        let _ = call(&policy, &host, "api.test").await;
    }
    host.set(Health::Up);
    tokio::time::sleep(ms(100)).await;
    call(&policy, &host, "api.test").await.unwrap();
    let seen: Vec<_> = (events.stagger().into_iter())
        .filter(|event| event.fields.contains_key("host.state"))
        .map(|event| {
            (
                event.level,
                event.message.clone(),
                event.field("host.state").to_owned(),
                event.field("server.address").to_owned(),
                event.field("host.scope").to_owned(),
            )
        })
        .collect();
    use tracing::Level;
    let host_state = |level, message: &str, state: &str| {
        (
            level,
            message.to_owned(),
            state.to_owned(),
            "api.test".to_owned(),
            "host".to_owned(),
        )
    };
    assert_eq!(
        seen,
        [
            host_state(Level::WARN, "host down", "down"),
            host_state(Level::DEBUG, "probing a down host", "probing"),
            host_state(Level::INFO, "host up", "up"),
        ]
    );
    // Why it went down: its last attempt was refused.
    let down = events
        .stagger()
        .into_iter()
        .find(|e| e.message == "host down");
    assert_eq!(down.unwrap().field("host.evidence"), "unanswered");
}
