//! `queue`: the packet goes to the queue's listener (weir's per-flow processing) where the
//! statement runs; accepted, it goes on with the hook's next base chain (as after the
//! kernel's reinjection with NF_ACCEPT); with nobody listening it is dropped, or accepted
//! with `bypass`. Each ruleset was checked with the real nft (`nft -c -f`: it parses;
//! this kernel has no nft_queue to load it).

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use weir_conntrack::Config;
use weir_engine::stateful::{FlowHook, PacketCt, QueueVerdict, Queued, Stateful};
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;
use weir_wire::{LinkType, PacketMeta};

fn stateful(rules: &str, mode: Mode) -> Stateful {
    let rs = weir_lang::load_str("t.nft", rules)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0;
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

fn udp(sport: u16, payload: &[u8]) -> Vec<u8> {
    Builder::new().udp(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 19, 0, 1),
        sport,
        443,
        payload,
    )
}

/// One forwarded packet through prerouting, forward and postrouting: the decision and the
/// mark it left with.
fn forward(sf: &mut Stateful, frame: &mut [u8]) -> (Decision, u32) {
    let mut pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let mut pc = PacketCt::default();
    let mut meta = Meta::with_ifnames("lan0", "wan0");
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let d = sf.hook_mut(hook, frame, &mut pm, &mut meta, 1_000, &mut pc);
        if !d.is_accept() {
            return (d, meta.mark);
        }
    }
    (sf.finish(&mut pc, 1_000), meta.mark)
}

/// What the test listener saw, shared with the test.
#[derive(Default)]
struct Seen {
    calls: Vec<(u16, Hook, bool, bool, usize)>,
}

/// Listens on queues 5 to 9; drops payloads starting with `d`, rewrites a first byte `m`
/// to `M` and the TTL to 33, sends one extra packet for a first byte `s`.
struct Listener(Arc<Mutex<Seen>>);

impl FlowHook for Listener {
    fn listens(&self, num: u16) -> bool {
        (5..=9).contains(&num)
    }

    fn queued(&mut self, q: Queued<'_>) -> QueueVerdict {
        let c = q.conn.expect("a tracked connection");
        self.0
            .lock()
            .unwrap()
            .calls
            .push((q.num, q.hook, c.reply, c.new, q.frame.len()));
        let at = q.pm.l4_off as usize + 8;
        match q.frame.get(at).copied() {
            Some(b'd') => QueueVerdict::Drop,
            Some(b'm') => {
                q.frame[at] = b'M';
                q.frame[q.pm.l3_off as usize + 8] = 33;
                QueueVerdict::Modified
            }
            Some(b's') => {
                q.send.push(vec![0x45; 20]);
                QueueVerdict::Accept
            }
            Some(b'f') => {
                // done with this direction of the connection
                *q.done = true;
                QueueVerdict::Accept
            }
            _ => QueueVerdict::Accept,
        }
    }
}

const RULES: &str = "table ip t {
  chain fw {
    type filter hook forward priority 0;
    udp dport 443 queue num 5
    meta mark set 1
  }
  chain later {
    type filter hook forward priority 10;
    meta mark set 2
  }
  chain post {
    type filter hook postrouting priority 0;
    ip ttl 33 meta mark set 3
  }
}
";

#[test]
fn nobody_listening_drops_unless_bypass() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(RULES, mode);
        let (d, _) = forward(&mut sf, &mut udp(1000, b"hello"));
        assert_eq!(d, Decision::Drop(DropReason::Queue(5)));
        assert_eq!((sf.stats().queued, sf.stats().queue_unheard), (1, 1));
        let mut sf = stateful(&RULES.replace("queue num 5", "queue num 5 bypass"), mode);
        let (d, mark) = forward(&mut sf, &mut udp(1000, b"hello"));
        // accepted at the queue: the rest of its chain does not run, the next chain does
        assert_eq!((d, mark), (Decision::Accept, 2));
        assert_eq!(sf.stats().queue_unheard, 0);
    }
}

#[test]
fn the_listener_decides_where_the_statement_runs() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut sf = stateful(RULES, mode);
        sf.set_flow_hook(Some(Box::new(Listener(seen.clone()))));
        let (d, mark) = forward(&mut sf, &mut udp(1000, b"hello"));
        assert_eq!((d, mark), (Decision::Accept, 2));
        assert!(sf.take_queue_out().is_empty());
        // the same connection: no longer new
        let (d, _) = forward(&mut sf, &mut udp(1000, b"s-end"));
        assert_eq!(d, Decision::Accept);
        assert_eq!(sf.take_queue_out(), vec![vec![0x45; 20]]);
        let (d, _) = forward(&mut sf, &mut udp(1001, b"drop"));
        assert_eq!(d, Decision::Drop(DropReason::Queue(5)));
        // changed in place: later chains see the change (postrouting matches the TTL)
        let mut f = udp(1002, b"more");
        let (d, mark) = forward(&mut sf, &mut f);
        assert_eq!((d, mark), (Decision::Accept, 3));
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        assert_eq!(f[pm.l4_off as usize + 8], b'M');
        let calls = seen.lock().unwrap().calls.clone();
        let len = udp(1000, b"hello").len();
        assert_eq!(
            calls,
            vec![
                (5, Hook::Forward, false, true, len),
                (5, Hook::Forward, false, false, len),
                (5, Hook::Forward, false, true, len - 1),
                (5, Hook::Forward, false, true, len - 1),
            ]
        );
        assert_eq!(sf.stats().queued, 4);
    }
}

