//! `fib` on the router's path: the router's routes and addresses answer it (the reverse path
//! filter as firewalld writes it, kube-proxy's `fib daddr type local`).

use std::net::{Ipv4Addr, Ipv6Addr};
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Engine, Mode};
use weir_router::{Port, PortAddr, Route, Router, Routes, Rx};
use weir_wire::build::Builder;
use weir_wire::{Addr, LinkType, Mac, PacketMeta};

fn stateful_of(text: &str) -> Stateful {
    let (rs, _) = weir_lang::load_str("t.nft", text)
        .map_err(|(sm, d)| weir_lang::diag::render_all(&d, &sm))
        .unwrap();
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        weir_conntrack::Config::default(),
    )
}

const LAN: Mac = Mac([2, 0, 0, 0, 0, 1]);
const WAN: Mac = Mac([2, 0, 0, 0, 1, 1]);
const HOST: Mac = Mac([2, 0, 0, 0, 0, 9]);

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

/// lan0 (198.18.30.1/24, 2001:db8:30::1/64) and wan0 (198.18.31.1/24, 2001:db8:31::1/64,
/// the default routes), with kernel indexes 4 and 5 (`indexes`) or none known.
fn router(indexes: bool) -> Router {
    let addr = |s: &str, len| PortAddr { addr: a(s), len };
    let ports = vec![
        Port::new("lan0")
            .with_mac(LAN)
            .with_mtu(1500)
            .with_ifindex(if indexes { 4 } else { 0 })
            .with_addrs([addr("198.18.30.1", 24), addr("2001:db8:30::1", 64)]),
        Port::new("wan0")
            .with_mac(WAN)
            .with_mtu(1500)
            .with_ifindex(if indexes { 5 } else { 0 })
            .with_addrs([addr("198.18.31.1", 24), addr("2001:db8:31::1", 64)]),
    ];
    let routes = Routes::new(vec![
        Route::new(a("198.18.30.0"), 24, 0, None),
        Route::new(a("198.18.31.0"), 24, 1, None),
        Route::new(a("0.0.0.0"), 0, 1, Some(a("198.18.31.254"))),
        Route::new(a("2001:db8:30::"), 64, 0, None),
        Route::new(a("2001:db8:31::"), 64, 1, None),
        Route::new(a("::"), 0, 1, Some(a("2001:db8:31::fe"))),
    ])
    .unwrap();
    let mut r = Router::new(ports, routes);
    for h in [
        "198.18.30.2",
        "198.18.31.2",
        "198.18.31.254",
        "2001:db8:30::2",
        "2001:db8:31::2",
        "2001:db8:31::fe",
    ] {
        r.set_neighbour(a(h), HOST);
    }
    r
}

fn go(r: &mut Router, sf: &mut Stateful, pi: usize, mut f: Vec<u8>) -> String {
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let fate = r.route_frame(sf, &mut f, pm, pi, Rx::default(), 1);
    fate.describe(&["lan0".to_string(), "wan0".to_string()])
}

fn udp4(pi: usize, src: &str, dst: &str) -> Vec<u8> {
    let (s, d): (Ipv4Addr, Ipv4Addr) = (src.parse().unwrap(), dst.parse().unwrap());
    Builder::new()
        .macs(HOST.0, [LAN, WAN][pi].0)
        .udp(s, d, 1000, 53, b"q")
}

fn udp6(pi: usize, src: &str, dst: &str) -> Vec<u8> {
    let (s, d): (Ipv6Addr, Ipv6Addr) = (src.parse().unwrap(), dst.parse().unwrap());
    Builder::new()
        .macs(HOST.0, [LAN, WAN][pi].0)
        .udp(s, d, 1000, 53, b"q")
}

