//! CIDR containment, for what IPAMs decide by it: which Calico blocks lie in a pool (no
//! field links them), whether an address is inside a pool.

use std::net::IpAddr;

/// A network as (address bits in 128, prefix length in 128, IPv6?); an IPv4 network sits in
/// the low 32 bits with its prefix length plus 96. A bare address is a /32 or /128.
fn parse(text: &str) -> Option<(u128, u32, bool)> {
    let (address, prefix) = match text.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix.trim().parse::<u32>().ok()?)),
        None => (text, None),
    };
    Some(match address.trim().parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => (
            u128::from(u32::from(v4)),
            prefix.unwrap_or(32).min(32) + 96,
            false,
        ),
        IpAddr::V6(v6) => (u128::from(v6), prefix.unwrap_or(128).min(128), true),
    })
}

/// Whether `inner` (a CIDR, or a bare address) lies inside the CIDR `outer`: the same
/// family, at least as long a prefix, the same network under `outer`'s prefix. Unreadable
/// text contains nothing and is inside nothing.
pub fn contains(outer: &str, inner: &str) -> bool {
    let (Some((outer_net, outer_len, outer_v6)), Some((inner_net, inner_len, inner_v6))) =
        (parse(outer), parse(inner))
    else {
        return false;
    };
    let mask = |len: u32| u128::MAX.checked_shl(128 - len).unwrap_or(0);
    outer_v6 == inner_v6
        && inner_len >= outer_len
        && inner_net & mask(outer_len) == outer_net & mask(outer_len)
}

#[cfg(test)]
mod tests {
    use super::contains;

    #[test]
    fn containment_is_by_family_prefix_and_network() {
        assert!(contains("10.244.0.0/16", "10.244.1.0/26"));
        assert!(contains("10.244.0.0/16", "10.244.1.7"));
        assert!(!contains("10.244.0.0/16", "10.245.1.0/26"));
        assert!(!contains("10.244.1.0/26", "10.244.0.0/16"));
        assert!(contains("fd00::/48", "fd00::40/122"));
        assert!(!contains("10.244.0.0/16", "fd00::/122"));
        assert!(contains("0.0.0.0/0", "10.0.0.0/8"));
        assert!(!contains("bogus", "10.0.0.0/8"));
    }
}
