//! The configured apiserver set: `--apiserver NAME=URL`, validated once at
//! start so a typo is an error naming the flag, not a silent misroute.

use std::net::SocketAddr;
use std::str::FromStr;

use url::Url;

pub use mvp_contract::limits::MAX_APISERVERS;

use crate::tls::PeerTls;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiserverSpec {
    pub name: String,
    pub url: Url,
}

impl ApiserverSpec {
    pub fn host(&self) -> &str {
        self.url.host_str().unwrap_or("")
    }

    pub fn port(&self) -> u16 {
        self.url.port_or_known_default().unwrap_or(443)
    }

    pub fn is_tls(&self) -> bool {
        self.url.scheme() == "https"
    }

    /// The socket address when the URL names an IP literal.
    pub fn ip_address(&self) -> Option<SocketAddr> {
        let host = self.host().trim_start_matches('[').trim_end_matches(']');
        host.parse().ok().map(|ip| SocketAddr::new(ip, self.port()))
    }

    /// Base URL without a trailing slash, for joining discovery paths.
    pub fn base(&self) -> String {
        self.url.as_str().trim_end_matches('/').to_string()
    }
}

impl FromStr for ApiserverSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, url) = s
            .split_once('=')
            .ok_or_else(|| format!("--apiserver {s:?}: expected NAME=URL, e.g. v130=http://127.0.0.1:6443"))?;
        let valid_name = !name.is_empty()
            && name.len() <= 63
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
        if !valid_name {
            return Err(format!(
                "--apiserver {s:?}: NAME {name:?} must be 1-63 lowercase letters, digits, '-' or '.'"
            ));
        }
        let url = Url::parse(url).map_err(|e| format!("--apiserver {s:?}: URL {url:?} is invalid: {e}"))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(format!("--apiserver {s:?}: URL scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("--apiserver {s:?}: URL has no host"));
        }
        if url.path() != "/" || url.query().is_some() || !url.username().is_empty() {
            return Err(format!(
                "--apiserver {s:?}: URL must be scheme://host[:port] with no path, query or credentials"
            ));
        }
        Ok(ApiserverSpec { name: name.to_string(), url })
    }
}

/// Checks the set as a whole: unique names and addresses, and within the
/// table's limit.
pub fn validate_set(set: &[ApiserverSpec]) -> Result<(), String> {
    if set.is_empty() {
        return Err("at least one --apiserver NAME=URL is required".into());
    }
    if set.len() > MAX_APISERVERS {
        return Err(format!("{} apiservers given; at most {MAX_APISERVERS} are supported", set.len()));
    }
    for (i, a) in set.iter().enumerate() {
        for b in set.iter().skip(i + 1) {
            if a.name == b.name {
                return Err(format!("--apiserver name {:?} is given twice", a.name));
            }
            if a.host() == b.host() && a.port() == b.port() {
                return Err(format!("--apiserver {} and {} point at the same address", a.name, b.name));
            }
        }
    }
    Ok(())
}

/// All apiservers speak one scheme, and https ones are verified.
pub fn check_schemes(apiservers: &[ApiserverSpec], peer: Option<&PeerTls>) -> Result<(), String> {
    let tls = apiservers.iter().filter(|a| a.is_tls()).count();
    if tls != 0 && tls != apiservers.len() {
        return Err("--apiserver URLs mix http:// and https://; use one scheme for all".into());
    }
    match (tls != 0, peer.is_some()) {
        (true, false) => Err(format!(
            "--apiserver {}: https:// apiservers need --peer-ca-file (they are never contacted unverified)",
            apiservers.first().map(|a| a.name.as_str()).unwrap_or_default()
        )),
        (false, true) => Err("--peer-ca-file is set but the apiservers are http://; use https:// URLs".into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let a: ApiserverSpec = "v130=http://127.0.0.1:6443".parse().unwrap();
        assert_eq!(a.name, "v130");
        assert_eq!(a.ip_address(), Some("127.0.0.1:6443".parse().unwrap()));
        assert_eq!(a.base(), "http://127.0.0.1:6443");
        let b: ApiserverSpec = "kas-1=https://apiserver-1.example:6443/".parse().unwrap();
        assert!(b.is_tls());
        assert_eq!(b.ip_address(), None);
        let v6: ApiserverSpec = "v6=http://[::1]:7000".parse().unwrap();
        assert_eq!(v6.ip_address(), Some("[::1]:7000".parse().unwrap()));
        for bad in [
            "",
            "noequals",
            "=http://127.0.0.1:1",
            "UPPER=http://127.0.0.1:1",
            "a=ftp://127.0.0.1:1",
            "a=not a url",
            "a=http://127.0.0.1:1/path",
            "a=http://u:p@127.0.0.1:1",
        ] {
            assert!(bad.parse::<ApiserverSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn set_rules() {
        let p = |s: &str| s.parse::<ApiserverSpec>().unwrap();
        assert!(validate_set(&[]).is_err());
        assert!(validate_set(&[p("a=http://127.0.0.1:1"), p("a=http://127.0.0.1:2")]).is_err());
        assert!(validate_set(&[p("a=http://127.0.0.1:1"), p("b=http://127.0.0.1:1")]).is_err());
        assert!(validate_set(&[p("a=http://127.0.0.1:1"), p("b=http://127.0.0.1:2")]).is_ok());
    }
}
