//! `reset tcp option KIND` (nft_exthdr_tcp_strip_eval): the first option of the kind becomes
//! NOPs with the TCP checksum updated, later reads of the chain find it missing; no TCP header:
//! the rule stops; an option running past the header: the packet is dropped. The same in the
//! compiled and the linear evaluator.

use std::net::Ipv4Addr;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Decision, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;
use weir_wire::{LinkType, PacketMeta};

mod common;
use common::*;

const A: [u8; 4] = [198, 18, 0, 1];
const B: [u8; 4] = [198, 18, 0, 2];

/// A TCP SYN with these option bytes (a multiple of 4) and a valid checksum.
fn syn(opts: &[u8]) -> Vec<u8> {
    let doff = (20 + opts.len()) / 4;
    let mut h = vec![0x03, 0xe8, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0];
    h.extend([(doff as u8) << 4, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    h.extend(opts);
    let mut f = Builder::raw().ip(Ipv4Addr::from(A), Ipv4Addr::from(B), 6, &h);
    let l4 = f.len() - h.len();
    let ps = weir_wire::checksum::pseudo_v4(A, B, 6, h.len() as u16);
    let c = weir_wire::checksum::checksum_with(ps, &f[l4..]);
    f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    f
}

/// The decision, the mark and the frame after the input hook.
fn run(sf: &mut Stateful, mut p: Vec<u8>) -> (Decision, u32, Vec<u8>) {
    let mut pm = PacketMeta::parse(&p, LinkType::RawIp);
    let mut meta = Meta::with_ifnames("lan0", "");
    let d = sf.hook_mut(
        Hook::Input,
        &mut p,
        &mut pm,
        &mut meta,
        1_000,
        &mut PacketCt::default(),
    );
    (d, meta.mark, p)
}

const RULES: &str = "table ip t {
  chain c {
    type filter hook input priority 0;
    reset tcp option sack-perm
    tcp option sack-perm exists meta mark set meta mark | 0x1
    tcp option maxseg exists meta mark set meta mark | 0x2
    meta mark set meta mark | 0x4
  }
}
";

#[test]
fn reset_tcp_option_strips_the_option() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        // MSS, SACK permitted, timestamps-less padding
        let p = syn(&[2, 4, 0x05, 0xb4, 4, 2, 1, 1]);
        let (d, mark, out) = run(&mut sf, p.clone());
        assert_eq!(d, Decision::Accept, "{mode:?}");
        // the stripped option is missing for the rules after the reset; MSS is still there
        assert_eq!(mark, 0x2 | 0x4, "{mode:?}");
        let l4 = out.len() - 28;
        assert_eq!(&out[l4 + 20..], &[2, 4, 0x05, 0xb4, 1, 1, 1, 1], "{mode:?}");
        assert_eq!(out[..l4 + 16], p[..l4 + 16], "{mode:?}");
        let pm = PacketMeta::parse(&out, LinkType::RawIp);
        assert!(pm.transport_checksum_ok(&out), "{mode:?}: checksum");

        // no such option: nothing written, the rule goes on
        let p = syn(&[2, 4, 0x05, 0xb4]);
        let (d, mark, out) = run(&mut sf, p.clone());
        assert_eq!((d, mark), (Decision::Accept, 0x2 | 0x4), "{mode:?}");
        assert_eq!(out, p, "{mode:?}");

        // an option of the kind running past the header: dropped
        let (d, _, _) = run(&mut sf, syn(&[1, 1, 1, 1, 1, 1, 4, 5]));
        assert!(matches!(d, Decision::Drop(_)), "{mode:?}: {d:?}");

        // not TCP: the reset's rule stops, the others run
        assert_eq!(mark_of_udp(&mut sf), 0x4, "{mode:?}");
    }
}

fn mark_of_udp(sf: &mut Stateful) -> u32 {
    mark(sf, udp4())
}
