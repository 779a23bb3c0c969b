//! NAT as Linux `nf_nat` does it: choosing a binding for a new connection
//! (`get_unique_tuple`) and rewriting the packets of a NATed connection (`nf_nat_manip_pkt`,
//! `nf_nat_icmp_reply_translation`), with incremental checksum updates (RFC 1624).
//!
//! A binding is only a changed reply tuple: the original tuple stays what the first packet
//! carried, the reply tuple is what the other side will send. A packet of direction `d` is
//! rewritten towards the inverse of the other direction's tuple; which half (source or
//! destination) is rewritten depends on the hook's manip type (destination at prerouting and
//! output, source at postrouting and input) and on the connection's status bits (src-nat 16,
//! dst-nat 32), swapped for the reply direction, exactly as `nf_nat_packet`.
//!
//! Differences from Linux (see also KNOWN_DIFFERENCES):
//! - the address of a multi-address range and the starting offset of a port search come from a
//!   deterministic hash of the tuple (Linux: jhash with a boot-time seed, and `get_random_u16`
//!   for source NAT); `random` / `fully-random` take a pseudo-random offset from a seeded
//!   generator, so a replay is reproducible;
//! - the port search walks the whole range before giving up (Linux stops after 128 tries,
//!   then a few random halvings); when nothing is free the packet is dropped and counted;
//! - `persistent` only leaves the destination out of the address hash; there is no
//!   `find_appropriate_src` (reusing the binding of another connection of the same source);
//! - SCTP's CRC32c is not updated after a port change.

use crate::eval::NatAction;
use weir_conntrack::Tuple;
use weir_lang::ir::{Hook, NatKind};
use weir_wire::checksum as cs;
use weir_wire::meta::proto;
use weir_wire::{Frag, LinkType, PacketMeta, L3};

/// Linux IPS_* NAT status bits, as `ct status` reads them.
pub mod status {
    pub const SRC_NAT: u16 = 16;
    pub const DST_NAT: u16 = 32;
    pub const SRC_NAT_DONE: u16 = 128;
    pub const DST_NAT_DONE: u16 = 256;
}

const UDPLITE: u8 = 136;
const SCTP: u8 = 132;

/// Which half of a tuple a hook rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Manip {
    Src,
    Dst,
}

impl Manip {
    /// The manip type of a hook (None: forward, ingress... do no NAT).
    pub fn of_hook(h: Hook) -> Option<Manip> {
        match h {
            Hook::Prerouting | Hook::Output => Some(Manip::Dst),
            Hook::Postrouting | Hook::Input => Some(Manip::Src),
            _ => None,
        }
    }
    pub fn of_kind(k: NatKind) -> Manip {
        match k {
            NatKind::Snat | NatKind::Masquerade => Manip::Src,
            NatKind::Dnat | NatKind::Redirect => Manip::Dst,
        }
    }
    pub fn inverse(self) -> Manip {
        match self {
            Manip::Src => Manip::Dst,
            Manip::Dst => Manip::Src,
        }
    }
    pub fn status_bit(self) -> u16 {
        match self {
            Manip::Src => status::SRC_NAT,
            Manip::Dst => status::DST_NAT,
        }
    }
    pub fn done_bit(self) -> u16 {
        match self {
            Manip::Src => status::SRC_NAT_DONE,
            Manip::Dst => status::DST_NAT_DONE,
        }
    }
    /// The status bit that says a packet of direction `reply` is rewritten at this manip.
    pub fn applies(self, nat_status: u16, reply: bool) -> bool {
        let bit = if reply {
            self.inverse().status_bit()
        } else {
            self.status_bit()
        };
        nat_status & bit != 0
    }
}

/// Why no binding could be made: the packet is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatError {
    /// masquerade / redirect without an interface address of the packet's family.
    NoAddress,
    /// Every port (or ICMP id) of the range is taken.
    NoPort,
    /// The statement's address is of the other family.
    Family,
}

