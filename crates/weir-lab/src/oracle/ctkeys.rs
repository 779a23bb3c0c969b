//! The `ct` keys of a connection's tuples and counters (`ct load src_ip|dst_ip|src_ip6|
//! dst_ip6|src|dst|proto_src|proto_dst|protocol|l3protocol|bytes|packets|avgpkt|zone [, dir
//! D]`, `label`), as `nft_ct_get_eval` reads them, from the oracle's model of the connection.
//!
//! The model: no NAT, so the reply tuple is the original one inverted; the packet's own tuple
//! is the original one when it goes in the original direction (`info` 0, 1, 2: a new,
//! established or related packet of the original direction, as an expected connection's first
//! packet is), the reply one otherwise (`info` 3, 4). Counters are the model's (see [`counters`]); the zone is 0 (no zone templates), no label is set.

use super::interp::{Ct, Loc, Packet, Pktinfo, Prov};
use weir_engine::CtView;

const ETH: usize = 14;

/// Indexes of [`counters`].
pub const BYTES: usize = 0;
pub const PACKETS: usize = 2;

/// One direction's tuple: addresses (4 or 16 bytes, network order) and ports, each byte with
/// where it is in the frame.
struct Tuple {
    src: Vec<(u8, usize)>,
    dst: Vec<(u8, usize)>,
    sport: [(u8, usize); 2],
    dport: [(u8, usize); 2],
    ports: bool,
}

/// Protocols whose conntrack tuple holds the transport header's ports.
fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 33 | 132 | 136)
}

/// The tuple of direction `dir` (0 original, 1 reply); None for a packet that is neither
/// IPv4 nor IPv6 or too short.
fn tuple(c: &Ct, f: &[u8], info: &Pktinfo, dir: usize) -> Option<Tuple> {
    let (off, n) = match info.ethertype {
        0x0800 => (ETH + 12, 4),
        0x86dd => (ETH + 8, 16),
        _ => return None,
    };
    f.get(off..off + 2 * n)?;
    let bytes = |o: usize| (0..n).map(|k| (f[o + k], o + k)).collect::<Vec<_>>();
    let (psrc, pdst) = (bytes(off), bytes(off + n));
    let th = info
        .l4
        .filter(|&(th, p)| has_ports(p) && !info.fragoff && th + 4 <= info.end);
    let port = |o: usize| match th {
        Some((th, _)) => [(f[th + o], th + o), (f[th + o + 1], th + o + 1)],
        None => [(0, usize::MAX), (0, usize::MAX)],
    };
    let (psport, pdport) = (port(0), port(2));
    // the packet's direction
    let own = (c.info >= 3) as usize == dir;
    Some(if own {
        Tuple {
            src: psrc,
            dst: pdst,
            sport: psport,
            dport: pdport,
            ports: th.is_some(),
        }
    } else {
        Tuple {
            src: pdst,
            dst: psrc,
            sport: pdport,
            dport: psport,
            ports: th.is_some(),
        }
    })
}

type Loaded = (Vec<u8>, Vec<Option<Prov>>);

fn frame_bytes(b: &[(u8, usize)]) -> Loaded {
    let prov = b
        .iter()
        .map(|&(_, o)| {
            (o != usize::MAX).then_some(Prov {
                loc: Loc::Frame(o),
                mask: 0xff,
                xor: 0,
            })
        })
        .collect();
    (b.iter().map(|&(v, _)| v).collect(), prov)
}

/// The model's counters (`nf_conn_counter`: bytes original, reply, packets original,
/// reply): each direction the connection has seen carried one packet of this packet's length
/// (`skb->len`), counted before the rules run as `nf_conntrack_in` counts it; a packet of the
/// original direction is the first its connection saw. (Not `Ct` fields the generator could
/// repair: the kernel lab builds `Ct` too.)
pub fn counters(c: &Ct, info: &Pktinfo) -> [u64; 4] {
    let n = info.len as u64;
    if c.info >= 3 {
        [n, n, 1, 1]
    } else {
        [n, 0, 1, 0]
    }
}

/// A counter as the kernel stores it (a u64 in host order, little-endian here).
fn counter(v: u64) -> Loaded {
    (v.to_le_bytes().to_vec(), vec![None; 8])
}

