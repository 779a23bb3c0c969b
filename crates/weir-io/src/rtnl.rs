//! rtnetlink: the kernel's devices, addresses and routes (`RTM_GETLINK`, `RTM_GETADDR`,
//! `RTM_GETROUTE` dumps, [`dump`]), and a socket subscribed to their changes ([`Watch`]:
//! `RTMGRP_LINK`, `RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`, `RTMGRP_IPV4_ROUTE`,
//! `RTMGRP_IPV6_ROUTE`). Only the facts: what a route lookup makes of them is the caller's
//! (`weir_dataplane::kernel_fib`).

use crate::nfqueue::attrs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const IFLA_IFNAME: u16 = 3;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_PRIORITY: u16 = 6;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const IFF_LOOPBACK: u32 = 0x8;
/// The groups [`Watch`] listens to.
pub const GROUPS: u32 = 0x1 | 0x10 | 0x40 | 0x100 | 0x400;

/// A device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub loopback: bool,
}

/// An address on a device (`AF_INET` 2 or `AF_INET6` 10; IPv4 in the low 32 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrEntry {
    pub family: u8,
    pub index: u32,
    pub addr: u128,
    pub prefix_len: u8,
}

/// A route of any table (`RTN_*` type; the first next hop's device of a multipath route).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteEntry {
    pub family: u8,
    pub table: u32,
    pub kind: u8,
    pub dst: u128,
    pub dst_len: u8,
    pub oif: u32,
    pub priority: u32,
}

/// What the kernel has now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub links: Vec<Link>,
    pub addrs: Vec<AddrEntry>,
    pub routes: Vec<RouteEntry>,
}

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn ne32(d: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(d.get(..4)?.try_into().ok()?))
}

/// An address attribute's bytes as a field value (IPv4 in the low 32 bits).
fn addr_bits(d: &[u8]) -> Option<u128> {
    match d.len() {
        4 => Some(u32::from_be_bytes(d.try_into().ok()?) as u128),
        16 => Some(u128::from_be_bytes(d.try_into().ok()?)),
        _ => None,
    }
}

/// An `RTM_NEWLINK` body (`struct ifinfomsg` and attributes).
pub fn parse_link(b: &[u8]) -> Option<Link> {
    let index = ne32(b.get(4..8)?)?;
    let flags = ne32(b.get(8..12)?)?;
    let name = attrs(b.get(16..)?)
        .find(|(t, _)| *t == IFLA_IFNAME)
        .map(|(_, d)| {
            let n = d.iter().position(|&c| c == 0).unwrap_or(d.len());
            String::from_utf8_lossy(&d[..n]).into_owned()
        })?;
    Some(Link {
        index,
        name,
        loopback: flags & IFF_LOOPBACK != 0,
    })
}

/// An `RTM_NEWADDR` body (`struct ifaddrmsg` and attributes): IPv4's local address (the
/// peer's on a point-to-point link is `IFA_ADDRESS`), IPv6's address.
pub fn parse_addr(b: &[u8]) -> Option<AddrEntry> {
    let (family, prefix_len) = (*b.first()?, *b.get(1)?);
    let index = ne32(b.get(4..8)?)?;
    let (mut local, mut address) = (None, None);
    for (t, d) in attrs(b.get(8..)?) {
        match t {
            IFA_LOCAL => local = addr_bits(d),
            IFA_ADDRESS => address = addr_bits(d),
            _ => {}
        }
    }
    Some(AddrEntry {
        family,
        index,
        addr: local.or(address)?,
        prefix_len,
    })
}

