//! Packets from the bytecode itself: a hit packet that satisfies the rule's comparisons in
//! order (the bytes each comparison reads are written, through the masks of `bitwise`, so that
//! it holds), and miss packets that each violate one comparison of the hit packet.
//!
//! The method is "evaluate, repair, repeat": the interpreter runs the rule on a template packet,
//! and where the rule breaks, the bytes the failing comparison read (their provenance says
//! which frame bytes or metadata) get a value that satisfies it; loads past the end of the
//! packet grow it; `meta nfproto` / `meta protocol` switch the template between IPv4 and IPv6.
//! Header lengths and the IPv4 checksum are fixed after each step unless a comparison set them.

use super::bytecode::{Block, Expr, ExtKind};
use super::interp::{
    eval, eval_upto, ip_checksum, pktinfo, set_lookup, Conn, Ct, Env, Family, Loc, Outcome, Packet,
    Prov, Regs, ETH,
};
use crate::rng::Rng;
use std::collections::BTreeSet;

/// A packet being built: which bytes comparisons chose (the fixups leave them).
#[derive(Clone, Debug)]
struct Work {
    p: Packet,
    pinned: BTreeSet<usize>,
    /// `meta len` wanted (little-endian bytes as the register holds them).
    len: Option<[u8; 4]>,
}

/// An Ethernet frame with an IPv4 or IPv6 header and a TCP header, random addresses, ports
/// and payload.
pub fn template(v6: bool, rng: &mut Rng) -> Packet {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&(rng.range(1024, 65535) as u16).to_be_bytes());
    tcp[2..4].copy_from_slice(&(rng.range(1, 65535) as u16).to_be_bytes());
    tcp[4..8].copy_from_slice(&(rng.next_u64() as u32).to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = 0x02;
    tcp[14..16].copy_from_slice(&[0xfa, 0xf0]);
    let payload = rng.bytes(16);
    if v6 {
        f.extend([0x86, 0xdd]);
        let mut h = vec![0x60, 0, 0, 0, 0, 0, 6, 64];
        for _ in 0..2 {
            h.extend([0xfd, 0, 0, 0, 0, 0, 0, 0]);
            h.extend(rng.bytes(8));
        }
        f.extend(h);
    } else {
        f.extend([0x08, 0x00]);
        let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 6, 0, 0];
        h.extend([10, rng.below(256) as u8, rng.below(256) as u8, 1]);
        h.extend([10, rng.below(256) as u8, rng.below(256) as u8, 2]);
        f.extend(h);
    }
    f.extend(tcp);
    f.extend(payload);
    let mut p = Packet {
        frame: f,
        mark: 0,
        priority: 0,
        iif: super::interp::ifname(super::interp::IIFNAME),
        oif: super::interp::ifname(super::interp::OIFNAME),
        iif_index: 2,
        oif_index: 3,
        conn: Conn::Untracked,
        wall_ns: rng.range(1_500_000_000, 1_900_000_000) * NS + rng.below(NS),
    };
    fixup(&mut p, &BTreeSet::new(), None);
    p
}

const NS: u64 = 1_000_000_000;

/// Put a header / option / chunk into the packet or take it out (`exthdr`), moving the
/// chosen bytes after it along.
fn edit_exthdr(w: &mut Work, kind: ExtKind, typ: u8, need: usize, put: bool, env: &Env) -> bool {
    let Ok(Some(mut info)) = pktinfo(&w.p, env) else {
        return false;
    };
    // a TCP option or SCTP chunk in a packet of another protocol: change the protocol first
    let proto = match kind {
        ExtKind::Tcp => 6,
        ExtKind::Sctp => 132,
        ExtKind::Ipv6 => 0,
    };
    if put && proto != 0 && info.l4.is_some_and(|(_, p)| p != proto) {
        let o = if is_v6(&w.p) { ETH + 6 } else { ETH + 9 };
        if w.pinned.contains(&o) || (is_v6(&w.p) && super::interp::ipv6_ext(w.p.frame[o])) {
            return false;
        }
        w.p.frame[o] = proto;
        fixup(&mut w.p, &w.pinned, w.len);
        let Ok(Some(i)) = pktinfo(&w.p, env) else {
            return false;
        };
        info = i;
    }
    let done = if put {
        super::exthdr::insert(kind, typ, need, &mut w.p.frame, &info).map(|(at, n)| (at, n, true))
    } else {
        super::exthdr::remove(kind, typ, &mut w.p.frame, &info).map(|(at, n)| (at, n, false))
    };
    let Some((at, n, grew)) = done else {
        return false;
    };
    w.pinned = w
        .pinned
        .iter()
        .filter_map(|&o| match o {
            o if o < at => Some(o),
            o if grew => Some(o + n),
            o if o < at + n => None,
            o => Some(o - n),
        })
        .collect();
    true
}