/// What a NAT statement asks, with the interface address resolved.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub manip: Manip,
    pub addr: Option<(u128, u128)>,
    pub port: Option<(u16, u16)>,
    pub random: bool,
    pub persistent: bool,
    /// The address range is a prefix to map onto ([`Request::netmapped`]).
    pub netmap: bool,
}

impl Request {
    /// Resolve a statement: masquerade takes the output interface's address, redirect the
    /// input interface's (the loopback address at `output`).
    pub fn from_action(
        a: &NatAction,
        v6: bool,
        hook: Hook,
        oif_addr: Option<u128>,
        iif_addr: Option<u128>,
    ) -> Result<Request, NatError> {
        let fits = |x: u128| v6 || x <= u32::MAX as u128;
        let addr = match a.kind {
            NatKind::Snat | NatKind::Dnat => a.addr,
            NatKind::Masquerade => Some(oif_addr.ok_or(NatError::NoAddress)?).map(|x| (x, x)),
            NatKind::Redirect => {
                let x = if hook == Hook::Output {
                    if v6 {
                        1
                    } else {
                        0x7f00_0001
                    }
                } else {
                    iif_addr.ok_or(NatError::NoAddress)?
                };
                Some((x, x))
            }
        };
        if let Some((lo, hi)) = addr {
            if !fits(lo) || !fits(hi) {
                return Err(
                    if matches!(a.kind, NatKind::Masquerade | NatKind::Redirect) {
                        NatError::NoAddress
                    } else {
                        NatError::Family
                    },
                );
            }
        }
        let port = a.port.map(|(a, b)| (a.min(b), a.max(b)));
        Ok(Request {
            manip: Manip::of_kind(a.kind),
            addr: addr.map(|(a, b)| (a.min(b), a.max(b))),
            port,
            random: a.random,
            persistent: a.persistent,
            netmap: a.netmap,
        })
    }

    /// A netmap request (`prefix`) made for one tuple's address `a` (the source for source
    /// NAT, the destination for destination NAT): the prefix's network part with `a`'s host
    /// part, as the kernel's `nf_nat_ipv4_netmap` / `nf_nat_ipv6_netmap` (the netmask is the
    /// bits the range's ends share).
    pub fn netmapped(mut self, a: u128, v6: bool) -> Request {
        if let (true, Some((lo, hi))) = (self.netmap, self.addr) {
            let width = if v6 { u128::MAX } else { u32::MAX as u128 };
            let mask = !(lo ^ hi) & width;
            let x = (a & !mask & width) | (lo & mask);
            self.addr = Some((x, x));
        }
        self
    }
}

fn is_icmp(t: &Tuple) -> bool {
    (t.proto == proto::ICMP && !t.v6) || (t.proto == proto::ICMPV6 && t.v6)
}

