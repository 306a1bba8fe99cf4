//! An `Authorization` header's bearer token, read exactly as kube-apiserver
//! reads it (`k8s.io/apiserver/pkg/authentication/request/bearertoken`):
//! the value trimmed, split on single spaces into at most three parts, the
//! scheme `bearer` in any case, the token the second part (anything after
//! it ignored), none when that part is empty. The skew log ([`crate::usage`])
//! and delegated authorization ([`crate::operate::delegated`]) both read
//! tokens here, so the identity either derives is the one the cluster would.

/// The bearer token of an `Authorization` header value, if kube would read one.
pub fn bearer_token(value: &str) -> Option<&str> {
    let mut parts = value.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    /// bearertoken.go's cases, and what its SplitN(auth, " ", 3) makes of
    /// extra words and spaces.
    #[test]
    fn read_as_kube_reads_it() {
        for (value, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("  Bearer abc  ", Some("abc")),
            ("Bearer abc def", Some("abc")),
            ("Bearer abc def ghi", Some("abc")),
            // A space before the token: kube warns and reads none.
            ("Bearer  abc", None),
            ("Bearer ", None),
            ("Bearer", None),
            ("Basic abc", None),
            ("", None),
            ("Bearer\tabc", None),
        ] {
            assert_eq!(bearer_token(value), want, "{value:?}");
        }
    }
}
