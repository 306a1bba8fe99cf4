//! Authentication like kube-apiserver's union authenticator, in its order:
//! requestheader (only on a connection whose client certificate chains to the
//! requestheader CA and whose CN is allowed), then x509 client certificate
//! (chains to the client CA), then bearer token; otherwise 401.
//! Authenticated users get `system:authenticated`, as in kube.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use serde::Serialize;

/// What the TLS handshake proved about the client, per connection.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// CN of a client certificate that chains to the requestheader CA.
    pub requestheader_cn: Option<String>,
    /// CN and O of a client certificate that chains to the client CA.
    pub x509: Option<(String, Vec<String>)>,
}

#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// token → (user, groups)
    pub tokens: BTreeMap<String, (String, Vec<String>)>,
    /// Empty: any CN signed by the requestheader CA.
    pub requestheader_allowed_names: Vec<String>,
    /// When false (no authenticator configured) everyone is anonymous.
    pub required: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
    #[serde(rename = "authenticatedBy")]
    pub authenticated_by: String,
}

fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers.get_all(name).iter().filter_map(|v| v.to_str().ok().map(str::to_string)).collect()
}

impl AuthConfig {
    pub fn authenticate(&self, conn: Option<&ConnInfo>, headers: &HeaderMap) -> Option<UserInfo> {
        let with_authenticated = |mut groups: Vec<String>| {
            groups.push("system:authenticated".into());
            groups
        };
        if let Some(cn) = conn.and_then(|c| c.requestheader_cn.as_ref()) {
            let allowed = self.requestheader_allowed_names.is_empty() || self.requestheader_allowed_names.contains(cn);
            let user = values(headers, "x-remote-user").into_iter().next();
            if let (true, Some(name)) = (allowed, user) {
                let mut extra = BTreeMap::new();
                for (k, v) in headers {
                    if let Some(key) = k.as_str().strip_prefix("x-remote-extra-") {
                        extra.entry(key.to_string()).or_insert_with(Vec::new).push(v.to_str().unwrap_or("").to_string());
                    }
                }
                return Some(UserInfo {
                    name,
                    groups: with_authenticated(values(headers, "x-remote-group")),
                    extra,
                    authenticated_by: format!("requestheader (proxy {cn})"),
                });
            }
        }
        if let Some((cn, orgs)) = conn.and_then(|c| c.x509.as_ref()) {
            return Some(UserInfo {
                name: cn.clone(),
                groups: with_authenticated(orgs.clone()),
                extra: BTreeMap::new(),
                authenticated_by: "x509".into(),
            });
        }
        let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if let Some((user, groups)) = bearer.and_then(|t| self.tokens.get(t.trim())) {
            return Some(UserInfo {
                name: user.clone(),
                groups: with_authenticated(groups.clone()),
                extra: BTreeMap::new(),
                authenticated_by: "token".into(),
            });
        }
        if self.required {
            None
        } else {
            Some(UserInfo {
                name: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
                extra: BTreeMap::new(),
                authenticated_by: "anonymous".into(),
            })
        }
    }
}