#[test]
fn a_range_keeps_each_connection_on_one_queue() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut sf = stateful(
        &RULES.replace("queue num 5", "queue num 5-9"),
        Mode::Compiled,
    );
    sf.set_flow_hook(Some(Box::new(Listener(seen.clone()))));
    for sport in 1000..1064u16 {
        for _ in 0..3 {
            assert_eq!(forward(&mut sf, &mut udp(sport, b"x")).0, Decision::Accept);
        }
    }
    let calls = seen.lock().unwrap().calls.clone();
    let mut used = std::collections::BTreeSet::new();
    for c in calls.chunks(3) {
        assert!(
            c.iter().all(|x| x.0 == c[0].0),
            "one connection, one queue: {c:?}"
        );
        used.insert(c[0].0);
    }
    assert_eq!(used.len(), 5, "64 connections over the 5 queues: {used:?}");
}

/// A listener done with a direction of a connection is not called again for it: the
/// connection entry's bit accepts its packets at `queue`; another connection, or the other
/// direction, still reaches it.
#[test]
fn a_direction_the_listener_is_done_with_costs_a_bit_test() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(RULES, mode);
        let seen = Arc::new(Mutex::new(Seen::default()));
        sf.set_flow_hook(Some(Box::new(Listener(seen.clone()))));
        // the first packet has no entry yet: its `done` is not kept
        forward(&mut sf, &mut udp(1000, b"first"));
        forward(&mut sf, &mut udp(1000, b"fin"));
        for _ in 0..3 {
            let (d, mark) = forward(&mut sf, &mut udp(1000, b"dropme"));
            // accepted at the queue without a call (a call would drop it), on to the chains
            assert_eq!((d, mark), (Decision::Accept, 2));
        }
        assert_eq!(seen.lock().unwrap().calls.len(), 2);
        assert_eq!(sf.stats().queue_done, 3);
        // another connection is still handed over
        let (d, _) = forward(&mut sf, &mut udp(1001, b"dropme"));
        assert_eq!(d, Decision::Drop(DropReason::Queue(5)));
        assert_eq!(seen.lock().unwrap().calls.len(), 3);
    }
}

/// `queue to EXPR`: the queue computed per packet: a symmetric hash spreads connections over
/// `mod 5 offset 5` and keeps both directions of each on one queue; a map by the source port
/// picks 7 or 8; with nobody on the computed queue the packet is dropped, naming it.
#[test]
fn a_queue_computed_per_packet() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut sf = stateful(
            &RULES.replace("queue num 5", "queue to symhash mod 5 offset 5"),
            mode,
        );
        sf.set_flow_hook(Some(Box::new(Listener(seen.clone()))));
        for sport in 1000..1064u16 {
            for _ in 0..2 {
                assert_eq!(forward(&mut sf, &mut udp(sport, b"x")).0, Decision::Accept);
            }
        }
        let calls = seen.lock().unwrap().calls.clone();
        let used: std::collections::BTreeSet<u16> = calls.iter().map(|c| c.0).collect();
        assert_eq!(used, (5..=9).collect(), "{mode:?}");
        assert!(calls.chunks(2).all(|c| c[0].0 == c[1].0));

        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut sf = stateful(
            &RULES.replace(
                "queue num 5",
                "queue to udp sport map { 1000 : 7, 1001 : 8, 1002 : 3 }",
            ),
            mode,
        );
        sf.set_flow_hook(Some(Box::new(Listener(seen.clone()))));
        assert_eq!(forward(&mut sf, &mut udp(1000, b"x")).0, Decision::Accept);
        assert_eq!(forward(&mut sf, &mut udp(1001, b"x")).0, Decision::Accept);
        // queue 3: nobody listens
        assert_eq!(
            forward(&mut sf, &mut udp(1002, b"x")).0,
            Decision::Drop(DropReason::Queue(3))
        );
        // no element: the rule stops there, the chains go on (the later one's mark)
        assert_eq!(
            forward(&mut sf, &mut udp(1003, b"x")),
            (Decision::Accept, 2)
        );
        let nums: Vec<u16> = seen.lock().unwrap().calls.iter().map(|c| c.0).collect();
        assert_eq!(nums, [7, 8], "{mode:?}");
    }
}
