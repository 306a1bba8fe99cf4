//! The header names of kube's requestheader authentication
//! (`--requestheader-username-headers`, `-group-headers`,
//! `-extra-headers-prefix`): the front door strips them from clients and
//! writes the first of each for a verified certificate, so they must be the
//! names the apiservers read.

use super::TlsError;

/// Lower-case header names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeaderNames {
    pub username: Vec<String>,
    pub group: Vec<String>,
    pub extra_prefix: Vec<String>,
}

impl Default for RequestHeaderNames {
    fn default() -> Self {
        RequestHeaderNames {
            username: vec!["x-remote-user".into()],
            group: vec!["x-remote-group".into()],
            extra_prefix: vec!["x-remote-extra-".into()],
        }
    }
}

impl RequestHeaderNames {
    /// From the three flags' values, as kube-apiserver takes them.
    pub fn from_flags(username: &[String], group: &[String], extra_prefix: &[String]) -> Result<RequestHeaderNames, TlsError> {
        let lower = |v: &[String], flag: &str| -> Result<Vec<String>, TlsError> {
            let out: Vec<String> = v.iter().map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect();
            if out.is_empty() || out.iter().any(|h| !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')) {
                return Err(TlsError::Flags(format!("{flag}: expected HTTP header names, got {v:?}")));
            }
            Ok(out)
        };
        Ok(RequestHeaderNames {
            username: lower(username, "--requestheader-username-headers")?,
            group: lower(group, "--requestheader-group-headers")?,
            extra_prefix: lower(extra_prefix, "--requestheader-extra-headers-prefix")?,
        })
    }

    /// The user name header the front door writes.
    pub fn username_header(&self) -> &str {
        self.username.first().map(String::as_str).unwrap_or("x-remote-user")
    }

    pub fn group_header(&self) -> &str {
        self.group.first().map(String::as_str).unwrap_or("x-remote-group")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_lower_cased_and_checked() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let n = RequestHeaderNames::from_flags(&v(&["X-Remote-User"]), &v(&["X-Remote-Group", "X-Group"]), &v(&["X-Remote-Extra-"])).unwrap();
        assert_eq!(n.username_header(), "x-remote-user");
        assert_eq!(n.group, ["x-remote-group", "x-group"]);
        assert!(RequestHeaderNames::from_flags(&v(&[""]), &v(&["g"]), &v(&["e"])).is_err());
        assert!(RequestHeaderNames::from_flags(&v(&["bad header"]), &v(&["g"]), &v(&["e"])).is_err());
    }
}
