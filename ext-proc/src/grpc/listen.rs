//! Where the gRPC services Envoy calls listen: `IP:PORT` (TCP, with
//! TCP_NODELAY) or `unix:PATH` (a Unix domain socket, for an Envoy on the
//! same host or in the same pod through a shared `emptyDir`).
//!
//! `--grpc-listen` may be given more than once: the same services on every
//! address (e.g. a Unix socket for the Envoy beside mvp-ext-proc and TCP for
//! a debugging client). `mvp-ext-proc envoy-config --ext-proc` takes the same
//! two forms and renders a `pipe` address for `unix:PATH`.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context;

use crate::stopping::{DRAIN_LIMIT, Stopping};

/// The prefix that marks a Unix socket path in `--grpc-listen` and
/// `--ext-proc`.
pub const UNIX_PREFIX: &str = "unix:";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrpcListen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl FromStr for GrpcListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix(UNIX_PREFIX) {
            return unix_path(path).map(|p| GrpcListen::Unix(p.to_path_buf()));
        }
        s.parse().map(GrpcListen::Tcp).map_err(|_| format!("{s:?}: expected IP:PORT or {UNIX_PREFIX}/ABSOLUTE/PATH"))
    }
}

/// An absolute path that fits `sockaddr_un` (108 bytes with the NUL):
/// a relative path would depend on each process's working directory, and a
/// longer one fails only at bind time, in the other process.
pub fn unix_path(path: &str) -> Result<&Path, String> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(format!("{UNIX_PREFIX}{path}: the socket path must be absolute"));
    }
    if path.len() > 107 {
        return Err(format!("{UNIX_PREFIX}{path}: the socket path is longer than 107 bytes"));
    }
    Ok(p)
}

impl fmt::Display for GrpcListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrpcListen::Tcp(a) => write!(f, "{a}"),
            GrpcListen::Unix(p) => write!(f, "{UNIX_PREFIX}{}", p.display()),
        }
    }
}

pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, BoundSocket),
}

/// The socket file this process created, identified by its inode so that a
/// file someone else put at the path later is never removed.
pub struct BoundSocket {
    path: PathBuf,
    ino: u64,
}

impl BoundSocket {
    /// Removes the socket file after a graceful stop: a stale file would
    /// make Envoy's reconnects fail with "connection refused" instead of
    /// "no such file", and tools that watch for the file would see a
    /// server that is not there.
    fn remove(&self) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino)
            && let Err(e) = std::fs::remove_file(&self.path)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove the gRPC socket");
        }
    }
}

impl GrpcListen {
    /// Binds the address. A Unix socket left behind by an earlier run (no
    /// one accepts on it) is replaced; one that a running process serves is
    /// "in use", as a TCP port would be; any other file at the path is an
    /// error, never removed.
    pub async fn bind(&self) -> anyhow::Result<Listener> {
        let what = || format!("--grpc-listen {self}: cannot listen");
        match self {
            GrpcListen::Tcp(a) => Ok(Listener::Tcp(tokio::net::TcpListener::bind(a).await.with_context(what)?)),
            GrpcListen::Unix(p) => {
                use std::os::unix::fs::FileTypeExt;
                match std::fs::symlink_metadata(p) {
                    Ok(m) if m.file_type().is_socket() => {
                        if std::os::unix::net::UnixStream::connect(p).is_ok() {
                            anyhow::bail!("--grpc-listen {self}: in use (another process accepts on this socket)");
                        }
                        std::fs::remove_file(p).with_context(what)?
                    }
                    Ok(_) => anyhow::bail!("--grpc-listen {self}: the path exists and is not a socket"),
                    Err(_) => {}
                }
                let l = tokio::net::UnixListener::bind(p).with_context(what)?;
                use std::os::unix::fs::MetadataExt;
                let ino = std::fs::symlink_metadata(p).with_context(what)?.ino();
                Ok(Listener::Unix(l, BoundSocket { path: p.clone(), ino }))
            }
        }
    }

    /// The same address given twice would leave one listener unreachable
    /// (a socket path) or fail late (a port): refused up front.
    pub fn check_distinct(all: &[GrpcListen]) -> Result<(), String> {
        for (i, a) in all.iter().enumerate() {
            if all.iter().skip(i + 1).any(|b| b == a) {
                return Err(format!("--grpc-listen {a} given twice"));
            }
        }
        Ok(())
    }
}

impl Listener {
    /// Serves `router` on this listener until the stop, then lets open
    /// streams finish for at most [`DRAIN_LIMIT`]; a Unix socket's file is
    /// removed when it stops. With `tls`, a TCP listener serves mutual TLS
    /// only ([`super::tls`]); a Unix socket is never TLS.
    pub async fn serve(
        self,
        router: tonic::transport::server::Router,
        stopping: Stopping,
        tls: Option<tokio::sync::watch::Receiver<std::sync::Arc<rustls::ServerConfig>>>,
    ) -> Result<(), tonic::transport::Error> {
        let (served, bound) = match (self, tls) {
            (Listener::Tcp(l), Some(tls)) => {
                let incoming = super::tls::handshakes(tcp_incoming(l), tls);
                (drained(router.serve_with_incoming_shutdown(incoming, stopping.clone().stopped()), stopping).await, None)
            }
            (Listener::Tcp(l), None) => (drained(router.serve_with_incoming_shutdown(tcp_incoming(l), stopping.clone().stopped()), stopping).await, None),
            (Listener::Unix(l, bound), _) => {
                (drained(router.serve_with_incoming_shutdown(unix_incoming(l), stopping.clone().stopped()), stopping).await, Some(bound))
            }
        };
        if let Some(b) = bound {
            b.remove();
        }
        served
    }
}

