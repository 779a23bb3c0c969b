//! The router both sides model: the topology file (JSON) and its checked form.
//!
//! [`Topology`] is the file format of issue 6, read and written with serde:
//!
//! ```json
//! {"interfaces": [{"name": "lan0", "mac": "02:77:65:00:00:01", "addrs": ["198.18.0.1/24", "2001:db8::1/64"]}],
//!  "routes":     [{"dst": "0.0.0.0/0", "via": "198.19.0.1", "dev": "wan0"}],
//!  "neighbors":  [{"addr": "198.19.0.1", "mac": "02:00:00:00:02:01", "dev": "wan0"}],
//!  "packets":    [{"iif": "lan0"}]}
//! ```
//!
//! An interface may say `"rp_filter": "strict"` or `"loose"` (IPv4's reverse path filter, the
//! kernel's `net.ipv4.conf.NAME.rp_filter` 1 or 2; left out: off), e.g.
//! `{"name": "lan0", "mac": "02:77:65:00:00:01", "addrs": ["198.18.0.1/24"], "rp_filter": "strict"}`.
//!
//! [`Router::from_topology`] checks it (names, MACs, prefixes, that every address is in the lab
//! ranges 198.18.0.0/15 and 2001:db8::/32, that gateways are on-link, no duplicates) and gives
//! the lookups both sides need: which addresses are the router's own ([`Router::is_local`]),
//! the longest-prefix-match route of a destination ([`Router::route`]) and the static
//! neighbour table ([`Router::neighbor`]). The kernel side configures exactly this; the weir
//! side ([`crate::model`]) answers from it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// The topology file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub interfaces: Vec<Interface>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub neighbors: Vec<Neighbor>,
    /// One entry per packet of the capture, in order: the interface it arrives on.
    #[serde(default)]
    pub packets: Vec<PacketIn>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    #[serde(default)]
    pub addrs: Vec<String>,
    /// The IPv4 reverse path filter of packets arriving on it (Linux's
    /// `net.ipv4.conf.NAME.rp_filter`): `off` (the default: the field is left out), `strict` or
    /// `loose`. Linux has no such filter for IPv6 (see [`RpFilter`]).
    #[serde(default, skip_serializing_if = "RpFilter::is_off")]
    pub rp_filter: RpFilter,
}

/// An interface's IPv4 reverse path filter, as Linux's `rp_filter` sysctl (which applies
/// `max(all, interface)`; the lab leaves `all` at 0): `strict` (1) drops a packet whose source
/// is not routed back out of the interface it came in on, `loose` (2) one whose source has no
/// route at all. IPv6 has no `rp_filter` sysctl in Linux (only the `rpfilter` / `fib`
/// netfilter matches), so the lab's IPv6 packets are never filtered, on either side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RpFilter {
    #[default]
    Off,
    Strict,
    Loose,
}

impl RpFilter {
    pub fn is_off(&self) -> bool {
        *self == RpFilter::Off
    }

