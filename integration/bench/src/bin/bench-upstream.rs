//! The benchmark's upstream: minimal, fast apiservers (hyper, one thread).
//! Each `--server NAME=ADDR=DIR` serves `DIR/api.json` and `DIR/apis.json` as
//! aggregated discovery (ETag, 304) and answers everything else with a tiny
//! 200 naming itself (`x-upstream`) and the route the front door chose
//! (`x-routed`, from `x-mvp-route`), so the benchmark can check routing
//! without parsing bodies.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use mvp_bench::NOT_ROUTED;
use mvp_ext_proc::apidiscovery::JSON_CONTENT_TYPE as AGGREGATED;
use mvp_ext_proc::apidiscovery::etag::quoted_sha512;

#[derive(Parser)]
struct Args {
    /// NAME=ADDR=DIR, repeatable.
    #[arg(long = "server", required = true)]
    servers: Vec<String>,
}

struct Doc {
    body: Bytes,
    etag: String,
}

impl Doc {
    fn new(body: Vec<u8>) -> Doc {
        let etag = quoted_sha512(&body);
        Doc { body: body.into(), etag }
    }
}

struct Server {
    name: String,
    api: Doc,
    apis: RwLock<Arc<Doc>>,
}

fn discovery(req: &Request<Incoming>, doc: &Doc) -> Response<Full<Bytes>> {
    let inm = req.headers().get("if-none-match").and_then(|v| v.to_str().ok());
    let builder = Response::builder().header("etag", &doc.etag).header("vary", "Accept").header("cache-control", "public");
    let resp = if inm == Some(doc.etag.as_str()) {
        builder.status(StatusCode::NOT_MODIFIED).body(Full::new(Bytes::new()))
    } else {
        builder.header("content-type", AGGREGATED).body(Full::new(doc.body.clone()))
    };
    resp.unwrap_or_default()
}

async fn handle(server: Arc<Server>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path();
    let aggregated = req.headers().get("accept").and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("as=APIGroupDiscoveryList"));
    let resp = match (req.method().as_str(), path) {
        ("GET", "/api") if aggregated => discovery(&req, &server.api),
        ("GET", "/apis") if aggregated => {
            let doc = server.apis.read().map(|d| d.clone()).unwrap_or_else(|p| p.into_inner().clone());
            discovery(&req, &doc)
        }
        ("POST", "/__bench/apis") => {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            *server.apis.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Doc::new(body.to_vec()));
            Response::new(Full::new(Bytes::from_static(b"replaced\n")))
        }
        _ => {
            // Always there (`-`: no route header), so every door's answers
            // are the same size, whether its filter routes by the header or
            // not (the native build).
            let routed = req.headers().get(mvp_contract::headers::ROUTE).cloned().unwrap_or(hyper::header::HeaderValue::from_static(NOT_ROUTED));
            let b = Response::builder().header("content-type", "text/plain").header("x-upstream", &server.name).header("x-routed", routed);
            b.body(Full::new(Bytes::from_static(b"ok\n"))).unwrap_or_default()
        }
    };
    Ok(resp)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let mut tasks = Vec::new();
    for spec in &args.servers {
        let mut parts = spec.splitn(3, '=');
        let (Some(name), Some(addr), Some(dir)) = (parts.next(), parts.next(), parts.next()) else {
            anyhow::bail!("--server {spec:?}: expected NAME=ADDR=DIR");
        };
        let addr: SocketAddr = addr.parse().with_context(|| format!("--server {spec}"))?;
        let dir = PathBuf::from(dir);
        let read = |f: &str| std::fs::read(dir.join(f)).with_context(|| format!("{}/{f}", dir.display()));
        let server = Arc::new(Server { name: name.to_string(), api: Doc::new(read("api.json")?), apis: RwLock::new(Arc::new(Doc::new(read("apis.json")?))) });
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let _ = tcp.set_nodelay(true);
                let server = server.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(server.clone(), req));
                    // HTTP/1.1 and HTTP/2 (prior knowledge), as kube-apiserver:
                    // the front door's apiserver clusters speak HTTP/2.
                    let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                        .await;
                });
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
