//! `mvp-ext-proc serve`: membership → sync (member states) → the planes
//! that follow them (endpoints, table, merged `/apis` and OpenAPI, state
//! file) → the gRPC listener Envoy calls (ADS, `GetTable` for the wasm
//! refresher, ext_proc for `/apis`) and the admin listener.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::apiservers::{self, ApiserverSpec};
use crate::discover::{DiscoveryOptions, Transport};
use crate::grpc::listen::GrpcListen;
use crate::metrics::Metrics;
use crate::sync::{States, SyncOptions, Syncer};
use crate::tls::PeerTls;
use crate::stopping::{DRAIN_LIMIT, Stop};
use crate::xds::{AdsServer, ClusterOptions, Snapshot, XdsPublisher};
use crate::membership::kube::KubeOptions;
use crate::merge::apis_plane::DiscoveryPlane;
use crate::merge::openapi_plane::OpenApiPlane;
use crate::openapi::MergedOpenApi;
use crate::operate::admin::{self, Published};
use crate::state_file::persist::Persisted;
use crate::state_file::plane::{StateFilePlane, persisting};
use crate::table::plane::{TablePlane, Tables};
use crate::{membership, rewrite, table};

pub struct ServeOptions {
    pub apiservers: Vec<ApiserverSpec>,
    /// One or more: the same services on each.
    pub grpc_listen: Vec<GrpcListen>,
    pub metrics_listen: Option<SocketAddr>,
    pub refresh_interval: Duration,
    pub state_file: Option<PathBuf>,
    pub departed_retention: Duration,
    /// Membership from the cluster, besides the seed.
    pub membership: Option<KubeOptions>,
    pub discovery: DiscoveryOptions,
    pub discovery_token_file: Option<PathBuf>,
    pub peer_tls: Option<PeerTls>,
    /// The requestheader user name header discovery requests carry with the
    /// proxy client certificate.
    pub username_header: String,
    /// The requestheader group header the front door forwards (with the
    /// user name header: who sent a request the skew log counts).
    pub group_header: String,
    /// ADS streams end after this long (`xds::ads`); `None` never.
    pub ads_max_stream_age: Option<Duration>,
    /// At most this many ADS streams at once (`MAX_ADS_STREAMS` by default).
    pub max_ads_streams: usize,
    /// At most this many `GetTable` long polls held at once
    /// (`MAX_HELD_TABLE_CALLS` by default).
    pub max_held_table_calls: usize,
    /// `--apiserver-http2-max-streams-per-connection`.
    pub apiserver_http2_max_streams: u32,
    /// `--apiserver-h2c`: plaintext apiservers take HTTP/2 with prior
    /// knowledge (HTTP/1.1 otherwise).
    pub apiserver_h2c: bool,
    /// `--apiserver-ping-timeout` (zero: no PINGs).
    pub apiserver_ping_timeout: Duration,
    /// Mutual TLS on the TCP gRPC listeners (`--tls-cert-file`,
    /// `--tls-private-key-file`, `--client-ca-file`).
    pub grpc_tls: Option<crate::grpc::tls::GrpcTlsFiles>,
    /// Delegated authentication and authorization of the operator
    /// endpoints: the kubeconfig of the cluster that reviews (`None` in it:
    /// in-cluster credentials); `None`: open (loopback, kubeadm's default).
    pub delegated_auth: Option<Option<PathBuf>>,
    /// `--metrics-listen` over HTTPS with the gRPC port's certificate.
    pub metrics_tls: bool,
    /// The other replicas, whose skew-log counts `readiness` and the status
    /// page add (`--replica…`).
    pub replicas: crate::usage::replicas::ReplicaOptions,
}

/// How often mvp-ext-proc pings each gRPC client (Envoy), and how long a
/// ping may go unanswered before its connection and streams are dropped.
const GRPC_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
const GRPC_KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub fn serve(o: ServeOptions) -> anyhow::Result<()> {
    if !o.apiservers.is_empty() || o.membership.is_none() {
        apiservers::validate_set(&o.apiservers).map_err(anyhow::Error::msg)?;
        apiservers::check_schemes(&o.apiservers, o.peer_tls.as_ref()).map_err(anyhow::Error::msg)?;
    }
    if o.apiserver_h2c && o.peer_tls.is_some() {
        anyhow::bail!("--apiserver-h2c is for http:// apiservers; https:// ones negotiate HTTP/2 by ALPN");
    }
    GrpcListen::check_distinct(&o.grpc_listen).map_err(anyhow::Error::msg)?;
    if o.refresh_interval.is_zero() {
        anyhow::bail!("--refresh-interval must be greater than 0");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(o))
}

