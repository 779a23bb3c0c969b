//! The routing environment `fib` expressions are evaluated in: a model host's devices,
//! addresses and routes ([`FibModel`], a value: a kernel lab can configure `ip addr` / `ip
//! route` from it), the tables the kernel derives from them (the local table: the addresses,
//! their subnets' broadcast addresses, IPv6 multicast and subnet-router anycast; the main
//! table: the connected subnets and the routes), and `fib` as `nft_fib4_eval`,
//! `nft_fib4_eval_type`, `nft_fib6_eval` and `__nft_fib6_eval_type` evaluate it on the packet's
//! bytes ([`eval`]). The model also answers weir's engine ([`weir_engine::Fib`]), so both
//! sides of the oracle look routes up in the same tables.

use super::interp::{Env, Pktinfo, ETH};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use weir_engine::fib::rtn;
use weir_engine::{FibQuery, FibRoute};
use weir_lang::ir::Hook;

/// A device: `ip link` (index, name; `lo` is the loopback device).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FibDev {
    pub index: u32,
    pub name: String,
    pub loopback: bool,
}

/// An address on a device: `ip addr add ADDR/LEN dev DEV`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FibAddr {
    pub addr: IpAddr,
    pub prefix_len: u8,
    pub dev: u32,
}

/// A route: `ip route add [TYPE] DST/LEN [via GW] [dev DEV]` (main table; `dev` 0 and no
/// gateway for blackhole, unreachable and prohibit routes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FibRouteSpec {
    pub dst: IpAddr,
    pub prefix_len: u8,
    /// [`rtn`]: unicast, blackhole, unreachable, prohibit.
    pub kind: u8,
    pub dev: u32,
    pub via: Option<IpAddr>,
}

/// A model host's routing: devices, addresses, routes; IPv6 forwarding on (a router: the
/// kernel adds subnet-router anycast addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FibModel {
    pub devs: Vec<FibDev>,
    pub addrs: Vec<FibAddr>,
    pub routes: Vec<FibRouteSpec>,
    pub ipv6_forwarding: bool,
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// A route of [`FibModel::from_lists`]: destination, prefix length, [`rtn`] kind, device
/// index (0: none), gateway.
pub type RouteRow<'a> = (&'a str, u8, u8, u32, Option<&'a str>);

