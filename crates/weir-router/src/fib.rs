//! Longest-prefix match: the lookup of a routing table (and of any table keyed by prefixes).
//!
//! [`Lpm`] keeps one hash table per prefix length present, longest first, for each family. A
//! lookup masks the address to each length in turn and probes that length's table: the cost
//! is one probe per distinct prefix length longer than the match (a router's table has a few
//! distinct lengths; a full Internet table about 25 for IPv4), not one comparison per route,
//! so a table of 10,000 routes costs a packet what a table of ten does.
//!
//! Keys are typed addresses ([`Addr`]): a prefix of one family never holds an address of the
//! other. The keys are the configured prefixes (the lookups' addresses are the senders', but a
//! lookup inserts nothing), so the tables hash with a multiply-and-fold ([`AddrHasher`])
//! instead of SipHash.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use weir_wire::field::prefix_mask;
use weir_wire::{Addr, Family as AddrFamily};

/// A fast hasher for addresses (keys a remote sender cannot insert).
#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u8(*b);
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` hashed with [`AddrHasher`].
pub type AddrMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

/// One family's prefixes: per length present (longest first), the networks of that length.
#[derive(Clone, Debug)]
struct Family<V> {
    by_len: Vec<(u8, AddrMap<u128, V>)>,
}

impl<V> Default for Family<V> {
    fn default() -> Self {
        Family { by_len: Vec::new() }
    }
}

/// A longest-prefix-match table of IPv4 and IPv6 prefixes, each with a value.
#[derive(Clone, Debug)]
pub struct Lpm<V> {
    fam: [Family<V>; 2],
    len: usize,
}

impl<V> Default for Lpm<V> {
    fn default() -> Self {
        Lpm {
            fam: [Family::default(), Family::default()],
            len: 0,
        }
    }
}

impl<V> Lpm<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add the prefix `net/len` (host bits are ignored; a length beyond the family's width is
    /// clamped to it). Returns the value it replaces when the prefix was already present.
    pub fn insert(&mut self, net: Addr, len: u8, value: V) -> Option<V> {
        let v6 = net.is_v6();
        let len = len.min(net.family().bits());
        let f = &mut self.fam[v6 as usize];
        let at = match f.by_len.binary_search_by(|(l, _)| len.cmp(l)) {
            Ok(i) => i,
            Err(i) => {
                f.by_len.insert(i, (len, AddrMap::default()));
                i
            }
        };
        let old = f.by_len[at]
            .1
            .insert(net.bits() & prefix_mask(len, v6), value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// The value of the longest prefix holding `addr`, and that prefix's length.
    #[inline]
    pub fn lookup(&self, addr: Addr) -> Option<(&V, u8)> {
        let (v6, addr) = (addr.is_v6(), addr.bits());
        self.fam[v6 as usize]
            .by_len
            .iter()
            .find_map(|(len, t)| t.get(&(addr & prefix_mask(*len, v6))).map(|v| (v, *len)))
    }

    /// The value of the longest prefix holding `addr`.
    #[inline]
    pub fn get(&self, addr: Addr) -> Option<&V> {
        self.lookup(addr).map(|(v, _)| v)
    }

    /// The value of exactly the prefix `net/len`.
    pub fn exact(&self, net: Addr, len: u8) -> Option<&V> {
        let v6 = net.is_v6();
        let f = &self.fam[v6 as usize];
        let i = f.by_len.binary_search_by(|(l, _)| len.cmp(l)).ok()?;
        f.by_len[i].1.get(&(net.bits() & prefix_mask(len, v6)))
    }

    /// Prefixes held (both families).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Distinct prefix lengths of a family: the most probes a lookup makes.
    pub fn lengths(&self, family: AddrFamily) -> usize {
        self.fam[family.index()].by_len.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: every prefix compared in turn, the longest holding the address wins
    /// (the last inserted of equal prefixes).
    fn linear(pfx: &[(u128, u8, bool, usize)], addr: u128, v6: bool) -> Option<(usize, u8)> {
        let mut best: Option<(usize, u8)> = None;
        for &(net, len, f6, v) in pfx {
            let len = len.min(if f6 { 128 } else { 32 });
            if f6 == v6
                && addr & prefix_mask(len, v6) == net & prefix_mask(len, v6)
                && best.is_none_or(|(_, l)| len >= l)
            {
                best = Some((v, len));
            }
        }
        best
    }

    fn addr(bits: u128, v6: bool) -> Addr {
        if v6 {
            Addr::v6(bits)
        } else {
            Addr::v4(bits as u32)
        }
    }

    /// Prefixes and addresses drawn near each other (a few networks, so that prefixes nest
    /// and addresses fall inside them).
    fn near(base: u128, bits: u128, v6: bool) -> u128 {
        let shift = if v6 { 96 } else { 0 };
        let fam = if v6 { u128::MAX } else { u32::MAX as u128 };
        (base << shift | bits) & fam
    }

    proptest! {
        #[test]
        fn longest_prefix_as_the_linear_walk(
            pfx in proptest::collection::vec((0u128..4, any::<u32>(), 0u8..=40, any::<bool>()), 0..60),
            addrs in proptest::collection::vec((0u128..4, any::<u32>(), any::<bool>()), 1..40),
        ) {
            let pfx: Vec<(u128, u8, bool, usize)> = pfx
                .iter()
                .enumerate()
                .map(|(i, &(b, bits, len, v6))| {
                    (near(b, bits as u128 & !0xff, v6), if v6 { len * 3 } else { len }, v6, i)
                })
                .collect();
            let mut t = Lpm::new();
            for &(net, len, v6, v) in &pfx {
                t.insert(addr(net, v6), len, v);
            }
            for &(b, bits, v6) in &addrs {
                let a = near(b, bits as u128, v6);
                prop_assert_eq!(
                    t.lookup(addr(a, v6)).map(|(v, l)| (*v, l)),
                    linear(&pfx, a, v6),
                    "address {:x} v6 {}", a, v6
                );
            }
        }
    }

    #[test]
    fn replaces_and_counts() {
        let a = |s: &str| s.parse::<Addr>().unwrap();
        let mut t = Lpm::new();
        assert_eq!(t.insert(a("198.18.0.0"), 15, 1), None);
        assert_eq!(t.insert(a("198.18.7.9"), 24, 2), None);
        assert_eq!(t.insert(a("198.18.7.0"), 24, 3), Some(2));
        assert_eq!(t.insert(a("0.0.0.0"), 0, 4), None);
        assert_eq!(t.len(), 3);
        assert_eq!(t.lengths(AddrFamily::Ipv4), 3);
        assert_eq!(t.get(a("198.18.7.200")), Some(&3));
        assert_eq!(t.get(a("198.19.1.1")), Some(&1));
        assert_eq!(t.get(a("203.0.113.1")), Some(&4));
        assert_eq!(t.get(Addr::v6(a("198.18.7.1").bits())), None);
        assert_eq!(t.exact(a("198.18.7.0"), 24), Some(&3));
        assert_eq!(t.exact(a("198.18.7.0"), 23), None);
    }
}