async fn run(o: ServeOptions) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    let rotation = match &o.peer_tls {
        Some(p) => Some(crate::tls::reload::follow(p.clone(), metrics.clone())?),
        None => None,
    };
    let transport = Transport::new(
        o.discovery_token_file.as_deref(),
        o.peer_tls.as_ref().zip(rotation.as_ref().map(|(r, _)| r.client_config.clone())),
        &o.username_header,
        o.apiserver_h2c,
    )?;
    let options = SyncOptions { interval: o.refresh_interval, discovery: o.discovery, departed_retention: o.departed_retention };
    let seed = membership::from_seed(&o.apiservers);
    // With `--membership` nothing is known to have left until it is listed.
    let (members_tx, members) = tokio::sync::watch::channel(o.membership.is_none().then(|| seed.clone()));
    let membership_task = match &o.membership {
        Some(k) => Some(follow_cluster(k, o.apiservers.clone(), if o.peer_tls.is_some() { "https" } else { "http" }, members_tx.clone()).await?),
        None => None,
    };
    let state_file = o.state_file.as_deref().map(Persisted::new);
    let restorable = match state_file.as_ref().map(Persisted::load) {
        Some(Ok(stored)) => stored,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "starting without the state file; it is rewritten on the next change");
            Default::default()
        }
        None => Default::default(),
    };
    let (syncer, states) = Syncer::new(&seed, restorable, transport, options, metrics.clone());
    let cluster_options = ClusterOptions {
        tls_files_digest: rotation.as_ref().map(|(r, _)| r.digest.borrow().clone()).unwrap_or_default(),
        peer_tls: o.peer_tls.clone(),
        username_header: o.username_header.clone(),
        http2_max_streams: Some(o.apiserver_http2_max_streams),
        plaintext_h2c: o.apiserver_h2c,
        ping_timeout: o.apiserver_ping_timeout,
    };
    let (snapshot_tx, snapshot) = tokio::sync::watch::channel(Snapshot::unpublished());
    let (stop, stopping) = Stop::new();
    let (ads, accepted) = AdsServer::new(snapshot, metrics.clone());
    let ads = ads.ending_streams_at(stopping.clone()).with_max_stream_age(o.ads_max_stream_age).with_max_streams(o.max_ads_streams);
    let envoys = ads.envoys();
    let syncer = syncer.gated_on(accepted);
    let endpoints = XdsPublisher {
        options: cluster_options,
        tls_files: rotation.as_ref().map(|(r, _)| r.digest.clone()),
        snapshot: snapshot_tx,
        from: vec![],
    };
    let (published, planes) = follow_states(states, endpoints, state_file, &metrics);

    let grpc_tls = match o.grpc_tls.clone() {
        Some(files) => Some(files.follow(metrics.clone()).context("gRPC TLS")?),
        None => None,
    };
    let mut grpc = Vec::new();
    for at in &o.grpc_listen {
        grpc.push(at.bind().await?);
    }
    let replicas = Arc::new(crate::usage::replicas::Replicas::new(o.replicas.clone(), crate::usage::replicas::replica_id())?);
    let delegated = match &o.delegated_auth {
        Some(kubeconfig) => Some(crate::operate::delegated::Delegated::new(
            crate::membership::kube::client_from(kubeconfig.as_deref(), "--authentication-kubeconfig").await?,
        )),
        None => None,
    };
    let admin_listener = match o.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("--metrics-listen {addr}: cannot listen"))?,
        ),
        None => None,
    };
    tracing::info!(
        grpc = %o.grpc_listen.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        metrics = ?o.metrics_listen,
        apiservers = ?o.apiservers.iter().map(|s| format!("{}={}", s.name, s.url)).collect::<Vec<_>>(),
        refresh_interval = ?o.refresh_interval,
        "mvp-ext-proc serving"
    );

    // HTTP/2 keepalive: an Envoy that stops answering (its machine powered
    // off or frozen; its kernel may still ACK) loses its ADS stream — and
    // with it the endpoint set it last acknowledged, which would keep every
    // joining member closed — within interval + timeout, not when TCP gives
    // up (~15 min).
    // Who uses skewed APIs (Envoy's skew log), for `readiness`; kept
    // beside the state file across restarts.
    let usage_file = o.state_file.as_deref().map(crate::usage::persist::path_for);
    let usage = Arc::new(usage_file.as_deref().map(crate::usage::persist::load).unwrap_or_default());
    let usage_saving = usage_file.map(|path| tokio::spawn(crate::usage::persist::save_loop(usage.clone(), path, stopping.clone())));
    // Token clients are named by the cluster that reviews the operator
    // endpoints' tokens, if one is configured.
    let reviewer = delegated.as_ref().map(|d| Arc::new(crate::usage::verify::KubeReviewer(d.client())) as Arc<dyn crate::usage::verify::Reviewer>);
    let verifier = crate::usage::verify::Verifier::new(usage.clone(), metrics.clone(), reviewer);
    let (health, health_task) =
        crate::grpc::health::service(published.table.clone(), published.merged.clone(), stopping.clone()).await;
    let health_task = tokio::spawn(health_task);
    let grpc_router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(GRPC_KEEPALIVE_INTERVAL))
        // tonic otherwise sends no SETTINGS_MAX_CONCURRENT_STREAMS at all.
        .max_concurrent_streams(Some(mvp_contract::limits::MAX_GRPC_STREAMS_PER_CONNECTION))
        .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
        .add_service(health)
        .add_service(ads.service())
        .add_service(table::get_table::TableService::server(published.table.clone(), metrics.clone(), stopping.clone(), o.max_held_table_calls))
        .add_service(rewrite::handler::Rewriter::server(published.merged.clone(), published.openapi.clone(), metrics.clone()))
        .add_service(crate::usage::als::SkewLog::server(verifier, &o.username_header, &o.group_header, stopping.clone()));
    tokio::spawn(stop.on_signal());
    let tls_config = grpc_tls.as_ref().map(|(config, _)| config.clone());
    let grpc_server = futures::future::try_join_all(grpc.into_iter().map(|l| l.serve(grpc_router.clone(), stopping.clone(), tls_config.clone())));
    let sync_task = tokio::spawn(syncer.run(members));
    // With the gRPC port's certificate, the operator port is HTTPS too
    // (bearer tokens never cross the network in clear).
    let admin_tls = match (&admin_listener, o.grpc_tls.clone().filter(|_| o.metrics_tls)) {
        (Some(_), Some(files)) => Some(files.follow_for_operators().context("operator port TLS")?),
        _ => None,
    };
    let admin_task = admin_listener.map(|l| {
        let router = admin::router(metrics.clone(), published.clone(), envoys.clone(), usage.clone(), replicas.clone(), delegated.clone());
        let stopping = stopping.clone();
        let tls = admin_tls.as_ref().map(|(config, _)| config.clone());
        tokio::spawn(async move {
            match tls {
                Some(config) => {
                    let l = crate::grpc::tls::TlsListener::new(l, config)?;
                    axum::serve(l, router).with_graceful_shutdown(stopping.stopped()).await
                }
                None => axum::serve(l, router).with_graceful_shutdown(stopping.stopped()).await,
            }
        })
    });
    grpc_server.await.context("gRPC server failed")?;
    // The skew log's last counts written (a bounded write of one file).
    if let Some(t) = usage_saving
        && tokio::time::timeout(DRAIN_LIMIT, t).await.is_err()
    {
        tracing::warn!("the skew log's counts were not saved within the drain limit");
    }
    drop(members_tx);
    if let Some(t) = membership_task {
        t.abort();
    }
    sync_task.abort();
    for p in planes {
        p.abort();
    }
    health_task.abort();
    if let Some((_, t)) = rotation {
        t.abort();
    }
    for (_, t) in grpc_tls.into_iter().chain(admin_tls) {
        t.abort();
    }
    if let Some(t) = admin_task {
        t.abort();
    }
    tracing::info!("mvp-ext-proc stopped");
    Ok(())
}