fn is_v6(p: &Packet) -> bool {
    p.frame.get(12..14) == Some(&[0x86, 0xdd])
}

/// Make the lengths and the IPv4 checksum agree with the frame, except where comparisons
/// chose them; `len`: the `meta len` wanted.
fn fixup(p: &mut Packet, pinned: &BTreeSet<usize>, len: Option<[u8; 4]>) {
    // device names: NUL-terminated, zeros after the end
    for n in [&mut p.iif, &mut p.oif] {
        n[15] = 0;
        if let Some(z) = n.iter().position(|&b| b == 0) {
            n[z..].fill(0);
        }
    }
    let f = &mut p.frame;
    let pin = |o: usize| pinned.contains(&o);
    let et = u16::from_be_bytes([f[12], f[13]]);
    if let Some(l) = len {
        let want = u32::from_le_bytes(l) as usize;
        if (20..=4000).contains(&want) {
            f.resize(ETH + want, 0);
        }
    }
    if et == 0x0800 && f.len() >= ETH + 20 {
        let ihl = (f[ETH] & 0xf) as usize * 4;
        if ETH + ihl > f.len() {
            f.resize(ETH + ihl, 0);
        }
        for (o, b) in f.iter_mut().enumerate().take(ETH + ihl).skip(ETH + 20) {
            if !pin(o) {
                *b = 0;
            }
        }
        if pin(ETH + 2) || pin(ETH + 3) {
            let tot = u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]) as usize;
            if tot >= ihl.max(20) && len.is_none() {
                f.resize(ETH + tot, 0);
            }
        } else {
            let tot = (f.len() - ETH).min(65535) as u16;
            f[ETH + 2..ETH + 4].copy_from_slice(&tot.to_be_bytes());
        }
        if !pin(ETH + 10) && !pin(ETH + 11) && ihl >= 20 {
            f[ETH + 10] = 0;
            f[ETH + 11] = 0;
            let c = ip_checksum(&f[ETH..ETH + ihl]);
            f[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
        }
    } else if et == 0x86dd && f.len() >= ETH + 40 {
        if pin(ETH + 4) || pin(ETH + 5) {
            let pl = u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]) as usize;
            if len.is_none() {
                f.resize(ETH + 40 + pl, 0);
            }
        } else {
            let pl = (f.len() - ETH - 40).min(65535) as u16;
            f[ETH + 4..ETH + 6].copy_from_slice(&pl.to_be_bytes());
        }
    }
}

/// `v + 1` / `v - 1` as big-endian integers (wrapping).
fn step(v: &[u8], up: bool) -> Vec<u8> {
    let mut v = v.to_vec();
    for b in v.iter_mut().rev() {
        if up {
            let (n, c) = b.overflowing_add(1);
            *b = n;
            if !c {
                break;
            }
        } else {
            let (n, c) = b.overflowing_sub(1);
            *b = n;
            if !c {
                break;
            }
        }
    }
    v
}

/// What the register bytes can be made to hold: `c` through each byte's mask and xor (bytes
/// of unknown origin keep their value).
fn project(c: &[u8], cur: &[u8], prov: &[Option<Prov>]) -> Vec<u8> {
    c.iter()
        .enumerate()
        .map(|(j, &b)| match prov.get(j).copied().flatten() {
            Some(p) => (b & p.mask) | (p.xor & !p.mask),
            None => cur.get(j).copied().unwrap_or(0),
        })
        .collect()
}

/// Whether expression `e` (a comparison or lookup) holds for register value `v`.
fn holds(b: &Block, e: &Expr, v: &[u8]) -> bool {
    match e {
        Expr::Cmp { op, data, .. } => op.holds(v[..data.len()].cmp(data)),
        Expr::Range { neq, from, to, .. } => {
            let v = &v[..from.len()];
            (v >= from.as_slice() && v <= to.as_slice()) != *neq
        }
        Expr::Lookup { set, invert, .. } => set_lookup(&b.sets[*set], v).is_some() != *invert,
        _ => true,
    }
}

