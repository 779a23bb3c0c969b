//! `fib` in NFQUEUE mode: the kernel routes the packets, so its own tables answer the rules'
//! lookups. [`KernelFib`] holds the local (255) and main (254) tables and the device names,
//! read by rtnetlink at start ([`weir_io::rtnl::dump`]) and read again whenever the kernel
//! says its devices, addresses or routes changed (a thread on [`weir_io::rtnl::Watch`]).
//! Policy routing rules are not read: a lookup is the local table's, then the main table's
//! (`fib ... mark` looks up as without the mark). A lookup walks the table by prefix length
//! (longest first, then the lowest metric): fine for a host's routes, not for a full
//! Internet table.

use std::net::IpAddr;
use std::sync::{Arc, RwLock, Weak};
use weir_engine::{Fib, FibQuery, FibRoute};
use weir_io::rtnl::{self, Snapshot};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    v6: bool,
    net: u128,
    len: u8,
    kind: u8,
    oif: u32,
    priority: u32,
}

#[derive(Debug, Default)]
struct Tables {
    names: std::collections::HashMap<u32, String>,
    local: Vec<Entry>,
    main: Vec<Entry>,
}

fn bits(a: IpAddr) -> (bool, u128) {
    match a {
        IpAddr::V4(a) => (false, u32::from(a) as u128),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}

impl Tables {
    fn of(s: &Snapshot) -> Tables {
        let mut t = Tables {
            names: s.links.iter().map(|l| (l.index, l.name.clone())).collect(),
            ..Tables::default()
        };
        for r in &s.routes {
            let e = Entry {
                v6: r.family == libc::AF_INET6 as u8,
                net: r.dst,
                len: r.dst_len,
                kind: r.kind,
                oif: r.oif,
                priority: r.priority,
            };
            if !e.v6 && r.family != libc::AF_INET as u8 {
                continue;
            }
            match r.table {
                255 => t.local.push(e),
                254 => t.main.push(e),
                _ => {}
            }
        }
        for v in [&mut t.local, &mut t.main] {
            v.sort_by_key(|e| (std::cmp::Reverse(e.len), e.priority));
        }
        t
    }

    fn best(t: &[Entry], a: IpAddr, oif: u32) -> Option<&Entry> {
        let (v6, x) = bits(a);
        let w: u32 = if v6 { 128 } else { 32 };
        t.iter().find(|e| {
            let shift = w - (e.len as u32).min(w);
            e.v6 == v6
                && (shift >= w || (e.net >> shift) == (x >> shift))
                && (oif == 0 || e.oif == oif)
        })
    }

    fn route(&self, e: &Entry) -> FibRoute {
        FibRoute {
            kind: e.kind,
            ifindex: e.oif,
            ifname: self.names.get(&e.oif).cloned().unwrap_or_default(),
        }
    }
}

/// The kernel's routing tables, kept current.
#[derive(Debug, Default)]
pub struct KernelFib {
    tables: RwLock<Tables>,
}

impl KernelFib {
    /// Tables of a snapshot (tests; [`KernelFib::start`] reads the kernel's).
    pub fn of(s: &Snapshot) -> KernelFib {
        KernelFib {
            tables: RwLock::new(Tables::of(s)),
        }
    }

    /// Replace the tables.
    pub fn replace(&self, s: &Snapshot) {
        let t = Tables::of(s);
        if let Ok(mut g) = self.tables.write() {
            *g = t;
        }
    }

    /// Read the kernel's tables and follow their changes (a thread that ends when the
    /// tables are dropped).
    pub fn start() -> std::io::Result<Arc<KernelFib>> {
        let mut watch = rtnl::Watch::open()?;
        let fib = Arc::new(KernelFib::of(&rtnl::dump()?));
        let weak: Weak<KernelFib> = Arc::downgrade(&fib);
        std::thread::Builder::new()
            .name("weir-fib".into())
            .spawn(move || loop {
                let changed = match watch.wait(1000) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("rtnetlink: {e}");
                        std::thread::sleep(std::time::Duration::from_secs(1));
                        true
                    }
                };
                let Some(fib) = weak.upgrade() else {
                    return;
                };
                if changed {
                    match rtnl::dump() {
                        Ok(s) => fib.replace(&s),
                        Err(e) => tracing::warn!("rtnetlink dump: {e}"),
                    }
                }
            })?;
        Ok(fib)
    }
}

