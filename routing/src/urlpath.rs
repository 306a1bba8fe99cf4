//! A request target as Go's `net/url` hands it to kube-apiserver: the path
//! percent-decoded like `URL.Path`, the query kept raw (and form-decoded
//! per key and value like `url.ParseQuery` when it is read).
//!
//! Works on bytes, borrows unless the input holds an escape, and cannot
//! panic: a non-UTF-8 or malformed path must classify, not fail.

use std::borrow::Cow;

/// `:path` split at the first `?`, the path part percent-decoded.
pub struct DecodedPath<'a> {
    path: Cow<'a, [u8]>,
    query: &'a [u8],
}

impl<'a> DecodedPath<'a> {
    /// An invalid escape is kept literally (Go would reject the request
    /// line; the apiserver answers it, not us).
    pub fn parse(raw: &'a [u8]) -> DecodedPath<'a> {
        // One pass for the query's start and whether the path has an
        // escape to decode (every request comes here).
        let mut end = raw.len();
        let mut escaped = false;
        for (i, b) in raw.iter().enumerate() {
            match b {
                b'?' => {
                    end = i;
                    break;
                }
                b'%' => escaped = true,
                _ => {}
            }
        }
        let path = raw.get(..end).unwrap_or(raw);
        let query = raw.get(end + 1..).unwrap_or(b"");
        DecodedPath { path: if escaped { percent_decode(path) } else { Cow::Borrowed(path) }, query }
    }

    pub fn path(&self) -> &[u8] {
        &self.path
    }

    pub fn query(&self) -> &'a [u8] {
        self.query
    }
}

pub fn percent_decode(input: &[u8]) -> Cow<'_, [u8]> {
    if !input.contains(&b'%') {
        return Cow::Borrowed(input);
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while let Some(&b) = input.get(i) {
        if b == b'%'
            && let (Some(h), Some(l)) = (
                input.get(i + 1).and_then(|c| hex_val(*c)),
                input.get(i + 2).and_then(|c| hex_val(*c)),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b);
        i += 1;
    }
    Cow::Owned(out)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Form-decoding of one query key or value (`+` is a space), as Go's
/// `url.ParseQuery`.
pub fn query_decode(v: &[u8]) -> Cow<'_, [u8]> {
    if v.contains(&b'+') {
        let spaced: Vec<u8> = v.iter().map(|b| if *b == b'+' { b' ' } else { *b }).collect();
        Cow::Owned(percent_decode(&spaced).into_owned())
    } else {
        percent_decode(v)
    }
}

/// `key=value` pairs of a raw query, each form-decoded.
pub fn query_pairs(query: &[u8]) -> impl Iterator<Item = (Cow<'_, [u8]>, Cow<'_, [u8]>)> {
    query.split(|b| *b == b'&').map(|pair| {
        let (k, v) = match pair.iter().position(|b| *b == b'=') {
            Some(i) => (pair.get(..i).unwrap_or(b""), pair.get(i + 1..).unwrap_or(b"")),
            None => (pair, &b""[..]),
        };
        (query_decode(k), query_decode(v))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_go() {
        let cases: &[(&[u8], &[u8], &[u8])] = &[
            (b"/api/v1/pods", b"/api/v1/pods", b""),
            (b"/api/v1/p%6Fds?x=%20", b"/api/v1/pods", b"x=%20"),
            (b"/a%2Fb", b"/a/b", b""),
            (b"/bad%zzescape%4", b"/bad%zzescape%4", b""),
            (b"/a?b?c", b"/a", b"b?c"),
            (b"", b"", b""),
        ];
        for (raw, path, query) in cases {
            let d = DecodedPath::parse(raw);
            assert_eq!((d.path(), d.query()), (*path, *query), "{}", String::from_utf8_lossy(raw));
        }
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            query_pairs(b"a=1+2&b&c=%41").map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        assert_eq!(pairs, [(b"a".to_vec(), b"1 2".to_vec()), (b"b".to_vec(), vec![]), (b"c".to_vec(), b"A".to_vec())]);
    }
}
