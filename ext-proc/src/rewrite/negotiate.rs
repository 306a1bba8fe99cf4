//! Which `/apis` answer a client asked for, decided from `Accept` the way
//! kube-apiserver 1.36+ negotiates it (`endpoints/handlers/negotiation`,
//! `discovery/aggregated/negotiation.go`): clauses ordered by q-value, the
//! first one the server can produce wins.

/// What the front door does with one `/apis` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Peer-aggregated `APIGroupDiscoveryList` v2, in this encoding.
    Merged(Format),
    /// `profile=nopeer`: the answering apiserver's own document, untouched.
    NoPeer,
    /// Unaggregated `APIGroupList` (JSON), rebuilt from the merged groups.
    GroupList,
    /// Anything else (YAML, CBOR, unaggregated protobuf, …): the apiserver's
    /// own answer, untouched.
    Passthrough,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Protobuf,
}

struct Clause<'a> {
    media: &'a str,
    q: f32,
    g: Option<&'a str>,
    v: Option<&'a str>,
    as_kind: Option<&'a str>,
    profile: Option<&'a str>,
}

fn parse(accept: &str) -> Vec<Clause<'_>> {
    let mut out: Vec<Clause<'_>> = accept
        .split(',')
        .filter_map(|raw| {
            let mut parts = raw.split(';').map(str::trim);
            let media = parts.next().filter(|m| !m.is_empty())?;
            let mut c = Clause { media, q: 1.0, g: None, v: None, as_kind: None, profile: None };
            for p in parts {
                let Some((k, val)) = p.split_once('=') else { continue };
                let val = val.trim().trim_matches('"');
                match k.trim() {
                    "q" => c.q = val.parse().unwrap_or(0.0),
                    "g" => c.g = Some(val),
                    "v" => c.v = Some(val),
                    "as" => c.as_kind = Some(val),
                    "profile" => c.profile = Some(val),
                    _ => {}
                }
            }
            Some(c)
        })
        .filter(|c| c.q > 0.0)
        .collect();
    // Stable: equal q keeps the client's order.
    out.sort_by(|a, b| b.q.partial_cmp(&a.q).unwrap_or(std::cmp::Ordering::Equal));
    out
}

pub fn negotiate(accept: Option<&str>) -> Plan {
    let accept = accept.map(str::trim).filter(|a| !a.is_empty()).unwrap_or("*/*");
    for c in parse(accept) {
        let json = matches!(c.media, "application/json" | "application/*" | "*/*");
        let protobuf = c.media == "application/vnd.kubernetes.protobuf";
        if !json && !protobuf {
            // YAML, CBOR: kube can serve them; we leave them to it.
            if matches!(c.media, "application/yaml" | "application/cbor") {
                return Plan::Passthrough;
            }
            continue;
        }
        match (c.g, c.v, c.as_kind) {
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => {
                if c.profile == Some("nopeer") {
                    return Plan::NoPeer;
                }
                return Plan::Merged(if protobuf { Format::Protobuf } else { Format::Json });
            }
            // v2beta1 is no longer served (AggregatedDiscoveryRemoveBetaType,
            // locked on since 1.35): skip to the next clause, as kube does.
            (Some(_), _, _) | (_, _, Some(_)) => continue,
            (None, None, None) if json => return Plan::GroupList,
            _ => return Plan::Passthrough,
        }
    }
    Plan::Passthrough
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let cases: &[(Option<&str>, Plan)] = &[
            (Some(v2), Plan::Merged(Format::Json)),
            (Some("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"), Plan::Merged(Format::Protobuf)),
            // kubectl 1.32–1.36
            (Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"), Plan::Merged(Format::Json)),
            // client-go with NoPeerDiscovery, and the docs' nopeer header
            (Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"), Plan::NoPeer),
            (Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer"), Plan::NoPeer),
            // unknown profile values are ignored
            (Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=other"), Plan::Merged(Format::Json)),
            // v2beta1 only, then plain JSON: the unaggregated list
            (Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"), Plan::GroupList),
            (Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"), Plan::Passthrough),
            (Some("application/json"), Plan::GroupList),
            (Some("application/json, */*"), Plan::GroupList),
            (Some("*/*"), Plan::GroupList),
            (None, Plan::GroupList),
            (Some(""), Plan::GroupList),
            (Some("application/vnd.kubernetes.protobuf"), Plan::Passthrough),
            (Some("application/yaml"), Plan::Passthrough),
            (Some("text/html"), Plan::Passthrough),
            // q-values order clauses
            (Some("application/json;q=0.5,application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"), Plan::Merged(Format::Protobuf)),
            (Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json"), Plan::GroupList),
            (Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"), Plan::GroupList),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(*accept), *want, "{accept:?}");
        }
    }
}
