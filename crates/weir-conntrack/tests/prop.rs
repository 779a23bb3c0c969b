//! Random packet sequences over a few flows: no panic, the table stays bounded and its index
//! consistent.

use std::net::Ipv4Addr;

use proptest::prelude::*;
use weir_conntrack::*;
use weir_wire::build::{Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

#[derive(Clone, Debug)]
struct P {
    flow: u8,
    reply: bool,
    kind: u8,
    flags: u8,
    seq: u32,
    ack: u32,
    len: u8,
    dt_ms: u32,
    confirm: bool,
}

fn pkt() -> impl Strategy<Value = P> {
    (
        0u8..6,
        any::<bool>(),
        0u8..4,
        any::<u8>(),
        0u32..4000,
        0u32..4000,
        0u8..40,
        0u32..40_000,
        any::<bool>(),
    )
        .prop_map(
            |(flow, reply, kind, flags, seq, ack, len, dt_ms, confirm)| P {
                flow,
                reply,
                kind,
                flags,
                seq,
                ack,
                len,
                dt_ms,
                confirm,
            },
        )
}

fn frame(p: &P) -> Vec<u8> {
    let a = Ipv4Addr::new(10, 0, 0, 1 + p.flow % 3);
    let b = Ipv4Addr::new(10, 0, 1, 1);
    let (s, d, sp, dp) = if p.reply {
        (b, a, 80, 1000 + p.flow as u16)
    } else {
        (a, b, 1000 + p.flow as u16, 80)
    };
    let payload = vec![0u8; p.len as usize];
    let bld = Builder::new();
    match p.kind {
        0 | 1 => {
            // Mostly sensible flags, sometimes anything.
            let f = if p.kind == 0 {
                [0x02, 0x12, 0x10, 0x11, 0x04, 0x14, 0x18][p.flags as usize % 7]
            } else {
                p.flags
            };
            bld.tcp(
                s,
                d,
                &Tcp::new(sp, dp, f)
                    .seq(p.seq)
                    .ack(p.ack)
                    .window(p.len as u16 * 100),
                &payload,
            )
        }
        2 => bld.udp(s, d, sp, dp, &payload),
        _ => {
            if p.flags % 3 == 0 {
                let q = bld.tcp(d, s, &Tcp::new(dp, sp, 0x10).seq(p.seq), b"");
                let q = weir_wire::build::hostile::ip_packet(&q, LinkType::Ethernet);
                bld.icmp_error(s, d, 3, 1, &q, (p.len as usize).min(q.len()))
            } else {
                bld.icmp_echo(s, d, !p.reply, p.flow as u16, 1, &payload)
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn random_sequences(ps in proptest::collection::vec(pkt(), 1..120), max in 1usize..6) {
        let mut ct: Conntrack<u8> = Conntrack::new(Config { max_entries: max, ..Config::default() });
        let mut now = 0u64;
        for p in &ps {
            now += p.dt_ms as u64 * 1_000_000;
            let f = frame(p);
            let pm = PacketMeta::parse(&f, LinkType::Ethernet);
            match ct.track(&pm, &f, now) {
                Track::New(pend)
                    if p.confirm => { let _ = ct.confirm(pend, now); }
                Track::Existing { id, .. } | Track::Related { master: id, .. } => {
                    let _ = ct.get(id);
                }
                _ => {}
            }
            prop_assert!(ct.len() <= max);
            prop_assert_eq!(ct.iter().count(), ct.len());
            for (id, _) in ct.iter() {
                for d in [Dir::Original, Dir::Reply] {
                    let t = ct.tuple(id, d).unwrap();
                    prop_assert_eq!(ct.find(&t), Some((id, d)));
                }
            }
            if p.flags == 7 { ct.gc(now, 3); }
        }
    }
}