/// An `RTM_NEWROUTE` body (`struct rtmsg` and attributes).
pub fn parse_route(b: &[u8]) -> Option<RouteEntry> {
    let mut r = RouteEntry {
        family: *b.first()?,
        dst_len: *b.get(1)?,
        table: *b.get(4)? as u32,
        kind: *b.get(7)?,
        dst: 0,
        oif: 0,
        priority: 0,
    };
    for (t, d) in attrs(b.get(12..)?) {
        match t {
            RTA_DST => r.dst = addr_bits(d)?,
            RTA_OIF => r.oif = ne32(d)?,
            RTA_PRIORITY => r.priority = ne32(d)?,
            RTA_TABLE => r.table = ne32(d)?,
            // struct rtnexthop: len u16, flags u8, hops u8, ifindex i32
            RTA_MULTIPATH if r.oif == 0 => r.oif = ne32(d.get(4..8)?)?,
            _ => {}
        }
    }
    Some(r)
}

/// Messages of a datagram: (type, body).
fn messages(mut m: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    std::iter::from_fn(move || {
        if m.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32::from_ne_bytes(m[0..4].try_into().ok()?) as usize;
        let ty = u16::from_ne_bytes([m[4], m[5]]);
        let seq = u32::from_ne_bytes(m[8..12].try_into().ok()?);
        if len < NLMSG_HDRLEN || len > m.len() {
            return None;
        }
        let body = &m[NLMSG_HDRLEN..len];
        m = &m[len.next_multiple_of(4).min(m.len())..];
        Some((ty, seq, body))
    })
}

fn socket(groups: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the returned descriptor is checked and owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(os_err("rtnetlink socket"));
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain old data; zeroed is a valid value, then filled.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    sa.nl_groups = groups;
    // SAFETY: `sa` is a valid sockaddr_nl and its size is passed with it.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if r < 0 {
        return Err(os_err("rtnetlink bind"));
    }
    Ok(fd)
}

fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recv into a live, writable buffer of the given length on our own socket.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
        )
    };
    if n < 0 {
        return Err(os_err("rtnetlink recv"));
    }
    Ok(n as usize)
}

/// One dump: the request (`hdr`: the family header, zeroed) and every answer's body.
fn dump_one(
    fd: &OwnedFd,
    ty: u16,
    hdr_len: usize,
    seq: u32,
    out: &mut Vec<Vec<u8>>,
) -> io::Result<()> {
    let mut b = Vec::with_capacity(NLMSG_HDRLEN + hdr_len);
    b.extend_from_slice(&((NLMSG_HDRLEN + hdr_len) as u32).to_ne_bytes());
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.resize(NLMSG_HDRLEN + hdr_len, 0);
    // SAFETY: send a live buffer of the given length on our own socket.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            b.as_ptr() as *const libc::c_void,
            b.len(),
            0,
        )
    };
    if n < 0 {
        return Err(os_err("rtnetlink send"));
    }
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = recv(fd, &mut buf)?;
        for (t, s, body) in messages(&buf[..n]) {
            if s != seq {
                continue;
            }
            match t {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let err = body
                        .get(..4)
                        .map_or(0, |e| i32::from_ne_bytes(e.try_into().unwrap()));
                    if err != 0 {
                        return Err(io::Error::from_raw_os_error(-err));
                    }
                    return Ok(());
                }
                _ => out.push(body.to_vec()),
            }
        }
    }
}

/// The kernel's devices, addresses and routes (all tables, both families) now.
pub fn dump() -> io::Result<Snapshot> {
    let fd = socket(0)?;
    let mut s = Snapshot::default();
    let mut bodies = Vec::new();
    dump_one(&fd, RTM_GETLINK, 16, 1, &mut bodies)?;
    s.links = bodies.drain(..).filter_map(|b| parse_link(&b)).collect();
    dump_one(&fd, RTM_GETADDR, 8, 2, &mut bodies)?;
    s.addrs = bodies.drain(..).filter_map(|b| parse_addr(&b)).collect();
    dump_one(&fd, RTM_GETROUTE, 12, 3, &mut bodies)?;
    s.routes = bodies.drain(..).filter_map(|b| parse_route(&b)).collect();
    Ok(s)
}

/// A socket that hears the kernel's changes of devices, addresses and routes.
pub struct Watch {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Watch {
    pub fn open() -> io::Result<Watch> {
        let fd = socket(GROUPS)?;
        Ok(Watch {
            fd,
            buf: vec![0u8; 1 << 16],
        })
    }

