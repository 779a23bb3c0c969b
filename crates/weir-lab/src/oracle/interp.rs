//! The kernel's evaluation of one rule's expressions on a packet (`nft_do_chain` on one rule):
//! registers as `struct nft_regs` (bytes, in the machine's order: little-endian), payload
//! loads against the offsets `nft_set_pktinfo*` computes, `NFT_BREAK` when a load falls outside
//! the packet or a comparison fails.
//!
//! Each register byte also remembers where it came from ([`Prov`]: a byte of the frame, of the
//! mark, ... through the masks and xors of `bitwise`), so that the generator can write the
//! packet bytes a comparison wants.

use super::bytecode::{Base, Block, ElemData, Expr, ExtKind, Set, WORDS};
use std::cmp::Ordering;
use weir_lang::ir::Hook;

/// Length of the Ethernet header every generated frame starts with.
pub const ETH: usize = 14;

/// The family of the table a rule is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Ip,
    Ip6,
    Inet,
    Netdev,
}

impl Family {
    pub fn from_name(s: &str) -> Option<Family> {
        Some(match s {
            "ip" => Family::Ip,
            "ip6" => Family::Ip6,
            "inet" => Family::Inet,
            "netdev" => Family::Netdev,
            _ => return None,
        })
    }
}

/// Where the rule runs.
#[derive(Clone, Debug)]
pub struct Env {
    pub family: Family,
    pub hook: Hook,
    /// The routing `fib` looks up ([`super::fibenv::FibModel`]); None: the default model.
    pub fib: Option<std::sync::Arc<super::fibenv::FibModel>>,
}

/// The names of the devices a packet comes in by and goes out by (Ethernet devices: type
/// ARPHRD_ETHER, and the frame's destination is the input device's address, [`OWN_MAC`]).
pub const IIFNAME: &str = "eth0";
pub const OIFNAME: &str = "eth1";
pub const OWN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

impl Env {
    /// The routing model `fib` reads: the one given, else [`super::fibenv::FibModel`]'s
    /// default.
    pub fn fib_model(&self) -> std::sync::Arc<super::fibenv::FibModel> {
        static DEFAULT: std::sync::OnceLock<std::sync::Arc<super::fibenv::FibModel>> =
            std::sync::OnceLock::new();
        self.fib
            .clone()
            .unwrap_or_else(|| DEFAULT.get_or_init(Default::default).clone())
    }

    /// The hook has an input device.
    pub fn has_in(&self) -> bool {
        matches!(
            self.hook,
            Hook::Ingress | Hook::Prerouting | Hook::Input | Hook::Forward
        )
    }

    /// The hook has an output device.
    pub fn has_out(&self) -> bool {
        matches!(
            self.hook,
            Hook::Forward | Hook::Output | Hook::Postrouting | Hook::Egress
        )
    }

    /// The hook has a link-layer header in front of the network header (`skb_mac_header`).
    pub fn has_link(&self) -> bool {
        matches!(
            self.hook,
            Hook::Ingress | Hook::Prerouting | Hook::Input | Hook::Forward
        )
    }
}

/// A packet: an Ethernet frame and the metadata rules can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub frame: Vec<u8>,
    pub mark: u32,
    pub priority: u32,
    /// The names of the input and output devices (IFNAMSIZ bytes, NUL-padded), where the
    /// hook has them.
    pub iif: [u8; 16],
    pub oif: [u8; 16],
    /// Their indexes.
    pub iif_index: u32,
    pub oif_index: u32,
    /// What connection tracking knows of the packet.
    pub conn: Conn,
    /// The wall clock when the packet comes (`ktime_get_real_ns`: ns since the epoch, UTC).
    pub wall_ns: u64,
}

/// The packet's connection as `ct` expressions see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conn {
    /// `notrack`ed: `ct state untracked`, every other key breaks.
    Untracked,
    /// No entry (conntrack could not track it): `ct state invalid`, the others break.
    Invalid,
    Tracked(Ct),
}

/// A connection entry, as much of it as the oracle reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ct {
    /// `enum ip_conntrack_info`: 0 established, 1 related, 2 new, 3 established (reply),
    /// 4 related (reply).
    pub info: u8,
    pub status: u32,
    pub mark: u32,
    pub expiration_ms: u32,
}

impl Default for Ct {
    fn default() -> Ct {
        Ct {
            info: 0,
            status: 0x8 | 0x2 | 0x4,
            mark: 0,
            expiration_ms: 30_000,
        }
    }
}

impl Conn {
    /// `ct state`: NF_CT_STATE_BIT(ctinfo), or the untracked / invalid bit.
    pub fn state_bits(&self) -> u32 {
        match self {
            Conn::Untracked => 64,
            Conn::Invalid => 1,
            Conn::Tracked(c) => 1 << (c.info % 3 + 1),
        }
    }
}

/// A device name as the kernel holds it.
pub fn ifname(s: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (i, c) in s.bytes().take(15).enumerate() {
        b[i] = c;
    }
    b
}

/// Where a register byte came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    Frame(usize),
    Mark(u8),
    Priority(u8),
    /// `meta l4proto`: the IPv4 protocol or IPv6 next header.
    L4proto,
    /// `meta nfproto` / `meta protocol` (byte i): the network protocol.
    Nfproto,
    Protocol(u8),
    /// `meta len` byte i (little-endian).
    Len(u8),
    /// `meta pkttype` (from the frame's destination address).
    Pkttype,
    /// Byte i of the input (true) or output device's name, or of its index.
    Ifname(bool, u8),
    Ifindex(bool, u8),
    /// `ct state` byte i, `ct direction`, `ct status` / `ct mark` / `ct expiration` byte i.
    CtState(u8),
    CtDir,
    CtStatus(u8),
    CtMark(u8),
    CtExp(u8),
    /// `meta time` byte i (little-endian), `meta day`, `meta hour` byte i.
    Time(u8),
    Day,
    Hour(u8),
    /// Whether the packet has the extension header / TCP option / SCTP chunk of the type
    /// (`exthdr ... present`).
    Present(ExtKind, u8),
    /// Byte i of a `fib` result (the generator chooses the address looked up).
    Fib(u8),
}

