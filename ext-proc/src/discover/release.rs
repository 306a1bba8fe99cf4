//! A member's release as an upgrade sees it: `major.minor` of the API set
//! it serves (`/version`, emulation included: `read_version`).

/// A kube release, `major.minor` (what an upgrade moves between).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
}

impl Release {
    /// `1.37`, `v1.37`, `v1.37.2`, `v1.37.0-rc.1+abc` (a `/version`'s
    /// gitVersion); `v1.37.2 (emulating 1.35)` is 1.35, the APIs it serves.
    pub fn parse(s: &str) -> Option<Release> {
        let s = s.trim();
        if let Some((_, emulated)) = s.split_once("(emulating ") {
            return Release::parse(emulated.trim_end_matches(')'));
        }
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts = s.split(['.', '-', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Release { major, minor })
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}
