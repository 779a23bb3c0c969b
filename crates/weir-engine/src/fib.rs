//! `fib`: route lookups as the kernel's `nft_fib_ipv4` / `nft_fib_ipv6` make them, answered by
//! a routing table the caller gives ([`Fib`]).
//!
//! The engine does the kernel's part: which address is looked up (`saddr`: the route back to
//! the source, a reverse-path lookup; `daddr`: the route to the destination), with which
//! device restriction (`iif`, `oif`), the special cases (a packet looped back at prerouting,
//! `0.0.0.0` to a broadcast or local multicast address, IPv6 neighbour discovery from `::`),
//! and what the result is (`oif`, `oifname`, `type`, `check`). The table answers two
//! questions only: the route to an address ([`Fib::lookup`], `fib_lookup` /
//! `ip6_route_lookup`) and the local table's route for it ([`Fib::local`]: the host's own
//! addresses, its subnets' broadcast addresses; `inet_dev_addr_type`, `nf_ipv6_chk_addr`).
//!
//! Without a table ([`crate::stateful::Stateful::set_fib`] not called, or `State::fib`
//! empty) every lookup finds no route: `oif` 0, `oifname` "", `check` missing, `type` unspec
//! (0) — the engine knows nothing of the host's routes then.

use crate::eval::{Pkt, State};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use weir_lang::ir::{fib::*, Hook};
use weir_wire::{field::ifname_value, Field, L3};

/// Route and address types (`RTN_*`), as `fib ... type` gives them.
pub mod rtn {
    pub const UNSPEC: u8 = 0;
    pub const UNICAST: u8 = 1;
    pub const LOCAL: u8 = 2;
    pub const BROADCAST: u8 = 3;
    pub const ANYCAST: u8 = 4;
    pub const MULTICAST: u8 = 5;
    pub const BLACKHOLE: u8 = 6;
    pub const UNREACHABLE: u8 = 7;
    pub const PROHIBIT: u8 = 8;
    pub const THROW: u8 = 9;

    /// A route whose lookup fails (`fib_props[type].error`: the kernel's lookup returns
    /// an error, not the route).
    pub fn is_error(kind: u8) -> bool {
        matches!(kind, BLACKHOLE | UNREACHABLE | PROHIBIT | THROW)
    }
}

/// The `LOOPBACK_IFINDEX` the kernel looks routes up from (`flowi4_iif`, `flowi6_iif`).
pub const LOOPBACK_IFINDEX: u32 = 1;

/// One route lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FibQuery {
    /// The address looked up (the packet's source for `fib saddr`).
    pub dst: IpAddr,
    /// The flow's source (the other address of the packet; None where the kernel gives
    /// none: a multicast, limited-broadcast or zero-network IPv4 address).
    pub src: Option<IpAddr>,
    /// The flow's input device (`LOOPBACK_IFINDEX`, or the output device for `fib saddr .
    /// iif` at forward): what policy routing rules may match.
    pub iif: u32,
    /// A device the route must leave by (0: any): IPv6 link-local addresses are looked up on
    /// the packet's device (`RT6_LOOKUP_F_IFACE`).
    pub oif: u32,
    /// The packet's mark with `fib mark ...`, 0 without.
    pub mark: u32,
}

/// A route (or a local-table entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FibRoute {
    /// Its type ([`rtn`]): unicast, local, broadcast, multicast, blackhole ...
    pub kind: u8,
    /// The device it leaves by (local: the device holding the address); 0 for none
    /// (blackhole, unreachable, prohibit routes).
    pub ifindex: u32,
    pub ifname: String,
}

/// The host's routing tables as `fib` asks them. Implemented by the router (its routes and
/// ports), by the NFQUEUE worker (the kernel's routes, read by rtnetlink) and by the oracle's
/// model.
pub trait Fib: Send + Sync {
    /// The route `fib_lookup` (IPv4) / `ip6_route_lookup` (IPv6) finds for `q.dst`: the
    /// local table first (the host's addresses: `LOCAL`; its subnets' broadcast addresses:
    /// `BROADCAST`), then the main table by longest prefix. None: no route matches.
    fn lookup(&self, q: &FibQuery) -> Option<FibRoute>;
    /// The local table's entry for `addr` (`LOCAL` for an address of the host, on the device
    /// holding it; `BROADCAST` for a subnet's broadcast address); None when it has none.
    fn local(&self, addr: IpAddr) -> Option<FibRoute>;
}

/// A [`Fib`] as the engine's state keeps it (shared by the workers; `Debug` for the state).
#[derive(Clone)]
pub struct FibTable(pub Arc<dyn Fib>);

impl std::fmt::Debug for FibTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FibTable")
    }
}

/// A device as the hook has it: (index, name as a field value).
type Dev = Option<(u32, u128)>;

