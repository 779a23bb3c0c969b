//! Connection tuples and their inversion (ICMP: a request's type to its reply's, and back),
//! directions and entry ids.

use weir_wire::meta::proto;

/// Direction of a packet relative to its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// From the side that opened the connection.
    Original = 0,
    Reply = 1,
}

impl Dir {
    pub(crate) fn from_index(i: usize) -> Dir {
        if i == 0 {
            Dir::Original
        } else {
            Dir::Reply
        }
    }
}

/// Identifies an entry while it is in the table (a slab index: reused after removal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub u32);

/// A connection tuple. IPv4 addresses are in the low 32 bits. ICMP: the identifier in `sport`,
/// `type << 8 | code` in `dport` (as Linux's ICMP tuple); protocols without ports: 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub v6: bool,
    /// The conntrack zone the tuple is in, for its direction (`ct zone set`; 0: the default
    /// zone): part of the connection's identity, as Linux's `nf_ct_zone_id`.
    pub zone: u16,
}

/// A connection's conntrack zone (`ct [original|reply] zone set ID`): its id, and the
/// directions it applies to ([`Zone::ORIGINAL`], [`Zone::REPLY`]; both by default), as
/// Linux's `struct nf_conntrack_zone`. In a direction it does not apply to, the connection's
/// tuple is in zone 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Zone {
    pub id: u16,
    pub dir: u8,
}

impl Zone {
    pub const ORIGINAL: u8 = 1;
    pub const REPLY: u8 = 2;
    /// Zone 0 in both directions: where connections are without `ct zone set`.
    pub const DEFAULT: Zone = Zone { id: 0, dir: 3 };

    /// The zone id of the connection's tuple of direction `d` (`nf_ct_zone_id`).
    pub fn id_for(self, d: Dir) -> u16 {
        if self.dir & (1 << d as u8) != 0 {
            self.id
        } else {
            0
        }
    }
}

impl Default for Zone {
    fn default() -> Zone {
        Zone::DEFAULT
    }
}

/// ICMP request <-> reply types (Linux `invmap`); 0xff when the type has no inverse.
pub(crate) fn icmp_inverse(v6: bool, t: u8) -> u8 {
    if v6 {
        match t {
            128 => 129,
            129 => 128,
            139 => 140,
            140 => 139,
            _ => 0xff,
        }
    } else {
        match t {
            8 => 0,
            0 => 8,
            13 => 14,
            14 => 13,
            15 => 16,
            16 => 15,
            17 => 18,
            18 => 17,
            _ => 0xff,
        }
    }
}

/// ICMP types that may create an entry (requests).
pub(crate) fn icmp_creates(v6: bool, t: u8) -> bool {
    if v6 {
        matches!(t, 128 | 139)
    } else {
        matches!(t, 8 | 13 | 15 | 17)
    }
}

/// ICMPv6 types Linux leaves untracked (neighbour discovery, MLD).
pub(crate) fn icmp6_untracked(t: u8) -> bool {
    matches!(t, 130..=136 | 143)
}

impl Tuple {
    /// The tuple of the other direction: addresses and ports swapped; ICMP keeps the id and
    /// maps a request type to its reply type (and back).
    pub fn invert(&self) -> Tuple {
        let icmp =
            (self.proto == proto::ICMP && !self.v6) || (self.proto == proto::ICMPV6 && self.v6);
        if icmp {
            let t = (self.dport >> 8) as u8;
            let inv = icmp_inverse(self.v6, t);
            let t2 = if inv == 0xff { t } else { inv };
            Tuple {
                src: self.dst,
                dst: self.src,
                sport: self.sport,
                dport: ((t2 as u16) << 8) | (self.dport & 0xff),
                proto: self.proto,
                v6: self.v6,
                zone: self.zone,
            }
        } else {
            Tuple {
                src: self.dst,
                dst: self.src,
                sport: self.dport,
                dport: self.sport,
                proto: self.proto,
                v6: self.v6,
                zone: self.zone,
            }
        }
    }
}