/// A register byte is `(byte at loc & mask) ^ xor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prov {
    pub loc: Loc,
    pub mask: u8,
    pub xor: u8,
}

/// What `nft_set_pktinfo_*` computes for the packet.
#[derive(Clone, Copy, Debug)]
pub struct Pktinfo {
    pub ethertype: u16,
    /// The transport header's offset in the frame (NFT_PKTINFO_L4PROTO), and its protocol.
    pub l4: Option<(usize, u8)>,
    pub fragoff: bool,
    /// `skb->len` at the hook (from the network header).
    pub len: usize,
    /// Where the data a load can read ends in the frame: the IP packet's end at the IP hooks
    /// (`ip_rcv` trims the link layer's padding), the frame's at netdev ingress.
    pub end: usize,
    /// `meta nfproto` (the hook's family: 2, 10, or 5 for netdev).
    pub nfproto: u8,
}

/// The result of the rule on a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The rule ran to its end (its verdict or statements).
    Match,
    /// NFT_BREAK at this expression.
    Break(usize),
    /// The family's hook does not see this packet.
    NotSeen,
    /// Something the oracle does not model.
    Unknown(String),
}

/// IPv6 next-header values `ipv6_ext_hdr` says are extension headers (hop-by-hop, routing,
/// fragment, AH, none, destination options).
pub fn ipv6_ext(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 51 | 59 | 60)
}

/// `ipv6_find_hdr(skb, &thoff, -1, &fragoff, &flags)`: the first header that is not an
/// extension header (its offset in the frame and protocol) and whether the packet is a later
/// fragment; None (-EBADMSG, -ENOENT) when a header does not fit.
pub fn ipv6_find_hdr(f: &[u8], end: usize) -> Option<(usize, u8, bool)> {
    let mut nexthdr = *f.get(ETH + 6)?;
    let mut start = ETH + 40;
    loop {
        if !ipv6_ext(nexthdr) || nexthdr == 59 {
            return Some((start, nexthdr, false));
        }
        if start + 2 > end {
            return None;
        }
        let (hnext, hlen) = (f[start], f[start + 1] as usize);
        let size = match nexthdr {
            44 => {
                if start + 4 > end {
                    return None;
                }
                let off = u16::from_be_bytes([f[start + 2], f[start + 3]]) & !0x7;
                if off != 0 {
                    if !ipv6_ext(hnext) || hnext == 59 {
                        return Some((start, hnext, true));
                    }
                    return None;
                }
                8
            }
            51 => (hlen + 2) << 2,
            _ => (hlen + 1) << 3,
        };
        nexthdr = hnext;
        start += size;
    }
}

fn ipv4_info(f: &[u8], validate: bool) -> Option<(usize, u8, bool)> {
    let h = f.get(ETH..ETH + 20)?;
    let ihl = (h[0] & 0xf) as usize * 4;
    let tot = u16::from_be_bytes([h[2], h[3]]) as usize;
    if validate && (h[0] >> 4 != 4 || ihl < 20 || tot < ihl || f.len() - ETH < tot) {
        return None;
    }
    let fragoff = u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0;
    Some((ETH + ihl, h[9], fragoff))
}

fn ipv6_info(f: &[u8], validate: bool) -> Option<()> {
    let h = f.get(ETH..ETH + 40)?;
    let plen = u16::from_be_bytes([h[4], h[5]]) as usize;
    if validate && (h[0] >> 4 != 6 || plen + 40 > f.len() - ETH) {
        return None;
    }
    Some(())
}

/// The packet as the hook sees it; None when the hook does not see it, Err when the oracle
/// does not model it.
pub fn pktinfo(p: &Packet, env: &Env) -> Result<Option<Pktinfo>, String> {
    let f = &p.frame;
    if f.len() < ETH {
        return Ok(None);
    }
    let ethertype = u16::from_be_bytes([f[12], f[13]]);
    let l3len = f.len() - ETH;
    let v4 = ethertype == 0x0800;
    let v6 = ethertype == 0x86dd;
    let seen = match env.family {
        Family::Ip => v4,
        Family::Ip6 => v6,
        Family::Inet => v4 || v6,
        Family::Netdev => true,
    };
    if !seen {
        return Ok(None);
    }
    // a VLAN tag: untagged (skb_vlan_untag) before the ingress hook, not modelled
    if matches!(ethertype, 0x8100 | 0x88a8) {
        return Err("VLAN tag".into());
    }
    let validate = env.family == Family::Netdev;
    let mut info = Pktinfo {
        ethertype,
        l4: None,
        fragoff: false,
        len: l3len,
        end: f.len(),
        nfproto: if env.family == Family::Netdev {
            5
        } else if v4 {
            2
        } else {
            10
        },
    };
    if v4 {
        if let Some((th, proto, frag)) = ipv4_info(f, validate) {
            info.l4 = Some((th, proto));
            info.fragoff = frag;
        }
    }
    if !validate {
        let ip_len = if v4 {
            f.get(ETH + 2..ETH + 4)
                .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
        } else {
            f.get(ETH + 4..ETH + 6)
                .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize + 40)
        };
        if let Some(n) = ip_len.filter(|&n| n <= l3len) {
            info.end = ETH + n;
            info.len = n;
        }
    }
    if v6 && ipv6_info(f, validate).is_some() {
        if let Some((th, nh, frag)) = ipv6_find_hdr(f, info.end) {
            info.l4 = Some((th, nh));
            info.fragoff = frag;
        }
    }
    Ok(Some(info))
}

