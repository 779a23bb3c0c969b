//! `fib` as nft_fib_ipv4 / nft_fib_ipv6 evaluate it, against a tiny routing table.

use std::net::IpAddr;
use std::sync::Arc;
use weir_engine::fib::{rtn, FibTable};
use weir_engine::{Compiled, Engine, Fib, FibQuery, FibRoute, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::{build, field::ifname_value, LinkType, PacketMeta};

/// Routes as (prefix, length, route) by longest prefix, the local entries by address; a
/// route may ask for a mark (policy routing) or a device (`q.oif`).
#[derive(Default)]
struct Table {
    routes: Vec<(IpAddr, u8, Option<u32>, FibRoute)>,
    locals: Vec<(IpAddr, FibRoute)>,
}

fn bits(a: IpAddr) -> (u128, u32) {
    match a {
        IpAddr::V4(a) => (u32::from(a) as u128, 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

fn covers(net: IpAddr, len: u8, a: IpAddr) -> bool {
    let ((n, w), (x, w2)) = (bits(net), bits(a));
    if w != w2 {
        return false;
    }
    let shift = w - len as u32;
    shift >= w || (n >> shift) == (x >> shift)
}

impl Fib for Table {
    fn lookup(&self, q: &FibQuery) -> Option<FibRoute> {
        if let Some(r) = self.local(q.dst) {
            return Some(r);
        }
        self.routes
            .iter()
            .filter(|(n, l, mark, r)| {
                covers(*n, *l, q.dst)
                    && mark.is_none_or(|m| m == q.mark)
                    && (q.oif == 0 || r.ifindex == q.oif)
            })
            .max_by_key(|(_, l, mark, _)| (*l, mark.is_some()))
            .map(|r| r.3.clone())
    }
    fn local(&self, addr: IpAddr) -> Option<FibRoute> {
        self.locals
            .iter()
            .find(|(a, _)| *a == addr)
            .map(|l| l.1.clone())
    }
}

fn route(kind: u8, ifindex: u32) -> FibRoute {
    let ifname = match ifindex {
        0 => "",
        1 => "lo",
        2 => "eth0",
        _ => "eth1",
    };
    FibRoute {
        kind,
        ifindex,
        ifname: ifname.into(),
    }
}

/// eth0 (2): 10.1.0.0/16 and 2001:db8:1::/64 (the host is .1 / ::1 there); eth1 (3): the
/// default routes and 10.9.0.1, the host's address there; a blackhole, a prohibit and an
/// unreachable route; mark 7 routes 10.7.0.0/16 by eth0, others by eth1.
fn table() -> Table {
    let a = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut t = Table::default();
    for (n, l, mark, r) in [
        ("10.1.0.0", 16, None, route(rtn::UNICAST, 2)),
        ("0.0.0.0", 0, None, route(rtn::UNICAST, 3)),
        ("10.7.0.0", 16, Some(7), route(rtn::UNICAST, 2)),
        ("203.0.113.0", 24, None, route(rtn::BLACKHOLE, 0)),
        ("198.51.100.0", 24, None, route(rtn::PROHIBIT, 0)),
        ("2001:db8:1::", 64, None, route(rtn::UNICAST, 2)),
        ("fe80::", 64, None, route(rtn::UNICAST, 2)),
        ("fe80::", 64, None, route(rtn::UNICAST, 3)),
        ("ff00::", 8, None, route(rtn::MULTICAST, 2)),
        ("::", 0, None, route(rtn::UNICAST, 3)),
        ("2001:db8:dead::", 48, None, route(rtn::UNREACHABLE, 0)),
    ] {
        t.routes.push((a(n), l, mark, r));
    }
    for (addr, r) in [
        ("10.1.0.1", route(rtn::LOCAL, 2)),
        ("10.1.255.255", route(rtn::BROADCAST, 2)),
        ("10.9.0.1", route(rtn::LOCAL, 3)),
        ("127.0.0.1", route(rtn::LOCAL, 1)),
        ("2001:db8:1::1", route(rtn::LOCAL, 2)),
    ] {
        t.locals.push((a(addr), r));
    }
    t
}

fn engines(rules: &str, fib: bool) -> Vec<Engine> {
    let (rs, _) = weir_lang::load_str("t.nft", rules)
        .map_err(|(sm, d)| weir_lang::diag::render_all(&d, &sm))
        .unwrap();
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let shared: Arc<dyn Fib> = Arc::new(table());
    [Mode::Compiled, Mode::Linear]
        .into_iter()
        .map(|m| {
            let mut e = Engine::new(Compiled::build(&rs, m));
            if fib {
                e.st.fib = Some(FibTable(shared.clone()));
            }
            e
        })
        .collect()
}

fn dev(meta: &mut Meta, iif: Option<u32>, oif: Option<u32>) {
    let name = |i: u32| ifname_value(["", "lo", "eth0", "eth1"][i as usize]);
    if let Some(i) = iif {
        meta.iif = i;
        meta.iifname = name(i);
        meta.iiftype = if i == 1 { 772 } else { 1 };
    }
    meta.has_ct = true;
    if let Some(o) = oif {
        meta.oif = o;
        meta.oifname = name(o);
    }
}

/// The mark the chain leaves on the packet (the rules set it), agreed by both modes.
fn mark(es: &mut [Engine], hook: Hook, frame: &[u8], iif: Option<u32>, oif: Option<u32>) -> u32 {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let r: Vec<u32> = es
        .iter_mut()
        .map(|e| {
            let mut meta = Meta::default();
            dev(&mut meta, iif, oif);
            let mut p = Pkt {
                frame,
                pm: &pm,
                meta: &mut meta,
                now_ns: 0,
                conns: None,
            };
            e.process(hook, &mut p);
            p.meta.mark
        })
        .collect();
    assert_eq!(r[0], r[1], "compiled and linear disagree");
    r[0]
}

fn v4(src: &str, dst: &str) -> Vec<u8> {
    build::udp4(src.parse().unwrap(), dst.parse().unwrap(), 1000, 53, b"x")
}

fn v6(src: &str, dst: &str) -> Vec<u8> {
    build::udp6(src.parse().unwrap(), dst.parse().unwrap(), 1000, 53, b"x")
}

fn chain(hook: &str, body: &str) -> String {
    format!("table inet t {{ chain c {{ type filter hook {hook} priority 0; {body} }} }}")
}

#[test]
fn reverse_path_filter_as_firewalld_writes_it() {
    let mut es = engines(
        &chain(
            "prerouting",
            "meta mark set 1; fib saddr . iif oif missing meta mark set 2",
        ),
        true,
    );
    let pre = Hook::Prerouting;
    // from a network behind eth0, arriving on eth0: the route back leaves by eth0
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "10.9.0.1"), Some(2), None),
        1
    );
    // the same source on eth1: spoofed
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "10.9.0.1"), Some(3), None),
        2
    );
    // an Internet source on eth0 (its route is the default by eth1): spoofed
    assert_eq!(
        mark(&mut es, pre, &v4("192.0.2.9", "10.1.0.1"), Some(2), None),
        2
    );
    assert_eq!(
        mark(&mut es, pre, &v4("192.0.2.9", "10.1.0.1"), Some(3), None),
        1
    );
    // a source behind a blackhole route has no way back
    assert_eq!(
        mark(&mut es, pre, &v4("203.0.113.5", "10.1.0.1"), Some(3), None),
        2
    );
    // a looped-back packet always passes (nft_fib_is_loopback)
    assert_eq!(
        mark(&mut es, pre, &v4("192.0.2.9", "127.0.0.1"), Some(1), None),
        1
    );
    // DHCP discover: 0.0.0.0 to the limited broadcast, answered with the input device
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v4("0.0.0.0", "255.255.255.255"),
            Some(2),
            None
        ),
        1
    );
    // IPv6
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:1::5", "2001:db8:1::1"),
            Some(2),
            None
        ),
        1
    );
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:1::5", "2001:db8:1::1"),
            Some(3),
            None
        ),
        2
    );
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:2::5", "2001:db8:1::1"),
            Some(3),
            None
        ),
        1
    );
    // a link-local source is looked up on the input device
    assert_eq!(
        mark(&mut es, pre, &v6("fe80::5", "fe80::1"), Some(3), None),
        1
    );
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:dead::1", "2001:db8:1::1"),
            Some(3),
            None
        ),
        2
    );
}

