//! Named stateful objects and the rules that name them (`counter name`, `quota name`, `limit
//! name`, object maps), evaluated as the kernel's `nft_objref`: one state per object, shared by
//! its rules, kept across a reload.

mod common;
use common::*;
use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;

/// A UDP datagram from 198.18.0.1 to port `dport`.
fn udp_to(dport: u16) -> Vec<u8> {
    Builder::raw().udp(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 18, 0, 2),
        1,
        dport,
        b"x",
    )
}

fn at(sf: &mut Stateful, p: Vec<u8>, now_ns: u64) -> u32 {
    mark_with(sf, Hook::Input, p, Meta::with_ifnames("lan0", ""), now_ns)
}

fn load(rules: &str) -> Engine {
    let rs = weir_lang::load_str("t.nft", rules)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0;
    assert!(rs.refuse_unevaluated().is_ok(), "{:?}", rs.unevaluated());
    Engine::new(Compiled::build(&rs, Mode::Compiled))
}

const COUNTERS: &str = "table ip t {
    counter c { }
    counter d { packets 10 bytes 100 }
    chain in { type filter hook input priority 0;
        udp dport 2 counter name \"c\"
        ip saddr 198.18.0.1 counter name \"c\"
        counter name udp dport map { 2 : \"c\", 3 : \"d\" } meta mark set meta mark | 0x1
    }
}";

/// Two rules (and a map) sending their packets to one counter add up; a key the map does not
/// hold stops the rule (its later statement does not run) and counts nothing.
#[test]
fn rules_sharing_a_counter_add_up_and_a_map_miss_stops_the_rule() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(COUNTERS, mode);
        let len = udp_to(2).len() as u64;
        let (mut c, mut d) = ((0u64, 0u64), (10u64, 100u64));
        for (dport, n) in [(2u16, 3), (3, 2), (4, 4)] {
            for _ in 0..n {
                let m = at(&mut sf, udp_to(dport), 1_000);
                // rule 1 (port 2), rule 2 (every packet), rule 3 (the map's ports only)
                let hits_c = (dport == 2) as u64 + 1 + (dport == 2) as u64;
                c = (c.0 + hits_c, c.1 + hits_c * len);
                if dport == 3 {
                    d = (d.0 + 1, d.1 + len);
                }
                assert_eq!(m & 1, matches!(dport, 2 | 3) as u32, "port {dport}");
            }
        }
        let st = &sf.engine().st;
        assert_eq!(st.named_counters[0][0], c, "{mode:?}");
        assert_eq!(st.named_counters[0][1], d, "{mode:?}");
    }
}

const QUOTAS: &str = "table ip t {
    quota q { 100 bytes }
    quota o { over 50 bytes }
    chain in { type filter hook input priority 0;
        udp dport 2 quota name \"q\" meta mark set meta mark | 0x1
        udp dport 2 quota name \"q\" meta mark set meta mark | 0x2
        quota name udp dport map { 2 : \"o\" } meta mark set meta mark | 0x4
    }
}";

/// A quota object counts the bytes of every rule that names it: once they reach it, `quota
/// name` stops its rules; an `over` quota starts matching then.
#[test]
fn a_quota_object_is_consumed_across_rules() {
    let mut sf = engine(QUOTAS, Mode::Compiled);
    let len = udp_to(2).len() as u64;
    let (mut q, mut o) = (0u64, 0u64);
    let mut stopped = false;
    for i in 0..6 {
        let m = at(&mut sf, udp_to(2), 1_000 + i);
        let mut want = 0;
        for bit in [1, 2] {
            q += len;
            if q < 100 {
                want |= bit;
            }
        }
        o += len;
        if o >= 50 {
            want |= 4;
        }
        stopped |= want & 3 == 0;
        assert_eq!(m, want, "packet {i}");
    }
    assert!(stopped, "the quota ran out");
}

const LIMIT_NAMED: &str = "table ip t {
    limit l { rate 2/second burst 2 packets }
    chain in { type filter hook input priority 0;
        udp dport 2 limit name \"l\" meta mark set meta mark | 0x1
        udp dport 2 limit name udp dport map { 2 : \"l\" } meta mark set meta mark | 0x2
    }
}";

const LIMIT_ANON: &str = "table ip t {
    chain in { type filter hook input priority 0;
        udp dport 2 limit rate 2/second burst 2 packets meta mark set meta mark | 0x1
        udp dport 2 limit rate 2/second burst 2 packets meta mark set meta mark | 0x2
    }
}";

/// How many of the rules' limits passed `n` packets at `t`, `t + 1`, ... and one second later.
fn passes(sf: &mut Stateful, n: u64, t: u64) -> (u32, u32) {
    let count = |sf: &mut Stateful, t: u64| {
        (0..n)
            .map(|i| at(sf, udp_to(2), t + i).count_ones())
            .sum::<u32>()
    };
    (count(sf, t), count(sf, t + 1_000_000_000))
}