/// `nft_fib_store_result`. With `present`, whether a device was found (the kernel's `!!index`:
/// every device it has has an index; weir's may not know it).
fn store(flags: u8, result: u8, dev: Dev) -> u128 {
    let (index, name) = dev.unwrap_or((0, 0));
    if flags & F_PRESENT != 0 {
        return u128::from(dev.is_some());
    }
    match result {
        RESULT_OIFNAME => name,
        _ => index as u128,
    }
}

fn ip(l3: L3, v: u128) -> IpAddr {
    if l3 == L3::Ipv4 {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    }
}

/// Evaluate `fib` (`flags`, `result` as [`weir_lang::ir::Source::Fib`]) on a packet at the
/// hook of the chain running, with the state's table; None breaks the rule (not IP).
pub(crate) fn eval(st: &State, flags: u8, result: u8, p: &Pkt) -> Option<u128> {
    let table = st.fib.as_ref().map(|f| &*f.0);
    let hook = st.hook.unwrap_or(Hook::Prerouting);
    let l3 = p.pm.l3;
    let (sf, df) = match l3 {
        L3::Ipv4 => (Field::IpSaddr, Field::IpDaddr),
        L3::Ipv6 => (Field::Ip6Saddr, Field::Ip6Daddr),
        _ => return None,
    };
    let saddr = p.field(sf)?;
    let daddr = p.field(df)?;
    let m = &p.meta;
    let dev = |i: u32, n: u128| (i != 0 || n != 0).then_some((i, n));
    let in_dev = dev(m.iif, m.iifname);
    let out_dev = dev(m.oif, m.oifname);
    // the device the lookup is restricted to
    let restrict = if flags & F_IIF != 0 {
        in_dev
    } else if flags & F_OIF != 0 {
        out_dev
    } else {
        None
    };
    // skb->dev: the output device once the packet is routed out
    let skb_dev = match hook {
        Hook::Output | Hook::Postrouting | Hook::Egress => out_dev,
        _ => in_dev,
    };
    let mark = if flags & F_MARK != 0 { m.mark } else { 0 };
    let in_loopback = m.iiftype == 772 || (m.iiftype == 0 && m.iifname == ifname_value("lo"));
    let v4 = l3 == L3::Ipv4;
    let (dst, src) = if flags & F_DADDR != 0 {
        (daddr, saddr)
    } else {
        (saddr, daddr)
    };
    if result == RESULT_ADDRTYPE {
        let Some(t) = table else {
            return Some(rtn::UNSPEC as u128);
        };
        let kind = if v4 {
            addr_type4(t, dst as u32, restrict)
        } else {
            addr_type6(t, dst, src, restrict, skb_dev, mark)
        };
        return Some(kind as u128);
    }
    // nft_fib_is_loopback (no PACKET_LOOPBACK here: a looped-back packet comes in on `lo`);
    // netdev ingress is hook 0, as prerouting
    let early = matches!(hook, Hook::Prerouting | Hook::Ingress);
    if early && in_loopback {
        return Some(store(flags, result, in_dev));
    }
    let out = |d: Dev| Some(store(flags, result, d));
    let Some(t) = table else {
        return out(None);
    };
    if v4 {
        let (s, d) = (saddr as u32, daddr as u32);
        if s >> 24 == 0 && (d == u32::MAX || d >> 8 == 0xe0_00_00) {
            // 0.0.0.0 to 255.255.255.255 or 224.0.0.0/24 (DHCP, IGMP): skb->dev
            return out(skb_dev);
        }
        let flow_iif = if flags & F_SADDR != 0 && flags & F_IIF != 0 && hook == Hook::Forward {
            out_dev.map_or(0, |d| d.0)
        } else {
            LOOPBACK_IFINDEX
        };
        let q = FibQuery {
            dst: ip(l3, dst),
            src: get_saddr4(src as u32).map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            iif: flow_iif,
            oif: 0,
            mark,
        };
        let Some(r) = t.lookup(&q) else {
            return out(None);
        };
        if r.kind == rtn::LOCAL || rtn::is_error(r.kind) {
            return out(None);
        }
        return match restrict {
            None => out(route_dev(&r)),
            Some(d) if same_dev(d, &r) => out(Some(d)),
            Some(_) => out(None),
        };
    }
    // IPv6
    if early && p.pm.l4proto == 58 && saddr == 0 && link_local(daddr) {
        return out(in_dev);
    }
    let q = query6(dst, src, restrict, skb_dev, mark);
    let Some(r) = t.lookup(&q) else {
        return out(None);
    };
    if matches!(r.kind, rtn::LOCAL | rtn::ANYCAST) || rtn::is_error(r.kind) {
        return out(None);
    }
    match restrict {
        Some(d) if !same_dev(d, &r) => out(None),
        _ => out(route_dev(&r)),
    }
}