#[test]
fn oif_and_oifname_of_the_route() {
    let rules = chain(
        "prerouting",
        "fib daddr oif 3 meta mark set 3; fib daddr oif 2 meta mark set 2; \
         fib daddr oif 0 meta mark set 9; fib daddr oifname \"eth1\" meta mark set mark or 0x10",
    );
    let mut es = engines(&rules, true);
    let pre = Hook::Prerouting;
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "8.8.8.8"), Some(2), None),
        19
    );
    assert_eq!(
        mark(&mut es, pre, &v4("8.8.8.8", "10.1.7.7"), Some(3), None),
        2
    );
    // the host's own address: RTN_LOCAL gives no device
    assert_eq!(
        mark(&mut es, pre, &v4("8.8.8.8", "10.1.0.1"), Some(3), None),
        9
    );
    // blackhole and prohibit routes: the lookup fails
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "203.0.113.1"), Some(2), None),
        9
    );
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "198.51.100.1"), Some(2), None),
        9
    );
    // the local subnet's broadcast: a broadcast route, by its device
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "10.1.255.255"), Some(2), None),
        2
    );
    // IPv6: local and unreachable give none
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:1::5", "2001:db8:1::1"),
            Some(2),
            None
        ),
        9
    );
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:1::5", "2001:db8:dead::1"),
            Some(2),
            None
        ),
        9
    );
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:1::5", "2001:db8:9::1"),
            Some(2),
            None
        ),
        19
    );
    // without a table: no route
    let mut none = engines(&rules, false);
    assert_eq!(
        mark(&mut none, pre, &v4("10.1.2.3", "8.8.8.8"), Some(2), None),
        9
    );
}

