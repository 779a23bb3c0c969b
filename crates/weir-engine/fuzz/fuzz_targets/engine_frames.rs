//! The whole engine fed arbitrary frames with a fixed ruleset (the example gateway, which uses
//! sets, maps, verdict maps, concatenations, jumps, limits and marks): every hook, both link
//! types, compiled and linear; it must never panic, and both modes must decide the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Mutex;
use weir_engine::{Compiled, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::{LinkType, PacketMeta};

static ENGINES: Mutex<Option<(Engine, Engine)>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut g = ENGINES.lock().unwrap();
    let (c, l) = g.get_or_insert_with(|| {
        let (rs, _) = weir_lang::load_str("gateway.nft", include_str!("../../../../examples/gateway.nft")).expect("example checks");
        (Engine::new(Compiled::build(&rs, Mode::Compiled)), Engine::new(Compiled::build(&rs, Mode::Linear)))
    });
    // the first byte picks the interfaces and the time, the rest is the frame
    let (sel, frame) = data.split_first().unwrap_or((&0, &[]));
    let names = ["lan0", "dmz0", "wan0", ""];
    let meta = Meta::with_ifnames(names[(*sel & 3) as usize], names[((*sel >> 2) & 3) as usize]);
    let now = (*sel as u64) * 50_000_000;
    for link in [LinkType::Ethernet, LinkType::RawIp] {
        let pm = PacketMeta::parse(frame, link);
        for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting, Hook::Input] {
            let mut pc = Pkt { frame, pm: &pm, meta: &mut { meta }, now_ns: now , conns: None};
            let mut pl = Pkt { frame, pm: &pm, meta: &mut { meta }, now_ns: now , conns: None};
            let dc = c.process(hook, &mut pc);
            let dl = l.process(hook, &mut pl);
            assert_eq!(dc, dl, "compiled and linear disagree at {hook:?}");
            assert_eq!(pc.meta.mark, pl.meta.mark);
        }
    }
});
