//! What of a connection the profiles can act on: what the kernel must hand to weir when
//! the ruleset queues to scripts and nothing else (`weir run --print-kernel-rules`).
//!
//! nfqws2's users write the kernel side by hand (`-m connbytes --connbytes 1:6
//! --connbytes-mode packets -j NFQUEUE`, the ports of their profiles); here it is derived
//! from the profiles: for each profile, the protocols and ports its filters take (the
//! flow's remote port: the destination in the original direction, the source in the
//! reply), and for each direction the most packets any of the queue's instances can act on
//! (the largest packet bound of their ranges; none when a range ends in bytes or sequence,
//! or never). A profile's address sets and host lists do not narrow what is queued (the
//! host is known only from the packets themselves).

use crate::profile::filter::{Filters, Ports};

/// The transport selector of a [`Selector`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4 {
    /// Every protocol (a profile without L4 filters).
    Any,
    /// TCP or UDP (6 or 17) to these remote ports (None: every port).
    Ports(u8, Option<Ports>),
    /// ICMP (IPv4) or ICMPv6, every type.
    Icmp,
    /// Another IP protocol.
    Proto(u8),
}

/// A class of connections some profile takes, and how many packets of each direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// Some(false): IPv4 only, Some(true): IPv6 only.
    pub v6: Option<bool>,
    pub l4: L4,
    /// The original (client to server) direction's first packets to queue (None: all).
    pub orig: Option<u64>,
    /// The reply direction's first packets to queue (None: all); at least 1, so the
    /// flow's state learns the server's first packet (SYN/ACK: the reply's sequence, its
    /// TTL for `autottl`).
    pub reply: Option<u64>,
}

/// What the profiles of some queues can act on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    pub selectors: Vec<Selector>,
}

impl Scope {
    /// The selectors of one profile's filters, with the queue's packet bounds.
    pub(crate) fn add(&mut self, f: &Filters, orig: Option<u64>, reply: Option<u64>) {
        let reply = reply.map(|n| n.max(1));
        let mut l4 = Vec::new();
        if let Some(p) = &f.tcp {
            l4.push(L4::Ports(6, (!p.is_all()).then(|| p.clone())));
        }
        if let Some(p) = &f.udp {
            l4.push(L4::Ports(17, (!p.is_all()).then(|| p.clone())));
        }
        if f.icmp.is_some() {
            l4.push(L4::Icmp);
        }
        for &p in f.ipp.iter().flatten() {
            l4.push(L4::Proto(p));
        }
        if l4.is_empty() {
            l4.push(L4::Any);
        }
        for l4 in l4 {
            let s = Selector {
                v6: f.v6,
                l4,
                orig,
                reply,
            };
            if !self.selectors.contains(&s) {
                self.selectors.push(s);
            }
        }
    }

    /// Nothing to queue (no profiles).
    pub fn is_empty(&self) -> bool {
        self.selectors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::filter::Ports;

    #[test]
    fn a_profile_gives_one_selector_per_protocol_it_takes() {
        let mut s = Scope::default();
        let f = Filters {
            tcp: Some(Ports::parse("80,443").unwrap()),
            udp: Some(Ports::parse("*").unwrap()),
            v6: Some(false),
            ..Default::default()
        };
        s.add(&f, Some(6), Some(0));
        assert_eq!(s.selectors.len(), 2);
        assert_eq!(
            s.selectors[0].l4,
            L4::Ports(6, Some(Ports::parse("80,443").unwrap()))
        );
        // every port: no port match
        assert_eq!(s.selectors[1].l4, L4::Ports(17, None));
        // the reply's first packet is always queued
        assert!(s
            .selectors
            .iter()
            .all(|x| x.orig == Some(6) && x.reply == Some(1)));
        assert!(s.selectors.iter().all(|x| x.v6 == Some(false)));
        // the same again adds nothing; no L4 filter: every protocol
        s.add(&f, Some(6), Some(0));
        assert_eq!(s.selectors.len(), 2);
        s.add(&Filters::default(), None, None);
        assert_eq!(s.selectors[2].l4, L4::Any);
        assert_eq!(s.selectors[2].orig, None);
    }
}
