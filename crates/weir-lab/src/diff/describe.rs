//! Packets, predictions and the kernel's handling in words, and their comparison
//! ([`compare`], [`field_diffs`]).

use super::observed::KernelView;
use crate::model::{Fate, Prediction};
use crate::topology::{mac_text, Router};
use std::net::IpAddr;
use weir_wire::{LinkType, PacketMeta, L3};

fn flag_letters(f: u8) -> String {
    let s: String = [
        (0x01, 'F'),
        (0x02, 'S'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x10, 'A'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'C'),
    ]
    .iter()
    .filter(|(b, _)| f & b != 0)
    .map(|(_, c)| *c)
    .collect();
    if s.is_empty() {
        "none".into()
    } else {
        s
    }
}

/// A one-line description of a frame: `IPv4 tcp 198.18.0.10:40000 > 198.19.7.7:80 [S] ttl 64`.
pub fn describe_frame(frame: &[u8]) -> String {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let v4 = match pm.l3 {
        L3::Ipv4 => true,
        L3::Ipv6 => false,
        L3::Other(et) => {
            return format!(
                "EtherType 0x{et:04x}{}, {} bytes",
                if pm.vlan.is_some() { " (VLAN)" } else { "" },
                frame.len()
            )
        }
    };
    if let Some(m) = pm.malformed.filter(|m| m.is_l3()) {
        return format!(
            "{} malformed ({}), {} bytes",
            if v4 { "IPv4" } else { "IPv6" },
            m.reason(),
            frame.len()
        );
    }
    let a = |x: u128| crate::topology::from_bits(x, v4);
    let (s, d) = (a(pm.saddr), a(pm.daddr));
    let ttl = frame
        .get(pm.l3_off as usize + if v4 { 8 } else { 7 })
        .copied()
        .unwrap_or(0);
    let proto = match pm.l4proto {
        6 => "tcp".to_string(),
        17 => "udp".to_string(),
        1 => "icmp".to_string(),
        58 => "icmpv6".to_string(),
        p => format!("proto {p}"),
    };
    let ep = |x: IpAddr, p: u16| {
        if v4 {
            format!("{x}:{p}")
        } else {
            format!("[{x}]:{p}")
        }
    };
    let mut out = if pm.has_ports {
        format!("{proto} {} > {}", ep(s, pm.sport), ep(d, pm.dport))
    } else {
        format!("{proto} {s} > {d}")
    };
    if pm.l4proto == 6 && pm.has_l4 {
        out.push_str(&format!(" [{}]", flag_letters(pm.tcp_flags)));
    }
    if matches!(pm.l4proto, 1 | 58) && pm.has_l4 {
        let l4 = pm.l4_off as usize;
        out.push_str(&format!(
            " type {} code {}",
            frame.get(l4).copied().unwrap_or(0),
            frame.get(l4 + 1).copied().unwrap_or(0)
        ));
    }
    if pm.frag != weir_wire::Frag::None {
        out.push_str(if pm.frag == weir_wire::Frag::First {
            " first fragment"
        } else {
            " later fragment"
        });
    }
    format!(
        "{} {out} ttl {ttl} len {}",
        if v4 { "IPv4" } else { "IPv6" },
        pm.l3_len
    )
}

