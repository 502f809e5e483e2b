//! The upstreams nginx proxies to, in the test process on loopback: an HTTP backend that can be stopped
//! and started again on its port, one that accepts connections and never answers, and one that cuts its
//! response short. Each is a task aborted on drop.

use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::{JoinHandle, JoinSet};

type Answer = Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>>;

/// How a backend answers a request.
pub type Handler = Arc<dyn Fn(Request<Incoming>) -> Answer + Send + Sync>;

pub fn handler<F, Fut>(answer: F) -> Handler
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    Arc::new(move |request| Box::pin(answer(request)))
}

/// An HTTP/1.1 backend on loopback.
pub struct Backend {
    addr: SocketAddr,
    handler: Handler,
    serving: Option<JoinHandle<()>>,
    /// While stopped, the port bound and not listening: a connection to it is refused as to a port
    /// nobody has, and no other server of the suite is handed it in the meantime (a `free_port`
    /// probe, another backend's bind to port 0), which would then answer for this one.
    reserved: Option<TcpSocket>,
}

impl Backend {
    pub async fn start(handler: Handler) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let serving = Some(tokio::spawn(serve(listener, Arc::clone(&handler))));
        Self {
            addr,
            handler,
            serving,
            reserved: None,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving: the listener is closed (a connection is refused) and every open connection
    /// dropped, by the time this returns. The port stays this backend's, bound and not listening.
    pub async fn stop(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.abort();
            // Cancelled: the accept loop, its listener and its set of connections are dropped.
            let _ = serving.await;
            self.reserved = Some(reserve(self.addr));
        }
    }

    /// Serves again on the same port, its reservation let go the moment before. tokio's `bind` sets
    /// `SO_REUSEADDR`, so the connections of the last run still in `TIME_WAIT` do not hold the port.
    pub async fn restart(&mut self) {
        assert!(self.serving.is_none(), "restart a stopped backend");
        self.reserved = None;
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serving = Some(tokio::spawn(serve(listener, Arc::clone(&self.handler))));
    }
}

/// `addr` bound by a socket that does not listen: a connection to it is refused. With
/// `SO_REUSEADDR`, as the listener had, so that the connections it closed, in `TIME_WAIT`, do not
/// stand in its way; a bind to port 0 is never handed a port so held, nor is a bind without it.
fn reserve(addr: SocketAddr) -> TcpSocket {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket
        .bind(addr)
        .unwrap_or_else(|why| panic!("keeping the stopped backend's port {addr}: {why}"));
    socket
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(serving) = &self.serving {
            serving.abort();
        }
    }
}

async fn serve(listener: TcpListener, handler: Handler) {
    // Owned by this task: aborting it drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let handler = Arc::clone(&handler);
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let answer = handler(request);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        // Reap the connections that ended, so that the set does not grow with the run.
        while connections.try_join_next().is_some() {}
    }
}

/// A task on loopback that is aborted on drop.
pub struct Upstream {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts every connection and reads what it is sent, and never writes a byte.
pub async fn silent() -> Upstream {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            connections.spawn(async move {
                let mut buffer = [0; 4096];
                while let Ok(1..) = stream.read(&mut buffer).await {}
            });
        }
    });
    Upstream { addr, task }
}

/// Reads each request's head and answers `200` with `Content-Length: content_length`, then sends
/// `sent` bytes of the body and closes the connection.
pub async fn cut_short(content_length: usize, sent: usize) -> Upstream {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            connections.spawn(async move {
                // The head only: nginx sends a GET without a body. Closing with unread bytes would
                // reset the connection instead of closing it.
                let mut head = Vec::new();
                let mut buffer = [0; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                     Content-Length: {content_length}\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(&vec![b'x'; sent]).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Upstream { addr, task }
}