/// Whether the kernel delivers the packet to the IP hooks at all (`ip_rcv_core`,
/// `ipv6_rcv`): a well-formed IPv4 header with a right checksum, lengths that agree with the
/// frame; an IPv6 header whose payload length agrees.
pub fn deliverable(p: &Packet) -> bool {
    let f = &p.frame;
    if f.len() < ETH + 20 {
        return false;
    }
    match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => {
            let h = &f[ETH..];
            let ihl = (h[0] & 0xf) as usize * 4;
            let tot = u16::from_be_bytes([h[2], h[3]]) as usize;
            h[0] >> 4 == 4
                && ihl >= 20
                && tot >= ihl
                && tot <= h.len()
                && ip_checksum(&h[..ihl]) == 0
                && h[20..ihl].iter().all(|&b| b == 0)
        }
        0x86dd => {
            f.len() >= ETH + 40
                && f[ETH] >> 4 == 6
                && u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]) as usize + 40 <= f.len() - ETH
                && (f[ETH + 6] != 0 || hop_by_hop_ok(&f[ETH + 40..]))
        }
        _ => false,
    }
}

/// A hop-by-hop options header first, as `ipv6_rcv` checks it before the hooks
/// (`ipv6_parse_hopopts`): it fits, and its options are padding or unknown options to skip
/// (the action bits 00); anything else the oracle counts as dropped.
fn hop_by_hop_ok(h: &[u8]) -> bool {
    let Some(&len) = h.get(1) else {
        return false;
    };
    let end = (len as usize + 1) * 8;
    if end > h.len() {
        return false;
    }
    let mut o = 2;
    while o < end {
        match h[o] {
            0 => o += 1,
            t => {
                let Some(&l) = h.get(o + 1) else {
                    return false;
                };
                if (t != 1 && t >> 6 != 0) || o + 2 + l as usize > end {
                    return false;
                }
                o += 2 + l as usize;
            }
        }
    }
    true
}

/// The Internet checksum of `b` (0 over a header with a right checksum).
pub fn ip_checksum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The registers.
#[derive(Clone)]
pub struct Regs {
    pub data: [u8; WORDS * 4],
    pub prov: [Option<Prov>; WORDS * 4],
}

impl Regs {
    fn new() -> Regs {
        Regs {
            data: [0; WORDS * 4],
            prov: [None; WORDS * 4],
        }
    }

    /// Store `n` bytes at word `w`, zeroing the rest of the last word (as the kernel's loads).
    fn store(&mut self, w: usize, bytes: &[u8], prov: &[Option<Prov>]) -> Option<()> {
        let o = w * 4;
        let end = o + bytes.len().div_ceil(4) * 4;
        if end > self.data.len() {
            return None;
        }
        self.data[o..end].fill(0);
        self.prov[o..end].fill(None);
        self.data[o..o + bytes.len()].copy_from_slice(bytes);
        self.prov[o..o + bytes.len()].copy_from_slice(prov);
        Some(())
    }

    pub fn get(&self, w: usize, n: usize) -> &[u8] {
        &self.data[w * 4..(w * 4 + n).min(self.data.len())]
    }
}

/// A trace of one evaluation: the outcome and the registers when it ended (for the
/// generator: the provenance of the bytes a failed comparison read).
pub struct Trace {
    pub outcome: Outcome,
    pub regs: Regs,
    /// The transport header offset the packet had (for extending it).
    pub info: Option<Pktinfo>,
    /// The packet's mark when the rule matched (`meta set mark`), and the connection's mark
    /// a `ct set mark` gave.
    pub mark: u32,
    pub ct_mark: Option<u32>,
    /// The packet's priority when the rule matched (`meta set priority`).
    pub priority: u32,
    /// The translation a NAT statement asked for: kind, address range, port range.
    pub nat: Option<NatOut>,
    /// The frame after the rule's payload writes (checksums not updated), when it wrote.
    pub written: Option<Vec<u8>>,
}

/// A NAT statement's translation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatOut {
    pub kind: String,
    pub addr: Option<(u128, u128)>,
    pub port: Option<(u16, u16)>,
}

/// Whether a set holds `key` (register layout); its element when it does: one of its own,
/// else its catch-all element (nft_set_catchall_lookup, after the set's own lookup misses).
pub fn set_lookup<'a>(set: &'a Set, key: &[u8]) -> Option<&'a super::bytecode::Elem> {
    own_lookup(set, key).or(set.catchall.as_ref())
}

fn own_lookup<'a>(set: &'a Set, key: &[u8]) -> Option<&'a super::bytecode::Elem> {
    let n = set.elems.first()?.key.len();
    let key = &key[..n.min(key.len())];
    if set.elems.iter().any(|e| e.end.is_some()) {
        return set.elems.iter().find(|e| {
            let end = e.end.as_ref().unwrap_or(&e.key);
            let mut o = 0;
            e.comps.iter().all(|&c| {
                let (k, lo, hi) = (&key[o..o + c], &e.key[o..o + c], &end[o..o + c]);
                o += c;
                k >= lo && k <= hi
            })
        });
    }
    if set.interval() {
        // the greatest element at or below the key: an interval's start (member) or the end
        // of one (not)
        let mut best: Option<&super::bytecode::Elem> = None;
        for e in &set.elems {
            if e.key.as_slice() <= key
                && best.map_or(true, |b| {
                    e.key > b.key || (e.key == b.key && b.interval_end && !e.interval_end)
                })
            {
                best = Some(e);
            }
        }
        return best.filter(|e| !e.interval_end);
    }
    set.elems.iter().find(|e| e.key == key)
}

/// Evaluate a block's expressions on a packet.
pub fn eval(b: &Block, p: &Packet, env: &Env) -> Trace {
    eval_upto(b, p, env, usize::MAX)
}

