//! A fake kube-apiserver serving one release's real discovery documents.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use anyhow::Context;
use clap::Parser;
use integration::fake::documents::Documents;
use integration::fake::server::{FakeState, router};

#[derive(Parser)]
#[command(name = "fake-apiserver", about = "Serves one Kubernetes release's discovery documents like kube-apiserver")]
struct Args {
    /// Name reported in every resource response (x-fake-apiserver header and body).
    #[arg(long)]
    name: String,
    /// Release folder under --fixtures, e.g. v1.30.
    #[arg(long)]
    release: String,
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Folder holding <release>/{api,apis,api__v1}.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/discovery"))]
    fixtures: PathBuf,
    /// Behave like a server older than Kubernetes 1.26: no aggregated discovery.
    #[arg(long)]
    no_aggregated_discovery: bool,
    /// List GROUP/VERSION in the unaggregated /apis without serving it (as a
    /// cluster-wide APIService served by another apiserver would be).
    #[arg(long = "list-unserved-group-version", value_name = "GROUP/VERSION")]
    listed_only: Vec<String>,
    /// Aggregated discovery version served: v2 (Kubernetes 1.30+) or v2beta1 (1.26–1.29).
    #[arg(long, default_value = "v2", value_parser = ["v2", "v2beta1"])]
    aggregated_discovery_version: String,
    /// Require `Authorization: Bearer TOKEN` on every API request (401 otherwise).
    #[arg(long, value_name = "TOKEN")]
    require_bearer_token: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let a = Args::parse();
    let docs = Documents::load(&a.fixtures, &a.release)?;
    let state = FakeState {
        name: a.name.clone(),
        aggregated: !a.no_aggregated_discovery,
        fixtures: a.fixtures.clone(),
        docs: Arc::new(RwLock::new(Arc::new(docs))),
        listed_only: a.listed_only,
        aggregated_version: a.aggregated_discovery_version.clone(),
        stats: Default::default(),
        apis_override: Default::default(),
        bearer_token: a.require_bearer_token,
    };
    let listener = tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("listening on {}", a.listen))?;
    tracing::info!(name = %a.name, release = %a.release, listen = %a.listen, aggregated = !a.no_aggregated_discovery, "fake apiserver serving");
    axum::serve(listener, router(state)).await?;
    Ok(())
}
