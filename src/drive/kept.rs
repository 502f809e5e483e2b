//! What a [`Call`](super::call::Call) keeps of its results between its attempts, in a box that a call
//! which never keeps one (every first-attempt success) pays one pointer and one test for.

use super::call::Final;

/// What a call keeps of its results between its attempts.
pub(super) enum Kept<Res, E> {
    /// The last attempt's result while a retry of it is due, and whether a deadline passing hands
    /// it back (where the protocol keeps it).
    Last(Result<Res, E>, bool),
    /// The call's result, a guard having refused it, once its delay has been waited out.
    Final(Final<Res, E>),
}

/// A [`Kept`] result, or none. Empty, it drops with a test in line, whatever the result's types: a
/// fallible service's error would otherwise give every call's drop a call to the result's drop glue.
pub(super) struct Slot<Res, E>(Option<Box<Kept<Res, E>>>);

impl<Res, E> Slot<Res, E> {
    pub(super) const fn empty() -> Self {
        Self(None)
    }

    pub(super) fn put(&mut self, kept: Kept<Res, E>) {
        self.0 = Some(Box::new(kept));
    }

    pub(super) fn take(&mut self) -> Option<Kept<Res, E>> {
        self.0.take().map(|kept| *kept)
    }

    /// Drops what is kept, if anything.
    #[inline]
    pub(super) fn clear(&mut self) {
        if let Some(kept) = self.0.take() {
            drop_kept(kept);
        }
    }
}

impl<Res, E> Drop for Slot<Res, E> {
    #[inline]
    fn drop(&mut self) {
        self.clear();
    }
}

#[cold]
#[inline(never)]
fn drop_kept<Res, E>(kept: Box<Kept<Res, E>>) {
    drop(kept);
}

impl<Res, E> std::fmt::Debug for Slot<Res, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0.as_deref() {
            None => "None",
            Some(Kept::Last(..)) => "Last",
            Some(Kept::Final(_)) => "Final",
        })
    }
}