fn u16_at(f: &[u8], i: usize) -> Option<u16> {
    f.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// The header fields in which two frames of the same packet differ (empty: identical bytes).
pub fn field_diffs(weir: &[u8], kernel: &[u8]) -> Vec<String> {
    if weir == kernel {
        return Vec::new();
    }
    let mut d = Vec::new();
    if weir.len() < 14 || kernel.len() < 14 {
        return vec![format!(
            "frame lengths: weir {}, kernel {}",
            weir.len(),
            kernel.len()
        )];
    }
    if weir[..6] != kernel[..6] {
        d.push(format!(
            "ether daddr: weir {}, kernel {}",
            mac_text(&weir[..6].try_into().unwrap()),
            mac_text(&kernel[..6].try_into().unwrap())
        ));
    }
    if weir[6..12] != kernel[6..12] {
        d.push(format!(
            "ether saddr: weir {}, kernel {}",
            mac_text(&weir[6..12].try_into().unwrap()),
            mac_text(&kernel[6..12].try_into().unwrap())
        ));
    }
    let a = PacketMeta::parse(weir, LinkType::Ethernet);
    let b = PacketMeta::parse(kernel, LinkType::Ethernet);
    if a.l3 != b.l3 {
        d.push(format!("network layer: weir {:?}, kernel {:?}", a.l3, b.l3));
        return d;
    }
    if a.l3_ok() && b.l3_ok() {
        let v4 = a.l3 == L3::Ipv4;
        let ad = |x: u128| crate::topology::from_bits(x, v4);
        if a.saddr != b.saddr {
            d.push(format!(
                "source address: weir {}, kernel {}",
                ad(a.saddr),
                ad(b.saddr)
            ));
        }
        if a.daddr != b.daddr {
            d.push(format!(
                "destination address: weir {}, kernel {}",
                ad(a.daddr),
                ad(b.daddr)
            ));
        }
        let (la, lb) = (a.l3_off as usize, b.l3_off as usize);
        let ttl = if v4 { 8 } else { 7 };
        if weir.get(la + ttl) != kernel.get(lb + ttl) {
            d.push(format!(
                "{}: weir {:?}, kernel {:?}",
                if v4 { "ttl" } else { "hop limit" },
                weir.get(la + ttl),
                kernel.get(lb + ttl)
            ));
        }
        if v4 && u16_at(weir, la + 10) != u16_at(kernel, lb + 10) {
            d.push(format!(
                "ipv4 header checksum: weir {:04x?}, kernel {:04x?}",
                u16_at(weir, la + 10),
                u16_at(kernel, lb + 10)
            ));
        }
        if a.l3_len != b.l3_len {
            d.push(format!("ip length: weir {}, kernel {}", a.l3_len, b.l3_len));
        }
        if a.l4proto != b.l4proto {
            d.push(format!(
                "protocol: weir {}, kernel {}",
                a.l4proto, b.l4proto
            ));
        }
        if a.has_ports && b.has_ports && (a.sport, a.dport) != (b.sport, b.dport) {
            d.push(format!(
                "ports: weir {} > {}, kernel {} > {}",
                a.sport, a.dport, b.sport, b.dport
            ));
        }
        let csum = match a.l4proto {
            6 => Some(16),
            17 => Some(6),
            1 | 58 => Some(2),
            _ => None,
        };
        if let Some(o) = csum.filter(|_| a.has_l4 && b.has_l4) {
            let (x, y) = (
                u16_at(weir, a.l4_off as usize + o),
                u16_at(kernel, b.l4_off as usize + o),
            );
            if x != y {
                d.push(format!(
                    "transport checksum: weir {x:04x?}, kernel {y:04x?}"
                ));
            }
        }
        let pa = a.payload(weir).map(|(o, n)| &weir[o..o + n]);
        let pb = b.payload(kernel).map(|(o, n)| &kernel[o..o + n]);
        if pa != pb {
            let (x, y) = (pa.unwrap_or(&[]), pb.unwrap_or(&[]));
            let at = x
                .iter()
                .zip(y)
                .position(|(p, q)| p != q)
                .unwrap_or(x.len().min(y.len()));
            let show = |v: &[u8]| -> String {
                v.iter()
                    .skip(at)
                    .take(8)
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            d.push(format!(
                "transport payload differs at byte {at} of {}: weir {}, kernel {}",
                x.len(),
                show(x),
                show(y)
            ));
        }
    }
    if d.is_empty() {
        let at = weir
            .iter()
            .zip(kernel)
            .position(|(x, y)| x != y)
            .unwrap_or(weir.len().min(kernel.len()));
        d.push(format!(
            "bytes differ from offset {at} (weir {} bytes, kernel {})",
            weir.len(),
            kernel.len()
        ));
    }
    d
}

pub(super) fn ifname(router: &Router, i: usize) -> &str {
    router.ifaces.get(i).map(|f| f.name.as_str()).unwrap_or("?")
}

/// weir's prediction in words.
pub fn describe_prediction(router: &Router, p: &Prediction) -> String {
    match &p.fate {
        Fate::Forwarded { oif, .. } => format!(
            "forwarded out of {}{}",
            ifname(router, *oif),
            ct_note(&p.why)
        ),
        Fate::Local => format!("delivered locally{}", ct_note(&p.why)),
        Fate::Dropped => format!("not forwarded: {}", p.why),
    }
}

/// " (ct state X)" when the model's path says what connection tracking decided.
fn ct_note(why: &str) -> String {
    why.split("; ")
        .find(|s| s.starts_with("ct state "))
        .map(|s| format!(" ({s})"))
        .unwrap_or_default()
}

/// The kernel's handling in words.
pub fn describe_kernel(router: &Router, k: &KernelView) -> String {
    let mut s = match k.forwarded.len() {
        0 if k.local => "delivered locally".to_string(),
        0 => "not forwarded".to_string(),
        1 => format!("forwarded out of {}", ifname(router, k.forwarded[0].0)),
        n => format!(
            "forwarded {n} copies ({})",
            k.forwarded
                .iter()
                .map(|f| ifname(router, f.0))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if !k.forwarded.is_empty() && k.local {
        s.push_str(" and delivered locally");
    }
    if !k.other.is_empty() {
        let o: Vec<String> = k
            .other
            .iter()
            .take(2)
            .map(|(i, f)| format!("{} on {}", describe_frame(f), ifname(router, *i)))
            .collect();
        s.push_str(&format!("; the router answered: {}", o.join("; ")));
    }
    s
}

/// Differences between weir's prediction and the kernel (empty: the same).
pub fn compare(router: &Router, p: &Prediction, k: &KernelView) -> Vec<String> {
    let mut d = Vec::new();
    match &p.fate {
        Fate::Forwarded { oif, frame } => match k.forwarded.as_slice() {
            [] => d.push(format!(
                "weir forwards it out of {}, the kernel does not",
                ifname(router, *oif)
            )),
            [(kif, kframe)] => {
                if kif != oif {
                    d.push(format!(
                        "output interface: weir {}, kernel {}",
                        ifname(router, *oif),
                        ifname(router, *kif)
                    ));
                }
                d.extend(field_diffs(frame, kframe));
            }
            many => d.push(format!("the kernel sent {} copies, weir one", many.len())),
        },
        Fate::Local => {
            if !k.local {
                d.push("weir delivers it locally, the kernel does not".into());
            }
            if !k.forwarded.is_empty() {
                d.push(format!(
                    "the kernel forwards it out of {}",
                    ifname(router, k.forwarded[0].0)
                ));
            }
        }
        Fate::Dropped => {
            if let Some((i, _)) = k.forwarded.first() {
                d.push(format!(
                    "the kernel forwards it out of {}, weir does not ({})",
                    ifname(router, *i),
                    p.why
                ));
            }
            if k.local {
                d.push(format!(
                    "the kernel delivers it locally, weir does not ({})",
                    p.why
                ));
            }
        }
    }
    if matches!(p.fate, Fate::Forwarded { .. }) && k.local {
        d.push("the kernel also delivers it locally".into());
    }
    d
}
