//! `stagger::blocking::retry` over reqwest's blocking client: retries in a program with no async
//! runtime, the thread sleeping between attempts.
//!
//! ```sh
//! cargo run --example blocking                                  # httpbin's 503, retried until the deadline
//! cargo run --example blocking -- https://httpbin.org/status/200
//! ```

use std::time::{Duration, SystemTime};

use stagger::classify::DefaultClassifier;
use stagger::{Outcome, RetryPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url =
        (std::env::args().nth(1)).unwrap_or_else(|| "https://httpbin.org/status/503".to_owned());
    let client = reqwest::blocking::Client::new();
    let policy = RetryPolicy::builder()
        .max_elapsed(Duration::from_secs(10))
        .build()?;
    let result = stagger::blocking::retry(
        &policy,
        || client.get(&url).send(),
        |result| match result {
            // The default rules, and a server's Retry-After as a floor.
            Ok(response) => {
                let outcome = DefaultClassifier::status(response.status());
                let asked = stagger::server_delay(response.headers(), SystemTime::now());
                match (outcome, asked) {
                    (
                        Outcome::RetrySafe(reason) | Outcome::RetryIfIdempotent(reason),
                        Some(delay),
                    ) => Outcome::RetryAfter(reason, delay),
                    (outcome, _) => outcome,
                }
            }
            Err(error) => DefaultClassifier::error(error),
        },
    );
    match result {
        // A response still failing when the retries stop is handed back as it is.
        Ok(response) => println!("{}", response.status()),
        // "gave up after 11 attempts (max retries reached)", the deadline's, or reqwest's error.
        Err(error) => eprintln!("{error} ({:?})", error.info()),
    }
    Ok(())
}
