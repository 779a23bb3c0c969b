//! What the tests of header and metadata keys share: an engine for a ruleset that must be
//! evaluated whole, and the mark a packet leaves a hook with (each rule sets its own bit).
#![allow(dead_code)]

use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;
use weir_wire::{LinkType, PacketMeta};

/// An engine for `rules`, every construct of which weir evaluates.
pub fn engine(rules: &str, mode: Mode) -> Stateful {
    let rs = weir_lang::load_str("t.nft", rules)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0;
    assert!(rs.refuse_unevaluated().is_ok(), "{:?}", rs.unevaluated());
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

/// The mark the raw IP packet `p` leaves `hook` with (accepted), with `meta` and the clock
/// at `now_ns`.
pub fn mark_with(
    sf: &mut Stateful,
    hook: Hook,
    mut p: Vec<u8>,
    mut meta: Meta,
    now_ns: u64,
) -> u32 {
    let mut pm = PacketMeta::parse(&p, LinkType::RawIp);
    let d = sf.hook_mut(
        hook,
        &mut p,
        &mut pm,
        &mut meta,
        now_ns,
        &mut PacketCt::default(),
    );
    assert_eq!(d, Decision::Accept);
    meta.mark
}

/// The mark `p` leaves the input hook with, arriving on `lan0`.
pub fn mark(sf: &mut Stateful, p: Vec<u8>) -> u32 {
    mark_with(sf, Hook::Input, p, Meta::with_ifnames("lan0", ""), 1_000)
}

/// A small UDP datagram, 198.18.0.1:1 to 198.18.0.2:2.
pub fn udp4() -> Vec<u8> {
    Builder::raw().udp(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 18, 0, 2),
        1,
        2,
        b"x",
    )
}

/// A frame forwarded from `iif` to `oif` through prerouting, forward and postrouting (a fresh
/// `Meta` each hook, the mark carried as the router carries it; each hook must accept), then
/// confirmed with the connection's helper reading it: its mark, and the confirm point's
/// decision.
pub fn forward_via(
    sf: &mut Stateful,
    iif: &str,
    oif: &str,
    frame: &[u8],
    now_ns: u64,
) -> (u32, Decision) {
    let mut f = frame.to_vec();
    let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut pc = PacketCt::default();
    let mut mark = 0;
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let mut meta = Meta::with_ifnames(iif, oif);
        meta.mark = mark;
        let d = sf.hook_mut(hook, &mut f, &mut pm, &mut meta, now_ns, &mut pc);
        assert_eq!(d, Decision::Accept, "{hook:?}");
        mark = meta.mark;
    }
    (
        mark,
        sf.finish_frame(&mut f, &mut pm, &mut pc, now_ns, false),
    )
}