/// `ct load KEY [dir D]` of a tracked packet: Ok(Some) the register's bytes, Ok(None) the
/// rule breaks, Err a key the oracle does not model.
pub fn load(key: &str, c: &Ct, p: &Packet, info: &Pktinfo) -> Result<Option<Loaded>, String> {
    let mut w = key.split_whitespace();
    let name = w.next().unwrap_or("");
    let dir = match w.next() {
        None => None,
        Some("original") => Some(0),
        Some("reply") => Some(1),
        Some(d) => return Err(format!("ct {name} dir {d}")),
    };
    let v4 = info.ethertype == 0x0800;
    match name {
        "zone" => return Ok(Some((vec![0, 0], vec![None, None]))),
        // `nf_ct_labels_find`: none (the model sets no label), the bitmap reads as zeros
        "label" if dir.is_none() => return Ok(Some((vec![0; 16], vec![None; 16]))),
        "bytes" | "packets" | "avgpkt" => {
            let count = counters(c, info);
            let sum = |base: usize| match dir {
                Some(d) => count[base + d],
                None => count[base].wrapping_add(count[base + 1]),
            };
            let (b, n) = (sum(BYTES), sum(PACKETS));
            return Ok(Some(counter(match name {
                "bytes" => b,
                "packets" => n,
                _ => b.checked_div(n).unwrap_or(0),
            })));
        }
        "protocol" | "l3protocol" if dir.is_some() => {
            // the tuple's (the same in both directions)
            return Ok(Some(if name == "l3protocol" {
                (vec![if v4 { 2 } else { 10 }], vec![None])
            } else {
                match info.l4 {
                    // as `meta l4proto`: the generator makes a packet of the protocol
                    Some((_, proto)) => (
                        vec![proto],
                        vec![Some(Prov {
                            loc: Loc::L4proto,
                            mask: 0xff,
                            xor: 0,
                        })],
                    ),
                    None => return Err("ct protocol".into()),
                }
            }));
        }
        _ => {}
    }
    let Some(d) = dir else {
        return Err(format!("ct {name}"));
    };
    let Some(t) = tuple(c, &p.frame, info, d) else {
        return Err(format!("ct {name} of a packet without an IP header"));
    };
    Ok(match name {
        "src" => Some(frame_bytes(&t.src)),
        "dst" => Some(frame_bytes(&t.dst)),
        "src_ip" | "dst_ip" if !v4 => None,
        "src_ip6" | "dst_ip6" if v4 => None,
        "src_ip" | "src_ip6" => Some(frame_bytes(&t.src)),
        "dst_ip" | "dst_ip6" => Some(frame_bytes(&t.dst)),
        "proto_src" | "proto_dst" if !t.ports => {
            return Err(format!("ct {name} of a connection without ports"))
        }
        "proto_src" => Some(frame_bytes(&t.sport)),
        "proto_dst" => Some(frame_bytes(&t.dport)),
        _ => return Err(format!("ct {key}")),
    })
}

/// Weir's view of the model's connection: its tuples and counters.
pub fn fill_view(c: &Ct, p: &Packet, info: Option<&Pktinfo>, v: &mut CtView) {
    let Some(info) = info else {
        return;
    };
    let count = counters(c, info);
    v.packets = [count[PACKETS], count[PACKETS + 1]];
    v.bytes = [count[BYTES], count[BYTES + 1]];
    let addr = |b: &[(u8, usize)]| b.iter().fold(0u128, |a, &(x, _)| a << 8 | x as u128);
    let port = |b: &[(u8, usize); 2]| u16::from_be_bytes([b[0].0, b[1].0]);
    if let Some(o) = tuple(c, &p.frame, info, 0) {
        v.orig_src = addr(&o.src);
        v.orig_dst = addr(&o.dst);
        v.orig_sport = port(&o.sport);
        v.orig_dport = port(&o.dport);
    }
    if let Some(r) = tuple(c, &p.frame, info, 1) {
        v.reply_src = addr(&r.src);
        v.reply_dst = addr(&r.dst);
        v.reply_sport = port(&r.sport);
        v.reply_dport = port(&r.dport);
    }
}