#[test]
fn mark_selects_the_policy_route() {
    let rules = chain(
        "prerouting",
        "fib daddr . mark oif 2 meta mark set 0x20; fib daddr oif 3 meta mark set mark or 0x40",
    );
    let mut es = engines(&rules, true);
    let pre = Hook::Prerouting;
    // without mark 7, 10.7.0.0/16 goes by the default route (eth1)
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "10.7.0.9"), Some(2), None),
        0x40
    );
    let mut es = engines(
        &chain(
            "prerouting",
            "meta mark set 7; fib daddr . mark oif 2 meta mark set 0x20; \
             fib daddr oif 3 meta mark set mark or 0x40",
        ),
        true,
    );
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "10.7.0.9"), Some(2), None),
        0x60
    );
}

#[test]
fn address_types() {
    let rules = chain(
        "prerouting",
        "fib daddr type vmap { local : jump l, broadcast : jump b, multicast : jump m, \
         unicast : jump u, unspec : jump z, blackhole : jump bh, unreachable : jump ur }",
    )
    .replace(
        "ur } } }",
        "ur } } chain l { meta mark set 2 } chain b { meta mark set 3 } chain m { meta mark set 5 } \
         chain u { meta mark set 1 } chain z { meta mark set 100 } chain bh { meta mark set 6 } \
         chain ur { meta mark set 7 } }",
    );
    let mut es = engines(&rules, true);
    let pre = Hook::Prerouting;
    let t = |es: &mut Vec<Engine>, f: Vec<u8>| mark(es, pre, &f, Some(2), None);
    assert_eq!(t(&mut es, v4("8.8.8.8", "10.1.0.1")), 2);
    assert_eq!(t(&mut es, v4("8.8.8.8", "10.9.0.1")), 2);
    assert_eq!(t(&mut es, v4("8.8.8.8", "10.1.255.255")), 3);
    assert_eq!(t(&mut es, v4("8.8.8.8", "255.255.255.255")), 3);
    // 0.0.0.0 alone is "zeronet" (Linux >= 5.3; the kernel lab saw 0.0.0.50 as unicast)
    assert_eq!(t(&mut es, v4("8.8.8.8", "0.0.0.0")), 3);
    assert_eq!(t(&mut es, v4("8.8.8.8", "0.1.2.3")), 1);
    assert_eq!(t(&mut es, v4("8.8.8.8", "224.0.0.251")), 5);
    assert_eq!(t(&mut es, v4("8.8.8.8", "1.1.1.1")), 1);
    // the IPv4 type knows no blackhole: the local table has no entry
    assert_eq!(t(&mut es, v4("8.8.8.8", "203.0.113.1")), 1);
    assert_eq!(t(&mut es, v6("2001:db8:1::5", "2001:db8:1::1")), 2);
    assert_eq!(t(&mut es, v6("2001:db8:1::5", "ff02::1")), 5);
    assert_eq!(t(&mut es, v6("2001:db8:1::5", "2001:db8:9::1")), 1);
    assert_eq!(t(&mut es, v6("2001:db8:1::5", "2001:db8:dead::1")), 7);
    // without a table: unspec
    let mut none = engines(&rules, false);
    assert_eq!(t(&mut none, v4("8.8.8.8", "10.1.0.1")), 100);
}

