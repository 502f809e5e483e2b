//! `reqwest::Client` as a service of [`WithExtensions`]: the request sent, its extensions left
//! behind (feature `reqwest`).

use std::task::{Context, Poll};

use ::tower::Service;

use crate::replay::WithExtensions;

/// Sends the request as `Service<reqwest::Request>` does; its extensions, which were for the
/// layers above (the retry layer's [`Overrides`](crate::Overrides), a
/// [`ResendCount`](crate::ResendCount)), stay behind.
impl Service<WithExtensions> for reqwest::Client {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = <reqwest::Client as Service<reqwest::Request>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<reqwest::Request>::poll_ready(self, cx)
    }

    fn call(&mut self, request: WithExtensions) -> Self::Future {
        let (request, _extensions) = request.into_parts();
        Service::<reqwest::Request>::call(self, request)
    }
}
