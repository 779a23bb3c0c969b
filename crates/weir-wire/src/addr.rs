//! Typed addresses: an IP address with its family ([`Addr`]), and a MAC address ([`Mac`]).
//!
//! Fields hold addresses as `u128`s (an IPv4 address in the low 32 bits, see
//! [`crate::field`]); the tables of a router (routes, neighbours, its own addresses) and the
//! configuration speak of [`Addr`], which carries the family with the value, so that an IPv4
//! address never meets an IPv6 one with the same bits.

use crate::meta::{PacketMeta, L3};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The family of an IP address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    /// The family of a parsed network layer (None: not IP).
    pub fn of(l3: L3) -> Option<Family> {
        match l3 {
            L3::Ipv4 => Some(Family::Ipv4),
            L3::Ipv6 => Some(Family::Ipv6),
            L3::Other(_) => None,
        }
    }

    /// Bits in an address of the family.
    pub const fn bits(self) -> u8 {
        match self {
            Family::Ipv4 => 32,
            Family::Ipv6 => 128,
        }
    }

    pub const fn is_v6(self) -> bool {
        matches!(self, Family::Ipv6)
    }

    /// The family's index in tables kept per family (IPv4 0, IPv6 1).
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// An IPv4 or IPv6 address: its family and its value as fields hold it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    family: Family,
    bits: u128,
}

impl Addr {
    pub const fn v4(a: u32) -> Addr {
        Addr {
            family: Family::Ipv4,
            bits: a as u128,
        }
    }

    pub const fn v6(a: u128) -> Addr {
        Addr {
            family: Family::Ipv6,
            bits: a,
        }
    }

    /// The address of a family with a field's value (an IPv4 value keeps its low 32 bits).
    pub const fn new(family: Family, bits: u128) -> Addr {
        match family {
            Family::Ipv4 => Addr::v4(bits as u32),
            Family::Ipv6 => Addr::v6(bits),
        }
    }

    /// The value as fields hold it.
    pub const fn bits(self) -> u128 {
        self.bits
    }

    pub const fn family(self) -> Family {
        self.family
    }

    pub const fn is_v6(self) -> bool {
        self.family.is_v6()
    }

    /// The first `len` bits (a network of that prefix length).
    pub fn masked(self, len: u8) -> Addr {
        Addr {
            bits: self.bits & crate::field::prefix_mask(len, self.is_v6()),
            ..self
        }
    }

    /// Whether the address is in `net/len` (same family).
    pub fn within(self, net: Addr, len: u8) -> bool {
        self.family == net.family && self.masked(len) == net.masked(len)
    }

    /// IPv6 link-local (`fe80::/10`), on every link.
    pub fn is_link_local(self) -> bool {
        self.is_v6() && self.bits >> 118 == 0xfe80 >> 6
    }

    /// An address no ICMP error goes to or is about (RFC 1812, Linux's `icmp_send`):
    /// multicast, the limited broadcast, the unspecified address.
    pub fn is_multicast_or_broadcast(self) -> bool {
        match self.family {
            Family::Ipv4 => {
                let a = self.bits as u32;
                a >> 28 == 0xe || a == u32::MAX || a == 0
            }
            Family::Ipv6 => self.bits >> 120 == 0xff || self.bits == 0,
        }
    }

    pub fn ip(self) -> IpAddr {
        crate::field::ip_addr(self.bits, self.is_v6())
    }

    /// A packet's source address (None: not IP).
    pub fn src_of(pm: &PacketMeta) -> Option<Addr> {
        Family::of(pm.l3).map(|f| Addr::new(f, pm.saddr))
    }

    /// A packet's destination address (None: not IP).
    pub fn dst_of(pm: &PacketMeta) -> Option<Addr> {
        Family::of(pm.l3).map(|f| Addr::new(f, pm.daddr))
    }
}

impl From<IpAddr> for Addr {
    fn from(a: IpAddr) -> Addr {
        match a {
            IpAddr::V4(a) => a.into(),
            IpAddr::V6(a) => a.into(),
        }
    }
}

impl From<Ipv4Addr> for Addr {
    fn from(a: Ipv4Addr) -> Addr {
        Addr::v4(u32::from(a))
    }
}

impl From<Ipv6Addr> for Addr {
    fn from(a: Ipv6Addr) -> Addr {
        Addr::v6(u128::from(a))
    }
}

impl From<Addr> for IpAddr {
    fn from(a: Addr) -> IpAddr {
        a.ip()
    }
}