fn has_ports(p: u8) -> bool {
    matches!(p, proto::TCP | proto::UDP | UDPLITE | SCTP | proto::DCCP)
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hash_addrs(src: u128, dst: u128) -> u64 {
    mix(mix(src as u64 ^ (src >> 64) as u64) ^ dst as u64 ^ (dst >> 64) as u64)
}

fn tuple_hash(t: &Tuple) -> u64 {
    mix(hash_addrs(t.src, t.dst)
        ^ ((t.sport as u64) << 16 | t.dport as u64)
        ^ ((t.proto as u64) << 40))
}

/// The key a manip changes: the ICMP id (kept in `sport`) for either manip, else the port.
fn key(t: &mut Tuple, m: Manip) -> Option<&mut u16> {
    if is_icmp(t) {
        Some(&mut t.sport)
    } else if has_ports(t.proto) {
        Some(match m {
            Manip::Src => &mut t.sport,
            Manip::Dst => &mut t.dport,
        })
    } else {
        None
    }
}

/// `get_unique_tuple`: the tuple the connection's packets will carry after this manip, given
/// the tuple they carry before it (`cur`, the inverse of the current reply tuple). `used(t)`
/// says whether a tuple is taken (its inverse is some entry's tuple).
pub fn unique_tuple(
    cur: &Tuple,
    req: &Request,
    rng: &mut u64,
    used: impl Fn(&Tuple) -> bool,
) -> Result<Tuple, NatError> {
    let m = req.manip;
    let in_port_range = |t: &Tuple| -> bool {
        let mut t = *t;
        match (req.port, key(&mut t, m)) {
            (Some((lo, hi)), Some(k)) => lo <= *k && *k <= hi,
            _ => true,
        }
    };
    // 1. source NAT keeps the tuple when it already fits and is free
    if m == Manip::Src && !req.random {
        let addr_ok = req
            .addr
            .is_none_or(|(lo, hi)| lo <= cur.src && cur.src <= hi);
        if addr_ok && in_port_range(cur) && !used(cur) {
            return Ok(*cur);
        }
    }
    // 2. the address: the only one, or one picked by a hash of the addresses
    let mut t = *cur;
    if let Some((lo, hi)) = req.addr {
        let a = if lo == hi {
            lo
        } else {
            let h = hash_addrs(cur.src, if req.persistent { 0 } else { cur.dst }) as u128;
            let span = hi - lo;
            if span == u128::MAX {
                h
            } else {
                lo + h % (span + 1)
            }
        };
        match m {
            Manip::Src => t.src = a,
            Manip::Dst => t.dst = a,
        }
    }
    // 3. the port / id: keep it when it fits (and is free, unless the range is one port)
    if !req.random {
        match req.port {
            Some((lo, hi)) => {
                if in_port_range(&t) && (lo == hi || !used(&t)) {
                    return Ok(t);
                }
            }
            None => {
                if !used(&t) {
                    return Ok(t);
                }
            }
        }
    }
    let icmp = is_icmp(&t);
    let Some(k) = key(&mut t, m).map(|k| *k) else {
        // no ports: the clash shows at confirm
        return Ok(t);
    };
    let (min, size): (u32, u32) = match req.port {
        Some((lo, hi)) => (lo as u32, hi as u32 - lo as u32 + 1),
        None if icmp => (0, 65536),
        // a destination NAT without ports does not change the port
        None if m == Manip::Dst => return Ok(t),
        None if k < 512 => (1, 511),
        None if k < 1024 => (600, 424),
        None => (1024, 65536 - 1024),
    };
    let off: u32 = if req.random {
        *rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*rng >> 33) as u32
    } else if m == Manip::Dst {
        0
    } else {
        tuple_hash(cur) as u32
    };
    for i in 0..size {
        let v = (min + (off.wrapping_add(i)) % size) as u16;
        *key(&mut t, m).unwrap() = v;
        if !used(&t) {
            return Ok(t);
        }
    }
    Err(NatError::NoPort)
}

#[inline]
fn rd16(f: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([f[i], f[i + 1]])
}

#[inline]
fn wr16(f: &mut [u8], i: usize, v: u16) {
    f[i..i + 2].copy_from_slice(&v.to_be_bytes());
}

fn rd_addr(f: &[u8], i: usize, v6: bool) -> u128 {
    if v6 {
        u128::from_be_bytes(f[i..i + 16].try_into().unwrap())
    } else {
        u32::from_be_bytes(f[i..i + 4].try_into().unwrap()) as u128
    }
}

fn wr_addr(f: &mut [u8], i: usize, v6: bool, a: u128) {
    if v6 {
        f[i..i + 16].copy_from_slice(&a.to_be_bytes());
    } else {
        f[i..i + 4].copy_from_slice(&(a as u32).to_be_bytes());
    }
}

/// Update a checksum for an address change (32- or 128-bit).
fn upd_addr(c: u16, old: u128, new: u128, v6: bool) -> u16 {
    if v6 {
        cs::update128(c, old, new)
    } else {
        cs::update32(c, old as u32, new as u32)
    }
}

