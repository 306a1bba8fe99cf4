//! The identity of a client that authenticated with a certificate, exactly
//! as kube's x509 authenticator reads it from Go's `pkix.Name`: user = the
//! subject's CN (with several, the last in certificate order), groups =
//! every subject O in certificate order.
//!
//! Envoy exposes the verified peer certificate's subject only as an RFC 2253
//! string (`connection.subject_peer_certificate`, OpenSSL's
//! `XN_FLAG_RFC2253`): RDNs most-specific first (the reverse of certificate
//! order), `,` between RDNs, `+` inside a multi-valued RDN, and `\X` / `\XX`
//! escapes (special characters, and every byte of a non-ASCII character).
//!
//! The identity travels to the apiserver in request headers, which cannot
//! carry every byte a certificate can: an escape decodes to any byte (`\0D`,
//! `\0A`, `\00`), and HTTP trims the spaces around a value. A user or group
//! that a header would not carry exactly is refused ([`Uncarriable`]), never
//! forwarded altered — and never left to Envoy, whose router would refuse the
//! request with a 503 a client retries forever.

/// Why a subject's identity cannot be forwarded: the attribute (`CN`, `O`)
/// and what its value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uncarriable {
    pub attribute: &'static str,
    pub holds: &'static str,
}

impl Uncarriable {
    /// For Envoy's response code details (no spaces), e.g.
    /// `mvp_identity_refused{CN_control_character}`.
    pub fn details(&self) -> String {
        format!("mvp_identity_refused{{{}_{}}}", self.attribute, self.holds)
    }
}

/// The value as a header carries it, or why it cannot: only UTF-8 (what
/// Go's x509 parser accepts), no control character (CR and LF would end the
/// header, NUL cut it; Envoy and Go refuse them all), no space at either end
/// (HTTP trims it: the apiserver would read another name).
fn carriable(attribute: &'static str, bytes: Vec<u8>) -> Result<String, Uncarriable> {
    let refuse = |holds| Uncarriable { attribute, holds };
    if bytes.iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return Err(refuse("control_character"));
    }
    if bytes.first() == Some(&b' ') || bytes.last() == Some(&b' ') {
        return Err(refuse("edge_space"));
    }
    String::from_utf8(bytes).map_err(|_| refuse("not_utf8"))
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientIdentity {
    pub user: String,
    pub groups: Vec<String>,
}

/// `Ok(None)` when there is no CN: kube rejects such a certificate too
/// ("no subject common name"), so no identity is forwarded. An error when
/// the user (the CN that wins) or a group cannot be carried exactly.
pub fn from_rfc2253(subject: &[u8]) -> Result<Option<ClientIdentity>, Uncarriable> {
    let mut rdns: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![vec![]];
    let mut key: Vec<u8> = Vec::new();
    let mut value: Vec<u8> = Vec::new();
    let mut in_value = false;
    let mut i = 0;
    let push = |rdns: &mut Vec<Vec<(Vec<u8>, Vec<u8>)>>, key: &mut Vec<u8>, value: &mut Vec<u8>| {
        if let Some(last) = rdns.last_mut() {
            last.push((std::mem::take(key), std::mem::take(value)));
        }
    };
    while let Some(&b) = subject.get(i) {
        match b {
            b'\\' => {
                // `from_str_radix` would also take a sign: require two hex digits.
                let hex = subject
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
                let target = if in_value { &mut value } else { &mut key };
                match (hex, subject.get(i + 1)) {
                    (Some(byte), _) => {
                        target.push(byte);
                        i += 3;
                    }
                    (None, Some(&c)) => {
                        target.push(c);
                        i += 2;
                    }
                    (None, None) => i += 1,
                }
                continue;
            }
            b'=' if !in_value => in_value = true,
            b',' | b'+' if in_value => {
                push(&mut rdns, &mut key, &mut value);
                in_value = false;
                if b == b',' {
                    rdns.push(vec![]);
                }
            }
            _ if in_value => value.push(b),
            _ => key.push(b),
        }
        i += 1;
    }
    if in_value {
        push(&mut rdns, &mut key, &mut value);
    }
    // Back to certificate order. The RFC 2253 form (`XN_FLAG_DN_REV`) prints
    // every attribute in reverse, inside a multi-valued RDN too.
    let mut attrs: Vec<(Vec<u8>, Vec<u8>)> = rdns.into_iter().flatten().collect();
    attrs.reverse();
    // As Go's `pkix.Name.FillFromRDNSequence`, which kube's x509
    // authenticator reads: every CN overwrites the last (the last one wins),
    // every O is appended.
    let mut user = None;
    let mut groups = Vec::new();
    for (k, v) in attrs {
        match k.trim_ascii() {
            b"CN" => user = Some(v),
            b"O" => groups.push(v),
            _ => {}
        }
    }
    let Some(user) = user.filter(|u| !u.is_empty()) else { return Ok(None) };
    let user = carriable("CN", user)?;
    let groups = groups.into_iter().map(|g| carriable("O", g)).collect::<Result<_, _>>()?;
    Ok(Some(ClientIdentity { user, groups }))
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
