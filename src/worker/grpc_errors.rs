//! `CountErrors`: counts the gRPC calls a worker answers with an error status
//! (`meters::GRPC_ERRORS`) — at once, in a trailers-only response, or inside a stream, in its
//! trailers — whichever service answered (the worker's, its observability, the health check).
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

use crate::meters;

#[derive(Clone, Copy, Debug, Default)]
pub struct CountErrorsLayer;

impl<S> Layer<S> for CountErrorsLayer {
    type Service = CountErrors<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountErrors { inner }
    }
}

#[derive(Clone, Debug)]
pub struct CountErrors<S> {
    inner: S,
}

fn is_error(headers: &HeaderMap) -> bool {
    headers
        .get("grpc-status")
        .is_some_and(|status| status.as_bytes() != b"0")
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for CountErrors<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let counted = is_error(response.headers());
            if counted {
                meters::GRPC_ERRORS.add(1);
            }
            Ok(response.map(|inner| CountedBody {
                inner: Box::pin(inner),
                counted,
            }))
        })
    }
}

/// A response body whose trailers are read for an error status.
pub struct CountedBody<B> {
    inner: Pin<Box<B>>,
    counted: bool,
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = self.inner.as_mut().poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(trailers) = frame.trailers_ref() {
                if !self.counted && is_error(trailers) {
                    self.counted = true;
                    meters::GRPC_ERRORS.add(1);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