/// Follows the cluster's own membership objects and keeps `members` =
/// seed ∪ what they name.
async fn follow_cluster(
    k: &KubeOptions,
    seed: Vec<apiservers::ApiserverSpec>,
    scheme: &'static str,
    members: tokio::sync::watch::Sender<Option<membership::MemberSet>>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use membership::kube::{Source, follow_endpoints, follow_leases};
    let client = membership::kube::client(k).await?;
    // A source that is off has nothing to list; one that is on says nothing
    // until it has listed.
    let listing = |on: Source| if k.sources.contains(&on) { None } else { Some(Vec::new()) };
    let (endpoints_tx, mut endpoints) = tokio::sync::watch::channel(listing(Source::Endpoints));
    let (leases_tx, mut leases) = tokio::sync::watch::channel(listing(Source::Leases));
    let mut tasks = Vec::new();
    if k.sources.contains(&Source::Endpoints) {
        tasks.push(tokio::spawn(follow_endpoints(client.clone(), endpoints_tx.clone())));
    }
    if k.sources.contains(&Source::Leases) {
        tasks.push(tokio::spawn(follow_leases(client, k.lease_stale_after, leases_tx.clone())));
    }
    tracing::info!(sources = ?k.sources, kubeconfig = ?k.kubeconfig, "following the cluster's apiserver membership");
    Ok(tokio::spawn(async move {
        let _tasks = AbortOnDrop(tasks);
        // Held here, so `changed` waits for a change, never for a source
        // that is off.
        let _senders = (endpoints_tx, leases_tx);
        let mut listed = false;
        loop {
            let next = {
                let (e, l) = (endpoints.borrow_and_update(), leases.borrow_and_update());
                match (&*e, &*l) {
                    (Some(e), Some(l)) => Some(membership::combine::combine(&seed, &[l, e], scheme)),
                    _ => None,
                }
            };
            if let Some(next) = next {
                if !listed {
                    // The first complete membership is news even when it
                    // equals the seed: the sync loop waits for it.
                    tracing::info!(members = next.len(), "apiserver membership listed");
                    listed = true;
                    members.send_replace(Some(next));
                } else {
                    members.send_if_modified(|cur| {
                        let changed = cur.as_ref() != Some(&next);
                        if changed {
                            *cur = Some(next);
                        }
                        changed
                    });
                }
            }
            tokio::select! {
                _ = endpoints.changed() => {}
                _ = leases.changed() => {}
            }
        }
    }))
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(|t| t.abort());
    }
}