/// ICMP types whose second word is an identifier (the tracked queries).
fn icmp_has_id(v6: bool, t: u8) -> bool {
    if v6 {
        matches!(t, 128 | 129)
    } else {
        matches!(t, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18)
    }
}

/// Write `target`'s source (`Src`) or destination (`Dst`) address and port / ICMP id into the
/// IP packet `q` describes, updating the IPv4 header checksum and the transport checksum
/// (pseudo-header included) where the bytes are present. `addr_only`: leave the transport
/// header alone (the outer header of an ICMP error). Returns whether anything changed.
pub fn manip_pkt(
    frame: &mut [u8],
    q: &PacketMeta,
    target: &Tuple,
    m: Manip,
    addr_only: bool,
) -> bool {
    let v6 = match q.l3 {
        L3::Ipv4 => false,
        L3::Ipv6 => true,
        _ => return false,
    };
    let l3 = q.l3_off as usize;
    let end = q.l3_end().min(frame.len());
    let (alen, aoff) = match (v6, m) {
        (false, Manip::Src) => (4, l3 + 12),
        (false, Manip::Dst) => (4, l3 + 16),
        (true, Manip::Src) => (16, l3 + 8),
        (true, Manip::Dst) => (16, l3 + 24),
    };
    if aoff + alen > end {
        return false;
    }
    let new_addr = match m {
        Manip::Src => target.src,
        Manip::Dst => target.dst,
    };
    let old_addr = rd_addr(frame, aoff, v6);
    let mut changed = false;
    // transport first (its checksum covers the pseudo-header's old address)
    let l4 = q.l4_off as usize;
    if !addr_only && q.frag != Frag::Later && l4 != 0 && l4 < end {
        let p = q.l4proto;
        if has_ports(p) && l4 + 4 <= end {
            let poff = l4 + if m == Manip::Src { 0 } else { 2 };
            let new_port = match m {
                Manip::Src => target.sport,
                Manip::Dst => target.dport,
            };
            let old_port = rd16(frame, poff);
            let coff = match p {
                proto::TCP => Some(l4 + 16),
                proto::UDP | UDPLITE | proto::DCCP => Some(l4 + 6),
                _ => None,
            };
            if let Some(c) = coff.filter(|c| c + 2 <= end) {
                let old = rd16(frame, c);
                let f =
                    |x: u16| cs::update16(upd_addr(x, old_addr, new_addr, v6), old_port, new_port);
                let new = if p == proto::UDP {
                    cs::udp_update(old, f)
                } else {
                    f(old)
                };
                wr16(frame, c, new);
            }
            if old_port != new_port {
                wr16(frame, poff, new_port);
                changed = true;
            }
        } else if ((p == proto::ICMP && !v6) || (p == proto::ICMPV6 && v6)) && l4 + 4 <= end {
            // (a header cut short after its checksum still has it updated, as nft's payload
            // write does; the identifier needs the whole header)
            let typ = frame[l4];
            let mut c = rd16(frame, l4 + 2);
            if v6 {
                c = upd_addr(c, old_addr, new_addr, true);
            }
            if l4 + 8 <= end && icmp_has_id(v6, typ) {
                let old_id = rd16(frame, l4 + 4);
                c = cs::update16(c, old_id, target.sport);
                if old_id != target.sport {
                    wr16(frame, l4 + 4, target.sport);
                    changed = true;
                }
            }
            wr16(frame, l4 + 2, c);
        }
    }
    if old_addr != new_addr {
        wr_addr(frame, aoff, v6, new_addr);
        changed = true;
        if !v6 && l3 + 12 <= end {
            let c = rd16(frame, l3 + 10);
            wr16(frame, l3 + 10, upd_addr(c, old_addr, new_addr, false));
        }
    }
    changed
}

