//! A profile's filters (nfqws2's `--filter-*`, `--ipset*`, `--hostlist*`): what a flow must
//! be for the profile to be chosen. All but the L7 protocol and the host lists are known at
//! a connection's first packet; those two may become known later, and the choice is made
//! again then.

use crate::payload::Protocol;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Why a filter does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FilterError {}

/// Ports or port ranges (`80,443,1000-2000`, `*`), or all but those (`~...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ports {
    ranges: Vec<(u16, u16)>,
    negated: bool,
}

impl Ports {
    pub fn parse(text: &str) -> Result<Ports, FilterError> {
        let (negated, list) = match text.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if list == "*" {
            return Ok(Ports {
                ranges: vec![(0, u16::MAX)],
                negated,
            });
        }
        let bad = || FilterError(format!("ports {text:?}: expected port[-port][,...] or *"));
        let mut ranges = Vec::new();
        for part in list.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b): (u16, u16) = (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            );
            if a > b {
                return Err(bad());
            }
            ranges.push((a, b));
        }
        Ok(Ports { ranges, negated })
    }

    pub fn contains(&self, p: u16) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&p)) != self.negated
    }

    /// The ranges listed (`lo`, `hi` inclusive), in the order given.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges
    }

    /// Whether these are the ports *not* taken (`~...`).
    pub fn negated(&self) -> bool {
        self.negated
    }

    /// Whether every port is taken.
    pub fn is_all(&self) -> bool {
        (0..=u16::MAX).all(|p| self.contains(p))
    }
}

/// Addresses and prefixes, IPv4 and IPv6 mixed (`198.18.0.0/15,2001:db8::/32,1.2.3.4`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpSet {
    /// Per (is IPv6, prefix length): the prefixes, as the address's bits masked.
    by_len: HashMap<(bool, u8), HashSet<u128>>,
}

impl IpSet {
    /// One address or prefix per item (commas or whitespace between; `#` starts a comment
    /// to the end of the line, as in nfqws2's files).
    pub fn parse(text: &str) -> Result<IpSet, FilterError> {
        let mut s = IpSet::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            for item in line.split([',', ' ', '\t']).filter(|i| !i.is_empty()) {
                s.add(item)?;
            }
        }
        Ok(s)
    }

    pub fn add(&mut self, item: &str) -> Result<(), FilterError> {
        let bad = |why: &str| FilterError(format!("address {item:?}: {why}"));
        let (addr, len) = match item.split_once('/') {
            Some((a, l)) => (
                a,
                Some(l.parse::<u8>().map_err(|_| bad("bad prefix length"))?),
            ),
            None => (item, None),
        };
        let ip: std::net::IpAddr = addr.parse().map_err(|_| bad("not an IP address"))?;
        let (v6, bits, max) = match ip {
            std::net::IpAddr::V4(a) => (false, u32::from(a) as u128, 32u8),
            std::net::IpAddr::V6(a) => (true, u128::from(a), 128u8),
        };
        let len = len.unwrap_or(max);
        if len > max {
            return Err(bad("prefix length out of range"));
        }
        self.by_len
            .entry((v6, len))
            .or_default()
            .insert(mask(bits, len, max));
        Ok(())
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let (v6, bits, max) = match ip {
            std::net::IpAddr::V4(a) => (false, u32::from(a) as u128, 32u8),
            std::net::IpAddr::V6(a) => (true, u128::from(a), 128u8),
        };
        self.by_len
            .iter()
            .any(|(&(f, len), set)| f == v6 && set.contains(&mask(bits, len, max)))
    }

    pub fn is_empty(&self) -> bool {
        self.by_len.is_empty()
    }
}

fn mask(bits: u128, len: u8, max: u8) -> u128 {
    if len == 0 {
        0
    } else {
        bits & (u128::MAX << (max - len)) & (u128::MAX >> (128 - max as u32))
    }
}

/// Domains; a name matches a domain it equals or is a subdomain of (`example.com` matches
/// `www.example.com`), case-insensitively, a trailing dot ignored. nfqws2's `^domain`
/// (the domain alone, no subdomains) too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostList {
    with_subdomains: HashSet<String>,
    exact: HashSet<String>,
}