/// Evaluate the expressions before `upto` (Match when they all pass): the registers as the
/// expression `upto` finds them.
pub fn eval_upto(b: &Block, p: &Packet, env: &Env, upto: usize) -> Trace {
    let mut regs = Regs::new();
    let info = match pktinfo(p, env) {
        Ok(Some(i)) => i,
        Ok(None) => {
            return Trace {
                outcome: Outcome::NotSeen,
                regs,
                info: None,
                mark: p.mark,
                ct_mark: None,
                priority: p.priority,
                nat: None,
                written: None,
            }
        }
        Err(m) => {
            return Trace {
                outcome: Outcome::Unknown(m),
                regs,
                info: None,
                mark: p.mark,
                ct_mark: None,
                priority: p.priority,
                nat: None,
                written: None,
            }
        }
    };
    let mut mark = p.mark;
    let mut priority = p.priority;
    let mut frame = p.frame.clone();
    // the bytes a payload write changed: loads read them from the written frame, with no
    // provenance (the generator cannot steer them)
    let mut dirty = vec![false; frame.len()];
    let mut written = false;
    let mut ct_mark = None;
    let mut nat = None;
    let out = |outcome, regs| Trace {
        outcome,
        regs,
        info: Some(info),
        mark: p.mark,
        ct_mark: None,
        priority: p.priority,
        nat: None,
        written: None,
    };
    for (i, e) in b.exprs.iter().enumerate().take(upto) {
        match e {
            Expr::Payload {
                base,
                off,
                len,
                dreg,
            } => {
                let start = match base {
                    Base::Link if env.has_link() => 0,
                    Base::Link => return out(Outcome::Break(i), regs),
                    Base::Network => ETH,
                    Base::Transport => match info.l4 {
                        Some((th, _)) if !info.fragoff => th,
                        _ => return out(Outcome::Break(i), regs),
                    },
                    Base::Inner => match inner_offset(&frame, &info) {
                        Some(o) => o,
                        None => return out(Outcome::Break(i), regs),
                    },
                };
                let (a, z) = (start + off, start + off + len);
                if z > info.end {
                    return out(Outcome::Break(i), regs);
                }
                let prov: Vec<Option<Prov>> = (a..z)
                    .map(|o| {
                        (!dirty[o]).then_some(Prov {
                            loc: Loc::Frame(o),
                            mask: 0xff,
                            xor: 0,
                        })
                    })
                    .collect();
                if regs.store(*dreg, &frame[a..z], &prov).is_none() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::Inner {
                typ,
                hdrsize,
                flags,
                load,
                dreg,
            } => {
                let Some((v, prov)) =
                    super::inner::load(&frame, &info, (*typ, *hdrsize, *flags), load)
                else {
                    return out(Outcome::Break(i), regs);
                };
                if written {
                    return out(Outcome::Unknown("load after a payload write".into()), regs);
                }
                if regs.store(*dreg, &v, &prov).is_none() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::Meta { key, dreg } => {
                let pv = |l: Loc| {
                    Some(Prov {
                        loc: l,
                        mask: 0xff,
                        xor: 0,
                    })
                };
                let (v, prov): (Vec<u8>, Vec<Option<Prov>>) = match key.as_str() {
                    "l4proto" => match info.l4 {
                        Some((_, proto)) => (vec![proto], vec![pv(Loc::L4proto)]),
                        None => return out(Outcome::Break(i), regs),
                    },
                    "nfproto" => (vec![info.nfproto], vec![pv(Loc::Nfproto)]),
                    "protocol" => (
                        info.ethertype.to_be_bytes().to_vec(),
                        vec![pv(Loc::Protocol(0)), pv(Loc::Protocol(1))],
                    ),
                    "mark" => (
                        mark.to_le_bytes().to_vec(),
                        (0..4).map(|j| pv(Loc::Mark(j))).collect(),
                    ),
                    "priority" => (
                        p.priority.to_le_bytes().to_vec(),
                        (0..4).map(|j| pv(Loc::Priority(j))).collect(),
                    ),
                    "len" => (
                        (info.len as u32).to_le_bytes().to_vec(),
                        (0..4).map(|j| pv(Loc::Len(j))).collect(),
                    ),
                    "iifname" | "oifname" => {
                        let input = key == "iifname";
                        let (has, name) = if input {
                            (env.has_in(), &p.iif)
                        } else {
                            (env.has_out(), &p.oif)
                        };
                        if has {
                            (
                                name.to_vec(),
                                (0..16).map(|k| pv(Loc::Ifname(input, k))).collect(),
                            )
                        } else {
                            (vec![0u8; 16], vec![None; 16])
                        }
                    }
                    // the index, 0 without a device
                    "iif" | "oif" => {
                        let input = key == "iif";
                        let (has, idx) = if input {
                            (env.has_in(), p.iif_index)
                        } else {
                            (env.has_out(), p.oif_index)
                        };
                        if has {
                            (
                                idx.to_le_bytes().to_vec(),
                                (0..4).map(|k| pv(Loc::Ifindex(input, k))).collect(),
                            )
                        } else {
                            (vec![0; 4], vec![None; 4])
                        }
                    }
                    "iiftype" | "oiftype" => {
                        let has = if key == "iiftype" {
                            env.has_in()
                        } else {
                            env.has_out()
                        };
                        if !has {
                            return out(Outcome::Break(i), regs);
                        }
                        (1u16.to_le_bytes().to_vec(), vec![None; 2])
                    }
                    "pkttype" if env.has_in() => {
                        let d = &frame[..6];
                        let t = if d == [0xff; 6] {
                            1
                        } else if d[0] & 1 == 1 {
                            2
                        } else if d == OWN_MAC {
                            0
                        } else {
                            3
                        };
                        (vec![t], vec![pv(Loc::Pkttype)])
                    }
                    // nft_meta_get_eval_time: the wall clock, UTC; the day of the week (0:
                    // Sunday, with the kernel's timezone 0), the seconds since midnight
                    "time" => (
                        p.wall_ns.to_le_bytes().to_vec(),
                        (0..8).map(|j| pv(Loc::Time(j))).collect(),
                    ),
                    "day" => {
                        let secs = p.wall_ns / 1_000_000_000;
                        (vec![((secs / 86_400 + 4) % 7) as u8], vec![pv(Loc::Day)])
                    }
                    "hour" => {
                        let secs = p.wall_ns / 1_000_000_000;
                        (
                            ((secs % 86_400) as u32).to_le_bytes().to_vec(),
                            (0..4).map(|j| pv(Loc::Hour(j))).collect(),
                        )
                    }
                    // no security path: the oracle's host decrypts no IPsec
                    // nor a route's realm, a VRF device, a tunnel's metadata
                    "secpath" | "tunnel path" => (vec![0], vec![None]),
                    // (no route before routing: the rule stops)
                    "rtclassid"
                        if matches!(env.hook, Hook::Prerouting | Hook::Ingress | Hook::Egress) =>
                    {
                        return out(Outcome::Break(i), regs)
                    }
                    "rtclassid" | "sdif" => (vec![0; 4], vec![None; 4]),
                    // the devices' groups: the default group 0 (the oracle's devices are in
                    // no other); none without the device
                    "iifgroup" | "oifgroup" => {
                        let has = if key == "iifgroup" {
                            env.has_in()
                        } else {
                            env.has_out()
                        };
                        if !has {
                            return out(Outcome::Break(i), regs);
                        }
                        (vec![0; 4], vec![None; 4])
                    }
                    // the CPU the rule runs on: the model's is 0 (compare.rs runs weir there)
                    "cpu" => (vec![0; 4], vec![None; 4]),
                    // the packet's socket (its owner, its net_cls class id): the oracle's
                    // packets come from no local socket, so the rule stops
                    "skuid" | "skgid" | "cgroup" => return out(Outcome::Break(i), regs),
                    // the trace flag: not set on a packet coming in
                    "nftrace" => (vec![0], vec![None]),
                    "sdifname" => (vec![0; 16], vec![None; 16]),
                    k => return out(Outcome::Unknown(format!("meta {k}")), regs),
                };
                if regs.store(*dreg, &v, &prov).is_none() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::ExthdrReset { typ } => match super::exthdr::tcp_strip(*typ, &frame, &info) {
                None => return out(Outcome::Break(i), regs),
                // the packet is dropped (NF_DROP), a verdict the comparison does not model
                Some(Some((_, _, false))) => {
                    return out(Outcome::Unknown("reset tcp option: dropped".into()), regs)
                }
                // stripped (the bytes the comparison does not look at) or absent: on
                Some(_) => {}
            },
            Expr::Exthdr {
                kind,
                typ,
                off,
                len,
                present,
                dreg,
            } => {
                let need = off + len;
                let at = super::exthdr::find(*kind, *typ, need, *present, &frame, &info);
                let (v, prov): (Vec<u8>, Vec<Option<Prov>>) = if *present {
                    let pv = Prov {
                        loc: Loc::Present(*kind, *typ),
                        mask: 0xff,
                        xor: 0,
                    };
                    (vec![at.is_some() as u8], vec![Some(pv)])
                } else {
                    let Some(at) = at else {
                        return out(Outcome::Break(i), regs);
                    };
                    let (a, z) = (at + off, at + off + len);
                    if z > info.end {
                        return out(Outcome::Break(i), regs);
                    }
                    let prov = (a..z)
                        .map(|o| {
                            Some(Prov {
                                loc: Loc::Frame(o),
                                mask: 0xff,
                                xor: 0,
                            })
                        })
                        .collect();
                    (frame[a..z].to_vec(), prov)
                };
                if regs.store(*dreg, &v, &prov).is_none() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::Fib {
                flags,
                result,
                present,
                dreg,
            } => {
                let model = env.fib_model();
                let Some(v) =
                    super::fibenv::eval(&model, env, flags, result, *present, &frame, &info, mark)
                else {
                    return out(Outcome::Break(i), regs);
                };
                let prov: Vec<Option<Prov>> = (0..v.len())
                    .map(|k| {
                        Some(Prov {
                            loc: Loc::Fib(k as u8),
                            mask: 0xff,
                            xor: 0,
                        })
                    })
                    .collect();
                if regs.store(*dreg, &v, &prov).is_none() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::MetaSet { key, sreg } => match key.as_str() {
                "mark" => {
                    let v = regs.get(*sreg, 4);
                    mark = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                }
                "priority" => {
                    let v = regs.get(*sreg, 4);
                    priority = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                }
                k => return out(Outcome::Unknown(format!("meta set {k}")), regs),
            },
            // nft_ct_get_eval: the state of any packet; the other keys of a tracked one
            Expr::Ct { key, dreg } => {
                let pv = |l: Loc| {
                    Some(Prov {
                        loc: l,
                        mask: 0xff,
                        xor: 0,
                    })
                };
                let word = |v: u32, l: fn(u8) -> Loc| {
                    (
                        v.to_le_bytes().to_vec(),
                        (0..4u8).map(|k| pv(l(k))).collect::<Vec<_>>(),
                    )
                };
                let (v, prov) = match (key.as_str(), p.conn) {
                    ("state", c) => word(c.state_bits(), Loc::CtState),
                    (_, Conn::Untracked | Conn::Invalid) => return out(Outcome::Break(i), regs),
                    ("direction", Conn::Tracked(c)) => {
                        (vec![(c.info >= 3) as u8], vec![pv(Loc::CtDir)])
                    }
                    ("status", Conn::Tracked(c)) => word(c.status, Loc::CtStatus),
                    ("mark", Conn::Tracked(c)) => word(c.mark, Loc::CtMark),
                    ("expiration", Conn::Tracked(c)) => word(c.expiration_ms, Loc::CtExp),
                    ("l3protocol", _) => (
                        vec![if info.ethertype == 0x86dd { 10 } else { 2 }],
                        vec![None],
                    ),
                    ("protocol", _) => match info.l4 {
                        Some((_, proto)) => (vec![proto], vec![None]),
                        None => return out(Outcome::Unknown("ct protocol".into()), regs),
                    },
                    (k, Conn::Tracked(c)) => match super::ctkeys::load(k, &c, p, &info) {
                        Ok(Some(l)) => l,
                        Ok(None) => return out(Outcome::Break(i), regs),
                        Err(why) => return out(Outcome::Unknown(why), regs),
                    },
                };
                if regs.store(*dreg, &v, &prov).is_none() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::Limit { .. } | Expr::Quota { .. } => {
                if fresh_stops(e, info.len) {
                    return out(Outcome::Break(i), regs);
                }
            }
            // a counter object never stops the rule; a quota or limit object is replaced by
            // its own expression once its declaration is known (super::objects::fill)
            Expr::Objref { kind: 1, .. } => {}
            Expr::Objref { kind, .. } => {
                return out(Outcome::Unknown(format!("objref type {kind}")), regs)
            }
            Expr::Numgen { dreg, offset } => {
                if regs
                    .store(*dreg, &offset.to_le_bytes(), &[None; 4])
                    .is_none()
                {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::Nat {
                kind,
                family,
                addr,
                proto,
            } => {
                let v6 = info.ethertype == 0x86dd;
                // nft_nat_inet_eval: nothing for a packet of the other family, the rule goes on
                if family.is_some_and(|f| (f == 6) != v6) {
                    continue;
                }
                let n = if v6 { 16 } else { 4 };
                let val = |r: usize| {
                    regs.get(r, n)
                        .iter()
                        .fold(0u128, |a, &b| (a << 8) | b as u128)
                };
                let port = |r: usize| {
                    let b = regs.get(r, 2);
                    u16::from_be_bytes([b[0], b[1]])
                };
                nat = Some(NatOut {
                    kind: kind.clone(),
                    addr: addr.map(|(a, z)| (val(a), val(z))),
                    port: proto.map(|(a, z)| (port(a), port(z))),
                });
                break;
            }
            Expr::Stmt { end: true, .. } => break,
            Expr::Absent => return out(Outcome::Break(i), regs),
            Expr::RtZero { len, dreg } => {
                if env.hook == Hook::Prerouting {
                    return out(Outcome::Break(i), regs);
                }
                if regs
                    .store(*dreg, &vec![0; *len], &vec![None; *len])
                    .is_none()
                {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::Synproxy => {
                let Some((th, 6)) = info.l4 else {
                    return out(Outcome::Break(i), regs);
                };
                let flags = frame.get(th + 13).copied().unwrap_or(0);
                if info.fragoff || !tcp_checksum_ok(&frame, th, &info) || flags & 0x12 != 0 {
                    break;
                }
            }
            Expr::CtSetMark { sreg } => {
                if let Conn::Tracked(_) = p.conn {
                    let v = regs.get(*sreg, 4);
                    ct_mark = Some(u32::from_le_bytes([v[0], v[1], v[2], v[3]]));
                }
            }
            Expr::Stmt { .. } => {}
            Expr::PayloadWrite {
                base,
                off,
                len,
                sreg,
            } => {
                let start = match base {
                    Base::Link if env.has_link() => 0,
                    Base::Network => ETH,
                    Base::Transport => match info.l4 {
                        Some((th, _)) if !info.fragoff => th,
                        _ => return out(Outcome::Break(i), regs),
                    },
                    Base::Inner => match inner_offset(&frame, &info) {
                        Some(o) => o,
                        None => return out(Outcome::Break(i), regs),
                    },
                    _ => return out(Outcome::Break(i), regs),
                };
                let (a, z) = (start + off, start + off + len);
                if z > info.end {
                    return out(Outcome::Break(i), regs);
                }
                let v = regs.get(*sreg, *len).to_vec();
                frame[a..a + v.len()].copy_from_slice(&v);
                dirty[a..a + v.len()].iter_mut().for_each(|d| *d = true);
                written = true;
            }
            Expr::Bitwise {
                dreg,
                sreg,
                mask,
                xor,
            } => {
                let n = mask.len();
                let (s, d) = (sreg * 4, dreg * 4);
                if s + n > regs.data.len() || d + n > regs.data.len() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
                for j in 0..n {
                    let v = (regs.data[s + j] & mask[j]) ^ xor[j];
                    let pr = regs.prov[s + j].map(|p| Prov {
                        loc: p.loc,
                        mask: p.mask & mask[j],
                        xor: (p.xor & mask[j]) ^ xor[j],
                    });
                    regs.data[d + j] = v;
                    regs.prov[d + j] = pr;
                }
            }
            Expr::Shift {
                dreg,
                sreg,
                left,
                n,
                len,
            } => {
                let words = len.div_ceil(4);
                if (sreg.max(dreg) + words) * 4 > regs.data.len() || *n >= 32 {
                    return out(Outcome::Unknown("shift".into()), regs);
                }
                let src: Vec<u32> = (0..words)
                    .map(|k| {
                        let o = (sreg + k) * 4;
                        u32::from_le_bytes(regs.data[o..o + 4].try_into().unwrap())
                    })
                    .collect();
                let mut dst = vec![0u32; words];
                let mut carry = 0u32;
                let back = |x: u32, s: u32| if s == 0 { 0 } else { x >> (32 - s) };
                let fwd = |x: u32, s: u32| if s == 0 { 0 } else { x << (32 - s) };
                if *left {
                    for k in (0..words).rev() {
                        dst[k] = (src[k] << n) | carry;
                        carry = back(src[k], *n);
                    }
                } else {
                    for k in 0..words {
                        dst[k] = carry | (src[k] >> n);
                        carry = fwd(src[k], *n);
                    }
                }
                for (k, v) in dst.iter().enumerate() {
                    let o = (dreg + k) * 4;
                    regs.data[o..o + 4].copy_from_slice(&v.to_le_bytes());
                    regs.prov[o..o + 4].fill(None);
                }
            }
            Expr::Byteorder {
                dreg,
                sreg,
                len,
                size,
            } => {
                let (s, d) = (sreg * 4, dreg * 4);
                if s + len > regs.data.len() || d + len > regs.data.len() || *size == 0 {
                    return out(Outcome::Unknown("byteorder".into()), regs);
                }
                let v: Vec<u8> = regs.data[s..s + len].to_vec();
                let pr: Vec<Option<Prov>> = regs.prov[s..s + len].to_vec();
                for c in 0..len / size {
                    for j in 0..*size {
                        regs.data[d + c * size + j] = v[c * size + size - 1 - j];
                        regs.prov[d + c * size + j] = pr[c * size + size - 1 - j];
                    }
                }
            }
            Expr::Cmp { op, sreg, data } => {
                let d = regs.get(*sreg, data.len()).cmp(data.as_slice());
                if !op.holds(d) {
                    return out(Outcome::Break(i), regs);
                }
            }
            Expr::Range {
                neq,
                sreg,
                from,
                to,
            } => {
                let v = regs.get(*sreg, from.len());
                let inside = v >= from.as_slice() && v <= to.as_slice();
                if inside == *neq {
                    return out(Outcome::Break(i), regs);
                }
            }
            Expr::Lookup {
                sreg,
                set,
                dreg,
                invert,
                objref,
            } => {
                let s = &b.sets[*set];
                let n = s.elems.first().map_or(0, |e| e.key.len());
                let key = regs.get(*sreg, n).to_vec();
                let found = set_lookup(s, &key);
                if found.is_some() == *invert {
                    return out(Outcome::Break(i), regs);
                }
                // nft_objref_map_eval: the object the map gives evaluates, fresh
                if let (Some(kind), Some(e)) = (objref, found) {
                    let obj = match &e.data {
                        Some(ElemData::Object(n)) => b.objs.get(n),
                        _ => None,
                    };
                    match (kind, obj) {
                        (1, _) => {}
                        (2 | 4, Some(o)) => {
                            if fresh_stops(o, info.len) {
                                return out(Outcome::Break(i), regs);
                            }
                        }
                        _ => return out(Outcome::Unknown(format!("objref type {kind}")), regs),
                    }
                }
                if let (Some(d), Some(e)) = (dreg, found) {
                    match &e.data {
                        Some(ElemData::Verdict(_)) if *d == 0 => {}
                        Some(ElemData::Bytes(v)) if *d != 0 => {
                            let pr = vec![None; v.len()];
                            if regs.store(*d, v, &pr).is_none() {
                                return out(Outcome::Unknown("register".into()), regs);
                            }
                        }
                        _ => return out(Outcome::Unknown("map data".into()), regs),
                    }
                }
            }
            Expr::Immediate { dreg, data } => {
                let pr = vec![None; data.len()];
                if regs.store(*dreg, data, &pr).is_none() {
                    return out(Outcome::Unknown("register out of range".into()), regs);
                }
            }
            Expr::Verdict(_) | Expr::Counter => {}
            Expr::Unknown(k) => return out(Outcome::Unknown(k.clone()), regs),
        }
    }
    let mut t = out(Outcome::Match, regs);
    t.mark = mark;
    t.ct_mark = ct_mark;
    t.priority = priority;
    t.nat = nat;
    t.written = written.then_some(frame);
    t
}

/// Whether the packet has the header / option / chunk (`exthdr ... present`): 1 or 0.
pub fn eval_present(p: &Packet, env: &Env, kind: ExtKind, typ: u8) -> u8 {
    match pktinfo(p, env) {
        Ok(Some(info)) => super::exthdr::find(kind, typ, 0, true, &p.frame, &info).is_some() as u8,
        _ => 0,
    }
}

/// `nft_payload_inner_offset`: after the TCP header (`doff * 4`), the UDP header, a GRE
/// version 0 header ([`super::inner::tunnel_offset`]) or at IPIP's inner header; none for
/// other protocols, later fragments, or without a transport header.
pub fn inner_offset(f: &[u8], info: &Pktinfo) -> Option<usize> {
    let (th, proto) = info.l4?;
    if info.fragoff {
        return None;
    }
    match proto {
        17 => Some(th + 8),
        6 if th + 20 <= info.end => Some(th + (f[th + 12] >> 4) as usize * 4),
        47 | 4 => super::inner::tunnel_offset(f, info),
        _ => None,
    }
}

/// The order of two byte strings as `memcmp` (shorter: compared on the common length).
pub fn memcmp(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    a[..n].cmp(&b[..n])
}

/// Whether a `limit` or `quota` (a statement, or the object a reference names) stops the rule
/// on its first packet, of `len` bytes: its state fresh, as `nft_limit_init` / `nft_quota_init`
/// leave it.
fn fresh_stops(e: &Expr, len: usize) -> bool {
    match *e {
        Expr::Limit {
            rate,
            unit_secs,
            burst,
            bytes,
            invert,
        } => {
            // nft_limit_init / nft_limit_eval on the bucket's first packet: full of
            // tokens (rate + burst worth of bytes, or burst packets, 5 when 0)
            let nsecs = unit_secs as u128 * 1_000_000_000;
            let rate = rate.max(1) as u128;
            let (max, cost) = if bytes {
                (
                    nsecs * (rate + burst as u128) / rate,
                    nsecs * len as u128 / rate,
                )
            } else {
                let b = if burst == 0 { 5 } else { burst as u128 };
                (nsecs / rate * b, nsecs / rate)
            };
            (max >= cost) == invert
        }
        Expr::Quota {
            bytes,
            consumed,
            invert,
        } => {
            // nft_quota: over once the bytes consumed (this packet's included) reach it
            let over = consumed + len as u64 >= bytes;
            over != invert
        }
        _ => false,
    }
}

/// The TCP checksum of the segment at `th` (`nf_ip_checksum`), by RFC 1071 over the
/// pseudo-header and the segment.
fn tcp_checksum_ok(f: &[u8], th: usize, info: &Pktinfo) -> bool {
    let end = info.end.min(f.len());
    if th + 20 > end {
        return false;
    }
    let seg = &f[th..end];
    let mut sum: u64 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u64;
        }
    };
    if info.ethertype == 0x86dd {
        add(&f[ETH + 8..ETH + 40]);
        add(&(seg.len() as u32).to_be_bytes());
        add(&[0, 6]);
    } else {
        add(&f[ETH + 12..ETH + 20]);
        add(&[0, 6]);
        add(&(seg.len() as u16).to_be_bytes());
    }
    add(seg);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::bytecode::parse_file;

    fn packet(mark: u32, conn: Conn) -> Packet {
        let mut rng = crate::rng::Rng::new(7);
        let mut p = crate::oracle::gen::template(false, &mut rng);
        p.mark = mark;
        p.conn = conn;
        p
    }

    const ENV: Env = Env {
        family: Family::Ip,
        hook: Hook::Input,
        fib: None,
    };

    #[test]
    fn host_order_values_and_shifts() {
        // (mark | 0x10) << 8 == 0x1400: mark 4 gives it
        let src = "# x\nip t input\n  [ meta load mark => reg 1 ]\n  [ bitwise reg 1 = ( reg 1 & 0xffffffef ) ^ 0x00000010 ]\n  [ bitwise reg 1 = ( reg 1 << 0x00000008 ) ]\n  [ cmp eq reg 1 0x00001400 ]\n";
        let b = &parse_file(src)[0];
        assert_eq!(
            eval(b, &packet(4, Conn::Untracked), &ENV).outcome,
            Outcome::Match
        );
        assert_eq!(
            eval(b, &packet(5, Conn::Untracked), &ENV).outcome,
            Outcome::Break(3)
        );
    }

    #[test]
    fn interval_sets_after_byteorder() {
        // ct mark { 0x32-0x2222, 0x4444-0x42de3 }: interval starts and (exclusive) ends
        let src = "# x\n__set%d t 7\n__set%d t 0\n\telement 00000000 flags 1\telement 00000032\telement 00002223 flags 1\telement 00004444\telement 00042de4 flags 1\nip t output\n  [ ct load mark => reg 1 ]\n  [ byteorder reg 1 = hton(reg 1, 4, 4) ]\n  [ lookup reg 1 set __set%d ]\n";
        let b = &parse_file(src)[0];
        let env = Env {
            family: Family::Ip,
            hook: Hook::Output,
            fib: None,
        };
        let with = |mark| {
            let c = Ct {
                mark,
                ..Ct::default()
            };
            eval(b, &packet(0, Conn::Tracked(c)), &env).outcome
        };
        for (m, hit) in [
            (0x31, false),
            (0x32, true),
            (0x2222, true),
            (0x2223, false),
            (0x4444, true),
            (0x42de3, true),
            (0x42de4, false),
        ] {
            assert_eq!(with(m) == Outcome::Match, hit, "{m:#x}");
        }
        // an untracked packet has no mark: the rule breaks at the load
        assert_eq!(
            eval(b, &packet(0, Conn::Untracked), &env).outcome,
            Outcome::Break(0)
        );
    }

    #[test]
    fn wall_clock_keys() {
        // meta time 12341234 (a u64 in host order, printed most significant word first),
        // meta day "Saturday", meta hour "17:00" (TZ UTC-2: 15:00 UTC)
        let src = "# t\nip t input\n  [ meta load time => reg 1 ]\n  [ cmp eq reg 1 0x002bd849 0x74a8f400 ]\n\n# d\nip t input\n  [ meta load day => reg 1 ]\n  [ cmp eq reg 1 0x06 ]\n\n# h\nip t input\n  [ meta load hour => reg 1 ]\n  [ cmp eq reg 1 0x0000d2f0 ]\n";
        let bs = parse_file(src);
        let mut p = packet(0, Conn::Untracked);
        let at = |p: &Packet, i: usize| eval(&bs[i], p, &ENV).outcome == Outcome::Match;
        p.wall_ns = 12_341_234_000_000_000;
        assert!(at(&p, 0));
        p.wall_ns += 1;
        assert!(!at(&p, 0));
        // 2024-06-01 (a Saturday) 15:00:00 UTC
        p.wall_ns = 1_717_254_000_000_000_000;
        assert!(at(&p, 1) && at(&p, 2));
        p.wall_ns += 86_400_000_000_000;
        assert!(!at(&p, 1) && at(&p, 2));
    }

    #[test]
    fn transport_loads_break_on_later_fragments() {
        let src = "# x\nip t input\n  [ meta load l4proto => reg 1 ]\n  [ cmp eq reg 1 0x06 ]\n  [ payload load 2b @ transport header + 2 => reg 1 ]\n";
        let b = &parse_file(src)[0];
        let mut p = packet(0, Conn::Untracked);
        assert_eq!(eval(b, &p, &ENV).outcome, Outcome::Match);
        p.frame[ETH + 7] = 0x10;
        assert_eq!(eval(b, &p, &ENV).outcome, Outcome::Break(2));
    }
}
