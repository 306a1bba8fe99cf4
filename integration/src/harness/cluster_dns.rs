//! Cluster DNS for a node of the test's, answering Services by name as
//! CoreDNS's `kubernetes` plugin does: `SERVICE.NAMESPACE.svc.cluster.local`
//! is the Service's ClusterIP, or for a headless Service the address of
//! every ready endpoint (its EndpointSlices). What the install tests' pods
//! ask — Envoy's failover to the other replicas (`mvp-ext-proc.mvp-envoy.svc`)
//! and the replicas' own counts — and nothing else: any other name is
//! NXDOMAIN (no registry, no internet here to forward to).

use std::net::Ipv4Addr;
use std::sync::Arc;

use anyhow::{Context, Result};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use serde_json::Value;

pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// Answers on `IP:53` (UDP) while it lives.
pub struct ClusterDns {
    pub ip: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ClusterDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClusterDns {
    /// Serves on `ip:53`, reading Services from the apiserver at `base`
    /// with `http` (the cluster admin's client).
    pub async fn start(ip: &str, base: String, http: reqwest::Client) -> Result<ClusterDns> {
        let socket = Arc::new(tokio::net::UdpSocket::bind((ip, 53)).await.with_context(|| format!("cluster DNS on {ip}:53"))?);
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            loop {
                let Ok((n, from)) = socket.recv_from(&mut buf).await else { continue };
                let (query, socket, base, http) = (buf.get(..n).unwrap_or_default().to_vec(), socket.clone(), base.clone(), http.clone());
                tokio::spawn(async move {
                    if let Some(reply) = answer(&query, &base, &http).await {
                        let _ = socket.send_to(&reply, from).await;
                    }
                });
            }
        });
        Ok(ClusterDns { ip: ip.to_string(), task })
    }

    /// The kubelet configuration's lines that give pods this DNS.
    pub fn kubelet_config(&self) -> String {
        format!("clusterDNS: [\"{}\"]\nclusterDomain: {CLUSTER_DOMAIN}\n", self.ip)
    }
}

/// The reply to one query (`None`: not a DNS message).
async fn answer(query: &[u8], base: &str, http: &reqwest::Client) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    let question = q.queries().first()?.clone();
    let mut m = Message::new();
    m.set_id(q.id()).set_message_type(MessageType::Response).set_op_code(OpCode::Query).set_authoritative(true).set_recursion_desired(q.recursion_desired());
    m.add_query(question.clone());
    let name = question.name().to_ascii().to_ascii_lowercase();
    let labels: Vec<&str> = name.trim_end_matches('.').split('.').collect();
    let found = match labels.as_slice() {
        [service, namespace, "svc", "cluster", "local"] => addresses(base, http, namespace, service).await,
        _ => None,
    };
    match found {
        Some(ips) if question.query_type() == RecordType::A => {
            for ip in ips {
                m.add_answer(Record::from_rdata(question.name().clone(), 5, RData::A(A(ip))));
            }
        }
        // The name exists; it has no such record.
        Some(_) => {}
        None => {
            m.set_response_code(ResponseCode::NXDomain);
        }
    }
    m.to_vec().ok()
}

/// A Service's addresses: its ClusterIP, or a headless one's ready
/// endpoints; `None` if there is no such Service.
async fn addresses(base: &str, http: &reqwest::Client, namespace: &str, service: &str) -> Option<Vec<Ipv4Addr>> {
    let get = |path: String| async move { http.get(format!("{base}{path}")).send().await.ok()?.json::<Value>().await.ok() };
    let s = get(format!("/api/v1/namespaces/{namespace}/services/{service}")).await?;
    if s["kind"] != "Service" {
        return None;
    }
    match s["spec"]["clusterIP"].as_str()? {
        "None" => {
            let slices = get(format!("/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector=kubernetes.io/service-name={service}")).await?;
            let endpoints = slices["items"].as_array().into_iter().flatten().flat_map(|s| s["endpoints"].as_array().into_iter().flatten());
            Some(endpoints.filter(|e| e["conditions"]["ready"] != false).flat_map(|e| e["addresses"].as_array().into_iter().flatten()).filter_map(|a| a.as_str()?.parse().ok()).collect())
        }
        ip => Some(vec![ip.parse().ok()?]),
    }
}