impl FromStr for Addr {
    type Err = std::net::AddrParseError;

    fn from_str(s: &str) -> Result<Addr, Self::Err> {
        s.trim().parse::<IpAddr>().map(Addr::from)
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(&self.ip(), f)
    }
}

impl fmt::Debug for Addr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(&self.ip(), f)
    }
}

/// A MAC (Ethernet) address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    pub const BROADCAST: Mac = Mac([0xff; 6]);

    /// The MAC at the start of `b` (None when it is shorter).
    pub fn from_slice(b: &[u8]) -> Option<Mac> {
        Some(Mac(b.get(..6)?.try_into().ok()?))
    }

    /// The destination of an Ethernet frame.
    pub fn dst_of(frame: &[u8]) -> Option<Mac> {
        Mac::from_slice(frame)
    }

    /// The source of an Ethernet frame.
    pub fn src_of(frame: &[u8]) -> Option<Mac> {
        Mac::from_slice(frame.get(6..)?)
    }

    /// A group address (multicast or broadcast: the first byte's low bit).
    pub fn is_multicast(self) -> bool {
        self.0[0] & 1 == 1
    }

    pub const fn octets(self) -> [u8; 6] {
        self.0
    }
}

impl From<[u8; 6]> for Mac {
    fn from(b: [u8; 6]) -> Mac {
        Mac(b)
    }
}

impl From<Mac> for [u8; 6] {
    fn from(m: Mac) -> [u8; 6] {
        m.0
    }
}

/// Why a text is not a MAC address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseMacError(String);

impl fmt::Display for ParseMacError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "'{}': a MAC address is six hexadecimal bytes joined by ':' (02:00:00:00:00:01)",
            self.0
        )
    }
}

impl std::error::Error for ParseMacError {}

impl FromStr for Mac {
    type Err = ParseMacError;

    fn from_str(s: &str) -> Result<Mac, ParseMacError> {
        let err = || ParseMacError(s.to_string());
        let mut m = [0u8; 6];
        let mut parts = s.trim().split(':');
        for b in m.iter_mut() {
            let p = parts.next().ok_or_else(err)?;
            if p.is_empty() || p.len() > 2 {
                return Err(err());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(Mac(m))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_keep_their_family() {
        let a: Addr = "198.18.0.1".parse().unwrap();
        let b = Addr::v6(0xc612_0001);
        assert_eq!(a.bits(), b.bits());
        assert_ne!(a, b);
        assert_eq!(a.family(), Family::Ipv4);
        assert_eq!(a.to_string(), "198.18.0.1");
        assert_eq!(b.to_string(), "::c612:1");
        assert_eq!(Addr::new(Family::Ipv4, 1 << 40 | 5), Addr::v4(5));
        assert!(a.within("198.18.0.0".parse().unwrap(), 16));
        assert!(!a.within("198.19.0.0".parse().unwrap(), 16));
        assert!(!b.within(Addr::v4(0xc612_0000), 16));
        assert_eq!(a.masked(24), "198.18.0.0".parse().unwrap());
        assert!("fe80::1".parse::<Addr>().unwrap().is_link_local());
        assert!(!"2001:db8::1".parse::<Addr>().unwrap().is_link_local());
        for m in ["224.0.0.5", "255.255.255.255", "0.0.0.0", "ff02::1", "::"] {
            assert!(
                m.parse::<Addr>().unwrap().is_multicast_or_broadcast(),
                "{m}"
            );
        }
        assert!(!a.is_multicast_or_broadcast());
        assert!("nope".parse::<Addr>().is_err());
    }

    #[test]
    fn macs_parse_and_print() {
        let m: Mac = "02:00:00:0a:ff:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0, 0x0a, 0xff, 1]);
        assert_eq!(m.to_string(), "02:00:00:0a:ff:01");
        assert!(!m.is_multicast() && Mac::BROADCAST.is_multicast());
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "02:00:00:00:00:0g",
            "2::0:0:0:0",
            "",
        ] {
            let e = bad.parse::<Mac>().unwrap_err();
            assert!(e.to_string().contains("six hexadecimal bytes"), "{bad}");
        }
        let frame = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 8, 0];
        assert_eq!(Mac::dst_of(&frame), Some(Mac([1, 2, 3, 4, 5, 6])));
        assert_eq!(Mac::src_of(&frame), Some(Mac([7, 8, 9, 10, 11, 12])));
        assert_eq!(Mac::src_of(&frame[..10]), None);
    }
}