/// The register bytes expression `e` reads: (first word, length).
fn reads(b: &Block, e: &Expr) -> Option<(usize, usize)> {
    match e {
        Expr::Cmp { sreg, data, .. } => Some((*sreg, data.len())),
        Expr::Range { sreg, from, .. } => Some((*sreg, from.len())),
        Expr::Lookup { sreg, set, .. } => {
            Some((*sreg, b.sets[*set].elems.first().map_or(0, |e| e.key.len())))
        }
        _ => None,
    }
}

/// Values worth trying for expression `e` of `n` bytes.
fn candidates(b: &Block, e: &Expr, cur: &[u8], n: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut c: Vec<Vec<u8>> = Vec::new();
    let near = |v: &[u8], c: &mut Vec<Vec<u8>>| {
        let mut v = v.to_vec();
        v.resize(n, 0);
        c.push(step(&v, true));
        c.push(step(&v, false));
        c.push(v);
    };
    match e {
        Expr::Cmp { data, .. } => near(data, &mut c),
        Expr::Range { from, to, .. } => {
            near(from, &mut c);
            near(to, &mut c);
        }
        Expr::Lookup { set, .. } => {
            let s = &b.sets[*set];
            let pick: Vec<usize> = (0..s.elems.len().min(6))
                .map(|_| rng.below(s.elems.len() as u64) as usize)
                .collect();
            for i in pick.into_iter().chain([0, s.elems.len().saturating_sub(1)]) {
                if let Some(el) = s.elems.get(i) {
                    near(&el.key, &mut c);
                    if let Some(end) = &el.end {
                        near(end, &mut c);
                    }
                }
            }
        }
        _ => {}
    }
    // network and transport protocols
    match n {
        1 => {
            c.extend([2u8, 10, 6, 17, 1, 58, 0, 43, 44, 50, 51, 59, 60, 135, 139].map(|b| vec![b]))
        }
        2 => c.extend([[0x08, 0], [0x86, 0xdd]].map(|b| b.to_vec())),
        _ => {}
    }
    c.push(vec![0; n]);
    c.push(vec![0xff; n]);
    c.push(cur.to_vec());
    for _ in 0..4 {
        c.push(rng.bytes(n));
    }
    c
}