impl Fib for KernelFib {
    fn lookup(&self, q: &FibQuery) -> Option<FibRoute> {
        let t = self.tables.read().ok()?;
        Tables::best(&t.local, q.dst, q.oif)
            .or_else(|| Tables::best(&t.main, q.dst, q.oif))
            .map(|e| t.route(e))
    }

    fn local(&self, addr: IpAddr) -> Option<FibRoute> {
        let t = self.tables.read().ok()?;
        Tables::best(&t.local, addr, 0).map(|e| t.route(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_engine::fib::rtn;
    use weir_io::rtnl::{Link, RouteEntry};

    fn route(table: u32, kind: u8, dst: &str, len: u8, oif: u32, priority: u32) -> RouteEntry {
        let (v6, d) = bits(dst.parse().unwrap());
        RouteEntry {
            family: if v6 { 10 } else { 2 },
            table,
            kind,
            dst: d,
            dst_len: len,
            oif,
            priority,
        }
    }

    #[test]
    fn local_then_main_by_prefix_and_metric() {
        let s = Snapshot {
            links: vec![
                Link {
                    index: 1,
                    name: "lo".into(),
                    loopback: true,
                },
                Link {
                    index: 2,
                    name: "eth0".into(),
                    loopback: false,
                },
                Link {
                    index: 3,
                    name: "eth1".into(),
                    loopback: false,
                },
            ],
            addrs: Vec::new(),
            routes: vec![
                route(255, rtn::LOCAL, "10.0.0.1", 32, 2, 0),
                route(255, rtn::BROADCAST, "10.0.0.255", 32, 2, 0),
                route(255, rtn::LOCAL, "127.0.0.0", 8, 1, 0),
                route(254, rtn::UNICAST, "10.0.0.0", 24, 2, 100),
                route(254, rtn::UNICAST, "0.0.0.0", 0, 3, 200),
                route(254, rtn::UNICAST, "0.0.0.0", 0, 2, 100),
                route(254, rtn::BLACKHOLE, "203.0.113.0", 24, 0, 0),
                route(254, rtn::UNICAST, "fe80::", 64, 2, 256),
                route(254, rtn::UNICAST, "fe80::", 64, 3, 256),
                route(100, rtn::UNICAST, "8.8.8.0", 24, 3, 0),
            ],
        };
        let f = KernelFib::of(&s);
        let q = |dst: &str, oif| FibQuery {
            dst: dst.parse().unwrap(),
            src: None,
            iif: 1,
            oif,
            mark: 0,
        };
        let got = |dst: &str, oif| {
            f.lookup(&q(dst, oif))
                .map(|r| (r.kind, r.ifindex, r.ifname))
        };
        assert_eq!(got("10.0.0.1", 0), Some((rtn::LOCAL, 2, "eth0".into())));
        assert_eq!(got("127.1.2.3", 0), Some((rtn::LOCAL, 1, "lo".into())));
        assert_eq!(got("10.0.0.7", 0), Some((rtn::UNICAST, 2, "eth0".into())));
        // the lower metric of two defaults; a table other than main is not read
        assert_eq!(got("8.8.8.8", 0), Some((rtn::UNICAST, 2, "eth0".into())));
        assert_eq!(
            got("203.0.113.9", 0),
            Some((rtn::BLACKHOLE, 0, String::new()))
        );
        // a link-local address on the device asked for
        assert_eq!(got("fe80::9", 3), Some((rtn::UNICAST, 3, "eth1".into())));
        assert_eq!(got("2001:db8::1", 0), None);
        let l = f.local("10.0.0.255".parse().unwrap()).unwrap();
        assert_eq!((l.kind, l.ifindex), (rtn::BROADCAST, 2));
        assert!(f.local("10.0.0.7".parse().unwrap()).is_none());
        // replaced
        f.replace(&Snapshot::default());
        assert_eq!(got("10.0.0.7", 0), None);
    }

    /// This machine's tables, read by rtnetlink: 127.0.0.1 is local on `lo`.
    #[test]
    fn the_kernels_tables() {
        let Ok(f) = KernelFib::start() else {
            return; // no rtnetlink here
        };
        let l = f.local("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!((l.kind, l.ifname.as_str()), (rtn::LOCAL, "lo"));
    }
}
