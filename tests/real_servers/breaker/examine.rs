//! What every run promises, checked against what it saw.

use super::*;

/// What every run is checked for, found.
pub(super) struct Outline {
    pub(super) down: Seen,
    /// The call whose probe brought the host back, and when it ended on the wall clock: the host came
    /// up in that poll.
    pub(super) good: usize,
    pub(super) up_wall: Duration,
    /// Probes sent while the host was down, the one answered included.
    pub(super) probes: usize,
    /// Probes the policy counted between the host seen down and the server back.
    pub(super) probes_until_back: u32,
}

/// Checks what every run promises, pushing each broken promise to `problems`; prints the run's
/// figures. What the scenario checks besides needs the outline.
pub(super) fn examine(
    run: &Run,
    events: &HostEvents,
    found_down_within: Duration,
    failures_to_down: std::ops::RangeInclusive<u32>,
    problems: &mut Vec<String>,
) -> Option<Outline> {
    let label = run.label();
    let mut problem = |text: String| problems.push(format!("{label}: {text}"));
    let calls = &run.calls;
    if run.mode == Mode::Off {
        problem("a run with no breaker has no breaker's promises to examine".to_owned());
        return None;
    }
    for text in events.route_problems(|n| calls.get(n).map(|call| call.attempts)) {
        problem(text);
    }
    let Some(down) = run.watched.down else {
        problem("the host was never seen down".to_owned());
        return None;
    };
    let ([(tripped, failures)], [(good, held_at_up)]) = (&events.down[..], &events.up[..]) else {
        problem(format!(
            "one \"host down\" and one \"host up\" event: {events:?}"
        ));
        return None;
    };
    let (good, held_at_up) = (*good, *held_at_up);
    if run.watched.downs != 1 {
        problem(format!("seen going down {} times", run.watched.downs));
    }
    if !failures_to_down.contains(failures) {
        problem(format!(
            "down after {failures} failures, not {failures_to_down:?}"
        ));
    }
    let found_down = down.at.saturating_sub(run.gone);
    if found_down > found_down_within {
        problem(format!(
            "found down {found_down:?} after the server went, over {found_down_within:?}"
        ));
    }
    let HostState::Down {
        probes: probes_by_return,
        ..
    } = run.returned.state
    else {
        problem(format!(
            "not down when the server came back: {:?}",
            run.returned.state
        ));
        return None;
    };
    let probes_until_back = probes_by_return.saturating_sub(down.probes);

    // Back: the first probe after the server returned was answered, within a probe's delay.
    let good_call = &calls[good];
    let (up, up_wall) = (good_call.ended, good_call.ended_wall);
    let back = run.returned.seen.at;
    let up_after = up.checked_sub(back);
    match up_after {
        None => problem(format!("up {:?} before the server was back", back - up)),
        Some(after) if after > MAX_PROBE_DELAY + EVERY + SLACK => {
            problem(format!("up {after:?} after the server was back"))
        }
        _ => {}
    }
    if good_call.status != Some(200) || events.probes_of(good) == 0 {
        problem(format!(
            "the call that brought the host up went as a probe and ended 200: {} ({} probes)",
            good_call.summary(),
            events.probes_of(good)
        ));
    }
    if run.watched.up.is_none_or(|seen| seen < up) {
        problem(format!(
            "the watch saw it up at {:?}, the probe answered at {up:?}",
            run.watched.up
        ));
    }

    // Probing: one per delay, as the policy counts them and as its events name them.
    let probes = events.probes.len();
    let watched = run.watched.probes.len();
    if !(probes.saturating_sub(1)..=probes).contains(&watched) {
        problem(format!(
            "the policy counted {watched} probes, its events name {probes}"
        ));
    }
    let gaps: Vec<Duration> = (run.watched.probes.windows(2))
        .map(|pair| pair[1] - pair[0])
        .collect();
    for (k, &gap) in gaps.iter().enumerate() {
        // The gap before probe k + 2: the (k + 1)-th delay, drawn from [d/2, d]; the watch sees each
        // probe within a millisecond or so of its going. A probe that fails fast waits for the next
        // call after its delay.
        let delay = probe_delay(k + 1);
        if gap + ms(10) < delay / 2 || gap > delay + EVERY + SLACK {
            problem(format!(
                "probe {} went {gap:?} after the one before, its delay {delay:?} jittered to [{:?}, {delay:?}]",
                k + 2,
                delay / 2
            ));
        }
    }

    // While down: calls sent after the host was seen down and before it was up went as probes, or
    // failed at once unsent (fail fast), or were held until it was up (hold).
    let while_down = |call: &&Ended| call.sent >= down.at && call.sent < up;
    let mut rejected = Vec::new();
    for (n, call) in calls.iter().enumerate() {
        let probe = events.probes_of(n) > 0;
        match (run.mode, &call.rejected) {
            (Mode::FailFast, Some((reason, host, next_probe))) => {
                let named = host.as_deref() == Some(run.host.as_str());
                // A call not sent fails at once; one whose retry was not sent, with no answer to
                // hand back, fails with the same error after its attempts.
                let unsent = call.attempts == 0;
                if unsent {
                    rejected.push(call.took);
                }
                if *reason != StopReason::HostDown
                    || !named
                    || unsent && (!call.at_once || *next_probe > MAX_PROBE_DELAY)
                {
                    problem(format!(
                        "call {n} failed naming {} down, at once if unsent, and its next probe within 1 s: {} ({reason}, {host:?}, next probe in {next_probe:?})",
                        run.host,
                        call.summary()
                    ));
                }
            }
            (Mode::Hold, Some(_)) => problem(format!("call {n}, held, failed: {}", call.summary())),
            (Mode::Off, Some(_)) => unreachable!("returned above"),
            (_, None) if call.attempts == 0 => {
                problem(format!("a call not sent, not rejected: {}", call.summary()))
            }
            (_, None) => {}
        }
        if while_down(&call) && !probe && call.attempts > 0 {
            let held_until_up = run.mode == Mode::Hold && call.ended >= up;
            if !held_until_up {
                problem(format!(
                    "call {n}, sent while the host was down, neither probe nor {}: {}",
                    match run.mode {
                        Mode::FailFast => "failed fast",
                        Mode::Hold => "held until it was up",
                        Mode::Off => unreachable!("returned above"),
                    },
                    call.summary()
                ));
            }
        }
        if call.sent > up && call.status != Some(200) {
            problem(format!(
                "call {n}, sent after the host was up: {}",
                call.summary()
            ));
        }
        if run.mode == Mode::Hold && call.status != Some(200) && call.sent > run.gone && !probe {
            // Held calls ride the outage out; a probe's own 502 may end its call (a retry not
            // granted by the budget, say).
            problem(format!(
                "call {n}, held, did not end 200: {}",
                call.summary()
            ));
        }
    }
    if quantile(&rejected, 0.99) >= REJECTED_WITHIN {
        problem(format!(
            "rejected calls took {:?} at the 99th percentile",
            quantile(&rejected, 0.99)
        ));
    }

    let first_200 = (calls.iter())
        .filter(|call| call.status == Some(200) && call.ended >= back)
        .map(|call| call.ended - back)
        .min();
    let held: Vec<Duration> = (calls.iter().enumerate())
        .filter(|(n, call)| while_down(call) && events.probes_of(*n) == 0)
        .map(|(_, call)| call.took)
        .collect();
    let after_up: Vec<&Ended> = calls.iter().filter(|call| call.sent > up).collect();
    let ok_after_up = after_up.iter().filter(|c| c.status == Some(200)).count();
    let mode = match run.mode {
        Mode::FailFast => format!(
            "{} calls rejected unsent in p50 {:?}, p99 {:?}, max {:?}",
            rejected.len(),
            quantile(&rejected, 0.5),
            quantile(&rejected, 0.99),
            quantile(&rejected, 1.0)
        ),
        Mode::Off => unreachable!("returned above"),
        Mode::Hold => format!(
            "{} calls held (at most {} at once, {held_at_up} when it came up), for p50 {:?}, max \
             {:?}; {} calls did not end 200",
            held.len(),
            run.watched.held,
            quantile(&held, 0.5),
            quantile(&held, 1.0),
            calls.iter().filter(|call| call.status != Some(200)).count(),
        ),
    };
    eprintln!(
        "breaker {label}: {} calls; found down {found_down:?} after the server went, by call {tripped} \
         ({failures} failures in a row); while down ({:?}): {probes} probes ({probes_until_back} until \
         the server was back), gaps {:?} to {:?}; {mode}; up {:?} after the server was back, first \
         200 {first_200:?} after; {ok_after_up}/{} calls sent after it ended 200; {}",
        calls.len(),
        up - down.at,
        gaps.iter().min().copied().unwrap_or_default(),
        gaps.iter().max().copied().unwrap_or_default(),
        up_after.unwrap_or_default(),
        after_up.len(),
        events.routes_line(),
    );
    Some(Outline {
        down,
        good,
        up_wall,
        probes,
        probes_until_back,
    })
}

