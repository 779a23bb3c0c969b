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
//! `cutoff()`, `drop()`, `desync(spec, args)` (run a native desync action on the packet:
//! see [`super::desync`]).

use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use mlua::{
    Function, Lua, MetaMethod, String as LuaString, Table, UserData, UserDataMethods, Value,
};
use weir_wire::checksum::{checksum, checksum_with, pseudo_v4, pseudo_v6, udp_final};

use super::desync::ActionCache;
use super::flow::{FlowId, FlowTable};
use super::sandbox::Budget;
use crate::desync::Blobs;
use crate::payload::{Markers, PayloadType, Protocol};

/// Packets one call may queue with `pkt:send`.
pub const MAX_SEND: usize = 64;
/// The largest packet `pkt:send` and `pkt:set_payload` accept.
pub const MAX_PACKET: usize = 65535;

/// One direction's counters of a flow, as nfqws2 keeps them (`pcounter`, `pdcounter`,
/// `pbcounter`, `tcp.rseq`): the profiles' ranges read the same.
pub use crate::profile::range::Counters;

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
    /// Where the host name etc. lie in the L4 payload, as detected when the packet came:
    /// what `pkt:desync` resolves relative markers against (see [`super::desync`]).
    pub markers: Markers,
    /// The TTL / hop limit last seen from the server (for `pkt:desync`'s autottl).
    pub incoming_ttl: Option<u8>,
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
            markers: Markers::default(),
            incoming_ttl: None,
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
pub(crate) fn locate(p: &[u8]) -> (u8, usize, usize) {
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

/// What the `pkt` userdata reads and writes: the packet of the call under way (swapped in
/// and out by the runtime, never copied), what the script asked for, and the per-flow
/// state tables. Shared by the userdata, its methods and the runtime.
pub(crate) struct PktState {
    pub(crate) view: PacketView,
    /// The packet as it was before the script's first change (to restore on failure).
    pub(crate) backup: Option<Vec<u8>>,
    pub(crate) send: Vec<Vec<u8>>,
    pub(crate) cutoff: bool,
    pub(crate) drop: bool,
    pub(crate) flow: FlowId,
    pub(crate) flows: FlowTable,
    /// The blobs `pkt:desync`'s actions read, and its parsed actions.
    pub(crate) blobs: Blobs,
    pub(crate) actions: ActionCache,
    /// The call's instruction budget (`pkt:desync` charges it).
    pub(crate) budget: Arc<Budget>,
    /// Interned names, indexed by the enums' discriminants (their `ALL` order).
    ptype_names: Vec<LuaString>,
    proto_names: Vec<LuaString>,
}

/// Shared by the userdata, its methods (Lua functions, which must be `Send`) and the
/// runtime. Only the thread holding the runtime locks it, so the lock is never contended;
/// a lock already held is a script using `pkt` from inside itself (see [`busy`]).
pub(crate) type Shared = Arc<Mutex<PktState>>;

/// Locks the state for the runtime (never held across a call; a poisoned lock, from a
/// panic in a method, is taken over: the state is plain data).
pub(crate) fn lock(st: &Shared) -> MutexGuard<'_, PktState> {
    st.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks the state for a method or a field, failing if it is held (re-entry).
pub(crate) fn try_lock(st: &Shared) -> mlua::Result<MutexGuard<'_, PktState>> {
    match st.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
        Err(TryLockError::WouldBlock) => Err(busy()),
    }
}

/// The `pkt` userdata: one `__index` in Rust that matches the key and reads only that; the
/// methods are functions made once.
pub(crate) struct Pkt {
    st: Shared,
    /// byte, bytes, set_byte, set_payload, send, cutoff, drop, desync.
    methods: [Function; 8],
}

impl PktState {
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

    /// Queues a packet to send (`pkt:send`, `rawsend`).
    pub(crate) fn queue_send(&mut self, s: &[u8]) -> mlua::Result<()> {
        if self.send.len() >= MAX_SEND || s.len() > MAX_PACKET {
            return Err(mlua::Error::runtime(format!(
                "send: at most {MAX_SEND} packets of at most {MAX_PACKET} bytes per call"
            )));
        }
        self.send.push(s.to_vec());
        Ok(())
    }