/// `nf_nat_icmp_reply_translation`: an ICMP error RELATED to a NATed connection, travelling in
/// direction `reply`. The quoted packet is put back as the other side saw it (the opposite
/// manip, towards the other direction's tuple), the outer header is rewritten as a packet of
/// the connection would be (addresses only), and the ICMP checksum is recomputed.
pub fn icmp_reply_translation(
    frame: &mut [u8],
    pm: &PacketMeta,
    orig: &Tuple,
    reply_t: &Tuple,
    reply: bool,
    m: Manip,
) -> bool {
    let Some(q) = pm.icmp_quoted(frame) else {
        return false;
    };
    let other = if reply { orig } else { reply_t };
    let mut changed = manip_pkt(frame, &q, other, m.inverse(), false);
    let target = other.invert();
    changed |= manip_pkt(frame, pm, &target, m, true);
    let v6 = pm.l3 == L3::Ipv6;
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end();
    if changed && end <= frame.len() && l4 + 4 <= end {
        frame[l4 + 2] = 0;
        frame[l4 + 3] = 0;
        let init = if v6 {
            let l3 = pm.l3_off as usize;
            let s: [u8; 16] = frame[l3 + 8..l3 + 24].try_into().unwrap();
            let d: [u8; 16] = frame[l3 + 24..l3 + 40].try_into().unwrap();
            cs::pseudo_v6(s, d, proto::ICMPV6, (end - l4) as u32)
        } else {
            0
        };
        let c = cs::checksum_with(init, &frame[l4..end]);
        wr16(frame, l4 + 2, c);
    }
    changed
}

/// Stateless NAT (`ip saddr set`, `tcp dport set`...): write one header field with checksum
/// updates. Returns false when the packet does not carry the field (nothing written).
pub fn set_header_field(frame: &mut [u8], pm: &PacketMeta, f: weir_wire::Field, v: u128) -> bool {
    use weir_wire::Field as F;
    if f == F::TcpOption {
        // `reset tcp option KIND` (the kind is the value)
        return crate::tcp_strip::strip(frame, pm, v as u8);
    }
    if f == F::RawPayload {
        // `@BASE,OFFSET,LEN set VALUE` (packed by the engine)
        return crate::raw_write::apply(frame, pm, v);
    }
    if f == F::TcpOptionField {
        // `tcp option KIND FIELD set VALUE` (kind, offset, length and value packed)
        return crate::tcp_strip::set(frame, pm, v);
    }
    if let F::EtherDaddr | F::EtherSaddr = f {
        // the Ethernet destination (bytes 0..6) or source (6..12): no checksum covers them;
        // a raw-IP frame has neither
        if pm.link != LinkType::Ethernet || frame.len() < 14 {
            return false;
        }
        let at = if f == F::EtherDaddr { 0 } else { 6 };
        frame[at..at + 6].copy_from_slice(&(v as u64).to_be_bytes()[2..]);
        return true;
    }
    let v6 = pm.l3 == L3::Ipv6;
    let mut t = Tuple {
        zone: 0,
        src: pm.saddr,
        dst: pm.daddr,
        sport: pm.sport,
        dport: pm.dport,
        proto: pm.l4proto,
        v6,
    };
    if let Some(done) = set_plain_field(frame, pm, f, v) {
        return done;
    }
    let (m, port) = match f {
        F::IpSaddr if pm.l3 == L3::Ipv4 => (Manip::Src, false),
        F::IpDaddr if pm.l3 == L3::Ipv4 => (Manip::Dst, false),
        F::Ip6Saddr if v6 => (Manip::Src, false),
        F::Ip6Daddr if v6 => (Manip::Dst, false),
        F::TcpSport | F::UdpSport | F::ThSport if pm.has_ports => (Manip::Src, true),
        F::TcpDport | F::UdpDport | F::ThDport if pm.has_ports => (Manip::Dst, true),
        _ => return false,
    };
    if !pm.l3_ok() {
        return false;
    }
    match (m, port) {
        (Manip::Src, false) => t.src = v,
        (Manip::Dst, false) => t.dst = v,
        (Manip::Src, true) => t.sport = v as u16,
        (Manip::Dst, true) => t.dport = v as u16,
    }
    if !port && !has_ports(pm.l4proto) && !pm.has_ports {
        // an ICMP query: keep its id
        if let Some(id) = icmp_id(frame, pm) {
            t.sport = id;
        }
    }
    manip_pkt(frame, pm, &t, m, false);
    true
}