    /// Wait up to `timeout_ms` for a change; true when one (or a lost one: the socket's
    /// buffer overran) came. What changed is not kept: the caller dumps again.
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one live pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r <= 0 {
            return Ok(false);
        }
        let mut changed = false;
        loop {
            // SAFETY: recv into a live, writable buffer; MSG_DONTWAIT drains what is there.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(changed),
                    Some(libc::ENOBUFS) => changed = true,
                    _ => return Err(e),
                }
                continue;
            }
            changed |= messages(&self.buf[..n as usize]).any(|(t, _, _)| {
                matches!(
                    t,
                    RTM_NEWLINK..=RTM_GETLINK | RTM_NEWADDR..=RTM_GETADDR | RTM_NEWROUTE..=RTM_GETROUTE
                )
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, d: &[u8]) -> Vec<u8> {
        let mut b = ((4 + d.len()) as u16).to_ne_bytes().to_vec();
        b.extend(ty.to_ne_bytes());
        b.extend(d);
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        b
    }

    #[test]
    fn messages_parse() {
        // rtmsg: AF_INET, /24, table main (254), RTN_UNICAST; dst 10.1.2.0, oif 3, metric 100
        let mut r = vec![2, 24, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0];
        r.extend(attr(RTA_DST, &[10, 1, 2, 0]));
        r.extend(attr(RTA_OIF, &3u32.to_ne_bytes()));
        r.extend(attr(RTA_PRIORITY, &100u32.to_ne_bytes()));
        let got = parse_route(&r).unwrap();
        assert_eq!(
            got,
            RouteEntry {
                family: 2,
                table: 254,
                kind: 1,
                dst: 0x0a01_0200,
                dst_len: 24,
                oif: 3,
                priority: 100
            }
        );
        // a table above 255 (RTA_TABLE), a multipath route's first hop
        let mut r = vec![10, 0, 0, 0, 252, 3, 0, 1, 0, 0, 0, 0];
        r.extend(attr(RTA_TABLE, &1000u32.to_ne_bytes()));
        let mut hop = vec![8, 0, 0, 0];
        hop.extend(7u32.to_ne_bytes());
        r.extend(attr(RTA_MULTIPATH, &hop));
        let got = parse_route(&r).unwrap();
        assert_eq!((got.table, got.oif, got.dst, got.family), (1000, 7, 0, 10));
        // ifaddrmsg: AF_INET6 /64 on 2
        let mut a = vec![10, 64, 0, 0];
        a.extend(2u32.to_ne_bytes());
        let v6: u128 = "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().into();
        a.extend(attr(IFA_ADDRESS, &v6.to_be_bytes()));
        assert_eq!(
            parse_addr(&a),
            Some(AddrEntry {
                family: 10,
                index: 2,
                addr: v6,
                prefix_len: 64
            })
        );
        // ifinfomsg: lo, index 1, IFF_LOOPBACK
        let mut l = vec![0, 0, 0, 0];
        l.extend(1u32.to_ne_bytes());
        l.extend((IFF_LOOPBACK | 1).to_ne_bytes());
        l.extend(0u32.to_ne_bytes());
        l.extend(attr(IFLA_IFNAME, b"lo\0"));
        assert_eq!(
            parse_link(&l),
            Some(Link {
                index: 1,
                name: "lo".into(),
                loopback: true
            })
        );
    }

    /// The machine's own tables: a dump works without privileges and finds `lo`.
    #[test]
    fn dump_finds_the_loopback_device() {
        let Ok(s) = dump() else {
            return; // no netlink here (a sandbox)
        };
        assert!(
            s.links.iter().any(|l| l.loopback && l.name == "lo"),
            "{s:?}"
        );
        // the local table holds 127.0.0.0/8
        assert!(
            s.routes
                .iter()
                .any(|r| r.table == 255 && r.family == 2 && r.dst == 0x7f00_0000 && r.dst_len == 8),
            "{:?}",
            s.routes
        );
    }
}