impl HostList {
    /// One domain per item (lines, commas or whitespace; `#` comments).
    pub fn parse(text: &str) -> HostList {
        let mut h = HostList::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            for item in line.split([',', ' ', '\t']).filter(|i| !i.is_empty()) {
                h.add(item);
            }
        }
        h
    }

    pub fn add(&mut self, domain: &str) {
        let (exact, d) = match domain.strip_prefix('^') {
            Some(d) => (true, d),
            None => (false, domain),
        };
        let d = normal(d);
        if d.is_empty() {
            return;
        }
        if exact {
            self.exact.insert(d);
        } else {
            self.with_subdomains.insert(d);
        }
    }

    pub fn contains(&self, host: &str) -> bool {
        let h = normal(host);
        if self.exact.contains(&h) {
            return true;
        }
        let mut rest = h.as_str();
        loop {
            if self.with_subdomains.contains(rest) {
                return true;
            }
            match rest.split_once('.') {
                Some((_, r)) if !r.is_empty() => rest = r,
                _ => return false,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.with_subdomains.len() + self.exact.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn normal(d: &str) -> String {
    d.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// What a profile's filters see of a flow: fixed at its first packet, but for the
/// protocol and the host name.
#[derive(Clone, Copy, Debug)]
pub struct FlowKey<'a> {
    pub v6: bool,
    /// The IP protocol (6 TCP, 17 UDP, 1 / 58 ICMP...).
    pub proto: u8,
    /// The server's port (the destination of the flow's first packet, as the client sees
    /// it); 0 without ports.
    pub port: u16,
    /// ICMP: type and code.
    pub icmp: Option<(u8, u8)>,
    /// The remote address (the server's).
    pub remote: std::net::IpAddr,
    pub l7: Option<Protocol>,
    pub host: Option<&'a str>,
}

/// A profile's filters; an absent one matches everything.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// `--filter-l3`: Some(false) IPv4 only, Some(true) IPv6 only.
    pub v6: Option<bool>,
    /// `--filter-tcp`, `--filter-udp`, `--filter-icmp`, `--filter-ipp`: when any is given,
    /// the flow must pass one of those given (nfqws2: a profile with `--filter-tcp` takes
    /// no UDP unless `--filter-udp` is given too).
    pub tcp: Option<Ports>,
    pub udp: Option<Ports>,
    pub icmp: Option<Vec<(u8, Option<u8>)>>,
    pub ipp: Option<Vec<u8>>,
    /// `--filter-l7`: the flow's protocol is one of these (an unknown protocol does not
    /// match).
    pub l7: Option<Vec<Protocol>>,
    pub ipset: Option<IpSet>,
    pub ipset_exclude: Option<IpSet>,
    pub hostlist: Option<HostList>,
    pub hostlist_exclude: Option<HostList>,
}

impl Filters {
    /// Whether the flow passes. A host list with no host known yet does not match (the
    /// choice is made again when the host is known).
    pub fn pass(&self, k: &FlowKey) -> bool {
        if self.v6.is_some_and(|v6| v6 != k.v6) {
            return false;
        }
        let l4_given =
            self.tcp.is_some() || self.udp.is_some() || self.icmp.is_some() || self.ipp.is_some();
        if l4_given {
            let tcp = k.proto == 6 && self.tcp.as_ref().is_some_and(|p| p.contains(k.port));
            let udp = k.proto == 17 && self.udp.as_ref().is_some_and(|p| p.contains(k.port));
            let icmp = matches!(k.proto, 1 | 58)
                && self.icmp.as_ref().is_some_and(|l| {
                    k.icmp.is_some_and(|(t, c)| {
                        l.iter()
                            .any(|&(lt, lc)| (lt == t || lt == 255) && lc.is_none_or(|lc| lc == c))
                    })
                });
            let ipp = self.ipp.as_ref().is_some_and(|l| l.contains(&k.proto));
            if !(tcp || udp || icmp || ipp) {
                return false;
            }
        }
        if let Some(l7) = &self.l7 {
            if !k.l7.is_some_and(|p| l7.contains(&p)) {
                return false;
            }
        }
        if self.ipset.as_ref().is_some_and(|s| !s.contains(k.remote)) {
            return false;
        }
        if self
            .ipset_exclude
            .as_ref()
            .is_some_and(|s| s.contains(k.remote))
        {
            return false;
        }
        if let Some(h) = &self.hostlist {
            if !k.host.is_some_and(|host| h.contains(host)) {
                return false;
            }
        }
        if let Some(h) = &self.hostlist_exclude {
            if k.host.is_some_and(|host| h.contains(host)) {
                return false;
            }
        }
        true
    }

    /// Whether the choice can change when the protocol or the host becomes known.
    pub fn waits_for_l7(&self) -> bool {
        self.l7.is_some() || self.hostlist.is_some() || self.hostlist_exclude.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(proto: u8, port: u16, remote: &str, host: Option<&'static str>) -> FlowKey<'static> {
        let remote: std::net::IpAddr = remote.parse().unwrap();
        FlowKey {
            v6: remote.is_ipv6(),
            proto,
            port,
            icmp: None,
            remote,
            l7: None,
            host,
        }
    }

    #[test]
    fn ports() {
        let p = Ports::parse("80,443,1000-2000").unwrap();
        assert!(p.contains(80) && p.contains(1500) && !p.contains(81) && !p.contains(2001));
        let n = Ports::parse("~80").unwrap();
        assert!(!n.contains(80) && n.contains(443));
        assert!(Ports::parse("*").unwrap().contains(0));
        for bad in ["", "x", "5-1", "70000", "1,,2"] {
            assert!(Ports::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ipsets() {
        let s = IpSet::parse("198.18.0.0/15 # lab\n2001:db8::/32,203.0.113.7").unwrap();
        for (a, want) in [
            ("198.19.255.1", true),
            ("198.20.0.1", false),
            ("203.0.113.7", true),
            ("203.0.113.8", false),
            ("2001:db8::1", true),
            ("2001:db9::1", false),
            ("::ffff:198.18.0.1", false),
        ] {
            assert_eq!(s.contains(a.parse().unwrap()), want, "{a}");
        }
        assert!(IpSet::parse("1.2.3.4/33").is_err());
        assert!(IpSet::parse("example.com").is_err());
        assert!(IpSet::parse("0.0.0.0/0")
            .unwrap()
            .contains("9.9.9.9".parse().unwrap()));
    }

    #[test]
    fn hostlists_take_subdomains() {
        let h = HostList::parse("example.com\n^exact.org, Upper.NET.");
        assert!(h.contains("example.com") && h.contains("a.b.EXAMPLE.com."));
        assert!(!h.contains("badexample.com") && !h.contains("com"));
        assert!(h.contains("exact.org") && !h.contains("www.exact.org"));
        assert!(h.contains("upper.net") && h.contains("x.upper.net"));
        assert_eq!(h.len(), 3);
    }

    #[test]
    fn filters() {
        let f = Filters {
            tcp: Some(Ports::parse("80,443").unwrap()),
            hostlist: Some(HostList::parse("example.com")),
            ..Filters::default()
        };
        assert!(f.pass(&key(6, 443, "198.18.0.1", Some("www.example.com"))));
        assert!(
            !f.pass(&key(6, 443, "198.18.0.1", None)),
            "host not known yet"
        );
        assert!(
            !f.pass(&key(17, 443, "198.18.0.1", Some("example.com"))),
            "UDP not given"
        );
        assert!(!f.pass(&key(6, 22, "198.18.0.1", Some("example.com"))));
        assert!(f.waits_for_l7());
        let g = Filters {
            v6: Some(true),
            l7: Some(vec![Protocol::Quic]),
            ..Filters::default()
        };
        let mut k = key(17, 443, "2001:db8::1", None);
        assert!(!g.pass(&k));
        k.l7 = Some(Protocol::Quic);
        assert!(g.pass(&k));
        assert!(!g.pass(&FlowKey {
            v6: false,
            remote: "198.18.0.1".parse().unwrap(),
            ..k
        }));
    }
}
