//! The `tproxy` statement (Linux's `nft_tproxy`): a packet given to a transparent local
//! socket and delivered to the host, whatever its destination address.
//!
//! As the kernel: for a TCP or UDP packet of the statement's family, the socket of the
//! packet's own connection (TCP: established; UDP: connected, or bound to an address), or
//! else one listening on the target (ADDR: the input device's first address when not given;
//! PORT: the packet's destination port when not given). A TCP connection in TIME_WAIT
//! gives way to a listener for a new SYN. When that socket is transparent the packet is
//! its (`Meta::tproxy`: the target's index) and the rule goes on; otherwise the rule stops.
//!
//! Weir cannot attach a socket to a packet: it delivers the packet to the kernel's stack
//! marked with the target ([`Target`], by index in [`crate::compile::Compiled::tproxy`]),
//! where a kernel rule of weir's (`weir_dataplane::kernel`) runs the kernel's own `tproxy`
//! for that mark and a route of weir's delivers it locally. The connection keeps the
//! target ([`crate::stateful::CtExt::tproxy`]): its later packets are delivered the same
//! way, as the kernel's early demultiplexing gives an established socket's packets to it.

use crate::compile::{CTable, CValue};
use crate::eval::{value_of, Pkt, State};
use crate::socket::{SockInfo, SockQuery};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use weir_lang::ir;
use weir_wire::L3;

/// The most targets a ruleset's `tproxy` statements may name (the marks that carry them to
/// the kernel, `weir_io::inject`).
pub const MAX_TARGETS: usize = 108;

/// Where a `tproxy` statement sends: one of the values it can compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// 4 or 6; 0: either (`tproxy to :PORT` in an inet table).
    pub family: u8,
    /// The address (IPv4 in the low 32 bits); None: the input device's.
    pub addr: Option<u128>,
    /// None: the packet's destination port.
    pub port: Option<u16>,
}

impl Target {
    /// The statement as nft writes it (`tproxy ip to 198.18.0.1:3128`, `tproxy to :8080`),
    /// for the kernel's rule.
    pub fn nft(&self) -> String {
        let fam = match self.family {
            4 => " ip",
            6 => " ip6",
            _ => "",
        };
        let addr = match self.addr {
            Some(a) if self.family == 6 => format!("[{}]", Ipv6Addr::from(a)),
            Some(a) => Ipv4Addr::from(a as u32).to_string(),
            None => String::new(),
        };
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("tproxy{fam} to {addr}{port}")
    }
}

/// Compiled `tproxy`.
#[derive(Clone, Debug)]
pub struct CTproxy {
    pub family: u8,
    pub addr: Option<CValue>,
    pub port: Option<CValue>,
}

/// The values a statement's address or port can take (a constant, or a map's values).
fn values(t: &ir::Table, v: &ir::ValueExpr) -> Result<Vec<u128>, String> {
    match v {
        ir::ValueExpr::Const(c) => Ok(c.first().copied().into_iter().collect()),
        ir::ValueExpr::Map { map, .. } => {
            let set = match map {
                ir::SetRef::Named(i) => t.sets.get(*i).ok_or("no such map")?,
                ir::SetRef::Anon(s) => s,
            };
            Ok(set
                .elements
                .iter()
                .chain(set.catchall.iter())
                .filter_map(|e| match &e.data {
                    Some(ir::MapValue::Value(v)) => v.first().copied(),
                    _ => None,
                })
                .collect())
        }
        _ => Err("tproxy to a value computed from the packet (only constants and maps' values are known in advance)".into()),
    }
}

/// Every target the ruleset's `tproxy` statements can send to, in order (a named map's
/// values as they are at the load). An error names what cannot be listed.
pub fn targets(rs: &ir::Ruleset) -> Result<Vec<Target>, String> {
    let mut out: Vec<Target> = Vec::new();
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                for e in &r.exprs {
                    let ir::Expr::Tproxy(tp) = e else { continue };
                    let opt = |v: &Option<ir::ValueExpr>| -> Result<Vec<Option<u128>>, String> {
                        match v {
                            None => Ok(vec![None]),
                            Some(v) => Ok(values(t, v)?
                                .into_iter()
                                .map(|x| (x != 0).then_some(x))
                                .collect()),
                        }
                    };
                    for addr in opt(&tp.addr)? {
                        for port in opt(&tp.port)? {
                            let x = Target {
                                family: tp.family,
                                addr,
                                port: port.map(|p| p as u16),
                            };
                            if !out.contains(&x) {
                                out.push(x);
                            }
                        }
                    }
                }
            }
        }
    }
    if out.len() > MAX_TARGETS {
        return Err(format!(
            "tproxy: {} targets, at most {MAX_TARGETS}",
            out.len()
        ));
    }
    Ok(out)
}

fn ip(v6: bool, v: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(v))
    } else {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    }
}