/// Write register value `v` into the packet through the provenance of the register bytes.
fn write(
    w: &mut Work,
    v: &[u8],
    cur: &[u8],
    prov: &[Option<Prov>],
    env: &Env,
    rng: &mut Rng,
) -> bool {
    let mut switch: Option<bool> = None;
    for (j, &want) in v.iter().enumerate() {
        let Some(pv) = prov.get(j).copied().flatten() else {
            if cur.get(j) != Some(&want) {
                return false;
            }
            continue;
        };
        let bits = (want ^ pv.xor) & pv.mask;
        let put = |old: u8| (old & !pv.mask) | bits;
        match pv.loc {
            Loc::Frame(o) => {
                w.p.frame[o] = put(w.p.frame[o]);
                w.pinned.insert(o);
            }
            // chosen by the address looked up ([`fib_search`])
            Loc::Fib(_) => return false,
            Loc::Mark(k) => {
                let mut m = w.p.mark.to_le_bytes();
                m[k as usize] = put(m[k as usize]);
                w.p.mark = u32::from_le_bytes(m);
            }
            Loc::Priority(k) => {
                let mut m = w.p.priority.to_le_bytes();
                m[k as usize] = put(m[k as usize]);
                w.p.priority = u32::from_le_bytes(m);
            }
            Loc::L4proto => {
                let o = if is_v6(&w.p) { ETH + 6 } else { ETH + 9 };
                w.p.frame[o] = put(w.p.frame[o]);
                w.pinned.insert(o);
            }
            Loc::Nfproto => match put(if is_v6(&w.p) { 10 } else { 2 }) {
                2 => switch = Some(false),
                10 => switch = Some(true),
                _ => return false,
            },
            Loc::Protocol(k) => {
                let o = 12 + k as usize;
                w.p.frame[o] = put(w.p.frame[o]);
            }
            Loc::CtState(k) => {
                let old = w.p.conn.state_bits().to_le_bytes();
                let mut new = old;
                new[k as usize] = put(old[k as usize]);
                let mut st = u32::from_le_bytes(new);
                if st.count_ones() != 1 {
                    // one state at a time: the bit just asked for
                    let mut b = [0u8; 4];
                    b[k as usize] = bits;
                    st = u32::from_le_bytes(b);
                }
                let dir_reply = matches!(w.p.conn, Conn::Tracked(c) if c.info >= 3);
                let ct = match w.p.conn {
                    Conn::Tracked(c) => c,
                    _ => Ct::default(),
                };
                w.p.conn = match st {
                    1 => Conn::Invalid,
                    64 => Conn::Untracked,
                    2 => Conn::Tracked(Ct {
                        info: if dir_reply { 3 } else { 0 },
                        ..ct
                    }),
                    4 => Conn::Tracked(Ct {
                        info: if dir_reply { 4 } else { 1 },
                        ..ct
                    }),
                    8 => Conn::Tracked(Ct { info: 2, ..ct }),
                    // no other state (a byte of the word without a state bit keeps it)
                    0 if bits == 0 => w.p.conn,
                    _ => return false,
                };
            }
            Loc::CtDir | Loc::CtStatus(_) | Loc::CtMark(_) | Loc::CtExp(_) => {
                let Conn::Tracked(mut c) = w.p.conn else {
                    return false;
                };
                match pv.loc {
                    Loc::CtDir => {
                        let reply = put((c.info >= 3) as u8);
                        c.info = match (reply, c.info % 3) {
                            (0, i) => i,
                            (1, 2) => 3,
                            (1, i) => i + 3,
                            _ => return false,
                        };
                    }
                    Loc::CtStatus(k) | Loc::CtMark(k) | Loc::CtExp(k) => {
                        let f = match pv.loc {
                            Loc::CtStatus(_) => &mut c.status,
                            Loc::CtMark(_) => &mut c.mark,
                            _ => &mut c.expiration_ms,
                        };
                        let mut b = f.to_le_bytes();
                        b[k as usize] = put(b[k as usize]);
                        *f = u32::from_le_bytes(b);
                    }
                    _ => {}
                }
                w.p.conn = Conn::Tracked(c);
            }
            Loc::Ifindex(input, k) => {
                let n = if input {
                    &mut w.p.iif_index
                } else {
                    &mut w.p.oif_index
                };
                let mut b = n.to_le_bytes();
                b[k as usize] = put(b[k as usize]);
                *n = u32::from_le_bytes(b);
            }
            Loc::Ifname(input, k) => {
                let n = if input { &mut w.p.iif } else { &mut w.p.oif };
                n[k as usize] = put(n[k as usize]);
            }
            Loc::Pkttype => {
                let mac: [u8; 6] = match put(0) {
                    0 => super::interp::OWN_MAC,
                    1 => [0xff; 6],
                    2 => [0x01, 0, 0x5e, 0, 0, 1],
                    3 => [0x02, 0, 0, 0, 0, 0x99],
                    _ => return false,
                };
                w.p.frame[..6].copy_from_slice(&mac);
            }
            Loc::Time(k) => {
                let mut t = w.p.wall_ns.to_le_bytes();
                t[k as usize] = put(t[k as usize]);
                // 0 is weir's "no wall clock": not a time to try
                let t = u64::from_le_bytes(t);
                if t.wrapping_add(7_200 * NS) < 7_200 * NS {
                    return false;
                }
                w.p.wall_ns = t;
            }
            Loc::Day => {
                let days = w.p.wall_ns / NS / 86_400;
                let d = put(((days + 4) % 7) as u8) as u64;
                if d > 6 {
                    return false;
                }
                let nd = days - (days + 4) % 7 + d;
                w.p.wall_ns = w.p.wall_ns - days * 86_400 * NS + nd * 86_400 * NS;
            }
            Loc::Hour(k) => {
                let secs = w.p.wall_ns / NS;
                let mut h = ((secs % 86_400) as u32).to_le_bytes();
                h[k as usize] = put(h[k as usize]);
                let h = u32::from_le_bytes(h) as u64;
                if h >= 86_400 {
                    return false;
                }
                w.p.wall_ns = w.p.wall_ns - (secs % 86_400) * NS + h * NS;
            }
            Loc::Present(kind, typ) => match put(0) {
                0 | 1 if put(0) == super::interp::eval_present(&w.p, env, kind, typ) => {}
                1 => {
                    if !edit_exthdr(w, kind, typ, 0, true, env) {
                        return false;
                    }
                }
                0 => {
                    if !edit_exthdr(w, kind, typ, 0, false, env) {
                        return false;
                    }
                }
                _ => return false,
            },
            Loc::Len(k) => {
                let mut l = w
                    .len
                    .unwrap_or(((w.p.frame.len() - ETH) as u32).to_le_bytes());
                l[k as usize] = put(l[k as usize]);
                w.len = Some(l);
            }
        }
    }
    // a new network protocol: the other template (what was chosen so far is solved again)
    let et = u16::from_be_bytes([w.p.frame[12], w.p.frame[13]]);
    let v6 = match (switch, et) {
        (Some(s), _) => Some(s),
        (None, 0x86dd) => Some(true),
        (None, 0x0800) => Some(false),
        _ => None,
    };
    if let Some(v6) = v6 {
        let now_v6 = w.p.frame.len() >= ETH + 40 && w.p.frame[ETH] >> 4 == 6;
        let now_v4 = w.p.frame[ETH] >> 4 == 4;
        if (v6 && !now_v6) || (!v6 && !now_v4) || (switch.is_some() && v6 != is_v6(&w.p)) {
            let old = std::mem::replace(&mut w.p, template(v6, rng));
            w.p.mark = old.mark;
            w.p.priority = old.priority;
            w.p.iif = old.iif;
            w.p.oif = old.oif;
            w.p.iif_index = old.iif_index;
            w.p.oif_index = old.oif_index;
            w.p.conn = old.conn;
            w.p.wall_ns = old.wall_ns;
            w.pinned.clear();
            w.len = None;
        }
    }
    let _ = env;
    true
}