fn route_dev(r: &FibRoute) -> Dev {
    (r.ifindex != 0 || !r.ifname.is_empty()).then(|| (r.ifindex, ifname_value(&r.ifname)))
}

/// Whether the route leaves by the device: by index when both are known, else by name.
fn same_dev(d: (u32, u128), r: &FibRoute) -> bool {
    if d.0 != 0 && r.ifindex != 0 {
        d.0 == r.ifindex
    } else {
        d.1 != 0 && d.1 == ifname_value(&r.ifname)
    }
}

/// `get_saddr`: no flow source from a multicast, limited-broadcast or zero-network address.
fn get_saddr4(a: u32) -> Option<u32> {
    let bad = a >> 28 == 0xe || a == u32::MAX || a >> 24 == 0;
    (!bad).then_some(a)
}

/// `ipv6_addr_type(a) & IPV6_ADDR_LINKLOCAL`: fe80::/10, and multicast of link-local scope
/// (ffX2::, as the solicited-node addresses of neighbour discovery).
fn link_local(a: u128) -> bool {
    (a >> 118) == 0x3fa || ((a >> 120) == 0xff && (a >> 112) & 0xf == 2)
}

/// `nft_fib6_flowi_init`: a link-local address is looked up on the device (the given one,
/// else the packet's, `skb->dev`).
fn query6(dst: u128, src: u128, restrict: Dev, skb_dev: Dev, mark: u32) -> FibQuery {
    let oif = if link_local(dst) {
        restrict.or(skb_dev).map_or(0, |d| d.0)
    } else {
        0
    };
    FibQuery {
        dst: IpAddr::V6(Ipv6Addr::from(dst)),
        src: Some(IpAddr::V6(Ipv6Addr::from(src))),
        iif: LOOPBACK_IFINDEX,
        oif,
        mark,
    }
}

/// `inet_dev_addr_type`: broadcast for 0.0.0.0 and 255.255.255.255, multicast for
/// 224.0.0.0/4, else the local table's type when its entry is on `dev` (or no device is
/// given), else unicast.
fn addr_type4(t: &dyn Fib, a: u32, dev: Dev) -> u8 {
    // (`ipv4_is_zeronet` is `addr == 0` since Linux 5.3 made 0.0.0.0/8 routable: the
    // kernel here says unicast for 0.0.0.50)
    if a == 0 || a == u32::MAX {
        return rtn::BROADCAST;
    }
    if a >> 28 == 0xe {
        return rtn::MULTICAST;
    }
    match t.local(IpAddr::V4(Ipv4Addr::from(a))) {
        Some(r) if dev.is_none_or(|d| same_dev(d, &r)) => r.kind,
        _ => rtn::UNICAST,
    }
}

/// `__nft_fib6_eval_type`: local when the address is the given device's; the route's error
/// (blackhole, prohibit, throw, unreachable: also no route); anycast; local (no device given);
/// else multicast or unicast by the address, unspec for `::`.
fn addr_type6(t: &dyn Fib, dst: u128, src: u128, dev: Dev, skb_dev: Dev, mark: u32) -> u8 {
    let addr = IpAddr::V6(Ipv6Addr::from(dst));
    let mut ret = rtn::UNSPEC;
    if let Some(d) = dev {
        if t.local(addr)
            .is_some_and(|r| r.kind == rtn::LOCAL && same_dev(d, &r))
        {
            ret = rtn::LOCAL;
        }
    }
    let Some(r) = t.lookup(&query6(dst, src, dev, skb_dev, mark)) else {
        return rtn::UNREACHABLE;
    };
    if rtn::is_error(r.kind) {
        return r.kind;
    }
    if r.kind == rtn::ANYCAST {
        ret = rtn::ANYCAST;
    } else if dev.is_none() && r.kind == rtn::LOCAL {
        ret = rtn::LOCAL;
    }
    if ret != rtn::UNSPEC {
        return ret;
    }
    // ipv6_addr_type: neither unicast nor multicast are `::` and IPv4-mapped addresses
    if dst >> 120 == 0xff {
        rtn::MULTICAST
    } else if dst == 0 || dst >> 32 == 0xffff {
        rtn::UNSPEC
    } else {
        rtn::UNICAST
    }
}

/// `rt mtu` (nft's `NFT_RT_TCPMSS`, the kernel's `get_tcpmss`): the TCP MSS a route of MTU
/// `mtu` carries, less the IP and TCP headers (40 bytes, 60 for IPv6); 536 when that leaves
/// nothing or the MTU is out of range.
pub fn tcp_mss(mtu: usize, v6: bool) -> u16 {
    let minlen = if v6 { 60 } else { 40 };
    if mtu <= minlen || mtu > 0xffff {
        536
    } else {
        (mtu - minlen) as u16
    }
}
