//! Retrying any async operation under a policy: reconnect loops, restarting workers.

use std::future::Future;

use crate::classify::Outcome;
use crate::pause::Pause;
use crate::policy::{Attempt, Decision, RetryPolicy};

/// Runs `operation` until `classify` calls its result a success or fatal, or the policy stops the
/// retries, sleeping on tokio's timer between attempts. Returns the last attempt's result as it is.
///
/// The policy's backoff, `max_retries`, deadline, budget and hook apply as they do to HTTP requests;
/// the HTTP classifier does not. Every outcome is treated as idempotent: `classify` decides what may run
/// again (return [`Outcome::Fatal`] for what may not).
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, Outcome, Reason, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let addr = listener.local_addr()?;
/// let policy = RetryPolicy::builder()
///     .backoff(Backoff::exponential(Duration::from_millis(10)))
///     .max_retries(10)
///     .build()
///     .unwrap();
/// let stream = stagger::retry(
///     &policy,
///     || tokio::net::TcpStream::connect(addr),
///     |result| match result {
///         Ok(_) => Outcome::Success,
///         Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
///             Outcome::RetrySafe(Reason::Connect)
///         }
///         Err(_) => Outcome::Fatal,
///     },
/// )
/// .await?;
/// # drop(stream);
/// # Ok(())
/// # }
/// ```
pub async fn retry<T, E, Op, Fut, C>(
    policy: &RetryPolicy,
    mut operation: Op,
    mut classify: C,
) -> Result<T, E>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: FnMut(&Result<T, E>) -> Outcome,
{
    let mut state = policy.start();
    loop {
        let result = operation().await;
        match state.decide(Attempt::new(classify(&result))) {
            Decision::Retry(delay) => {
                // Drop a failed result (a half-open connection, say) before sleeping, not after.
                drop(result);
                Pause::new(delay).await;
            }
            Decision::Stop(_) => return result,
        }
    }
}