/// Make expression `i` of the rule hold (`want`) or fail on the packet, given the registers
/// it reads; false when no value can be written.
fn set_expr(
    b: &Block,
    i: usize,
    regs: &Regs,
    want: bool,
    w: &mut Work,
    env: &Env,
    rng: &mut Rng,
) -> bool {
    let e = &b.exprs[i];
    let Some((sreg, n)) = reads(b, e) else {
        return false;
    };
    let (a, z) = (sreg * 4, (sreg * 4 + n).min(regs.data.len()));
    let cur = &regs.data[a..z];
    let prov = &regs.prov[a..z];
    if prov.iter().all(Option::is_none) {
        return false;
    }
    if prov.iter().flatten().any(|p| matches!(p.loc, Loc::Fib(_))) {
        return fib_search(b, i, want, w, env, rng);
    }
    let mut cs = candidates(b, e, cur, n, rng);
    // try the candidates in a seeded order, the first ones (the constants) first
    let k = cs.len();
    for i in 0..k {
        let j = i + rng.below((k - i) as u64) as usize;
        if rng.chance(50) {
            cs.swap(i, j);
        }
    }
    for c in cs {
        let v = project(&c, cur, prov);
        if holds(b, e, &v) == want && v.as_slice() != cur {
            let mut w2 = w.clone();
            if write(&mut w2, &v, cur, prov, env, rng) {
                *w = w2;
                return true;
            }
        }
    }
    false
}

/// Make expression `i`, which reads a `fib` result, hold (`want`) or fail: write one of the
/// model's addresses ([`super::fibenv::candidates`]: local, broadcast, in a subnet or behind a
/// route, blackholed, multicast ...) as the address a `fib` before it looks up, and keep the
/// first with which the rule reaches `i` and `i` holds (or fails there).
fn fib_search(b: &Block, i: usize, want: bool, w: &mut Work, env: &Env, rng: &mut Rng) -> bool {
    let v6 = is_v6(&w.p);
    let model = env.fib_model();
    let mut cands = super::fibenv::candidates(&model, v6, rng.next_u64());
    let k = cands.len();
    for a in 0..k {
        let j = a + rng.below((k - a) as u64) as usize;
        cands.swap(a, j);
    }
    for off in fib_offsets(&b.exprs[..i], v6) {
        for c in &cands {
            let Some(w2) = with_addr(w, off, *c) else {
                continue;
            };
            let got = eval_upto(b, &w2.p, env, i + 1).outcome;
            let ok = if want {
                got == Outcome::Match
            } else {
                got == Outcome::Break(i)
            };
            if ok {
                *w = w2;
                return true;
            }
        }
    }
    false
}

/// Where the addresses the `fib` loads among `exprs` look up are in the frame.
fn fib_offsets(exprs: &[Expr], v6: bool) -> Vec<usize> {
    let mut offs: Vec<usize> = exprs
        .iter()
        .filter_map(|e| match e {
            Expr::Fib { flags, .. } => {
                let d = flags.iter().any(|f| f == "daddr");
                Some(match (v6, d) {
                    (false, false) => ETH + 12,
                    (false, true) => ETH + 16,
                    (true, false) => ETH + 8,
                    (true, true) => ETH + 24,
                })
            }
            _ => None,
        })
        .collect();
    offs.dedup();
    offs
}