/// Starts the planes that follow the member states, each its own task: the
/// routing table, Envoy's endpoints, the merged `/apis` and OpenAPI, the
/// state file. The state file's writer starts from the states as restored,
/// before the sync loop runs (what the file holds needs no write).
fn follow_states(
    states: States,
    endpoints: XdsPublisher,
    state_file: Option<Persisted>,
    metrics: &Arc<Metrics>,
) -> (Published, Vec<tokio::task::JoinHandle<()>>) {
    let (table, Tables { table: table_rx, changed, routed }) = TablePlane::new(metrics.clone(), states.borrow().clone());
    let (merged_tx, merged) = tokio::sync::watch::channel(None);
    let (openapi_tx, openapi) = tokio::sync::watch::channel(Arc::new(MergedOpenApi::default()));
    let mut planes = vec![
        tokio::spawn(table.run(states.clone())),
        tokio::spawn(endpoints.run(states.clone())),
        tokio::spawn(DiscoveryPlane::new(merged_tx, metrics.clone()).run(states.clone())),
        tokio::spawn(OpenApiPlane::new(openapi_tx, metrics.clone()).run(states.clone())),
    ];
    if let Some(file) = state_file {
        let restored = persisting(&states.borrow().members);
        planes.push(tokio::spawn(StateFilePlane::spawn(file, restored).run(states.clone())));
    }
    (Published { states: routed, table: table_rx, table_changed: changed, merged, openapi }, planes)
}
