//! The packet as a script sees it: [`PacketView`] on the Rust side, and one userdata (`pkt`)
//! on the Lua side whose fields are read from the packet bytes only when asked for; no table
//! is built per packet.
//!
//! Lua fields (`pkt.x`): `len`, `outgoing`, `ptype` (nfqws2's name), `l7` (the flow's
//! protocol or nil), `host` (or nil), `l4proto`, `sport`, `dport` (TCP/UDP, else nil),
//! `ttl` (hop limit in IPv6), `tcp_flags`, `seq`, `ack` (TCP, else nil), `payload` (a Lua
//! string of the L4 payload, made when read), `payload_offset`, `modified`, the counters of
//! this packet's direction `n` (packets), `d` (data packets), `b` (payload bytes), `s`
//! (relative sequence) and of the other direction `rn`, `rd`, `rb`, `rs`, and `state` (the
//! flow's persistent table, see [`super::flow`]).
//!
//! Methods (`pkt:x(...)`), positions 1-based over the IP packet as in `string.sub`:
//! `byte(i)`, `bytes(i, j)`, `set_byte(i, v)`, `set_payload(s)` (fixes the IP / UDP lengths
//! and the IPv4 header and TCP / UDP checksums), `send(s)` (queue a packet to send),
//! `cutoff()`, `drop()`.

use mlua::{Lua, String as LuaString, UserData, UserDataFields, UserDataMethods, Value};
use weir_wire::checksum::{checksum, checksum_with, pseudo_v4, pseudo_v6, udp_final};

use super::flow::{FlowId, FlowTable};
use crate::payload::{PayloadType, Protocol};

/// Packets one call may queue with `pkt:send`.
pub const MAX_SEND: usize = 64;
/// The largest packet `pkt:send` and `pkt:set_payload` accept.
pub const MAX_PACKET: usize = 65535;

/// One direction's counters of a flow, as nfqws2 keeps them (`pcounter`, `pdcounter`,
/// `pbcounter`, `tcp.rseq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets seen (`n`).
    pub packets: u64,
    /// Packets with a non-empty L4 payload (`d`).
    pub data_packets: u64,
    /// L4 payload bytes (`b`).
    pub bytes: u64,
    /// Relative TCP sequence of this packet (`s`); 0 for other protocols.
    pub seq: u64,
}

/// A packet handed to a script, with what the engine knows of its flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketView {
    /// The IP packet (no link header). A script's changes are made here.
    pub packet: Vec<u8>,
    /// Set when a script changed `packet`.
    pub modified: bool,
    /// Outgoing (client to server) or incoming.
    pub outgoing: bool,
    pub ptype: PayloadType,
    /// The flow's protocol, if known.
    pub l7: Option<Protocol>,
    /// The flow's host name (SNI, HTTP Host), if known.
    pub host: Option<String>,
    /// This packet's direction's counters.
    pub own: Counters,
    /// The other direction's counters.
    pub reverse: Counters,
    /// The IP protocol of the transport header (6 TCP, 17 UDP, ...).
    pub l4proto: u8,
    /// Where the transport header begins.
    pub l4_offset: usize,
    /// Where the L4 payload begins.
    pub payload_offset: usize,
}

impl Default for PacketView {
    fn default() -> Self {
        PacketView {
            packet: Vec::new(),
            modified: false,
            outgoing: false,
            ptype: PayloadType::Empty,
            l7: None,
            host: None,
            own: Counters::default(),
            reverse: Counters::default(),
            l4proto: 0,
            l4_offset: 0,
            payload_offset: 0,
        }
    }
}

impl PacketView {
    /// A view of `packet` with its transport header and payload located (IPv4 header
    /// length; IPv6 extension headers walked; TCP data offset). The payload type is
    /// `Empty` or `Unknown` and the rest unknown; the caller sets what it knows.
    pub fn new(packet: Vec<u8>, outgoing: bool) -> PacketView {
        let (l4proto, l4_offset, payload_offset) = locate(&packet);
        let ptype = if payload_offset >= packet.len() {
            PayloadType::Empty
        } else {
            PayloadType::Unknown
        };
        PacketView {
            packet,
            outgoing,
            ptype,
            l4proto,
            l4_offset,
            payload_offset,
            ..PacketView::default()
        }
    }
}

/// (IP protocol, transport header offset, payload offset) of an IP packet; offsets are
/// clamped to its length.
fn locate(p: &[u8]) -> (u8, usize, usize) {
    let len = p.len();
    let (proto, l4) = match p.first().map(|b| b >> 4) {
        Some(4) if len >= 20 => (p[9], ((p[0] & 0x0f) as usize * 4).min(len)),
        Some(6) if len >= 40 => {
            let mut nh = p[6];
            let mut off = 40;
            while matches!(nh, 0 | 43 | 44 | 51 | 60) && off + 8 <= len {
                let hlen = match nh {
                    44 => 8,
                    51 => (p[off + 1] as usize + 2) * 4,
                    _ => (p[off + 1] as usize + 1) * 8,
                };
                nh = p[off];
                off += hlen;
            }
            (nh, off.min(len))
        }
        _ => return (0, len, len),
    };
    let payload = match proto {
        6 if l4 + 20 <= len => l4 + ((p[l4 + 12] >> 4) as usize * 4).max(20),
        17 => l4 + 8,
        _ => l4,
    };
    (proto, l4, payload.min(len))
}