/// The packet with address `a` at `off` (chosen: pinned), None when it is there already.
fn with_addr(w: &Work, off: usize, a: std::net::IpAddr) -> Option<Work> {
    let bytes = match a {
        std::net::IpAddr::V4(a) => a.octets().to_vec(),
        std::net::IpAddr::V6(a) => a.octets().to_vec(),
    };
    let r = off..off + bytes.len();
    if w.p.frame.len() < r.end || w.p.frame[r.clone()] == bytes {
        return None;
    }
    let mut w2 = w.clone();
    w2.p.frame[r.clone()].copy_from_slice(&bytes);
    w2.pinned.extend(r);
    fixup(&mut w2.p, &w2.pinned, w2.len);
    Some(w2)
}

/// Repair the packet where the rule broke at expression `i`.
fn repair(b: &Block, i: usize, regs: &Regs, w: &mut Work, env: &Env, rng: &mut Rng) -> bool {
    match &b.exprs[i] {
        Expr::Payload { .. } => {
            // out of the packet: grow it (or clear a fragment offset hiding the header)
            let v6 = is_v6(&w.p);
            let f = &mut w.p.frame;
            if !v6
                && f.len() >= ETH + 8
                && u16::from_be_bytes([f[ETH + 6], f[ETH + 7]]) & 0x1fff != 0
            {
                if w.pinned.contains(&(ETH + 6)) || w.pinned.contains(&(ETH + 7)) {
                    return false;
                }
                f[ETH + 6] &= 0xe0;
                f[ETH + 7] = 0;
                return true;
            }
            if f.len() > 1400 || w.len.is_some() {
                return false;
            }
            if w.pinned.contains(&(ETH + 2)) || w.pinned.contains(&(ETH + 4)) {
                return false;
            }
            let more = rng.bytes(32);
            w.p.frame.extend(more);
            true
        }
        Expr::Cmp { .. } | Expr::Range { .. } | Expr::Lookup { .. } => {
            set_expr(b, i, regs, true, w, env, rng)
        }
        // not found: put one in first; found but past the packet's end: grow it
        Expr::Exthdr {
            kind,
            typ,
            off,
            len,
            present: false,
            ..
        } => {
            let Ok(Some(info)) = pktinfo(&w.p, env) else {
                return false;
            };
            let found = super::exthdr::find(*kind, *typ, off + len, false, &w.p.frame, &info);
            if found.is_some() {
                if w.p.frame.len() > 1400 || w.len.is_some() {
                    return false;
                }
                let more = rng.bytes(32);
                w.p.frame.extend(more);
                return true;
            }
            edit_exthdr(w, *kind, *typ, off + len, true, env)
        }
        // no tunnel (or not one the kernel parses): put one after the transport header
        Expr::Inner { typ, .. } => {
            let Ok(Some(info)) = pktinfo(&w.p, env) else {
                return false;
            };
            let seed = rng.next_u64();
            let Some(at) = super::inner::encapsulate(&mut w.p.frame, &info, *typ, seed) else {
                return false;
            };
            w.pinned.retain(|&o| o < at);
            true
        }
        // a key of a connection the packet does not have: track it
        Expr::Ct { .. } if !matches!(w.p.conn, Conn::Tracked(_)) => {
            w.p.conn = Conn::Tracked(Ct::default());
            true
        }
        _ => false,
    }
}

/// A hit packet, and the bytes the rule's comparisons chose.
#[derive(Clone, Debug)]
pub struct Hit {
    pub packet: Packet,
    pub pinned: BTreeSet<usize>,
}

/// A packet on which the rule matches, from the template of the family (IPv6 for `ip6`,
/// IPv4 first for the others); None when the repairs do not get there.
pub fn hit(b: &Block, env: &Env, rng: &mut Rng) -> Option<Hit> {
    let firsts: &[bool] = match env.family {
        Family::Ip => &[false],
        Family::Ip6 => &[true],
        _ => &[false, true],
    };
    for &v6 in firsts {
        let mut w = Work {
            p: template(v6, rng),
            pinned: BTreeSet::new(),
            len: None,
        };
        for _ in 0..(3 * b.exprs.len() + 8) {
            fixup(&mut w.p, &w.pinned, w.len);
            let t = eval(b, &w.p, env);
            match t.outcome {
                Outcome::Match => {
                    return Some(Hit {
                        packet: w.p,
                        pinned: w.pinned,
                    })
                }
                Outcome::Break(i) => {
                    if !repair(b, i, &t.regs, &mut w, env, rng) {
                        break;
                    }
                }
                _ => break,
            }
        }
    }
    None
}

