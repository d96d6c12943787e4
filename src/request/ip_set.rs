//! A set of CIDR blocks with fast membership: blocks are merged into sorted, disjoint address
//! ranges, so a lookup is one binary search however many blocks (100k and more) there are.

use std::net::IpAddr;

use ipnet::IpNet;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl IpSet {
    pub fn new(blocks: impl IntoIterator<Item = IpNet>) -> IpSet {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for block in blocks {
            match block {
                IpNet::V4(net) => v4.push((u32::from(net.network()), u32::from(net.broadcast()))),
                IpNet::V6(net) => v6.push((u128::from(net.network()), u128::from(net.broadcast()))),
            }
        }
        IpSet {
            v4: merge(v4, u32::checked_add),
            v6: merge(v6, u128::checked_add),
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(ip) => in_ranges(&self.v4, u32::from(ip)),
            IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                Some(v4) => in_ranges(&self.v4, u32::from(v4)),
                None => in_ranges(&self.v6, u128::from(ip)),
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// The largest CIDR block at the start of the first range both sets hold (IPv4 first),
    /// as an example of where they overlap; None when they share no address. For config
    /// checks, not requests.
    pub fn first_overlap(&self, other: &IpSet) -> Option<IpNet> {
        let widen = |(start, end): (u32, u32)| (u128::from(start), u128::from(end));
        if let Some(range) = first_common(&self.v4, &other.v4) {
            let (start, prefix) = largest_block(widen(range), 32);
            return ipnet::Ipv4Net::new((start as u32).into(), prefix)
                .ok()
                .map(IpNet::V4);
        }
        let range = first_common(&self.v6, &other.v6)?;
        let (start, prefix) = largest_block(range, 128);
        ipnet::Ipv6Net::new(start.into(), prefix)
            .ok()
            .map(IpNet::V6)
    }

    /// The number of disjoint ranges after merging.
    pub fn ranges(&self) -> usize {
        self.v4.len() + self.v6.len()
    }
}

/// Sorts ranges and merges overlapping or adjacent ones; `checked_add(end, 1)` is the address
/// right after a range.
fn merge<T: Copy + Ord + From<u8>>(
    mut ranges: Vec<(T, T)>,
    checked_add: fn(T, T) -> Option<T>,
) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut merged: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if checked_add(last.1, T::from(1)).is_none_or(|next| start <= next) => {
                last.1 = last.1.max(end);
            }
            _ => merged.push((start, end)),
        }
    }
    merged.shrink_to_fit();
    merged
}

/// The first intersection of two sorted lists of disjoint ranges.
fn first_common<T: Copy + Ord>(a: &[(T, T)], b: &[(T, T)]) -> Option<(T, T)> {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (start, end) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if start <= end {
            return Some((start, end));
        }
        // The range that ends first can meet nothing further in the other list.
        if a[i].1 < b[j].1 { i += 1 } else { j += 1 }
    }
    None
}

/// The largest block of a `bits`-bit address space that starts at `start` and ends at or
/// before `end`: its start and prefix length.
fn largest_block((start, end): (u128, u128), bits: u32) -> (u128, u8) {
    let span = end - start;
    // log2 of the number of addresses in [start, end], rounded down.
    let fits = match span.checked_add(1) {
        Some(count) => 127 - count.leading_zeros(),
        None => 128,
    };
    let aligned = start.trailing_zeros();
    let host_bits = fits.min(aligned).min(bits);
    (start, (bits - host_bits) as u8)
}

fn in_ranges<T: Copy + Ord>(ranges: &[(T, T)], value: T) -> bool {
    // The last range starting at or before `value` is the only one that can hold it.
    let after = ranges.partition_point(|&(start, _)| start <= value);
    after > 0 && value <= ranges[after - 1].1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(blocks: &[&str]) -> IpSet {
        IpSet::new(blocks.iter().map(|b| b.parse::<IpNet>().unwrap()))
    }

    #[test]
    fn membership_for_v4_v6_and_mapped_addresses() {
        let s = set(&["10.0.0.0/8", "192.0.2.66/32", "2001:db8:100::/48"]);
        assert!(s.contains("10.1.2.3".parse().unwrap()));
        assert!(s.contains("192.0.2.66".parse().unwrap()));
        assert!(!s.contains("192.0.2.67".parse().unwrap()));
        assert!(s.contains("::ffff:10.9.9.9".parse().unwrap()));
        assert!(s.contains("2001:db8:100:ffff::1".parse().unwrap()));
        assert!(!s.contains("2001:db8:101::1".parse().unwrap()));
        assert!(!s.contains("11.0.0.0".parse().unwrap()));
    }

    #[test]
    fn overlapping_and_adjacent_blocks_merge() {
        let s = set(&["10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "0.0.0.0/0"]);
        assert_eq!(s.ranges(), 1);
        assert!(s.contains("255.255.255.255".parse().unwrap()));
        let s = set(&["::/0", "2001:db8::/32"]);
        assert_eq!(s.ranges(), 1);
        assert!(s.contains("ffff::1".parse().unwrap()));
    }

    #[test]
    fn the_first_overlap_is_told_as_the_largest_block_at_its_start() {
        let overlap = |a: &[&str], b: &[&str]| set(a).first_overlap(&set(b)).map(|n| n.to_string());
        assert_eq!(
            overlap(&["203.0.113.0/24"], &["203.0.0.0/16"]),
            Some("203.0.113.0/24".into())
        );
        assert_eq!(
            overlap(
                &["10.0.0.0/8", "203.0.113.0/24"],
                &["203.0.113.128/25", "1.1.1.1/32"]
            ),
            Some("203.0.113.128/25".into())
        );
        // 10.0.0.3 to 10.0.0.9: the block at its start is the one address.
        assert_eq!(
            overlap(
                &["10.0.0.0/29", "10.0.0.8/31"],
                &["10.0.0.3/32", "10.0.0.4/30", "10.0.0.8/30"]
            ),
            Some("10.0.0.3/32".into())
        );
        assert_eq!(
            overlap(&["0.0.0.0/0"], &["0.0.0.0/0"]),
            Some("0.0.0.0/0".into())
        );
        assert_eq!(
            overlap(&["::/0"], &["2001:db8::/32"]),
            Some("2001:db8::/32".into())
        );
        assert_eq!(overlap(&["::/0"], &["::/0"]), Some("::/0".into()));
        assert_eq!(
            overlap(&["10.0.0.0/8"], &["11.0.0.0/8", "2001:db8::/32"]),
            None
        );
    }

    proptest! {
        #[test]
        fn agrees_with_a_linear_scan(
            blocks in prop::collection::vec((any::<u32>(), 0u8..=32), 0..60),
            probes in prop::collection::vec(any::<u32>(), 0..60),
        ) {
            let nets: Vec<IpNet> = blocks
                .iter()
                .map(|&(addr, len)| IpNet::V4(ipnet::Ipv4Net::new(addr.into(), len).unwrap().trunc()))
                .collect();
            let s = IpSet::new(nets.clone());
            let interesting = nets.iter().flat_map(|n| match n {
                IpNet::V4(n) => [u32::from(n.network()), u32::from(n.broadcast()), u32::from(n.broadcast()).wrapping_add(1)],
                IpNet::V6(_) => unreachable!(),
            });
            for probe in probes.into_iter().chain(interesting) {
                let ip = IpAddr::V4(probe.into());
                prop_assert_eq!(s.contains(ip), nets.iter().any(|n| n.contains(&ip)), "{}", ip);
            }
        }
    }
}