/// Sets the IP (and UDP) length fields to the packet's length and recomputes the IPv4
/// header checksum and the TCP / UDP checksum.
pub(crate) fn fix_lengths_and_checksums(p: &mut [u8], l4proto: u8, l4: usize) {
    let len = p.len();
    match p.first().map(|b| b >> 4) {
        Some(4) if len >= 20 => {
            let ihl = ((p[0] & 0x0f) as usize * 4).clamp(20, len);
            p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            p[10..12].copy_from_slice(&[0, 0]);
            let c = checksum(&p[..ihl]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        Some(6) if len >= 40 => {
            p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        }
        _ => return,
    }
    let seg = len.saturating_sub(l4);
    let csum_at = match l4proto {
        6 if seg >= 20 => l4 + 16,
        17 if seg >= 8 => {
            p[l4 + 4..l4 + 6].copy_from_slice(&(seg as u16).to_be_bytes());
            l4 + 6
        }
        _ => return,
    };
    p[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
    let pseudo = if p[0] >> 4 == 4 {
        let (s, d) = (p[12..16].try_into().unwrap(), p[16..20].try_into().unwrap());
        pseudo_v4(s, d, l4proto, seg as u16)
    } else {
        let (s, d) = (p[8..24].try_into().unwrap(), p[24..40].try_into().unwrap());
        pseudo_v6(s, d, l4proto, seg as u32)
    };
    let mut c = checksum_with(pseudo, &p[l4..]);
    if l4proto == 17 {
        c = udp_final(c);
    }
    p[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
}

/// The `pkt` userdata: the packet of the call under way (swapped in and out by the
/// runtime, never copied), what the script asked for, and the per-flow state tables.
pub(crate) struct Pkt {
    pub(crate) view: PacketView,
    /// The packet as it was before the script's first change (to restore on failure).
    pub(crate) backup: Option<Vec<u8>>,
    pub(crate) send: Vec<Vec<u8>>,
    pub(crate) cutoff: bool,
    pub(crate) drop: bool,
    pub(crate) flow: FlowId,
    pub(crate) flows: FlowTable,
    /// Interned names: payload types in `PayloadType::ALL` order, protocols in
    /// `Protocol::ALL` order.
    ptype_names: Vec<LuaString>,
    proto_names: Vec<LuaString>,
}

impl Pkt {
    pub(crate) fn new(lua: &Lua, max_flows: usize) -> mlua::Result<Pkt> {
        let ptype_names = PayloadType::ALL
            .iter()
            .map(|t| lua.create_string(t.name()))
            .collect::<mlua::Result<_>>()?;
        let proto_names = Protocol::ALL
            .iter()
            .map(|p| lua.create_string(p.name()))
            .collect::<mlua::Result<_>>()?;
        Ok(Pkt {
            view: PacketView::default(),
            backup: None,
            send: Vec::new(),
            cutoff: false,
            drop: false,
            flow: FlowId(0),
            flows: FlowTable::new(max_flows),
            ptype_names,
            proto_names,
        })
    }

    fn l4_be(&self, at: usize, n: usize) -> Option<u64> {
        let off = self.view.l4_offset.checked_add(at)?;
        let b = self.view.packet.get(off..off + n)?;
        Some(b.iter().fold(0u64, |a, &x| a << 8 | x as u64))
    }

    fn ports(&self, at: usize) -> Option<u64> {
        matches!(self.view.l4proto, 6 | 17)
            .then(|| self.l4_be(at, 2))
            .flatten()
    }

    fn tcp(&self, at: usize, n: usize) -> Option<u64> {
        (self.view.l4proto == 6)
            .then(|| self.l4_be(at, n))
            .flatten()
    }

    /// Saves the packet before the first change, and marks it changed.
    fn touch(&mut self) {
        if self.backup.is_none() {
            self.backup = Some(self.view.packet.clone());
        }
        self.view.modified = true;
    }
}

/// A 1-based position (as `string.sub`) to a 0-based index inside `len`.
fn index(i: i64, len: usize) -> Option<usize> {
    (i >= 1 && (i as u64) <= len as u64).then(|| (i - 1) as usize)
}

impl UserData for Pkt {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("len", |_, p| Ok(p.view.packet.len()));
        f.add_field_method_get("outgoing", |_, p| Ok(p.view.outgoing));
        f.add_field_method_get("ptype", |_, p| {
            let i = PayloadType::ALL.iter().position(|t| *t == p.view.ptype);
            Ok(i.map(|i| p.ptype_names[i].clone()))
        });
        f.add_field_method_get("l7", |_, p| {
            let i = p
                .view
                .l7
                .and_then(|l| Protocol::ALL.iter().position(|x| *x == l));
            Ok(i.map(|i| p.proto_names[i].clone()))
        });
        f.add_field_method_get("host", |lua, p| match &p.view.host {
            Some(h) => lua.create_string(h).map(Value::String),
            None => Ok(Value::Nil),
        });
        f.add_field_method_get("l4proto", |_, p| Ok(p.view.l4proto));
        f.add_field_method_get("sport", |_, p| Ok(p.ports(0)));
        f.add_field_method_get("dport", |_, p| Ok(p.ports(2)));
        f.add_field_method_get("ttl", |_, p| {
            let at = match p.view.packet.first().map(|b| b >> 4) {
                Some(4) => 8,
                Some(6) => 7,
                _ => return Ok(None),
            };
            Ok(p.view.packet.get(at).copied())
        });
        f.add_field_method_get("tcp_flags", |_, p| Ok(p.tcp(13, 1)));
        f.add_field_method_get("seq", |_, p| Ok(p.tcp(4, 4)));
        f.add_field_method_get("ack", |_, p| Ok(p.tcp(8, 4)));
        f.add_field_method_get("payload", |lua, p| {
            let off = p.view.payload_offset.min(p.view.packet.len());
            lua.create_string(&p.view.packet[off..])
        });
        f.add_field_method_get("payload_offset", |_, p| Ok(p.view.payload_offset));
        f.add_field_method_get("modified", |_, p| Ok(p.view.modified));
        f.add_field_method_get("n", |_, p| Ok(p.view.own.packets));
        f.add_field_method_get("d", |_, p| Ok(p.view.own.data_packets));
        f.add_field_method_get("b", |_, p| Ok(p.view.own.bytes));
        f.add_field_method_get("s", |_, p| Ok(p.view.own.seq));
        f.add_field_method_get("rn", |_, p| Ok(p.view.reverse.packets));
        f.add_field_method_get("rd", |_, p| Ok(p.view.reverse.data_packets));
        f.add_field_method_get("rb", |_, p| Ok(p.view.reverse.bytes));
        f.add_field_method_get("rs", |_, p| Ok(p.view.reverse.seq));
        f.add_field_function_get("state", |lua, ud| {
            let mut p = ud.borrow_mut::<Pkt>()?;
            let flow = p.flow;
            p.flows.get_or_create(lua, flow)
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("byte", |_, p, i: i64| {
            Ok(index(i, p.view.packet.len()).map(|i| p.view.packet[i]))
        });
        m.add_method("bytes", |lua, p, (i, j): (i64, Option<i64>)| {
            let len = p.view.packet.len() as i64;
            let j = j.unwrap_or(len).min(len);
            let i = i.max(1);
            let s = if i > j {
                &[][..]
            } else {
                &p.view.packet[(i - 1) as usize..j as usize]
            };
            lua.create_string(s)
        });
        m.add_method_mut("set_byte", |_, p, (i, v): (i64, u8)| {
            let Some(i) = index(i, p.view.packet.len()) else {
                return Err(mlua::Error::runtime(format!(
                    "set_byte: position {i} outside 1..{}",
                    p.view.packet.len()
                )));
            };
            p.touch();
            p.view.packet[i] = v;
            Ok(())
        });
        m.add_method_mut("set_payload", |_, p, s: LuaString| {
            let s = s.as_bytes();
            let off = p.view.payload_offset.min(p.view.packet.len());
            if off + s.len() > MAX_PACKET {
                return Err(mlua::Error::runtime(format!(
                    "set_payload: packet would be {} bytes (at most {MAX_PACKET})",
                    off + s.len()
                )));
            }
            p.touch();
            let v = &mut p.view;
            v.packet.truncate(off);
            v.packet.extend_from_slice(&s);
            fix_lengths_and_checksums(&mut v.packet, v.l4proto, v.l4_offset);
            Ok(())
        });
        m.add_method_mut("send", |_, p, s: LuaString| {
            let s = s.as_bytes();
            if p.send.len() >= MAX_SEND || s.len() > MAX_PACKET {
                return Err(mlua::Error::runtime(format!(
                    "send: at most {MAX_SEND} packets of at most {MAX_PACKET} bytes per call"
                )));
            }
            p.send.push(s.to_vec());
            Ok(())
        });
        m.add_method_mut("cutoff", |_, p, ()| {
            p.cutoff = true;
            Ok(())
        });
        m.add_method_mut("drop", |_, p, ()| {
            p.drop = true;
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_ipv4_tcp() {
        let mut p = vec![0u8; 40 + 3];
        p[0] = 0x45;
        p[9] = 6;
        p[20 + 12] = 5 << 4;
        assert_eq!(locate(&p), (6, 20, 40));
        assert_eq!(locate(&[]), (0, 0, 0));
    }
}