    /// Saves the packet before the first change, and marks it changed.
    pub(crate) fn touch(&mut self) {
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

/// The error for `pkt` used from inside itself (a finalizer run by an allocation of its own).
fn busy() -> mlua::Error {
    mlua::Error::runtime("pkt is busy")
}

fn int(v: Option<u64>) -> Value {
    v.map_or(Value::Nil, |v| Value::Integer(v as i64))
}

/// A method: `f(pkt, args)` with `pkt` ignored (the state is the one captured).
fn method<A, R>(
    lua: &Lua,
    st: &Shared,
    f: impl Fn(&Lua, &mut PktState, A) -> mlua::Result<R> + Send + 'static,
) -> mlua::Result<Function>
where
    A: mlua::FromLuaMulti,
    R: mlua::IntoLuaMulti,
{
    let st = st.clone();
    lua.create_function(move |lua, (_, a): (Value, A)| {
        let mut p = try_lock(&st)?;
        f(lua, &mut p, a)
    })
}

impl Pkt {
    /// The userdata and the state it shares with the runtime.
    pub(crate) fn new(
        lua: &Lua,
        max_flows: usize,
        budget: Arc<Budget>,
    ) -> mlua::Result<(Pkt, Shared)> {
        let ptype_names = PayloadType::ALL
            .iter()
            .map(|t| lua.create_string(t.name()))
            .collect::<mlua::Result<_>>()?;
        let proto_names = Protocol::ALL
            .iter()
            .map(|p| lua.create_string(p.name()))
            .collect::<mlua::Result<_>>()?;
        let st = Arc::new(Mutex::new(PktState {
            view: PacketView::default(),
            backup: None,
            send: Vec::new(),
            cutoff: false,
            drop: false,
            flow: FlowId(0),
            flows: FlowTable::new(max_flows),
            blobs: Blobs::new(),
            actions: ActionCache::default(),
            budget,
            ptype_names,
            proto_names,
        }));
        let methods = [
            method(lua, &st, |_, p, i: i64| {
                Ok(index(i, p.view.packet.len()).map(|i| p.view.packet[i]))
            })?,
            method(lua, &st, |lua, p, (i, j): (i64, Option<i64>)| {
                let len = p.view.packet.len() as i64;
                let j = j.unwrap_or(len).min(len);
                let i = i.max(1);
                let s = if i > j {
                    &[][..]
                } else {
                    &p.view.packet[(i - 1) as usize..j as usize]
                };
                lua.create_string(s)
            })?,
            method(lua, &st, |_, p, (i, v): (i64, u8)| {
                let Some(i) = index(i, p.view.packet.len()) else {
                    return Err(mlua::Error::runtime(format!(
                        "set_byte: position {i} outside 1..{}",
                        p.view.packet.len()
                    )));
                };
                p.touch();
                p.view.packet[i] = v;
                Ok(())
            })?,
            method(lua, &st, |_, p, s: LuaString| {
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
            })?,
            method(lua, &st, |_, p, s: LuaString| p.queue_send(&s.as_bytes()))?,
            method(lua, &st, |_, p, ()| {
                p.cutoff = true;
                Ok(())
            })?,
            method(lua, &st, |_, p, ()| {
                p.drop = true;
                Ok(())
            })?,
            method(
                lua,
                &st,
                |_, p, (spec, args): (LuaString, Option<Table>)| {
                    super::desync::call(p, &spec, args)
                },
            )?,
        ];
        Ok((
            Pkt {
                st: st.clone(),
                methods,
            },
            st,
        ))
    }

    /// `pkt[key]`.
    fn get(&self, lua: &Lua, key: &[u8]) -> mlua::Result<Value> {
        let method = |i: usize| Ok(Value::Function(self.methods[i].clone()));
        match key {
            b"byte" => return method(0),
            b"bytes" => return method(1),
            b"set_byte" => return method(2),
            b"set_payload" => return method(3),
            b"send" => return method(4),
            b"cutoff" => return method(5),
            b"drop" => return method(6),
            b"desync" => return method(7),
            _ => {}
        }
        if key == b"state" {
            let mut p = try_lock(&self.st)?;
            let flow = p.flow;
            return Ok(p
                .flows
                .get_or_create(lua, flow)?
                .map_or(Value::Nil, Value::Table));
        }
        let p = try_lock(&self.st)?;
        let v = &p.view;
        Ok(match key {
            b"len" => Value::Integer(v.packet.len() as i64),
            b"outgoing" => Value::Boolean(v.outgoing),
            b"ptype" => Value::String(p.ptype_names[v.ptype as usize].clone()),
            b"l7" => v.l7.map_or(Value::Nil, |l| {
                Value::String(p.proto_names[l as usize].clone())
            }),
            b"host" => match &v.host {
                Some(h) => Value::String(lua.create_string(h)?),
                None => Value::Nil,
            },
            b"l4proto" => Value::Integer(v.l4proto as i64),
            b"sport" => int(p.ports(0)),
            b"dport" => int(p.ports(2)),
            b"ttl" => {
                let at = match v.packet.first().map(|b| b >> 4) {
                    Some(4) => 8,
                    Some(6) => 7,
                    _ => return Ok(Value::Nil),
                };
                int(v.packet.get(at).map(|&b| b as u64))
            }
            b"tcp_flags" => int(p.tcp(13, 1)),
            b"seq" => int(p.tcp(4, 4)),
            b"ack" => int(p.tcp(8, 4)),
            b"payload" => {
                let off = v.payload_offset.min(v.packet.len());
                Value::String(lua.create_string(&v.packet[off..])?)
            }
            b"payload_offset" => Value::Integer(v.payload_offset as i64),
            b"modified" => Value::Boolean(v.modified),
            b"n" => Value::Integer(v.own.packets as i64),
            b"d" => Value::Integer(v.own.data_packets as i64),
            b"b" => Value::Integer(v.own.bytes as i64),
            b"s" => Value::Integer(v.own.seq as i64),
            b"rn" => Value::Integer(v.reverse.packets as i64),
            b"rd" => Value::Integer(v.reverse.data_packets as i64),
            b"rb" => Value::Integer(v.reverse.bytes as i64),
            b"rs" => Value::Integer(v.reverse.seq as i64),
            _ => Value::Nil,
        })
    }
}

impl UserData for Pkt {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_meta_method(MetaMethod::Index, |lua, this, key: LuaString| {
            this.get(lua, &key.as_bytes())
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

    #[test]
    fn discriminants_index_all() {
        for (i, t) in PayloadType::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i);
        }
        for (i, p) in Protocol::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
        }
    }
}