    /// The sysctl's value.
    pub fn sysctl(self) -> u8 {
        match self {
            RpFilter::Off => 0,
            RpFilter::Strict => 1,
            RpFilter::Loose => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RpFilter::Off => "off",
            RpFilter::Strict => "strict",
            RpFilter::Loose => "loose",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    pub dev: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Neighbor {
    pub addr: String,
    pub mac: String,
    pub dev: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacketIn {
    pub iif: String,
}

impl Topology {
    /// Parse the JSON text of a topology file (`name` is used in messages).
    pub fn from_json(name: &str, text: &str) -> Result<Topology, String> {
        serde_json::from_str(text).map_err(|e| format!("{name}: not a valid topology: {e}"))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// An Ethernet address.
pub type Mac = [u8; 6];

pub fn parse_mac(s: &str) -> Option<Mac> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 || parts.iter().any(|p| p.len() != 2) {
        return None;
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(m)
}

pub fn mac_text(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// An address prefix (`198.18.0.0/24`). The address keeps its host bits (an interface
/// address `198.18.0.1/24` is a `Prefix` too); [`Prefix::network`] clears them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

/// Numeric value and width in bits of an address.
pub fn addr_bits(a: IpAddr) -> (u128, u32) {
    match a {
        IpAddr::V4(a) => (u32::from(a) as u128, 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

fn mask(len: u8, bits: u32) -> u128 {
    // (a plain shift by the full width overflowed: in release builds it wrapped to no shift
    // at all, and a /128 became the mask 0)
    weir_wire::field::prefix_mask(len, bits == 128)
}

impl Prefix {
    /// `ADDR/LEN`, or a bare address (a host prefix).
    pub fn parse(s: &str) -> Result<Prefix, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("'{a}' is not an IPv4 or IPv6 address"))?;
        let bits = addr_bits(addr).1;
        let len = match l {
            None => bits as u8,
            Some(l) => {
                let n: u32 = l
                    .trim()
                    .parse()
                    .map_err(|_| format!("'{l}' is not a prefix length"))?;
                if n > bits {
                    return Err(format!("prefix length {n} is longer than {bits} bits"));
                }
                n as u8
            }
        };
        Ok(Prefix { addr, len })
    }

    pub fn is_v4(&self) -> bool {
        self.addr.is_ipv4()
    }

    pub fn bits(&self) -> u32 {
        addr_bits(self.addr).1
    }

    /// The prefix with its host bits cleared.
    pub fn network(&self) -> Prefix {
        let (v, bits) = addr_bits(self.addr);
        let n = v & mask(self.len, bits);
        Prefix {
            addr: from_bits(n, self.is_v4()),
            len: self.len,
        }
    }

    pub fn contains(&self, a: IpAddr) -> bool {
        if a.is_ipv4() != self.is_v4() {
            return false;
        }
        let (v, bits) = addr_bits(a);
        let (p, _) = addr_bits(self.addr);
        let m = mask(self.len, bits);
        v & m == p & m
    }

    /// The highest address of the prefix (the IPv4 broadcast address of a subnet).
    pub fn last(&self) -> IpAddr {
        let (v, bits) = addr_bits(self.addr);
        let m = mask(self.len, bits);
        let full = if bits == 128 {
            u128::MAX
        } else {
            (1u128 << bits) - 1
        };
        from_bits((v & m) | (full & !m), self.is_v4())
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

pub fn from_bits(v: u128, v4: bool) -> IpAddr {
    weir_wire::field::ip_addr(v, !v4)
}

/// The lab ranges: 198.18.0.0/15 (RFC 2544) and 2001:db8::/32 (RFC 3849). Every address the
/// lab configures or injects is in one of them.
pub fn in_lab_range(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => a.octets()[0] == 198 && (a.octets()[1] & 0xfe) == 18,
        IpAddr::V6(a) => a.segments()[0] == 0x2001 && a.segments()[1] == 0x0db8,
    }
}

/// Interface names the lab uses for itself while building (never allowed in a topology).
pub const RESERVED_IF_PREFIX: &str = "weirlab";
/// Most interfaces in one topology.
pub const MAX_INTERFACES: usize = 16;
/// Interface MTU of the lab's veth pairs.
pub const MTU: usize = 1500;

/// One router interface, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub mac: Mac,
    /// Addresses with their prefix lengths (host bits kept).
    pub addrs: Vec<Prefix>,
    /// The kernel's interface index in the router namespace (loopback is 1, then the
    /// interfaces in topology order); the lab checks it.
    pub ifindex: u32,
    /// The IPv4 reverse path filter of packets arriving on it.
    pub rp_filter: RpFilter,
}

/// A route, checked: connected prefixes of the interfaces and the topology's routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteEntry {
    pub prefix: Prefix,
    pub via: Option<IpAddr>,
    pub dev: usize,
    pub connected: bool,
}

/// Where the router sends a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// One of the router's addresses (or a local broadcast / subnet-router anycast address):
    /// the `input` hook.
    Local,
    /// Out of interface `dev` to `nexthop` (the gateway, or the destination when on-link).
    Forward { dev: usize, nexthop: IpAddr },
    /// No route: the kernel answers with an ICMP unreachable and forwards nothing.
    NoRoute,
}

/// The checked topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Router {
    pub ifaces: Vec<Iface>,
    pub routes: Vec<RouteEntry>,
    pub neighbors: Vec<(IpAddr, Mac, usize)>,
    /// Input interface of each packet (index into `ifaces`).
    pub packets: Vec<usize>,
}

fn valid_ifname(n: &str) -> Result<(), String> {
    if n.is_empty() || n.len() > 15 {
        return Err(format!("interface name '{n}' must be 1 to 15 characters"));
    }
    if n == "." || n == ".." || n == "lo" {
        return Err(format!("interface name '{n}' is reserved"));
    }
    if !n
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(format!(
            "interface name '{n}' may hold only letters, digits, '-', '_' and '.'"
        ));
    }
    if n.starts_with(RESERVED_IF_PREFIX) {
        return Err(format!(
            "interface name '{n}': names starting with '{RESERVED_IF_PREFIX}' are the lab's own"
        ));
    }
    Ok(())
}

fn lab_addr(what: &str, a: IpAddr) -> Result<(), String> {
    if in_lab_range(a) {
        Ok(())
    } else {
        Err(format!(
            "{what}: {a} is outside the lab ranges 198.18.0.0/15 and 2001:db8::/32"
        ))
    }
}

impl Router {
    /// Check a topology. Errors name the entry (`interfaces[1].mac: ...`).
    pub fn from_topology(t: &Topology) -> Result<Router, String> {
        if t.interfaces.is_empty() {
            return Err("topology: no interfaces".into());
        }
        if t.interfaces.len() > MAX_INTERFACES {
            return Err(format!(
                "topology: {} interfaces, at most {MAX_INTERFACES}",
                t.interfaces.len()
            ));
        }
        let mut ifaces: Vec<Iface> = Vec::new();
        for (i, it) in t.interfaces.iter().enumerate() {
            let at = format!("interfaces[{i}]");
            valid_ifname(&it.name).map_err(|e| format!("{at}.name: {e}"))?;
            if ifaces.iter().any(|f| f.name == it.name) {
                return Err(format!("{at}.name: '{}' appears twice", it.name));
            }
            let mac = parse_mac(&it.mac).ok_or_else(|| {
                format!(
                    "{at}.mac: '{}' is not a MAC address (like 02:77:65:00:00:01)",
                    it.mac
                )
            })?;
            if mac[0] & 1 == 1 || mac == [0; 6] {
                return Err(format!("{at}.mac: {} is not a unicast address", it.mac));
            }
            if ifaces.iter().any(|f| f.mac == mac) {
                return Err(format!("{at}.mac: {} is used by another interface", it.mac));
            }
            if mac[..4] == [0x02, 0x77, 0x6c, 0x61] || mac[..4] == [0x02, 0x77, 0x62, 0x61] {
                return Err(format!("{at}.mac: {} is in a range the lab uses for its peers (02:77:6c:61:..., 02:77:62:61:...)", it.mac));
            }
            let mut addrs = Vec::new();
            for (j, a) in it.addrs.iter().enumerate() {
                let p = Prefix::parse(a).map_err(|e| format!("{at}.addrs[{j}]: {e}"))?;
                lab_addr(&format!("{at}.addrs[{j}]"), p.addr)?;
                if p.len == 0 {
                    return Err(format!(
                        "{at}.addrs[{j}]: a /0 interface address is not allowed"
                    ));
                }
                let net = p.network();
                if p.addr == net.addr && p.len < p.bits() as u8 - 1 && p.is_v4() {
                    return Err(format!(
                        "{at}.addrs[{j}]: {a} is the network address of its subnet"
                    ));
                }
                if ifaces
                    .iter()
                    .flat_map(|f| f.addrs.iter())
                    .chain(addrs.iter())
                    .any(|q: &Prefix| q.addr == p.addr)
                {
                    return Err(format!("{at}.addrs[{j}]: {} is configured twice", p.addr));
                }
                if ifaces
                    .iter()
                    .flat_map(|f| f.addrs.iter())
                    .any(|q| q.network() == net)
                {
                    return Err(format!(
                        "{at}.addrs[{j}]: the subnet {net} is already on another interface"
                    ));
                }
                addrs.push(p);
            }
            ifaces.push(Iface {
                name: it.name.clone(),
                mac,
                addrs,
                ifindex: i as u32 + 2,
                rp_filter: it.rp_filter,
            });
        }
        let dev_of = |at: &str, d: &str| -> Result<usize, String> {
            ifaces
                .iter()
                .position(|f| f.name == d)
                .ok_or_else(|| format!("{at}.dev: no interface named '{d}'"))
        };
        let mut routes: Vec<RouteEntry> = Vec::new();
        for (i, f) in ifaces.iter().enumerate() {
            for a in &f.addrs {
                let net = a.network();
                if !routes.iter().any(|r| r.prefix == net) {
                    routes.push(RouteEntry {
                        prefix: net,
                        via: None,
                        dev: i,
                        connected: true,
                    });
                }
            }
        }
        for (i, r) in t.routes.iter().enumerate() {
            let at = format!("routes[{i}]");
            let p = Prefix::parse(&r.dst).map_err(|e| format!("{at}.dst: {e}"))?;
            if p.network() != p {
                return Err(format!(
                    "{at}.dst: {} has host bits set (the network is {})",
                    r.dst,
                    p.network()
                ));
            }
            if p.len > 0 {
                lab_addr(&format!("{at}.dst"), p.addr)?;
            }
            let dev = dev_of(&at, &r.dev)?;
            let via = match &r.via {
                None => None,
                Some(v) => {
                    let a: IpAddr = v
                        .parse()
                        .map_err(|_| format!("{at}.via: '{v}' is not an address"))?;
                    if a.is_ipv4() != p.is_v4() {
                        return Err(format!(
                            "{at}.via: {a} is not of the same family as {}",
                            r.dst
                        ));
                    }
                    lab_addr(&format!("{at}.via"), a)?;
                    if !ifaces[dev].addrs.iter().any(|q| q.contains(a)) {
                        return Err(format!(
                            "{at}.via: gateway {a} is not on a subnet of {}",
                            r.dev
                        ));
                    }
                    if ifaces.iter().any(|f| f.addrs.iter().any(|q| q.addr == a)) {
                        return Err(format!(
                            "{at}.via: gateway {a} is one of the router's own addresses"
                        ));
                    }
                    Some(a)
                }
            };
            if routes.iter().any(|q| q.prefix == p) {
                return Err(format!(
                    "{at}.dst: a route to {p} already exists (connected or listed before)"
                ));
            }
            routes.push(RouteEntry {
                prefix: p,
                via,
                dev,
                connected: false,
            });
        }
        let mut neighbors: Vec<(IpAddr, Mac, usize)> = Vec::new();
        for (i, n) in t.neighbors.iter().enumerate() {
            let at = format!("neighbors[{i}]");
            let a: IpAddr = n
                .addr
                .parse()
                .map_err(|_| format!("{at}.addr: '{}' is not an address", n.addr))?;
            lab_addr(&format!("{at}.addr"), a)?;
            let mac = parse_mac(&n.mac)
                .ok_or_else(|| format!("{at}.mac: '{}' is not a MAC address", n.mac))?;
            if mac[0] & 1 == 1 || mac == [0; 6] {
                return Err(format!("{at}.mac: {} is not a unicast address", n.mac));
            }
            let dev = dev_of(&at, &n.dev)?;
            if neighbors.iter().any(|(b, _, d)| *b == a && *d == dev) {
                return Err(format!("{at}: {a} on {} is listed twice", n.dev));
            }
            if ifaces.iter().any(|f| f.addrs.iter().any(|q| q.addr == a)) {
                return Err(format!(
                    "{at}.addr: {a} is one of the router's own addresses"
                ));
            }
            neighbors.push((a, mac, dev));
        }
        let mut packets = Vec::new();
        for (i, p) in t.packets.iter().enumerate() {
            packets.push(
                dev_of(&format!("packets[{i}]"), &p.iif)
                    .map_err(|e| e.replace(".dev:", ".iif:"))?,
            );
        }
        Ok(Router {
            ifaces,
            routes,
            neighbors,
            packets,
        })
    }

    pub fn iface(&self, name: &str) -> Option<usize> {
        self.ifaces.iter().position(|f| f.name == name)
    }

    /// The router's own addresses, local broadcast addresses (IPv4 subnets up to /30) and
    /// subnet-router anycast addresses (IPv6 subnets up to /126, joined by a forwarding router):
    /// packets to them go to the `input` hook.
    pub fn is_local(&self, a: IpAddr) -> bool {
        self.ifaces.iter().flat_map(|f| f.addrs.iter()).any(|p| {
            if p.addr == a {
                return true;
            }
            if p.is_v4() {
                p.len <= 30 && p.last() == a
            } else {
                p.len <= 126 && p.network().addr == a
            }
        })
    }

    /// The longest-prefix-match route of a destination.
    pub fn route(&self, dst: IpAddr) -> Dest {
        if self.is_local(dst) {
            return Dest::Local;
        }
        let best = self
            .routes
            .iter()
            .filter(|r| r.prefix.contains(dst))
            .max_by_key(|r| (r.prefix.len, r.connected));
        match best {
            None => Dest::NoRoute,
            Some(r) => Dest::Forward {
                dev: r.dev,
                nexthop: r.via.unwrap_or(dst),
            },
        }
    }

    /// The static neighbour entry (MAC) of an address on an interface.
    pub fn neighbor(&self, a: IpAddr, dev: usize) -> Option<Mac> {
        self.neighbors
            .iter()
            .find(|(b, _, d)| *b == a && *d == dev)
            .map(|n| n.1)
    }

    /// An IPv4 address of the router, preferably on interface `dev` (the ARP barrier's target).
    pub fn ipv4_addr(&self, dev: usize) -> Option<Ipv4Addr> {
        let v4 = |f: &Iface| {
            f.addrs.iter().find_map(|p| match p.addr {
                IpAddr::V4(a) => Some(a),
                _ => None,
            })
        };
        v4(&self.ifaces[dev]).or_else(|| self.ifaces.iter().find_map(v4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_prefixes_keep_their_address() {
        for (s, net) in [
            ("2001:db8::5/128", "2001:db8::5/128"),
            ("2001:db8::5/127", "2001:db8::4/127"),
            ("198.18.0.5/32", "198.18.0.5/32"),
            ("198.18.0.5/31", "198.18.0.4/31"),
            ("198.18.0.5/0", "0.0.0.0/0"),
        ] {
            assert_eq!(Prefix::parse(s).unwrap().network().to_string(), net);
        }
    }

    fn topo() -> Topology {
        Topology::from_json(
            "t",
            r#"{"interfaces": [
                {"name": "lan0", "mac": "02:77:65:00:00:01", "addrs": ["198.18.0.1/24", "2001:db8:0:1::1/64"]},
                {"name": "dmz0", "mac": "02:77:65:00:01:01", "addrs": ["198.18.1.1/24"]},
                {"name": "wan0", "mac": "02:77:65:00:02:01", "addrs": ["198.19.0.2/24", "2001:db8:ffff::2/64"]}],
              "routes": [{"dst": "0.0.0.0/0", "via": "198.19.0.1", "dev": "wan0"},
                         {"dst": "::/0", "via": "2001:db8:ffff::1", "dev": "wan0"},
                         {"dst": "198.18.0.128/25", "via": "198.18.1.254", "dev": "dmz0"}],
              "neighbors": [{"addr": "198.19.0.1", "mac": "02:00:00:00:02:01", "dev": "wan0"}],
              "packets": [{"iif": "lan0"}, {"iif": "wan0"}]}"#,
        )
        .unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn routes_by_longest_prefix() {
        let r = Router::from_topology(&topo()).unwrap();
        assert_eq!(r.packets, vec![0, 2]);
        assert_eq!(
            r.route(ip("198.18.0.10")),
            Dest::Forward {
                dev: 0,
                nexthop: ip("198.18.0.10")
            }
        );
        // the /25 via the DMZ is more specific than the connected /24
        assert_eq!(
            r.route(ip("198.18.0.130")),
            Dest::Forward {
                dev: 1,
                nexthop: ip("198.18.1.254")
            }
        );
        assert_eq!(
            r.route(ip("198.19.7.7")),
            Dest::Forward {
                dev: 2,
                nexthop: ip("198.19.0.1")
            }
        );
        assert_eq!(
            r.route(ip("2001:db8:bad::1")),
            Dest::Forward {
                dev: 2,
                nexthop: ip("2001:db8:ffff::1")
            }
        );
        assert_eq!(r.route(ip("198.18.1.1")), Dest::Local);
        assert_eq!(r.route(ip("198.18.0.255")), Dest::Local, "subnet broadcast");
        assert_eq!(
            r.route(ip("2001:db8:0:1::")),
            Dest::Local,
            "subnet-router anycast"
        );
        assert_eq!(
            r.route(ip("2001:db8:0:1::5")),
            Dest::Forward {
                dev: 0,
                nexthop: ip("2001:db8:0:1::5")
            }
        );
        assert_eq!(r.neighbor(ip("198.19.0.1"), 2), Some([2, 0, 0, 0, 2, 1]));
        assert_eq!(r.neighbor(ip("198.19.0.1"), 1), None);
        assert_eq!(r.ipv4_addr(1), Some("198.18.1.1".parse().unwrap()));
    }

    #[test]
    fn no_route_without_default() {
        let mut t = topo();
        t.routes.retain(|r| r.dst != "::/0");
        let r = Router::from_topology(&t).unwrap();
        assert_eq!(r.route(ip("2001:db8:bad::1")), Dest::NoRoute);
    }

    type Case = (fn(&mut Topology), &'static str);

    #[test]
    fn bad_topologies_say_why() {
        let cases: Vec<Case> = vec![
            (
                |t| t.interfaces[0].name = "averyveryverylongname".into(),
                "interfaces[0].name",
            ),
            (|t| t.interfaces[1].name = "lan0".into(), "appears twice"),
            (
                |t| t.interfaces[0].mac = "02:77".into(),
                "interfaces[0].mac",
            ),
            (
                |t| t.interfaces[0].mac = "01:00:5e:00:00:01".into(),
                "unicast",
            ),
            (
                |t| t.interfaces[0].addrs[0] = "10.0.0.1/24".into(),
                "outside the lab ranges",
            ),
            (
                |t| t.interfaces[0].addrs[0] = "198.18.0.1/33".into(),
                "longer than 32",
            ),
            (
                |t| t.interfaces[1].addrs[0] = "198.18.0.2/24".into(),
                "already on another interface",
            ),
            (|t| t.routes[0].dev = "nope".into(), "routes[0].dev"),
            (
                |t| t.routes[0].via = Some("198.18.5.1".into()),
                "not on a subnet",
            ),
            (|t| t.routes[2].dst = "198.18.0.129/25".into(), "host bits"),
            (
                |t| t.routes[2].dst = "198.18.1.0/24".into(),
                "already exists",
            ),
            (
                |t| t.neighbors[0].addr = "198.19.0.2".into(),
                "router's own",
            ),
            (|t| t.packets[1].iif = "eth9".into(), "packets[1].iif"),
            (
                |t| t.interfaces[2].name = "weirlabr0".into(),
                "the lab's own",
            ),
            (
                |t| t.interfaces[2].mac = "02:77:6c:61:62:00".into(),
                "the lab uses",
            ),
        ];
        for (f, want) in cases {
            let mut t = topo();
            f(&mut t);
            let e = Router::from_topology(&t).unwrap_err();
            assert!(e.contains(want), "{e} should mention {want}");
        }
        let e = Topology::from_json("x.json", r#"{"interfaces": [], "bogus": 1}"#).unwrap_err();
        assert!(e.contains("x.json") && e.contains("bogus"), "{e}");
        assert!(
            Router::from_topology(&Topology::from_json("x", r#"{"interfaces": []}"#).unwrap())
                .is_err()
        );
    }

    #[test]
    fn rp_filter_per_interface_defaults_to_off() {
        let mut t = topo();
        assert!(!t.to_json().contains("rp_filter"), "off is left out");
        t.interfaces[0].rp_filter = RpFilter::Strict;
        t.interfaces[2].rp_filter = RpFilter::Loose;
        let text = t.to_json();
        assert!(text.contains("\"rp_filter\": \"strict\""), "{text}");
        assert_eq!(Topology::from_json("t", &text).unwrap(), t);
        let r = Router::from_topology(&t).unwrap();
        let modes: Vec<u8> = r.ifaces.iter().map(|f| f.rp_filter.sysctl()).collect();
        assert_eq!(modes, vec![1, 0, 2]);
        let e = Topology::from_json("x", &text.replace("\"loose\"", "\"sometimes\"")).unwrap_err();
        assert!(e.contains("sometimes"), "{e}");
    }

    #[test]
    fn json_round_trip() {
        let t = topo();
        assert_eq!(Topology::from_json("t", &t.to_json()).unwrap(), t);
    }
}
