//! The campaign's router ([`world`]): its interfaces, routes and neighbours, the hosts around
//! it, and the networks the generators draw addresses from.

use crate::topology::{parse_mac, Interface, Mac, Neighbor, Route, Router, RpFilter, Topology};
use std::net::IpAddr;

/// Where a host is, seen from the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKind {
    /// On a connected subnet, with a static neighbour entry.
    OnLink,
    /// Behind a gateway (a routed subnet, or the internet behind the WAN).
    Behind,
}

#[derive(Clone, Debug)]
pub struct Host {
    pub addr: IpAddr,
    /// Source MAC of its frames as they reach the router (its own, or its gateway's).
    pub mac: Mac,
    pub iface: usize,
    pub kind: HostKind,
}

/// The campaign's router and the vocabulary generators draw from.
#[derive(Clone, Debug)]
pub struct World {
    pub topo: Topology,
    pub router: Router,
    pub hosts: Vec<Host>,
    /// Destinations that are the router's (own addresses, a broadcast, an anycast address).
    pub router_addrs: Vec<IpAddr>,
    pub nets4: Vec<&'static str>,
    pub nets6: Vec<&'static str>,
    /// IPv4 addresses in the lab range that no route covers (spoofed sources the loose
    /// reverse path filter drops).
    pub unrouted4: Vec<IpAddr>,
}

pub(crate) const IFS: [(&str, &str); 4] = [
    ("weirlan0", "02:77:65:00:00:01"),
    ("weirdmz0", "02:77:65:00:01:01"),
    ("weirwan0", "02:77:65:00:02:01"),
    ("weirsix0", "02:77:65:00:03:01"),
];

/// Each interface's IPv4 reverse path filter in the campaign's router: the LAN and the WAN
/// strict, the DMZ (two gateways, asymmetric paths) loose, the IPv6-only segment off.
pub(crate) const RP_FILTERS: [RpFilter; 4] = [
    RpFilter::Strict,
    RpFilter::Loose,
    RpFilter::Strict,
    RpFilter::Off,
];

