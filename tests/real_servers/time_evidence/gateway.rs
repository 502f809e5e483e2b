//! nginx in front of a backend on loopback that goes for 10 s (nginx answers `502`), or that turns
//! from about a millisecond to 300 ms for 10 s and answers all the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;

use super::*;
use crate::nginx::Nginx;
use crate::upstream::{Backend, handler};

/// How long the slow backend takes to answer while it is slow.
const SLOW: Duration = ms(300);

/// A backend answering `ok` after the delay in `delay` (milliseconds), behind nginx.
async fn behind_nginx(delay: Arc<AtomicU64>) -> (Backend, Nginx) {
    let backend = Backend::start(handler(move |_| {
        let delay = ms(delay.load(Ordering::Relaxed));
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Response::new(Full::new(Bytes::from("ok")))
        }
    }))
    .await;
    let nginx = Nginx::start(&format!(
        "location / {{ proxy_pass http://{}; }}",
        backend.addr()
    ))
    .await;
    (backend, nginx)
}

pub(crate) async fn behind_nginx_answering_502_through_a_10_s_restart_no_held_call_with_time_left_fails()
 {
    let recorded = Recorded::record_with_attempts();
    let (mut backend, nginx) = behind_nginx(Arc::default()).await;
    // The policy of the other scenarios with each breaker, and the defaults (hold, a 30 s deadline,
    // 10 s attempts).
    let mut setups = setups("502-", &MODES, |_| nginx.addr().to_string());
    for adapter in Adapter::BOTH {
        let policy = RetryPolicy::default();
        let host = nginx.addr().to_string();
        let mut setup = Setup::of(adapter, Mode::Hold, policy, host, EVERY, "502-defaults-");
        setup.start = setups[0].start;
        setups.push(setup);
    }
    let start = setups[0].start;
    let outage = async {
        tokio::time::sleep_until(start + WARM).await;
        backend.stop().await;
        let gone = start.elapsed();
        tokio::time::sleep_until(start + WARM + OUTAGE).await;
        let returned: Vec<Returned> = (setups.iter())
            .map(|setup| setup.end_outage(None, || {}))
            .collect();
        // Listening again at once: `restart` binds before its first await.
        futures::FutureExt::now_or_never(backend.restart()).expect("restarted at once");
        (gone, start.elapsed(), returned)
    };
    let (ran, (gone, back, returned)) = tokio::join!(drive(&setups), outage);
    let runs = runs_of(setups, ran, returned, &recorded, (gone, back));
    let mut problems = Vec::new();
    for run in &runs {
        examine_502(run, &mut problems);
    }
    assert_kept(&problems);
}

pub(crate) async fn a_host_that_turns_from_1_ms_to_300_ms_is_never_found_down_and_every_call_ends_200()
 {
    let recorded = Recorded::record_with_attempts();
    let delay = Arc::new(AtomicU64::new(0));
    let (_backend, nginx) = behind_nginx(Arc::clone(&delay)).await;
    let setups = setups("slow-", &MODES, |_| nginx.addr().to_string());
    let start = setups[0].start;
    let slow = async {
        tokio::time::sleep_until(start + WARM).await;
        delay.store(SLOW.as_millis() as u64, Ordering::Relaxed);
        let gone = start.elapsed();
        tokio::time::sleep_until(start + WARM + OUTAGE).await;
        let returned: Vec<Returned> = (setups.iter())
            .map(|setup| setup.end_outage(None, || {}))
            .collect();
        delay.store(0, Ordering::Relaxed);
        (gone, start.elapsed(), returned)
    };
    let (ran, (gone, back, returned)) = tokio::join!(drive(&setups), slow);
    let runs = runs_of(setups, ran, returned, &recorded, (gone, back));
    let mut problems = Vec::new();
    for run in &runs {
        let label = format!("slow host {}", run.label());
        let mut problem = |text: String| problems.push(format!("{label}: {text}"));
        let failed: Vec<&Ended> = (run.calls.iter())
            .filter(|call| call.status != Some(200))
            .collect();
        if run.watched.downs != 0 || host_down(&run.calls) != 0 {
            problem(format!(
                "{}, {} calls ended on the breaker",
                downs(&run.watched),
                host_down(&run.calls)
            ));
        }
        if !failed.is_empty() {
            problem(format!(
                "{} calls did not end 200: {}",
                failed.len(),
                (failed.iter().take(5))
                    .map(|call| call.summary())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let took = |from: Duration, until: Duration| -> Vec<Duration> {
            (run.calls.iter())
                .filter(|call| call.sent >= from && call.sent < until)
                .map(|call| call.took)
                .collect()
        };
        let (before, slow) = (took(ms(500), run.gone), took(run.gone, run.back));
        let retried = run.calls.iter().filter(|call| call.attempts > 1).count();
        eprintln!(
            "time evidence {label}: {} calls, {} attempts; {} ({} calls ended on the breaker); \
             {} calls not 200; {retried} retried; latency before p50 {}, p99 {}; while slow p50 {}, \
             p99 {}, max {:?}",
            run.calls.len(),
            run.attempts.len(),
            downs(&run.watched),
            host_down(&run.calls),
            failed.len(),
            millis(quantile(&before, 0.5)),
            millis(quantile(&before, 0.99)),
            millis(quantile(&slow, 0.5)),
            millis(quantile(&slow, 0.99)),
            quantile(&slow, 1.0),
        );
    }
    assert_kept(&problems);
}

/// What one run through nginx's `502`s promises, and its figures.
fn examine_502(run: &Run, problems: &mut Vec<String>) {
    let label = format!("502 restart {} {}", run.setup.tag, run.label());
    let mut problem = |text: String| problems.push(format!("{label}: {text}"));
    let attempts = |n: usize| run.calls.get(n).map(|call| call.attempts);
    for text in run.events.route_problems(attempts) {
        problem(text);
    }
    if let (Some(text), _) = run.held_problem() {
        problem(text);
    }
    let (not_ok, ok_after) = run.ok_after(run.returned.seen.at);
    if let Some(text) = not_ok {
        problem(text);
    }
    let figures = format!(
        "{} calls, {} attempts ({} while the backend was gone); {} probes; {}; failures: {}; \
         {ok_after}",
        run.calls.len(),
        run.attempts.len(),
        within(&run.attempts, run.gone, run.back),
        run.events.probes.len(),
        run.events.routes_line(),
        failures_by_reason(run.calls.iter()),
    );
    if run.setup.mode == Mode::Off {
        if run.watched.down.is_some() {
            problem(format!("found down with no breaker: {:?}", run.watched));
        }
        eprintln!("time evidence {label}: {figures}");
        return;
    }
    let Some((down, _)) = run.down_and_up() else {
        problem("never found down".to_owned());
        return;
    };
    let (late, up_after) = run.up_after(run.returned.seen.at);
    if let Some(text) = late {
        problem(text);
    }
    let mode = match run.setup.mode {
        Mode::Hold => run.held_line(),
        _ => format!("{} calls ended on the breaker", host_down(&run.calls)),
    };
    eprintln!(
        "time evidence {label}: {figures}; found down {:?} after the backend went, {up_after}; \
         {mode}",
        down.saturating_sub(run.gone),
    );
}
