//! MSS clamping on the router's path, as OpenWrt's fw4 and most gateways write it: `tcp flags
//! syn tcp option maxseg size set rt mtu` in the forward chain lowers the MSS of a SYN to what
//! the narrower of its two routes carries (1400 - 40 here), never raises it, and leaves a valid
//! checksum; `rt mtu` is known only after routing.

use std::net::Ipv4Addr;
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Engine, Mode};
use weir_router::{Fate, Port, PortAddr, Route, Router, Routes, Rx};
use weir_wire::build::{Builder, Tcp};
use weir_wire::{Addr, LinkType, Mac, PacketMeta};

const LAN: Mac = Mac([2, 0, 0, 0, 0, 1]);
const WAN: Mac = Mac([2, 0, 0, 0, 1, 1]);
const HOST: Mac = Mac([2, 0, 0, 0, 0, 9]);
const C: Ipv4Addr = Ipv4Addr::new(198, 18, 30, 2);
const S: Ipv4Addr = Ipv4Addr::new(198, 18, 31, 2);

fn a(s: &str) -> Addr {
    s.parse().unwrap()
}

fn router(rules: &str) -> (Stateful, Router) {
    let rs = weir_lang::load_str("t.nft", rules).unwrap().0;
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    let sf = Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        weir_conntrack::Config::default(),
    );
    let mut r = Router::new(
        vec![
            Port::new("lan0")
                .with_mac(LAN)
                .with_mtu(1500)
                .with_addrs([PortAddr::host(a("198.18.30.1"))]),
            Port::new("wan0")
                .with_mac(WAN)
                .with_mtu(1400)
                .with_addrs([PortAddr::host(a("198.18.31.1"))]),
        ],
        Routes::new(vec![
            Route::new(a("198.18.30.0"), 24, 0, None),
            Route::new(a("198.18.31.0"), 24, 1, None),
        ])
        .unwrap(),
    );
    r.set_neighbour(C.into(), HOST);
    r.set_neighbour(S.into(), HOST);
    (sf, r)
}

/// A SYN with MSS `mss` through the router, from the client (lan0) or the server (wan0): the
/// MSS it leaves with.
fn syn(sf: &mut Stateful, r: &mut Router, from_client: bool, mss: u16) -> u16 {
    let opts = [2, 4, (mss >> 8) as u8, mss as u8, 1, 1, 4, 2];
    let (src, dst, pi, mac) = if from_client {
        (C, S, 0, LAN)
    } else {
        (S, C, 1, WAN)
    };
    let mut f = Builder::new().macs(HOST.0, mac.0).tcp(
        src,
        dst,
        &Tcp::new(40000, 443, 0x02).seq(1).options(&opts),
        b"",
    );
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let fate = r.route_frame(sf, &mut f, pm, pi, Rx::default(), 1);
    assert!(matches!(fate, Fate::Out { .. }), "{fate:?}");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    assert!(pm.transport_checksum_ok(&f), "checksum");
    let l4 = pm.l4_off as usize;
    u16::from_be_bytes([f[l4 + 22], f[l4 + 23]])
}

#[test]
fn syn_mss_clamped_to_the_route() {
    let rules = "table inet f {
  chain fwd {
    type filter hook forward priority 0; policy accept;
    tcp flags syn tcp option maxseg size set rt mtu
  }
}";
    let (mut sf, mut r) = router(rules);
    // out by wan0 (MTU 1400): 1360; the other way, the route back to the source is wan0's
    assert_eq!(syn(&mut sf, &mut r, true, 1460), 1360);
    assert_eq!(syn(&mut sf, &mut r, false, 1460), 1360);
    // never raised
    assert_eq!(syn(&mut sf, &mut r, true, 1200), 1200);
    // a fixed value
    let rules = "table ip f {
  chain fwd {
    type filter hook forward priority 0; policy accept;
    tcp flags syn tcp option maxseg size set 1000
  }
}";
    let (mut sf, mut r) = router(rules);
    assert_eq!(syn(&mut sf, &mut r, true, 1460), 1000);
}

#[test]
fn rt_mtu_is_known_after_routing_only() {
    // at prerouting the rule stops (no route yet): the mark is not set; at forward it is
    let rules = "table ip f {
  chain pre {
    type filter hook prerouting priority 0; policy accept;
    rt mtu 1360 meta mark set 1
  }
  chain fwd {
    type filter hook forward priority 0; policy accept;
    meta mark 1 drop
    rt mtu 1360 meta mark set 2
    meta mark 2 tcp option maxseg size set 1100
  }
}";
    let (mut sf, mut r) = router(rules);
    assert_eq!(syn(&mut sf, &mut r, true, 1460), 1100);
}