/// Variants of a hit packet whose headers move or hide what the rule reads, unless the rule
/// chose those bytes: padding after the IP packet, an IPv4 later fragment (no transport header for nft), a first fragment
/// (More Fragments), an IPv4 header with options (the transport header further on); IPv6
/// extension headers (hop-by-hop, destination options, fragment headers), next headers that
/// are not (mobility, HIP).
pub fn variants(hit: &Hit) -> Vec<Packet> {
    let p = &hit.packet;
    let mut out = Vec::new();
    // the link layer's padding after the IP packet (short frames are padded to 60 bytes)
    let mut padded = p.clone();
    padded.frame.extend([0u8; 10]);
    out.push(padded);
    if is_v6(p) && p.frame.len() >= ETH + 40 {
        // an extension header in front of the rest: hop-by-hop options (PadN), destination
        // options, a fragment header (first fragment, then a later one)
        let nh = p.frame[ETH + 6];
        let none = BTreeSet::new();
        for (kind, ext) in [
            (0u8, [nh, 0, 1, 4, 0, 0, 0, 0]),
            (60, [nh, 0, 1, 4, 0, 0, 0, 0]),
            (44, [nh, 0, 0, 1, 0, 0, 0, 7]),
            (44, [nh, 0, 0, 0x10, 0, 0, 0, 7]),
        ] {
            let mut q = p.clone();
            q.frame[ETH + 6] = kind;
            q.frame.splice(ETH + 40..ETH + 40, ext);
            fixup(&mut q, &none, None);
            out.push(q);
        }
        // next headers Linux does not walk as extension headers (ipv6_ext_hdr): mobility,
        // HIP; the transport header is what follows
        for nh in [135u8, 139] {
            let mut q = p.clone();
            q.frame[ETH + 6] = nh;
            out.push(q);
        }
        return out;
    }
    if p.frame.get(12..14) != Some(&[0x08, 0x00]) || p.frame.len() < ETH + 20 {
        return out;
    }
    let free = |r: std::ops::Range<usize>| r.clone().all(|o| !hit.pinned.contains(&o));
    let none = BTreeSet::new();
    if free(ETH + 6..ETH + 8) {
        for word in [0x0004u16, 0x2000] {
            let mut q = p.clone();
            q.frame[ETH + 6..ETH + 8].copy_from_slice(&word.to_be_bytes());
            fixup(&mut q, &none, None);
            out.push(q);
        }
    }
    let ihl = (p.frame[ETH] & 0xf) as usize * 4;
    if ihl == 20 && free(ETH..ETH + 1) && hit.pinned.iter().all(|&o| !(ETH..ETH + 20).contains(&o))
    {
        let mut q = p.clone();
        q.frame[ETH] = 0x46;
        q.frame.splice(ETH + 20..ETH + 20, [0u8; 4]);
        fixup(&mut q, &none, None);
        out.push(q);
    }
    out
}

