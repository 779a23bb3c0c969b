//! The router's routes and addresses as `fib` expressions ask them ([`weir_engine::Fib`]):
//! what the kernel's local table would hold (the ports' addresses: `local`; their IPv4
//! subnets' directed broadcast: `broadcast`; IPv6 subnet-router anycast: `anycast`; IPv6
//! multicast on each port; the addresses on no port, `127.0.0.0/8` and `::1` on `lo`), then
//! the routing table by longest prefix (each route `unicast` out of its port). The router
//! installs it on the [`weir_engine::stateful::Stateful`] its path runs
//! ([`crate::Router::route_frame`]), rebuilt when its routes or addresses change.

use crate::port::Port;
use crate::routes::Routes;
use std::net::IpAddr;
use weir_engine::fib::rtn;
use weir_engine::{FibQuery, FibRoute};
use weir_wire::{Addr, Family};

/// One local-table entry: prefix, length, type, port (None: `lo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Local {
    net: Addr,
    len: u8,
    kind: u8,
    port: Option<usize>,
}

/// A snapshot of a router's ports, addresses and routes.
#[derive(Clone, Debug)]
pub struct RouterFib {
    /// Each port's (kernel index, name).
    devs: Vec<(u32, String)>,
    locals: Vec<Local>,
    routes: Routes,
}

fn addr(a: IpAddr) -> Addr {
    match a {
        IpAddr::V4(a) => Addr::v4(u32::from(a)),
        IpAddr::V6(a) => Addr::v6(u128::from(a)),
    }
}

impl RouterFib {
    pub fn new(ports: &[Port], locals: &[Addr], routes: &Routes) -> RouterFib {
        let mut t = Vec::new();
        let host = |a: Addr, kind, port| Local {
            net: a,
            len: a.family().bits(),
            kind,
            port,
        };
        for (i, p) in ports.iter().enumerate() {
            for pa in &p.addrs {
                t.push(host(pa.addr, rtn::LOCAL, Some(i)));
            }
            for a in p.local_addrs() {
                if !p.addrs.iter().any(|pa| pa.addr == a) {
                    let kind = if a.family() == Family::Ipv4 {
                        rtn::BROADCAST
                    } else {
                        rtn::ANYCAST
                    };
                    t.push(host(a, kind, Some(i)));
                }
            }
            t.push(Local {
                net: Addr::v6(0xff << 120),
                len: 8,
                kind: rtn::MULTICAST,
                port: Some(i),
            });
        }
        for a in locals {
            t.push(host(*a, rtn::LOCAL, None));
        }
        t.push(Local {
            net: Addr::v4(0x7f00_0000),
            len: 8,
            kind: rtn::LOCAL,
            port: None,
        });
        t.push(host(Addr::v6(1), rtn::LOCAL, None));
        RouterFib {
            devs: ports.iter().map(|p| (p.ifindex, p.name.clone())).collect(),
            locals: t,
            routes: routes.clone(),
        }
    }

    fn dev(&self, port: Option<usize>) -> (u32, String) {
        match port {
            Some(i) => self.devs[i].clone(),
            None => (1, "lo".into()),
        }
    }

    fn route(&self, kind: u8, port: Option<usize>) -> FibRoute {
        let (ifindex, ifname) = self.dev(port);
        FibRoute {
            kind,
            ifindex,
            ifname,
        }
    }

    /// The port a lookup is restricted to (`q.oif`), if it is one of the router's.
    fn port_of(&self, index: u32) -> Option<usize> {
        self.devs.iter().position(|d| d.0 == index && index != 0)
    }

    fn local_entry(&self, a: Addr, oif: Option<usize>) -> Option<&Local> {
        self.locals
            .iter()
            .filter(|l| a.within(l.net, l.len) && (oif.is_none() || l.port == oif))
            .max_by_key(|l| l.len)
    }
}

impl weir_engine::Fib for RouterFib {
    fn lookup(&self, q: &FibQuery) -> Option<FibRoute> {
        let dst = addr(q.dst);
        let oif = self.port_of(q.oif);
        if q.oif != 0 && oif.is_none() {
            return None;
        }
        if let Some(l) = self.local_entry(dst, oif) {
            return Some(self.route(l.kind, l.port));
        }
        // a link-local address looked up on a device: on its link
        if let (Some(p), true) = (oif, dst.is_link_local()) {
            return Some(self.route(rtn::UNICAST, Some(p)));
        }
        let r = self.routes.get(self.routes.lookup(dst)?);
        if oif.is_some_and(|p| p != r.port) {
            return None;
        }
        Some(self.route(rtn::UNICAST, Some(r.port)))
    }

    fn local(&self, a: IpAddr) -> Option<FibRoute> {
        self.local_entry(addr(a), None)
            .map(|l| self.route(l.kind, l.port))
    }
}