#[test]
fn address_type_on_a_device() {
    let rules = chain(
        "prerouting",
        "fib daddr . iif type local meta mark set 2; fib daddr type local meta mark set mark or 0x10",
    );
    let mut es = engines(&rules, true);
    let pre = Hook::Prerouting;
    // the address on the input device: local both ways
    assert_eq!(
        mark(&mut es, pre, &v4("8.8.8.8", "10.1.0.1"), Some(2), None),
        18
    );
    // eth1's address arriving on eth0: local to the host, not to eth0
    assert_eq!(
        mark(&mut es, pre, &v4("8.8.8.8", "10.9.0.1"), Some(2), None),
        16
    );
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:1::5", "2001:db8:1::1"),
            Some(2),
            None
        ),
        18
    );
    assert_eq!(
        mark(
            &mut es,
            pre,
            &v6("2001:db8:1::5", "2001:db8:1::1"),
            Some(3),
            None
        ),
        16
    );
    // at output, `oif` restricts to the output device
    let mut es = engines(
        &chain("output", "fib daddr . oif type local meta mark set 4"),
        true,
    );
    let out = Hook::Output;
    assert_eq!(
        mark(&mut es, out, &v4("10.1.0.1", "10.9.0.1"), None, Some(3)),
        4
    );
    assert_eq!(
        mark(&mut es, out, &v4("10.1.0.1", "10.9.0.1"), None, Some(2)),
        0
    );
}

#[test]
fn check_exists_and_missing_in_maps() {
    let rules = chain(
        "prerouting",
        "fib daddr check vmap { missing : jump miss, exists : jump hit } } \
         chain miss { meta mark set 1 } chain hit { meta mark set 2 ",
    );
    let mut es = engines(&rules, true);
    let pre = Hook::Prerouting;
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "8.8.8.8"), Some(2), None),
        2
    );
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "203.0.113.9"), Some(2), None),
        1
    );
    let mut es = engines(
        &chain(
            "prerouting",
            "meta mark set fib daddr check . ct mark map { exists . 0x00000000 : 0x00000005 }",
        ),
        true,
    );
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "8.8.8.8"), Some(2), None),
        5
    );
    // a miss in the map: the rule stops, the mark stays
    assert_eq!(
        mark(&mut es, pre, &v4("10.1.2.3", "203.0.113.9"), Some(2), None),
        0
    );
}

#[test]
fn saddr_iif_at_forward_restricts_to_the_input_device() {
    let mut es = engines(
        &chain("forward", "fib saddr . iif oif 2 meta mark set 2"),
        true,
    );
    let fwd = Hook::Forward;
    assert_eq!(
        mark(&mut es, fwd, &v4("10.1.2.3", "8.8.8.8"), Some(2), Some(3)),
        2
    );
    assert_eq!(
        mark(&mut es, fwd, &v4("8.8.4.4", "10.1.2.3"), Some(2), Some(3)),
        0
    );
}

#[test]
fn stateful_keeps_its_table_across_a_reload() {
    use weir_engine::stateful::Stateful;
    let load = |text: &str| {
        let (rs, _) = weir_lang::load_str("t.nft", text).unwrap();
        Engine::new(Compiled::build(&rs, Mode::Compiled))
    };
    let text = chain("prerouting", "fib daddr oif 3 meta mark set 3");
    let mut sf = Stateful::new(load(&text), weir_conntrack::Config::default());
    assert!(sf.fib().is_none());
    let t: Arc<dyn Fib> = Arc::new(table());
    sf.set_fib(Some(t.clone()));
    sf.reload(load(&text));
    assert!(sf.fib().is_some_and(|f| Arc::ptr_eq(f, &t)));
    sf.set_fib(None);
    assert!(sf.fib().is_none());
}