/// A named limit is one token bucket for the rules that name it (directly or through a map):
/// the burst is spent once, where two anonymous limits spend it twice; tokens come back at the
/// rate.
#[test]
fn a_named_limit_is_one_bucket_for_its_rules() {
    let (shared_now, shared_later) = passes(&mut engine(LIMIT_NAMED, Mode::Compiled), 4, 1_000);
    let (anon_now, anon_later) = passes(&mut engine(LIMIT_ANON, Mode::Compiled), 4, 1_000);
    // burst 2: two packets' worth at once
    assert_eq!(shared_now, 2);
    assert_eq!(anon_now, 2 * shared_now);
    // a second: 2 tokens back (capped at the burst)
    assert_eq!(shared_later, 2);
    assert_eq!(anon_later, 2 * shared_later);
}

/// Two workers sharing their ruleset's limiters and quotas (`Shared`) share the named limit
/// too.
#[test]
fn workers_share_a_named_limit() {
    let text = LIMIT_NAMED;
    let mut es = vec![load(text), load(text)];
    let s = weir_engine::eval::Shared::new(&es[0].rs);
    for e in &mut es {
        e.share(s.clone());
    }
    let mut sfs: Vec<Stateful> = es
        .into_iter()
        .map(|e| Stateful::new(e, Config::default()))
        .collect();
    let passed: u32 = (0..4)
        .map(|i| at(&mut sfs[i % 2], udp_to(2), 1_000 + i as u64).count_ones())
        .sum();
    assert_eq!(passed, 2, "the burst is spent once for both workers");
}

const BEFORE: &str = "table ip t {
    counter c { }
    quota q { 40 bytes }
    limit l { rate 1/minute burst 1 packets }
    quota x { 1000 bytes }
    chain in { type filter hook input priority 0;
        udp dport 2 counter name \"c\" quota name \"q\" meta mark set meta mark | 0x1
        udp dport 2 limit name \"l\" meta mark set meta mark | 0x2
        udp dport 2 quota name \"x\" meta mark set meta mark | 0x4
    }
}";

/// The objects' state survives a reload when the table still has an object of that kind and
/// name: the counter keeps counting, the spent quota stays spent, the empty bucket stays
/// empty; an object whose kind changed starts from its declaration.
#[test]
fn object_state_survives_a_reload() {
    let mut sf = engine(BEFORE, Mode::Compiled);
    let len = udp_to(2).len() as u64;
    assert!(len * 2 >= 40 && len < 40, "the quota lasts one packet");
    assert_eq!(at(&mut sf, udp_to(2), 1_000), 1 | 2 | 4);
    assert_eq!(at(&mut sf, udp_to(2), 2_000), 4);
    // the same objects, rules in another order; `x` is a counter now
    let after = "table ip t {
    limit l { rate 1/minute burst 1 packets }
    counter c { }
    counter x { packets 7 bytes 0 }
    quota q { 40 bytes }
    chain in { type filter hook input priority 0;
        udp dport 2 limit name \"l\" meta mark set meta mark | 0x2
        udp dport 2 counter name \"x\" meta mark set meta mark | 0x4
        udp dport 2 counter name \"c\" quota name \"q\" meta mark set meta mark | 0x1
    }
}";
    sf.reload(load(after));
    let st = &sf.engine().st;
    assert_eq!(st.named_counters[0][0], (2, 2 * len), "c kept its counts");
    assert_eq!(st.named_counters[0][1], (7, 0), "x starts as declared");
    // q spent, l empty (1 a minute): only the counter x's rule sets its bit
    assert_eq!(at(&mut sf, udp_to(2), 3_000), 4);
    let st = &sf.engine().st;
    assert_eq!(st.named_counters[0][0], (3, 3 * len));
    assert_eq!(st.named_counters[0][1], (8, len));
    // without the reload's carry the quota and the limit would pass again: a fresh engine
    let mut fresh = Stateful::new(load(after), Config::default());
    assert_eq!(at(&mut fresh, udp_to(2), 3_000), 1 | 2 | 4);
}

/// Workers that share their quotas (`Shared`) reload to engines sharing a new one: the
/// quota's bytes used carry into it, once, not once per worker.
#[test]
fn shared_quota_survives_a_reload_of_every_worker() {
    let text = "table ip t {
    quota q { 100 bytes }
    chain in { type filter hook input priority 0;
        udp dport 2 quota name \"q\" meta mark set meta mark | 0x1
    }
}";
    let pair = || {
        let mut es = vec![load(text), load(text)];
        let s = weir_engine::eval::Shared::new(&es[0].rs);
        for e in &mut es {
            e.share(s.clone());
        }
        es
    };
    let mut sfs: Vec<Stateful> = pair()
        .into_iter()
        .map(|e| Stateful::new(e, Config::default()))
        .collect();
    let len = udp_to(2).len() as u64;
    // two packets, one a worker
    for (i, sf) in sfs.iter_mut().enumerate() {
        assert_eq!(at(sf, udp_to(2), 1_000 + i as u64), 1);
    }
    for (sf, e) in sfs.iter_mut().zip(pair()) {
        sf.reload(e);
    }
    for sf in &sfs {
        assert_eq!(
            weir_engine::objects::quota_used(sf.engine(), 0, 0),
            Some(2 * len)
        );
    }
    // the quota runs out where it would have without the reload
    let mut used = 2 * len;
    for i in 0..4u64 {
        used += len;
        let m = at(&mut sfs[(i % 2) as usize], udp_to(2), 2_000 + i);
        assert_eq!(m, (used < 100) as u32, "packet {i}");
    }
}
