//! The fakes' own digest, written here rather than taken from the product:
//! fakes that computed their ETags and OpenAPI hashes with mvp-ext-proc's
//! code would agree with it even where both were wrong.

use sha2::{Digest, Sha512};

/// Uppercase hex SHA-512: kube-apiserver's discovery ETag (quoted) and
/// kube-openapi's `?hash=` are written this way.
pub fn sha512_upper_hex(bytes: &[u8]) -> String {
    Sha512::digest(bytes).iter().map(|b| format!("{b:02X}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_the_known_digest() {
        // SHA-512 of the empty string (FIPS 180-4 test vector).
        assert!(super::sha512_upper_hex(b"").starts_with("CF83E1357EEFB8BDF1542850D66D8007D620E4050B5715DC83F4A921D36CE9CE"));
    }
}
