//! Connection-tracking helpers: Linux's `nf_conntrack_ftp`, `nf_conntrack_tftp` and
//! `nf_conntrack_sip` with their NAT halves (`nf_nat_ftp`, `nf_nat_tftp`, `nf_nat_sip`).
//!
//! A helper is given to a new connection by `ct helper set "NAME"` (a `ct helper` object of
//! the table: `type "ftp" protocol tcp`). It then reads each packet of that connection as the
//! packet leaves the host (Linux runs helpers at confirm time, after NAT), finds the endpoints
//! the packet announces (an FTP data port, a TFTP transfer, SIP media) and says:
//!
//! - which connections to expect ([`Expect`]): the first packet of such a connection is
//!   `ct state related` (not `new`), its NAT follows its master's (no `nat` chain runs for it);
//! - what to rewrite in the payload ([`Edit`]) when the connection is translated, so the peer
//!   is told the address and port it can reach. The stateful layer applies the edits, fixes
//!   lengths and checksums, and for TCP shifts later sequence numbers (Linux `nf_ct_seqadj`).
//!
//! Each protocol is one file with one function, [`ftp::help`], [`tftp::help`], [`sip::help`],
//! pure (bytes in, [`Out`] out), tested alone.

pub mod ftp;
pub mod sip;
pub mod tftp;

use weir_conntrack::{Dir, Tuple};

/// The helpers weir has (`ct helper` objects' `type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Ftp = 1,
    Tftp = 2,
    Sip = 3,
}

impl Kind {
    /// The helper a `ct helper` object's `type "NAME"` names, for its protocol (6 or 17).
    pub fn of_name(name: &str, l4proto: u8) -> Option<Kind> {
        match (name, l4proto) {
            ("ftp", 6) => Some(Kind::Ftp),
            ("tftp", 17) => Some(Kind::Tftp),
            ("sip", 6 | 17) => Some(Kind::Sip),
            _ => None,
        }
    }

    /// The value kept in a connection entry (0: no helper).
    pub fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Ftp),
            2 => Some(Kind::Tftp),
            3 => Some(Kind::Sip),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Ftp => "ftp",
            Kind::Tftp => "tftp",
            Kind::Sip => "sip",
        }
    }
}

/// What a helper knows of the packet's connection.
///
/// Addresses are `Tuple` addresses (IPv4 in the low 32 bits). `this` is the tuple of the
/// packet's direction as its sender sent it (before any NAT), `other` the tuple of the other
/// direction as the peer sends it. Without NAT `other == this.invert()`. The sender's own
/// address as the peer knows it is `other.dst` (port `other.dport`); the peer's as the sender
/// knows it is `this.dst`.
#[derive(Clone, Copy, Debug)]
pub struct Cx {
    pub dir: Dir,
    pub this: Tuple,
    pub other: Tuple,
}

impl Cx {
    /// The connection is translated (either side's address or port changes).
    pub fn natted(&self) -> bool {
        self.other != self.this.invert()
    }
}

/// A connection the packet announces. Its first packet comes from the peer (`Cx::other.src`),
/// from `sport` (None: any port), to `dst`, with protocol `proto`; it is then translated to
/// `to` (the announced endpoint itself) and its source to `Cx::this.dst`, as Linux's
/// `nf_nat_follow_master` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub proto: u8,
    /// Where the peer connects, as it sees it (the address and port after the payload's rewrite).
    pub dst: (u128, u16),
    /// The endpoint announced, before NAT.
    pub to: (u128, u16),
    pub sport: Option<u16>,
}

/// A change of the transport payload: the `len` bytes at `at` are replaced by `with`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub at: usize,
    pub len: usize,
    pub with: Vec<u8>,
}

/// What a helper made of one packet. `edits` are sorted by `at` and do not overlap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Out {
    pub expects: Vec<Expect>,
    pub edits: Vec<Edit>,
}

/// Run the helper `kind` on one packet's transport payload.
pub fn help(kind: Kind, cx: &Cx, payload: &[u8], out: &mut Out) {
    match kind {
        Kind::Ftp => ftp::help(cx, payload, out),
        Kind::Tftp => tftp::help(cx, payload, out),
        Kind::Sip => sip::help(cx, payload, out),
    }
}

/// An address as text: dotted quad for IPv4, RFC 5952 for IPv6.
pub fn addr_text(addr: u128, v6: bool) -> String {
    if v6 {
        std::net::Ipv6Addr::from(addr).to_string()
    } else {
        std::net::Ipv4Addr::from(addr as u32).to_string()
    }
}