/// Run a `tproxy` statement (`nft_tproxy_eval`): true when a transparent socket takes the
/// packet (`Meta::tproxy` set), false to stop the rule.
pub(crate) fn eval(
    targets: &[Target],
    t: &CTable,
    tp: &CTproxy,
    p: &mut Pkt,
    st: &mut State,
) -> bool {
    let pm = p.pm;
    let v6 = match pm.l3 {
        L3::Ipv4 => false,
        L3::Ipv6 => true,
        _ => return false,
    };
    if (tp.family == 4 && v6) || (tp.family == 6 && !v6) {
        return false;
    }
    if !matches!(pm.l4proto, 6 | 17) || !pm.has_ports {
        return false;
    }
    let mut val = |v: &Option<CValue>| match v {
        Some(v) => value_of(t, v, p, st).map(|x| (x != 0).then_some(x)),
        None => Some(None),
    };
    let (Some(addr), Some(port)) = (val(&tp.addr), val(&tp.port)) else {
        return false;
    };
    let target = Target {
        family: tp.family,
        addr,
        port: port.map(|p| p as u16),
    };
    let Some(index) = targets.iter().position(|x| *x == target) else {
        // (a value a named map gained after the load: the kernel has no rule for it)
        return false;
    };
    let Some(sockets) = st.sockets.as_ref() else {
        return false;
    };
    let q = SockQuery {
        proto: pm.l4proto,
        remote: (ip(v6, pm.saddr), pm.sport),
        local: (ip(v6, pm.daddr), pm.dport),
        ifindex: p.meta.iif,
    };
    // the packet's own connection
    let mut sk = sockets.0.lookup(&q).filter(|s| match pm.l4proto {
        6 => s.state != SockInfo::LISTEN,
        _ => s.state == SockInfo::ESTABLISHED || !s.wildcard,
    });
    let laddr = addr.or(p.meta.iif_addr).unwrap_or(pm.daddr);
    let listener = SockQuery {
        local: (ip(v6, laddr), target.port.unwrap_or(pm.dport)),
        ..q
    };
    let syn = pm.l4proto == 6 && pm.tcp_flags & 0x17 == 0x02;
    match sk {
        Some(s) if s.state == SockInfo::TIME_WAIT && syn => {
            // nf_tproxy_handle_time_wait: a new SYN goes to a listener when there is one
            if let Some(l) = sockets
                .0
                .lookup(&listener)
                .filter(|l| l.state == SockInfo::LISTEN)
            {
                sk = Some(l);
            }
        }
        Some(_) => {}
        None => sk = sockets.0.lookup(&listener),
    }
    if !sk.is_some_and(|s| s.transparent) {
        return false;
    }
    p.meta.tproxy = Some(index as u8);
    true
}

impl super::Stateful {
    /// The host's sockets `tproxy` and `socket` ask ([`crate::socket`]); None (the
    /// default): no packet has a socket. It stays across [`super::Stateful::reload`].
    pub fn set_sockets(&mut self, s: Option<std::sync::Arc<dyn crate::socket::Sockets>>) {
        self.eng.st.sockets = s.map(crate::socket::SocketTable);
    }

    /// The OS fingerprints `osf` asks (a `pf.os` file, [`crate::osf::OsfDb::parse`]); None
    /// (the default): none, every SYN's OS is "unknown". It stays across
    /// [`super::Stateful::reload`].
    pub fn set_osf(&mut self, db: Option<std::sync::Arc<crate::osf::OsfDb>>) {
        self.eng.st.osf = db;
    }

    /// The targets of the ruleset's `tproxy` statements, by index (`Meta::tproxy`).
    pub fn tproxy_targets(&self) -> &[Target] {
        &self.eng.rs.tproxy
    }

    /// The `tproxy` target a packet is delivered to: the one a statement gave it, or (in
    /// the original direction) its connection's.
    #[inline]
    pub fn tproxy_of(&self, pc: &super::PacketCt) -> Option<u8> {
        // (without `tproxy` statements no connection has a target: nothing read)
        if pc.tproxy.is_some() || self.eng.rs.tproxy.is_empty() {
            return pc.tproxy;
        }
        let x = match &pc.ct {
            super::CtPkt::New(p) => p.entry.ext.tproxy,
            super::CtPkt::Entry {
                id,
                dir: weir_conntrack::Dir::Original,
                ..
            } => self.ct.get(*id)?.ext.tproxy,
            _ => 0,
        };
        x.checked_sub(1)
    }

    /// After a chain whose `tproxy` statement took the packet: its connection keeps the
    /// target.
    pub(super) fn tproxy_keep(&mut self, meta: &crate::eval::Meta, pc: &mut super::PacketCt) {
        let Some(i) = meta.tproxy else { return };
        pc.tproxy = Some(i);
        match &mut pc.ct {
            super::CtPkt::New(p) => p.entry.ext.tproxy = i + 1,
            super::CtPkt::Entry { id, .. } => {
                if let Some(e) = self.ct.get_mut(*id) {
                    e.ext.tproxy = i + 1;
                }
            }
            _ => {}
        }
    }

    /// The socket a packet at `hook` belongs to, for `socket` keys (`nft_socket`: TCP and
    /// UDP at prerouting, input and output; a local packet's is its sender's).
    pub(super) fn socket_of(
        &self,
        hook: weir_lang::ir::Hook,
        pm: &weir_wire::PacketMeta,
        meta: &crate::eval::Meta,
    ) -> Option<SockInfo> {
        use weir_lang::ir::Hook;
        let s = self.eng.st.sockets.as_ref()?;
        let v6 = match pm.l3 {
            L3::Ipv4 => false,
            L3::Ipv6 => true,
            _ => return None,
        };
        if !matches!(pm.l4proto, 6 | 17) || !pm.has_ports {
            return None;
        }
        let src = (ip(v6, pm.saddr), pm.sport);
        let dst = (ip(v6, pm.daddr), pm.dport);
        let (remote, local) = match hook {
            Hook::Prerouting | Hook::Input => (src, dst),
            Hook::Output => (dst, src),
            _ => return None,
        };
        s.0.lookup(&SockQuery {
            proto: pm.l4proto,
            remote,
            local,
            ifindex: meta.iif,
        })
    }
}