/// Packets that each violate one comparison of a hit packet (those the hit packet reaches).
pub fn misses(b: &Block, env: &Env, hit: &Hit, rng: &mut Rng) -> Vec<Packet> {
    let (hit, pinned) = (&hit.packet, &hit.pinned);
    let mut out = Vec::new();
    // a `fib` load: the hit packet with each of the model's addresses looked up instead
    let w = Work {
        p: hit.clone(),
        pinned: pinned.clone(),
        len: None,
    };
    let v6 = is_v6(hit);
    for off in fib_offsets(&b.exprs, v6) {
        for a in super::fibenv::candidates(&env.fib_model(), v6, rng.next_u64()) {
            out.extend(with_addr(&w, off, a).map(|w| w.p));
        }
    }
    // an inner-header load: TCP data offsets the kernel takes as they are (0, 4, 15)
    if b.exprs.iter().any(|e| {
        matches!(
            e,
            Expr::Payload {
                base: super::bytecode::Base::Inner,
                ..
            }
        )
    }) {
        if let Ok(Some(info)) = pktinfo(hit, env) {
            if let Some((th, 6)) = info.l4.filter(|_| !info.fragoff) {
                for doff in [0u8, 4, 15] {
                    if th + 12 < hit.frame.len() && !pinned.contains(&(th + 12)) {
                        let mut q = hit.clone();
                        q.frame[th + 12] = (q.frame[th + 12] & 0x0f) | doff << 4;
                        out.push(q);
                    }
                }
            }
        }
    }
    // around a tunnel: what makes the kernel give up or read elsewhere
    if let Some(Expr::Inner {
        typ,
        hdrsize,
        flags,
        ..
    }) = b.exprs.iter().find(|e| matches!(e, Expr::Inner { .. }))
    {
        if let Ok(Some(info)) = pktinfo(hit, env) {
            for f in super::inner::edges(&hit.frame, &info, *typ, *hdrsize, *flags) {
                let mut q = hit.clone();
                q.frame = f;
                fixup(&mut q, &BTreeSet::new(), None);
                out.push(q);
            }
        }
    }
    for (i, e) in b.exprs.iter().enumerate() {
        // `reset tcp option`: the hit packet with an option of the type (stripped), and the
        // packets around it (an option running past the header: the kernel drops the packet)
        if let Expr::ExthdrReset { typ } = e {
            let mut w = Work {
                p: hit.clone(),
                pinned: pinned.clone(),
                len: None,
            };
            if edit_exthdr(&mut w, ExtKind::Tcp, *typ, 2, true, env) {
                fixup(&mut w.p, &w.pinned, w.len);
                if let Ok(Some(info)) = pktinfo(&w.p, env) {
                    let at = super::exthdr::find(ExtKind::Tcp, *typ, 2, false, &w.p.frame, &info);
                    if let Some(at) = at {
                        for f in super::exthdr::edges(ExtKind::Tcp, 2, at, &w.p.frame, &info) {
                            let mut q = w.p.clone();
                            q.frame = f;
                            fixup(&mut q, &BTreeSet::new(), None);
                            out.push(q);
                        }
                    }
                }
                out.push(w.p);
            }
            continue;
        }
        let ext = match e {
            Expr::Cmp { .. } | Expr::Range { .. } | Expr::Lookup { .. } => None,
            Expr::Exthdr {
                kind,
                typ,
                present: false,
                ..
            } => Some((*kind, *typ)),
            _ => continue,
        };
        let t = eval_upto(b, hit, env, i);
        if t.outcome != Outcome::Match {
            continue;
        }
        let mut w = Work {
            p: hit.clone(),
            pinned: pinned.clone(),
            len: None,
        };
        // around the header, option or chunk a load reads: lengths that overrun, other
        // headers in front, the packet's end inside it
        if let (Some((kind, typ)), Expr::Exthdr { off, len, .. }) = (ext, e) {
            if let Ok(Some(info)) = pktinfo(hit, env) {
                let need = off + len;
                if let Some(at) = super::exthdr::find(kind, typ, need, false, &hit.frame, &info) {
                    for f in super::exthdr::edges(kind, need, at, &hit.frame, &info) {
                        let mut q = hit.clone();
                        q.frame = f;
                        fixup(&mut q, &BTreeSet::new(), None);
                        out.push(q);
                    }
                }
            }
        }
        // without the header, option or chunk a load reads
        let done = match ext {
            Some((kind, typ)) => edit_exthdr(&mut w, kind, typ, 0, false, env),
            None => set_expr(b, i, &t.regs, false, &mut w, env, rng),
        };
        if done {
            fixup(&mut w.p, &w.pinned, w.len);
            if w.p != *hit {
                out.push(w.p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::bytecode::parse_file;
    use crate::oracle::interp::deliverable;
    use weir_lang::ir::Hook;

    #[test]
    fn hit_and_misses_of_a_port_match() {
        let src = "# tcp dport 22\nip test-ip4 input\n  [ meta load l4proto => reg 1 ]\n  [ cmp eq reg 1 0x06 ]\n  [ payload load 2b @ transport header + 2 => reg 1 ]\n  [ cmp eq reg 1 0x0016 ]\n  [ immediate reg 0 accept ]\n";
        let b = &parse_file(src)[0];
        let env = Env {
            family: Family::Ip,
            hook: Hook::Input,
            fib: None,
        };
        let mut rng = Rng::new(1);
        let h = hit(b, &env, &mut rng).unwrap();
        assert!(deliverable(&h.packet));
        assert_eq!(&h.packet.frame[ETH + 20 + 2..ETH + 20 + 4], &[0, 22]);
        let m = misses(b, &env, &h, &mut rng);
        assert_eq!(m.len(), 2);
        for p in &m {
            assert_ne!(eval(b, p, &env).outcome, Outcome::Match);
        }
    }
}
