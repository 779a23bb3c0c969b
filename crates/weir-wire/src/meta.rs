//! Parsing a frame into [`PacketMeta`]. (Implementation in progress.)
use crate::field::Field;

/// How a frame starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// Ethernet II (with optional 802.1Q / 802.1ad tags).
    Ethernet,
    /// A raw IP packet; the version nibble says v4 or v6.
    RawIp,
}

/// The network layer found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    Ipv4,
    Ipv6,
    /// Not IP: the EtherType.
    Other(u16),
}

/// Why a packet is malformed. Each has a stable short name for counters and JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    TruncatedLink,
}

impl Malformed {
    pub fn reason(self) -> &'static str {
        "truncated-link"
    }
}

/// Everything the engine needs from one parse of a frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct PacketMeta {
    pub len: u32,
}

impl PacketMeta {
    pub fn parse(_frame: &[u8], _link: LinkType) -> PacketMeta {
        PacketMeta::default()
    }
    pub fn get(&self, _frame: &[u8], _f: Field) -> Option<u128> {
        None
    }
}
