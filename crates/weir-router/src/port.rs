//! The router's ports: the interfaces it forwards between, each with its name (as rules see
//! it), its MAC, its own addresses, its MTU and its reverse path filter.

use weir_wire::{Addr, Family, Mac};

/// Reverse path filtering (anti-spoofing, BCP 38), as Linux's `rp_filter` sysctl: `strict`
/// (1): a packet's source must be routed back out of the interface it came in on; `loose`
/// (2): its source must have a route at all; `off` (0, the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RpFilter {
    #[default]
    Off,
    Loose,
    Strict,
}

impl RpFilter {
    pub fn name(self) -> &'static str {
        match self {
            RpFilter::Off => "off",
            RpFilter::Loose => "loose",
            RpFilter::Strict => "strict",
        }
    }
}

/// One of the router's own addresses on a port, with the length of its subnet (a host
/// address when the length is the family's width).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortAddr {
    pub addr: Addr,
    pub len: u8,
}

impl PortAddr {
    /// A host address (no subnet known).
    pub fn host(addr: Addr) -> PortAddr {
        PortAddr {
            addr,
            len: addr.family().bits(),
        }
    }
}

/// A port of the router.
#[derive(Clone, Debug)]
pub struct Port {
    /// The interface's name (what `iifname` / `oifname` and device-bound chains see).
    pub name: String,
    /// Its index in the kernel (`meta iif` / `oif`); 0 when unknown.
    pub ifindex: u32,
    /// Its MAC: frames to another unicast MAC are not the router's. None: any frame is
    /// taken as the port's (a capture replayed without its link addresses).
    pub mac: Option<Mac>,
    /// The router's own addresses on it (the first of a family is its source address:
    /// masquerade, ICMP errors).
    pub addrs: Vec<PortAddr>,
    /// The largest IP packet the link carries.
    pub mtu: usize,
    /// The reverse path filter of the packets arriving on it.
    pub rp_filter: RpFilter,
    /// Its device group (`meta iifgroup` / `oifgroup`; the kernel's default 0).
    pub group: u32,
    /// `name` as a field value (computed once).
    pub(crate) name_value: u128,
}

impl Port {
    pub fn new(name: &str) -> Port {
        Port {
            name: name.to_string(),
            ifindex: 0,
            group: 0,
            mac: None,
            addrs: Vec::new(),
            mtu: usize::MAX,
            rp_filter: RpFilter::Off,
            name_value: weir_wire::field::ifname_value(name),
        }
    }

    pub fn with_mac(mut self, mac: Mac) -> Port {
        self.mac = Some(mac);
        self
    }

    pub fn with_addrs(mut self, addrs: impl IntoIterator<Item = PortAddr>) -> Port {
        self.addrs = addrs.into_iter().collect();
        self
    }

    pub fn with_mtu(mut self, mtu: usize) -> Port {
        self.mtu = mtu;
        self
    }

    pub fn with_rp_filter(mut self, f: RpFilter) -> Port {
        self.rp_filter = f;
        self
    }

    pub fn with_ifindex(mut self, i: u32) -> Port {
        self.ifindex = i;
        self
    }

    pub fn with_group(mut self, g: u32) -> Port {
        self.group = g;
        self
    }

    /// The port's first address of a family: the source of what the router sends from it,
    /// and what masquerade and redirect use.
    pub fn addr(&self, f: Family) -> Option<Addr> {
        self.addrs
            .iter()
            .find(|a| a.addr.family() == f)
            .map(|a| a.addr)
    }

    /// The name as a field value (`iifname` / `oifname`).
    pub fn name_value(&self) -> u128 {
        self.name_value
    }

    /// Whether an address is the router's on this port: one of its own, the directed
    /// broadcast of an IPv4 subnet (up to /30), the subnet-router anycast address of an IPv6
    /// subnet (up to /126), as Linux's local table holds them.
    pub fn is_local(&self, a: Addr) -> bool {
        self.local_addrs().any(|l| l == a)
    }

    /// The addresses [`Port::is_local`] holds: each own address, and its subnet's IPv4
    /// directed broadcast or IPv6 subnet-router anycast address.
    pub fn local_addrs(&self) -> impl Iterator<Item = Addr> + '_ {
        self.addrs.iter().flat_map(|p| {
            let other = match p.addr.family() {
                Family::Ipv4 if p.len <= 30 => {
                    let host = !(weir_wire::field::prefix_mask(p.len, false)) & u32::MAX as u128;
                    Some(Addr::new(Family::Ipv4, p.addr.bits() | host))
                }
                Family::Ipv6 if p.len <= 126 => Some(p.addr.masked(p.len)),
                _ => None,
            };
            std::iter::once(p.addr).chain(other)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Addr {
        s.parse().unwrap()
    }

    /// Linux's local table: the addresses, the directed broadcast of IPv4 subnets up to /30,
    /// the subnet-router anycast of IPv6 subnets up to /126; nothing for host routes.
    #[test]
    fn local_addresses() {
        let p = Port::new("lan0").with_addrs([
            PortAddr {
                addr: a("198.18.30.1"),
                len: 24,
            },
            PortAddr {
                addr: a("198.18.31.1"),
                len: 31,
            },
            PortAddr {
                addr: a("2001:db8:30::1"),
                len: 64,
            },
            PortAddr::host(a("198.18.32.9")),
        ]);
        for yes in [
            "198.18.30.1",
            "198.18.30.255",
            "198.18.31.1",
            "2001:db8:30::1",
            "2001:db8:30::",
            "198.18.32.9",
        ] {
            assert!(p.is_local(a(yes)), "{yes}");
        }
        for no in [
            "198.18.30.2",
            "198.18.30.0",
            "198.18.31.0",
            "198.18.31.255",
            "2001:db8:30::2",
            "198.18.32.255",
            "::ffff:198.18.30.1",
        ] {
            assert!(!p.is_local(a(no)), "{no}");
        }
        let r = crate::Router::new(vec![p], crate::Routes::default());
        assert!(r.is_local(a("198.18.30.255")) && !r.is_local(a("198.18.30.2")));
    }
}
