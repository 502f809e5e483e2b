//! What an adapter holds of a request while its attempts run: a copy for the retries, a recording, or
//! what judging needs of a request sent without a copy.

use crate::engine::state::RetryState;
use crate::replay::{Recorded, Replay, Sent};

/// What an adapter holds of the request while an attempt is in flight: a copy, from which the retries
/// are copied again, or, once no retry can follow, only what judging the result needs.
///
/// Retries send copies of the held copy, which stays in place: a future waiting in a busy runtime is
/// cold in the cache, and moving a request out of it and a new copy back in cost more than the copy
/// itself (`examples/herd/`, 10 000 clients). The last attempt a request can have sends the held copy
/// itself, so that no copy is made that no retry could use.
pub(crate) enum Held<Req, K> {
    /// A copy for the retries; or, before the first attempt, the request itself while it waits for
    /// its host ([`Held::unsent`]).
    Copy(Req),
    /// A request whose body could not be copied, being recorded as it streams out: the retries are
    /// made from the recording (the policy's `replay_buffer`), or, if the body was dropped unread,
    /// with the body itself.
    ///
    /// Boxed: rare, and it would otherwise make every request's future a word larger.
    Recording(Box<Recorded<Req>>),
    /// What judging needs of a request sent without a copy.
    Kept(K),
}

impl<Req, K> Held<Req, K> {
    /// Keeps a copy of `request` when a retry may follow it — or, for a body that cannot be copied and
    /// a policy with a `replay_buffer`, starts recording it — and only what judging needs otherwise: no
    /// copy is made for a request that can never be retried.
    pub(crate) fn prepare<R>(retry: &RetryState, replay: &R, request: &mut Req) -> Self
    where
        R: Replay<Req, Kept = K>,
    {
        if retry.may_retry() {
            if let Some(copy) = replay.clone_request(request) {
                return Held::Copy(copy);
            }
            let limit = retry.policy().replay_buffer();
            if limit > 0
                && let Some(recorded) = replay.start_recording(request, limit)
            {
                return Held::Recording(Box::new(recorded));
            }
        }
        Held::Kept(replay.keep(request))
    }

    /// The request itself, not sent yet, while it waits for its host before its first attempt:
    /// nothing is copied until it goes ([`take_unsent`](Self::take_unsent)), so that a request held
    /// for a down host, or failed before it is sent, costs no copy. (A variant of its own would make
    /// every `Held` a word larger.)
    #[cfg(feature = "tower")]
    pub(crate) fn unsent(request: Req) -> Self {
        Held::Copy(request)
    }

    /// The request [`unsent`](Self::unsent) held, to be sent now, and what is held of it from then
    /// on (see [`prepare`](Self::prepare)).
    #[cfg(feature = "tower")]
    pub(crate) fn take_unsent<R>(&mut self, retry: &RetryState, replay: &R) -> Option<Req>
    where
        R: Replay<Req, Kept = K>,
    {
        let Held::Copy(request) = self else {
            return None;
        };
        let prepared = Held::prepare(retry, replay, request);
        match std::mem::replace(self, prepared) {
            Held::Copy(request) => Some(request),
            Held::Recording(_) | Held::Kept(_) => None,
        }
    }

    /// Whether a retry can be made from what is held: a copy, a recording of a whole body, or a body
    /// that came back unread.
    #[inline]
    pub(crate) fn replayable(&self) -> bool {
        match self {
            Held::Copy(_) => true,
            Held::Recording(recorded) => recorded.replayable(),
            Held::Kept(_) => false,
        }
    }

    /// The request as judging sees it.
    pub(crate) fn sent(&self) -> Sent<'_, Req, K> {
        match self {
            Held::Copy(copy) => Sent::Copy(copy),
            Held::Recording(recorded) => Sent::Copy(recorded.request()),
            Held::Kept(kept) => Sent::Kept(kept),
        }
    }

    /// The request for a retry: a copy of the held one while `again` (another retry may follow it), and
    /// the held one itself otherwise. `None` if there is nothing to send — the held request cannot be
    /// copied, or none is held — in which case the call ends with the result in hand.
    pub(crate) fn next<R>(&mut self, again: bool, replay: &R) -> Option<Req>
    where
        R: Replay<Req, Kept = K>,
    {
        let held = match self {
            Held::Copy(held) => held,
            Held::Recording(recorded) if recorded.is_whole() => {
                // The recording becomes the held copy, from which this retry and any later one are
                // copied.
                let replayed = replay.rebuild(recorded)?;
                *self = Held::Copy(replayed);
                let Held::Copy(held) = self else {
                    return None;
                };
                held
            }
            Held::Recording(recorded) => {
                // The body came back unread (`None` if it did not: it did not end within the limit),
                // and goes out itself, recorded again if another retry may follow.
                let mut request = replay.rebuild(recorded)?;
                let limit = recorded.limit();
                *self = match again.then(|| replay.start_recording(&mut request, limit)) {
                    Some(Some(recorded)) => Held::Recording(Box::new(recorded)),
                    Some(None) | None => Held::Kept(replay.keep(&request)),
                };
                return Some(request);
            }
            Held::Kept(_) => return None,
        };
        if again {
            return replay.clone_request(held);
        }
        let kept = Held::Kept(replay.keep(held));
        match std::mem::replace(self, kept) {
            Held::Copy(request) => Some(request),
            Held::Recording(_) | Held::Kept(_) => None,
        }
    }
}