/// The campaign's router: a LAN, a DMZ with two routers to more subnets behind it, a WAN with
/// two gateways (198.19.0.0/16 and the IPv6 default through the first, 198.19.128.0/17 and
/// 2001:db8:beef::/48 through the second; no IPv4 default route, so that some sources have
/// no route at all), and an IPv6-only segment; the IPv4 reverse path filter strict on the
/// LAN and the WAN, loose on the DMZ ([`RP_FILTERS`]).
pub fn world() -> World {
    let addrs: [&[&str]; 4] = [
        &["198.18.0.1/24", "2001:db8:0:1::1/64"],
        &["198.18.1.1/24", "2001:db8:0:2::1/64"],
        &["198.19.0.2/24", "2001:db8:ffff::2/64"],
        &["2001:db8:0:6::1/64"],
    ];
    let interfaces = IFS
        .iter()
        .zip(addrs)
        .zip(RP_FILTERS)
        .map(|(((n, m), a), rp_filter)| Interface {
            name: n.to_string(),
            mac: m.to_string(),
            addrs: a.iter().map(|s| s.to_string()).collect(),
            rp_filter,
        })
        .collect();
    let route = |dst: &str, via: &str, dev: &str| Route {
        dst: dst.into(),
        via: Some(via.into()),
        dev: dev.into(),
    };
    let routes = vec![
        route("198.19.0.0/16", "198.19.0.1", "weirwan0"),
        route("::/0", "2001:db8:ffff::1", "weirwan0"),
        route("198.19.128.0/17", "198.19.0.3", "weirwan0"),
        route("2001:db8:beef::/48", "2001:db8:ffff::3", "weirwan0"),
        route("198.18.100.0/24", "198.18.1.254", "weirdmz0"),
        route("198.18.0.128/25", "198.18.1.254", "weirdmz0"),
        route("2001:db8:100::/48", "2001:db8:0:2::fe", "weirdmz0"),
        route("198.18.101.0/24", "198.18.1.253", "weirdmz0"),
        route("2001:db8:101::/48", "2001:db8:0:2::fd", "weirdmz0"),
    ];
    let mut neighbors = Vec::new();
    let mut nb = |a: &str, m: &str, d: &str| {
        neighbors.push(Neighbor {
            addr: a.into(),
            mac: m.into(),
            dev: d.into(),
        })
    };
    nb("198.19.0.1", "02:00:00:00:02:01", "weirwan0");
    nb("2001:db8:ffff::1", "02:00:00:00:02:01", "weirwan0");
    nb("198.19.0.3", "02:00:00:00:02:03", "weirwan0");
    nb("2001:db8:ffff::3", "02:00:00:00:02:03", "weirwan0");
    nb("198.18.1.254", "02:00:00:00:01:fe", "weirdmz0");
    nb("2001:db8:0:2::fe", "02:00:00:00:01:fe", "weirdmz0");
    nb("198.18.1.253", "02:00:00:00:01:fd", "weirdmz0");
    nb("2001:db8:0:2::fd", "02:00:00:00:01:fd", "weirdmz0");
    let mut hosts = Vec::new();
    for (i, (net4, net6, ids)) in [
        (
            Some("198.18.0"),
            "2001:db8:0:1",
            &[0x10u8, 0x11, 0x20, 0x50][..],
        ),
        (Some("198.18.1"), "2001:db8:0:2", &[0x10, 0x20, 0x53][..]),
        (None, "2001:db8:0:6", &[0x10, 0x20][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let dev = if i == 2 { 3 } else { i };
        for &h in ids {
            let mac = format!("02:00:00:00:{dev:02x}:{h:02x}");
            if let Some(n4) = net4 {
                let a = format!("{n4}.{h}");
                nb(&a, &mac, IFS[dev].0);
                hosts.push(Host {
                    addr: a.parse().unwrap(),
                    mac: parse_mac(&mac).unwrap(),
                    iface: dev,
                    kind: HostKind::OnLink,
                });
            }
            let a = format!("{net6}::{h:x}");
            nb(&a, &mac, IFS[dev].0);
            hosts.push(Host {
                addr: a.parse().unwrap(),
                mac: parse_mac(&mac).unwrap(),
                iface: dev,
                kind: HostKind::OnLink,
            });
        }
    }
    let behind: [(&str, usize, &[&str]); 4] = [
        (
            "02:00:00:00:01:fe",
            1,
            &[
                "198.18.100.5",
                "198.18.100.77",
                "198.18.0.200",
                "2001:db8:100::5",
                "2001:db8:100:7::1",
            ],
        ),
        (
            "02:00:00:00:01:fd",
            1,
            &["198.18.101.9", "198.18.101.200", "2001:db8:101::9"],
        ),
        (
            "02:00:00:00:02:01",
            2,
            &[
                "198.19.7.7",
                "198.19.66.5",
                "198.19.13.9",
                "2001:db8:bad::5",
                "2001:db8:1234::99",
            ],
        ),
        (
            "02:00:00:00:02:03",
            2,
            &["198.19.200.7", "198.19.131.1", "2001:db8:beef::1"],
        ),
    ];
    for (gw, iface, addrs) in behind {
        for a in addrs {
            hosts.push(Host {
                addr: a.parse().unwrap(),
                mac: parse_mac(gw).unwrap(),
                iface,
                kind: HostKind::Behind,
            });
        }
    }
    let topo = Topology {
        interfaces,
        routes,
        neighbors,
        packets: Vec::new(),
    };
    let router = Router::from_topology(&topo).expect("the campaign topology is valid");
    let router_addrs = [
        "198.18.0.1",
        "198.18.1.1",
        "198.19.0.2",
        "198.18.0.255",
        "2001:db8:0:1::1",
        "2001:db8:ffff::2",
        "2001:db8:0:6::1",
        "2001:db8:0:2::",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    World {
        topo,
        router,
        hosts,
        router_addrs,
        nets4: vec![
            "198.18.0.0/24",
            "198.18.1.0/24",
            "198.18.100.0/24",
            "198.18.0.128/25",
            "198.19.0.0/16",
            "198.18.0.0/15",
            "198.19.7.0/24",
            "198.19.0.0/24",
            "198.18.0.0/26",
            "198.18.101.0/24",
            "198.19.128.0/17",
        ],
        nets6: vec![
            "2001:db8:0:1::/64",
            "2001:db8:0:2::/64",
            "2001:db8:100::/48",
            "2001:db8:bad::/48",
            "2001:db8::/32",
            "2001:db8:0:6::/64",
            "2001:db8:ffff::/64",
            "2001:db8::/48",
            "2001:db8:101::/48",
        ],
        unrouted4: ["198.18.77.7", "198.18.250.1", "198.18.2.9"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect(),
    }
}
