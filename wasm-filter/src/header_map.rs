//! proxy-wasm ABI 0.2.1's serialized header map, the form `proxy_http_call`
//! takes headers in: a little-endian u32 count, then a (name length, value
//! length) u32 pair per entry, then each name and value NUL-terminated.

pub fn serialize(pairs: &[(&str, &str)]) -> Vec<u8> {
    let size = 4 + pairs.iter().map(|(k, v)| 10 + k.len() + v.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::serialize;

    #[test]
    fn counts_lengths_then_nul_terminated_strings() {
        let want: Vec<u8> = [
            &2u32.to_le_bytes()[..],
            &5u32.to_le_bytes(),
            &4u32.to_le_bytes(),
            &2u32.to_le_bytes(),
            &0u32.to_le_bytes(),
            b":path\0/abc\0te\0\0",
        ]
        .concat();
        assert_eq!(serialize(&[(":path", "/abc"), ("te", "")]), want);
        assert_eq!(serialize(&[]), 0u32.to_le_bytes());
    }
}