/// A graceful serve, cut off [`DRAIN_LIMIT`] after the stop: a client that
/// holds a stream open must not keep the process from exiting.
async fn drained(serve: impl Future<Output = Result<(), tonic::transport::Error>>, stopping: Stopping) -> Result<(), tonic::transport::Error> {
    tokio::select! {
        served = serve => served,
        () = stopping.drain_expired() => {
            tracing::warn!(limit = ?DRAIN_LIMIT, "gRPC streams still open after the drain limit: stopping anyway");
            Ok(())
        }
    }
}

/// Accepted connections with TCP_NODELAY: every ext_proc and GetTable
/// message is small and latency-bound.
pub(crate) fn tcp_incoming(l: tokio::net::TcpListener) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(l, |l| async move {
        loop {
            match l.accept().await {
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    return Some((Ok(s), l));
                }
                Err(e) => after_failed_accept(&e).await,
            }
        }
    })
}

fn unix_incoming(l: tokio::net::UnixListener) -> impl futures::Stream<Item = std::io::Result<tokio::net::UnixStream>> {
    futures::stream::unfold(l, |l| async move {
        loop {
            match l.accept().await {
                Ok((s, _)) => return Some((Ok(s), l)),
                Err(e) => after_failed_accept(&e).await,
            }
        }
    })
}

/// How long the accept loop waits after running out of descriptors or
/// memory (hyper's and Go's net/http's choice: 1 s).
pub const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_secs(1);

/// Out of file descriptors or kernel memory: another accept would fail at
/// once, with the pending connection still queued.
fn exhausted(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// After an accept failed: one connection's failure (reset before it was
/// accepted, …) lets the next accept go on at once; exhaustion waits
/// [`ACCEPT_BACKOFF`] — retried at once it would fail at once, a core spun
/// on a full descriptor table while open streams starve. The error is never
/// handed to the server, which would only drop it and ask again.
async fn after_failed_accept(e: &std::io::Error) {
    if exhausted(e) {
        tracing::warn!(error = %e, backoff = ?ACCEPT_BACKOFF, "gRPC listener cannot accept a connection (descriptors or memory exhausted); waiting");
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    } else {
        tracing::debug!(error = %e, "gRPC listener: a connection failed before it was accepted");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms_and_rejects_the_rest() {
        let cases: &[(&str, Option<GrpcListen>)] = &[
            ("127.0.0.1:18000", Some(GrpcListen::Tcp("127.0.0.1:18000".parse().unwrap()))),
            ("[::1]:18000", Some(GrpcListen::Tcp("[::1]:18000".parse().unwrap()))),
            ("unix:/run/mvp/grpc.sock", Some(GrpcListen::Unix("/run/mvp/grpc.sock".into()))),
            ("unix:grpc.sock", None),
            ("unix:", None),
            ("localhost:18000", None),
            ("18000", None),
        ];
        for (input, want) in cases {
            assert_eq!(input.parse::<GrpcListen>().ok(), *want, "{input}");
        }
        let long = format!("unix:/{}", "x".repeat(107));
        assert!(long.parse::<GrpcListen>().unwrap_err().contains("longer than 107"));
    }

    #[test]
    fn only_exhaustion_backs_off() {
        let os = std::io::Error::from_raw_os_error;
        for (e, backs_off) in [(os(libc::EMFILE), true), (os(libc::ENFILE), true), (os(libc::ENOBUFS), true), (os(libc::ENOMEM), true), (os(libc::ECONNABORTED), false), (os(libc::EPERM), false)] {
            assert_eq!(exhausted(&e), backs_off, "{e}");
        }
    }

    #[test]
    fn displays_as_parsed() {
        for s in ["127.0.0.1:18000", "unix:/run/mvp/grpc.sock"] {
            assert_eq!(s.parse::<GrpcListen>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn the_same_address_twice_is_refused() {
        let parse = |v: &[&str]| v.iter().map(|s| s.parse::<GrpcListen>().unwrap()).collect::<Vec<_>>();
        assert!(GrpcListen::check_distinct(&parse(&["127.0.0.1:1", "unix:/a.sock"])).is_ok());
        let err = GrpcListen::check_distinct(&parse(&["unix:/a.sock", "127.0.0.1:1", "unix:/a.sock"])).unwrap_err();
        assert_eq!(err, "--grpc-listen unix:/a.sock given twice");
    }

    #[tokio::test]
    async fn replaces_a_stale_socket_and_never_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("grpc.sock");
        let at = GrpcListen::Unix(sock.clone());
        let serving = at.bind().await.unwrap();
        let err = at.bind().await.err().expect("a served socket is in use").to_string();
        assert!(err.contains("in use"), "{err}");
        drop(serving);
        assert!(sock.exists(), "the socket file outlives its listener");
        drop(at.bind().await.expect("a stale socket is replaced"));

        // Stopped gracefully, it removes its own socket file ...
        let router = tonic::transport::Server::builder().add_routes(tonic::service::Routes::default());
        let (stop, stopped) = crate::stopping::Stop::new();
        stop.stop();
        at.bind().await.unwrap().serve(router.clone(), stopped.clone(), None).await.unwrap();
        assert!(!sock.exists(), "removed after a graceful stop");
        // ... but not one that replaced it meanwhile.
        let first = at.bind().await.unwrap();
        std::fs::remove_file(&sock).unwrap();
        let second = at.bind().await.unwrap();
        first.serve(router, stopped, None).await.unwrap();
        assert!(sock.exists(), "another listener's socket is left alone");
        drop(second);

        let file = dir.path().join("not-a-socket");
        std::fs::write(&file, "keep").unwrap();
        let err = GrpcListen::Unix(file.clone()).bind().await.err().unwrap().to_string();
        assert!(err.contains("not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    }
}