/// What iptables counted between the host seen down and the server back, against the probes.
pub(super) fn examine_syns(run: &Run, outline: &Outline, syns: &str, problems: &mut Vec<String>) {
    let label = run.label();
    let (Some(at_down), Some(at_back)) = (outline.down.reached, run.returned.seen.reached) else {
        problems.push(format!("{label}: the SYNs were not read"));
        return;
    };
    let while_down = at_back - at_down;
    eprintln!(
        "breaker {label}: {at_down} SYNs {syns} before the host was found down, {while_down} while it \
         was down, against {} probes; {} more probes until it was up",
        outline.probes_until_back,
        outline.probes - outline.probes_until_back as usize,
    );
    // Only the probes: one SYN each, as the attempt timeout ends an attempt before the SYN is sent
    // again.
    if while_down != u64::from(outline.probes_until_back) {
        problems.push(format!(
            "{label}: {while_down} SYNs while the host was down, {} probes",
            outline.probes_until_back
        ));
    }
    if at_down < u64::from(FAILURES) {
        problems.push(format!("{label}: down after {at_down} SYNs"));
    }
    // The first probe after the server is back finds it, unless one goes before it listens.
    let after_back = outline.probes - outline.probes_until_back as usize;
    if !(1..=2).contains(&after_back) {
        problems.push(format!(
            "{label}: {after_back} probes from the server back to the host up"
        ));
    }
}

pub(crate) fn assert_kept(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} broken promises:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