/// The header fields at a fixed place other than addresses and ports (`ip ttl set`, `ip dscp
/// set`, `ip6 hoplimit set`, `tcp flags set` ...): the bits written as nft's `payload write`
/// writes them, and the checksum that covers them updated (the IPv4 header's, or the
/// transport header's; a UDP checksum of 0 stays 0). None: not such a field.
fn set_plain_field(
    frame: &mut [u8],
    pm: &PacketMeta,
    f: weir_wire::Field,
    v: u128,
) -> Option<bool> {
    use weir_wire::Field as F;
    let v4 = pm.l3 == L3::Ipv4;
    let v6 = pm.l3 == L3::Ipv6;
    let l3 = pm.l3_off as usize;
    let l4 = pm.l4_off as usize;
    let tcp = pm.l4proto == proto::TCP;
    let udp = pm.l4proto == proto::UDP;
    let icmp = (v4 && pm.l4proto == proto::ICMP) || (v6 && pm.l4proto == proto::ICMPV6);
    // (offset, bytes, mask over those bytes as a big-endian integer, shift, checksum offset)
    let (at, n, mask, shift, csum): (usize, usize, u32, u32, Option<usize>) = match f {
        F::IpVersion if v4 => (l3, 1, 0xf0, 4, Some(l3 + 10)),
        F::IpHdrlength if v4 => (l3, 1, 0x0f, 0, Some(l3 + 10)),
        F::IpDscp if v4 => (l3 + 1, 1, 0xfc, 2, Some(l3 + 10)),
        F::IpEcn if v4 => (l3 + 1, 1, 0x03, 0, Some(l3 + 10)),
        F::IpLength if v4 => (l3 + 2, 2, 0xffff, 0, Some(l3 + 10)),
        F::IpId if v4 => (l3 + 4, 2, 0xffff, 0, Some(l3 + 10)),
        F::IpFragOff if v4 => (l3 + 6, 2, 0xffff, 0, Some(l3 + 10)),
        F::IpTtl if v4 => (l3 + 8, 1, 0xff, 0, Some(l3 + 10)),
        F::IpProtocol if v4 => (l3 + 9, 1, 0xff, 0, Some(l3 + 10)),
        F::IpChecksum if v4 => (l3 + 10, 2, 0xffff, 0, None),
        F::Ip6Version if v6 => (l3, 1, 0xf0, 4, None),
        F::Ip6Dscp if v6 => (l3, 2, 0x0fc0, 6, None),
        F::Ip6Ecn if v6 => (l3, 2, 0x0030, 4, None),
        F::Ip6Flowlabel if v6 => (l3, 4, 0x000f_ffff, 0, None),
        F::Ip6Length if v6 => (l3 + 4, 2, 0xffff, 0, None),
        F::Ip6Nexthdr if v6 => (l3 + 6, 1, 0xff, 0, None),
        F::Ip6Hoplimit if v6 => (l3 + 7, 1, 0xff, 0, None),
        F::TcpSequence if tcp => (l4 + 4, 4, u32::MAX, 0, Some(l4 + 16)),
        F::TcpAckseq if tcp => (l4 + 8, 4, u32::MAX, 0, Some(l4 + 16)),
        F::TcpDoff if tcp => (l4 + 12, 1, 0xf0, 4, Some(l4 + 16)),
        F::TcpFlags if tcp => (l4 + 13, 1, 0xff, 0, Some(l4 + 16)),
        F::TcpWindow if tcp => (l4 + 14, 2, 0xffff, 0, Some(l4 + 16)),
        F::TcpChecksum if tcp => (l4 + 16, 2, 0xffff, 0, None),
        F::TcpUrgptr if tcp => (l4 + 18, 2, 0xffff, 0, Some(l4 + 16)),
        F::UdpLength if udp => (l4 + 4, 2, 0xffff, 0, Some(l4 + 6)),
        F::UdpChecksum if udp => (l4 + 6, 2, 0xffff, 0, None),
        F::IcmpType | F::Icmp6Type if icmp => (l4, 1, 0xff, 0, Some(l4 + 2)),
        F::IcmpCode | F::Icmp6Code if icmp => (l4 + 1, 1, 0xff, 0, Some(l4 + 2)),
        F::IcmpId | F::Icmp6Id if icmp => (l4 + 4, 2, 0xffff, 0, Some(l4 + 2)),
        F::IcmpSequence | F::Icmp6Sequence if icmp => (l4 + 6, 2, 0xffff, 0, Some(l4 + 2)),
        F::IpVersion
        | F::IpHdrlength
        | F::IpDscp
        | F::IpEcn
        | F::IpLength
        | F::IpId
        | F::IpFragOff
        | F::IpTtl
        | F::IpProtocol
        | F::IpChecksum
        | F::Ip6Version
        | F::Ip6Dscp
        | F::Ip6Ecn
        | F::Ip6Flowlabel
        | F::Ip6Length
        | F::Ip6Nexthdr
        | F::Ip6Hoplimit
        | F::TcpSequence
        | F::TcpAckseq
        | F::TcpDoff
        | F::TcpFlags
        | F::TcpWindow
        | F::TcpChecksum
        | F::TcpUrgptr
        | F::UdpLength
        | F::UdpChecksum
        | F::IcmpType
        | F::Icmp6Type
        | F::IcmpCode
        | F::Icmp6Code
        | F::IcmpId
        | F::Icmp6Id
        | F::IcmpSequence
        | F::Icmp6Sequence => return Some(false),
        _ => return None,
    };
    if at + n > frame.len() || csum.is_some_and(|c| c + 2 > frame.len()) {
        return Some(false);
    }
    // the 16-bit aligned words the write touches, before and after (for the checksum)
    let (wa, wz) = (at & !1, (at + n + 1) & !1);
    let wz = wz.min(frame.len());
    let old: Vec<u8> = frame[wa..wz].to_vec();
    let mut cur: u32 = 0;
    for b in &frame[at..at + n] {
        cur = (cur << 8) | *b as u32;
    }
    let new = (cur & !mask) | (((v as u32) << shift) & mask);
    for (i, b) in frame[at..at + n].iter_mut().enumerate() {
        *b = (new >> (8 * (n - 1 - i))) as u8;
    }
    if let Some(c) = csum {
        // a checksum inside the words written is not updated against itself
        if !(wa..wz).contains(&c) {
            let sum = rd16(frame, c);
            let upd = |s: u16| cs::update_bytes(s, &old, &frame[wa..wz]);
            let sum = if udp && c == l4 + 6 {
                cs::udp_update(sum, upd)
            } else {
                upd(sum)
            };
            wr16(frame, c, sum);
        }
    }
    Some(true)
}

fn icmp_id(frame: &[u8], pm: &PacketMeta) -> Option<u16> {
    let l4 = pm.l4_off as usize;
    let v6 = pm.l3 == L3::Ipv6;
    let p = pm.l4proto;
    if ((p == proto::ICMP && !v6) || (p == proto::ICMPV6 && v6)) && l4 + 8 <= frame.len() {
        icmp_has_id(v6, frame[l4]).then(|| rd16(frame, l4 + 4))
    } else {
        None
    }
}