#[test]
fn reverse_path_filter_as_firewalld_writes_it() {
    let text = "table inet firewalld {
  chain filter_PREROUTING { type filter hook prerouting priority -290;
    meta nfproto ipv6 fib saddr . mark . iif oif missing drop
    meta nfproto ipv4 fib saddr . mark . iif oif missing drop } }";
    for indexes in [true, false] {
        let mut r = router(indexes);
        let mut sf = stateful_of(text);
        let dropped = |s: &str| s.starts_with("drop");
        // a client of lan0's subnet, in by lan0: forwarded
        let f = go(&mut r, &mut sf, 0, udp4(0, "198.18.30.2", "203.0.113.9"));
        assert_eq!(f, "forward out wan0", "{indexes}");
        // an Internet source in by lan0 (its route back is wan0's default): spoofed
        let f = go(&mut r, &mut sf, 0, udp4(0, "203.0.113.9", "198.18.30.2"));
        assert!(dropped(&f), "{f}");
        // ... and in by wan0: forwarded
        let f = go(&mut r, &mut sf, 1, udp4(1, "203.0.113.9", "198.18.30.2"));
        assert_eq!(f, "forward out lan0");
        // lan0's subnet in by wan0: spoofed
        let f = go(&mut r, &mut sf, 1, udp4(1, "198.18.30.7", "198.18.31.2"));
        assert!(dropped(&f), "{f}");
        // IPv6 the same
        let f = go(
            &mut r,
            &mut sf,
            0,
            udp6(0, "2001:db8:30::2", "2001:db8:99::1"),
        );
        assert_eq!(f, "forward out wan0");
        let f = go(
            &mut r,
            &mut sf,
            0,
            udp6(0, "2001:db8:99::1", "2001:db8:30::2"),
        );
        assert!(dropped(&f), "{f}");
        let f = go(
            &mut r,
            &mut sf,
            1,
            udp6(1, "2001:db8:99::1", "2001:db8:30::2"),
        );
        assert_eq!(f, "forward out lan0");
    }
}

#[test]
fn daddr_type_local_is_the_routers_own_address() {
    // kube-proxy: services reached on the node's own addresses
    let text = "table ip kube-proxy {
  chain pre { type filter hook prerouting priority 0; fib daddr type local drop }
  chain in { type filter hook input priority 0; fib daddr . iif type local accept; drop } }";
    let mut r = router(true);
    let mut sf = stateful_of(text);
    for (pi, dst, want) in [
        (0, "198.18.30.1", false),
        (0, "198.18.31.1", false),
        (0, "198.18.30.255", false),
        (0, "198.18.31.2", true),
        (0, "8.8.8.8", true),
        (1, "198.18.30.2", true),
    ] {
        let src = ["198.18.30.2", "198.18.31.2"][pi];
        let f = go(&mut r, &mut sf, pi, udp4(pi, src, dst));
        assert_eq!(f.starts_with("forward"), want, "{dst}: {f}");
        assert_eq!(f.starts_with("drop"), !want, "{dst}: {f}");
    }
    // local to the router, and to the port it came in by or not
    let text = "table ip t {
  chain in { type filter hook input priority 0; fib daddr . iif type local accept; drop } }";
    let mut sf = stateful_of(text);
    let f = go(&mut r, &mut sf, 0, udp4(0, "198.18.30.2", "198.18.30.1"));
    assert!(f.starts_with("to the router"), "{f}");
    let f = go(&mut r, &mut sf, 0, udp4(0, "198.18.30.2", "198.18.31.1"));
    assert!(f.starts_with("drop"), "{f}");
}

#[test]
fn oifname_of_the_route_and_routes_replaced() {
    let text = "table ip t { chain pre { type filter hook prerouting priority 0;
    fib daddr oifname \"lan0\" drop } }";
    let mut r = router(true);
    let mut sf = stateful_of(text);
    assert!(go(&mut r, &mut sf, 1, udp4(1, "198.18.31.2", "198.18.30.2")).starts_with("drop"));
    assert_eq!(
        go(&mut r, &mut sf, 0, udp4(0, "198.18.30.2", "8.8.8.8")),
        "forward out wan0"
    );
    // the default route moved to lan0: `fib` follows the router's routes
    let mut routes: Vec<Route> = r.routes().all().to_vec();
    for x in &mut routes {
        if x.len == 0 && !x.net.is_v6() {
            x.port = 0;
            x.via = Some(a("198.18.30.2"));
        }
    }
    r.set_routes(Routes::new(routes).unwrap());
    assert!(go(&mut r, &mut sf, 1, udp4(1, "198.18.31.2", "8.8.8.8")).starts_with("drop"));
}