impl FibModel {
    /// A model from plain lists: devices (index, name; index 1 is the loopback device),
    /// addresses (address, prefix length, device index), routes ([`RouteRow`]); IPv6
    /// forwarding on. Panics on an address that does not parse (the lists are the caller's
    /// constants).
    pub fn from_lists(
        devs: &[(u32, &str)],
        addrs: &[(&str, u8, u32)],
        routes: &[RouteRow<'_>],
    ) -> FibModel {
        FibModel {
            devs: devs
                .iter()
                .map(|&(index, name)| FibDev {
                    index,
                    name: name.into(),
                    loopback: index == 1,
                })
                .collect(),
            addrs: addrs
                .iter()
                .map(|&(a, prefix_len, dev)| FibAddr {
                    addr: ip(a),
                    prefix_len,
                    dev,
                })
                .collect(),
            routes: routes
                .iter()
                .map(|&(d, prefix_len, kind, dev, via)| FibRouteSpec {
                    dst: ip(d),
                    prefix_len,
                    kind,
                    dev,
                    via: via.map(ip),
                })
                .collect(),
            ipv6_forwarding: true,
        }
    }
}

impl Default for FibModel {
    fn default() -> FibModel {
        FibModel::from_lists(
            &[(1, "lo"), (2, "eth0"), (3, "eth1")],
            &[
                ("127.0.0.1", 8, 1),
                ("::1", 128, 1),
                ("10.0.0.1", 24, 2),
                ("2001:db8:a::1", 64, 2),
                ("fe80::2", 64, 2),
                ("192.168.1.1", 24, 3),
                ("2001:db8:b::1", 64, 3),
                ("fe80::3", 64, 3),
            ],
            &[
                ("172.16.0.0", 12, rtn::UNICAST, 2, Some("10.0.0.254")),
                (
                    "2001:db8:100::",
                    40,
                    rtn::UNICAST,
                    2,
                    Some("2001:db8:a::fe"),
                ),
                ("0.0.0.0", 0, rtn::UNICAST, 3, Some("192.168.1.254")),
                ("::", 0, rtn::UNICAST, 3, Some("2001:db8:b::fe")),
                ("203.0.113.0", 24, rtn::BLACKHOLE, 0, None),
                ("2001:db8:dead::", 48, rtn::BLACKHOLE, 0, None),
                ("198.51.100.0", 24, rtn::PROHIBIT, 0, None),
                ("2001:db8:beef::", 48, rtn::PROHIBIT, 0, None),
                ("192.0.2.0", 24, rtn::UNREACHABLE, 0, None),
                ("2001:db8:bad::", 48, rtn::UNREACHABLE, 0, None),
            ],
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub dst: IpAddr,
    pub len: u8,
    pub kind: u8,
    pub dev: u32,
}

fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(a) => (u32::from(a) as u128, 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

fn mask(len: u8, w: u8) -> u128 {
    let full = if w == 32 { u32::MAX as u128 } else { u128::MAX };
    full & !full.checked_shr(len as u32).unwrap_or(0)
}

fn from_bits(v: u128, w: u8) -> IpAddr {
    if w == 32 {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    }
}

/// The network of `a/len`.
pub fn network(a: IpAddr, len: u8) -> IpAddr {
    let (v, w) = bits(a);
    from_bits(v & mask(len, w), w)
}

fn covers(e: &Entry, a: IpAddr) -> bool {
    let ((n, w), (x, w2)) = (bits(e.dst), bits(a));
    w == w2 && (n ^ x) & mask(e.len, w) == 0
}

impl FibModel {
    /// The `ip` commands that give a network namespace this routing (its devices named and
    /// up are the caller's; `lo`'s own 127.0.0.1/8 and ::1 are there already): addresses
    /// (`nodad`: usable at once), then routes; with IPv6 forwarding, its sysctl.
    pub fn ip_commands(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.addrs {
            if self.loopback(a.dev) {
                continue;
            }
            let nodad = if a.addr.is_ipv6() { " nodad" } else { "" };
            out.push(format!(
                "ip addr add {}/{} dev {}{nodad}",
                a.addr,
                a.prefix_len,
                self.dev_name(a.dev)
            ));
        }
        for r in &self.routes {
            let fam = if r.dst.is_ipv6() { "-6 " } else { "" };
            let kind = match r.kind {
                rtn::BLACKHOLE => "blackhole ",
                rtn::UNREACHABLE => "unreachable ",
                rtn::PROHIBIT => "prohibit ",
                rtn::THROW => "throw ",
                _ => "",
            };
            let mut c = format!("ip {fam}route add {kind}{}/{}", r.dst, r.prefix_len);
            if let Some(v) = r.via {
                c += &format!(" via {v}");
            }
            if r.dev != 0 {
                c += &format!(" dev {}", self.dev_name(r.dev));
            }
            out.push(c);
        }
        if self.ipv6_forwarding {
            out.push("sysctl -w net.ipv6.conf.all.forwarding=1".into());
        }
        out
    }

    pub fn dev_name(&self, index: u32) -> String {
        self.devs
            .iter()
            .find(|d| d.index == index)
            .map_or_else(String::new, |d| d.name.clone())
    }

    fn loopback(&self, index: u32) -> bool {
        self.devs.iter().any(|d| d.index == index && d.loopback)
    }

    /// The local table (`ip route show table local`): each address (on the loopback device,
    /// its whole prefix), IPv4 subnets' broadcast addresses (prefixes under /31), IPv6
    /// multicast (ff00::/8) on each other device, and with forwarding each IPv6 subnet's
    /// router anycast address.
    pub fn local_table(&self) -> Vec<Entry> {
        let mut t = Vec::new();
        for a in &self.addrs {
            let (v, w) = bits(a.addr);
            let lo = self.loopback(a.dev);
            t.push(Entry {
                dst: a.addr,
                len: w,
                kind: rtn::LOCAL,
                dev: a.dev,
            });
            if lo && a.prefix_len < w {
                t.push(Entry {
                    dst: network(a.addr, a.prefix_len),
                    len: a.prefix_len,
                    kind: rtn::LOCAL,
                    dev: a.dev,
                });
            }
            if w == 32 && a.prefix_len < 31 {
                t.push(Entry {
                    dst: from_bits(v | (!mask(a.prefix_len, 32) & u32::MAX as u128), 32),
                    len: 32,
                    kind: rtn::BROADCAST,
                    dev: a.dev,
                });
            }
            if w == 128 && !lo && self.ipv6_forwarding && a.prefix_len < 127 {
                t.push(Entry {
                    dst: network(a.addr, a.prefix_len),
                    len: 128,
                    kind: rtn::ANYCAST,
                    dev: a.dev,
                });
            }
        }
        for d in self.devs.iter().filter(|d| !d.loopback) {
            t.push(Entry {
                dst: ip("ff00::"),
                len: 8,
                kind: rtn::MULTICAST,
                dev: d.index,
            });
        }
        t
    }

    /// The main table: each address's connected subnet (not the loopback device's), then the
    /// routes.
    pub fn main_table(&self) -> Vec<Entry> {
        let mut t = Vec::new();
        for a in self.addrs.iter().filter(|a| !self.loopback(a.dev)) {
            let e = Entry {
                dst: network(a.addr, a.prefix_len),
                len: a.prefix_len,
                kind: rtn::UNICAST,
                dev: a.dev,
            };
            if !t.contains(&e) {
                t.push(e);
            }
        }
        for r in &self.routes {
            t.push(Entry {
                dst: r.dst,
                len: r.prefix_len,
                kind: r.kind,
                dev: r.dev,
            });
        }
        t
    }

    fn best(&self, t: &[Entry], a: IpAddr, oif: u32) -> Option<Entry> {
        let mut best: Option<Entry> = None;
        for e in t {
            if covers(e, a)
                && (oif == 0 || e.dev == oif)
                && !matches!(best, Some(b) if b.len >= e.len)
            {
                best = Some(*e);
            }
        }
        best
    }

    fn route(&self, e: Entry) -> FibRoute {
        FibRoute {
            kind: e.kind,
            ifindex: e.dev,
            ifname: self.dev_name(e.dev),
        }
    }
}

impl weir_engine::Fib for FibModel {
    fn lookup(&self, q: &FibQuery) -> Option<FibRoute> {
        let e = self
            .best(&self.local_table(), q.dst, q.oif)
            .or_else(|| self.best(&self.main_table(), q.dst, q.oif))?;
        Some(self.route(e))
    }

    fn local(&self, addr: IpAddr) -> Option<FibRoute> {
        self.best(&self.local_table(), addr, 0)
            .map(|e| self.route(e))
    }
}

/// The result register's bytes (`nft_fib_store_result`): the device's index (host order),
/// its name (IFNAMSIZ, NUL-padded), or with `present` one byte, 1 when there is a device.
fn store(model: &FibModel, result: &str, present: bool, dev: u32) -> Vec<u8> {
    if present {
        return vec![(dev != 0) as u8];
    }
    if result == "oifname" {
        let mut n = [0u8; 16];
        for (i, c) in model.dev_name(dev).bytes().take(15).enumerate() {
            n[i] = c;
        }
        return n.to_vec();
    }
    dev.to_le_bytes().to_vec()
}

/// `fib FLAGS RESULT [present]` on the frame (`flags`: the words between `fib` and the result:
/// saddr, daddr, mark, iif, oif), as the kernel evaluates it for the packet's family; the
/// input device is eth0 (2) and the output device eth1 (3) where the hook has them. None
/// breaks (no IP header).
#[allow(clippy::too_many_arguments)]
pub fn eval(
    model: &FibModel,
    env: &Env,
    flags: &[String],
    result: &str,
    present: bool,
    frame: &[u8],
    info: &Pktinfo,
    mark: u32,
) -> Option<Vec<u8>> {
    let has = |f: &str| flags.iter().any(|x| x == f);
    let v4 = info.ethertype == 0x0800;
    let in_dev = if env.has_in() { 2 } else { 0 };
    let out_dev = if env.has_out() { 3 } else { 0 };
    let dev = if has("iif") {
        in_dev
    } else if has("oif") {
        out_dev
    } else {
        0
    };
    // skb->dev: the output device once the packet is routed out
    let skb_dev = match env.hook {
        Hook::Output | Hook::Postrouting | Hook::Egress => out_dev,
        _ => in_dev,
    };
    let mark = if has("mark") { mark } else { 0 };
    let (saddr, daddr) = if v4 {
        let h = frame.get(ETH..ETH + 20)?;
        (
            IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
            IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
        )
    } else if info.ethertype == 0x86dd {
        let h = frame.get(ETH..ETH + 40)?;
        let a = |o: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&h[o..o + 16]).unwrap()));
        (a(8), a(24))
    } else {
        return None;
    };
    let (dst, src) = if has("daddr") {
        (daddr, saddr)
    } else {
        (saddr, daddr)
    };
    let t = |q: FibQuery| weir_engine::Fib::lookup(model, &q);
    if result == "type" {
        let v = if v4 {
            type4(model, dst, dev)
        } else {
            type6(model, dst, src, dev, skb_dev, mark)
        };
        return Some((v as u32).to_le_bytes().to_vec());
    }
    let out = |d: u32| Some(store(model, result, present, d));
    // nft_hook(pkt) == NF_INET_PRE_ROUTING: netdev ingress is hook 0 too
    let pre = matches!(env.hook, Hook::Prerouting | Hook::Ingress);
    if v4 {
        // nft_fib_is_loopback at prerouting: the input device is eth0, not a loopback one
        if pre && model.loopback(in_dev) {
            return out(in_dev);
        }
        let (s, d) = (bits(saddr).0 as u32, bits(daddr).0 as u32);
        if s >> 24 == 0 && (d == u32::MAX || d >> 8 == 0xe0_0000) {
            return out(skb_dev);
        }
        let iif = if has("saddr") && has("iif") && env.hook == Hook::Forward {
            out_dev
        } else {
            1
        };
        let s4 = bits(src).0 as u32;
        let flow_src = (!(s4 >> 28 == 0xe || s4 == u32::MAX || s4 >> 24 == 0)).then_some(src);
        let Some(r) = t(FibQuery {
            dst,
            src: flow_src,
            iif,
            oif: 0,
            mark,
        }) else {
            return out(0);
        };
        // fib_lookup fails for blackhole, unreachable, prohibit and throw routes; a local
        // route gives no device
        if rtn::is_error(r.kind) || r.kind == rtn::LOCAL {
            return out(0);
        }
        return match dev {
            0 => out(r.ifindex),
            d if d == r.ifindex => out(d),
            _ => out(0),
        };
    }
    let ll = |a: IpAddr| v6_link_local(bits(a).0);
    if pre
        && (model.loopback(in_dev)
            || (info.l4.map(|l| l.1) == Some(58) && bits(saddr).0 == 0 && ll(daddr)))
    {
        return out(in_dev);
    }
    let oif = if ll(dst) {
        if dev != 0 {
            dev
        } else {
            skb_dev
        }
    } else {
        0
    };
    let Some(r) = t(FibQuery {
        dst,
        src: Some(src),
        iif: 1,
        oif,
        mark,
    }) else {
        return out(0);
    };
    if rtn::is_error(r.kind) || matches!(r.kind, rtn::LOCAL | rtn::ANYCAST) {
        return out(0);
    }
    if dev != 0 && dev != r.ifindex {
        return out(0);
    }
    out(r.ifindex)
}

/// `inet_dev_addr_type(net, dev, addr)`.
fn type4(model: &FibModel, a: IpAddr, dev: u32) -> u8 {
    let v = bits(a).0 as u32;
    // (`ipv4_is_zeronet` is `addr == 0` since Linux 5.3 made 0.0.0.0/8 routable: the
    // kernel here says unicast for 0.0.0.50)
    if v == 0 || v == u32::MAX {
        return rtn::BROADCAST;
    }
    if v >> 28 == 0xe {
        return rtn::MULTICAST;
    }
    match model.best(&model.local_table(), a, 0) {
        Some(e) if dev == 0 || dev == e.dev => e.kind,
        _ => rtn::UNICAST,
    }
}

/// `__nft_fib6_eval_type`.
fn type6(model: &FibModel, dst: IpAddr, src: IpAddr, dev: u32, skb_dev: u32, mark: u32) -> u8 {
    let v = bits(dst).0;
    let mut ret = rtn::UNSPEC;
    // nf_ipv6_chk_addr(daddr, dev, strict)
    if dev != 0 && model.addrs.iter().any(|a| a.addr == dst && a.dev == dev) {
        ret = rtn::LOCAL;
    }
    let oif = if v6_link_local(v) {
        if dev != 0 {
            dev
        } else {
            skb_dev
        }
    } else {
        0
    };
    let q = FibQuery {
        dst,
        src: Some(src),
        iif: 1,
        oif,
        mark,
    };
    // no route: ip6_null_entry, -ENETUNREACH
    let Some(r) = weir_engine::Fib::lookup(model, &q) else {
        return rtn::UNREACHABLE;
    };
    if rtn::is_error(r.kind) {
        return r.kind;
    }
    if r.kind == rtn::ANYCAST {
        ret = rtn::ANYCAST;
    } else if dev == 0 && r.kind == rtn::LOCAL {
        ret = rtn::LOCAL;
    }
    if ret != 0 {
        return ret;
    }
    // __ipv6_addr_type: IPV6_ADDR_ANY and IPV6_ADDR_MAPPED are not IPV6_ADDR_UNICAST
    let mapped = v >> 32 == 0xffff;
    if v >> 120 == 0xff {
        rtn::MULTICAST
    } else if v == 0 || mapped {
        rtn::UNSPEC
    } else {
        rtn::UNICAST
    }
}

/// `__ipv6_addr_type(a) & IPV6_ADDR_LINKLOCAL`: fe80::/10 (`0xFE800000` under `0xFFC00000`),
/// and multicast whose scope (`s6_addr[1] & 0x0f`) is 2.
fn v6_link_local(v: u128) -> bool {
    let b = v.to_be_bytes();
    (b[0] == 0xfe && b[1] & 0xc0 == 0x80) || (b[0] == 0xff && b[1] & 0x0f == 2)
}

/// Addresses of the family to try for a looked-up address: the model's own (local,
/// broadcast, anycast), one in each subnet and route, multicast, zero and limited broadcast,
/// loopback, link-local, and one only the default route covers.
pub fn candidates(model: &FibModel, v6: bool, salt: u64) -> Vec<IpAddr> {
    let w = if v6 { 128 } else { 32 };
    let mut out = Vec::new();
    let fam = |a: &IpAddr| a.is_ipv6() == v6;
    for e in model.local_table().iter().chain(&model.main_table()) {
        if !fam(&e.dst) {
            continue;
        }
        out.push(e.dst);
        if e.len < w {
            // a host inside: the network plus a small salted number
            let (n, _) = bits(e.dst);
            let host = (salt % 200 + 5) as u128 & !mask(e.len, w);
            out.push(from_bits(n | host.max(1), w));
        }
    }
    let extra: &[&str] = if v6 {
        &[
            "::",
            "::1",
            "fe80::99",
            "ff02::1",
            "ff02::1:ff00:1",
            "ff05::2",
            "::ffff:10.0.0.1",
            "2001:db8:77::9",
        ]
    } else {
        &[
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "239.1.2.3",
            "127.0.0.9",
            "8.8.4.4",
        ]
    };
    out.extend(extra.iter().map(|s| ip(s)));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_engine::Fib;

    #[test]
    fn the_default_model_as_commands_and_tables() {
        let m = FibModel::default();
        let c = m.ip_commands();
        assert!(
            c.contains(&"ip addr add 10.0.0.1/24 dev eth0".to_string()),
            "{c:?}"
        );
        assert!(c.contains(&"ip route add 172.16.0.0/12 via 10.0.0.254 dev eth0".to_string()));
        assert!(c.contains(&"ip -6 route add blackhole 2001:db8:dead::/48".to_string()));
        assert!(!c.iter().any(|l| l.contains("127.0.0.1")));
        let q = |d: &str| FibQuery {
            dst: d.parse().unwrap(),
            src: None,
            iif: 1,
            oif: 0,
            mark: 0,
        };
        let kind = |d: &str| m.lookup(&q(d)).map(|r| (r.kind, r.ifindex));
        assert_eq!(kind("10.0.0.1"), Some((rtn::LOCAL, 2)));
        assert_eq!(kind("10.0.0.255"), Some((rtn::BROADCAST, 2)));
        assert_eq!(kind("10.0.0.9"), Some((rtn::UNICAST, 2)));
        assert_eq!(kind("172.20.1.1"), Some((rtn::UNICAST, 2)));
        assert_eq!(kind("8.8.8.8"), Some((rtn::UNICAST, 3)));
        assert_eq!(kind("203.0.113.7"), Some((rtn::BLACKHOLE, 0)));
        assert_eq!(kind("127.3.3.3"), Some((rtn::LOCAL, 1)));
        assert_eq!(kind("2001:db8:a::"), Some((rtn::ANYCAST, 2)));
        assert_eq!(kind("ff02::1"), Some((rtn::MULTICAST, 2)));
        assert_eq!(kind("2001:db8:bad::1"), Some((rtn::UNREACHABLE, 0)));
        // a link-local address on the device asked for
        let mut ll = q("fe80::77");
        ll.oif = 3;
        assert_eq!(m.lookup(&ll).map(|r| r.ifindex), Some(3));
    }
}
