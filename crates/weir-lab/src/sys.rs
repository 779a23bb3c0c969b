//! The few Linux system calls the kernel lab needs, wrapped safely: entering a network
//! namespace on a scratch thread, AF_PACKET and raw IP sockets, poll, receive timestamps, CPU
//! pinning. Every call returns `io::Result`; nothing here panics.
//!
//! A socket belongs to the namespace of the thread that created it, whatever thread uses it
//! later: [`in_netns`] runs a closure on a new thread that first `setns(2)`s into the
//! namespace, so the process's own threads never change namespace.

use std::fs::File;
use std::io;
use std::mem;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const SIOCGSTAMPNS: libc::c_ulong = 0x8907;
const SOL_PACKET: libc::c_int = 263;
const PACKET_AUXDATA: libc::c_int = 8;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// `struct tpacket_auxdata` (linux/if_packet.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketAuxdata {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The effective user id (0: root).
pub fn euid() -> u32 {
    unsafe { libc::geteuid() }
}

/// Run `f` on a new thread inside the network namespace `ns` (an open `/run/netns/NAME`).
pub fn in_netns<T: Send>(ns: &File, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let fd = ns.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(move || {
            check(unsafe { libc::setns(fd, libc::CLONE_NEWNET) })?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}

/// Write a sysctl through /proc/sys (the current thread's network namespace).
pub fn sysctl(path: &str, value: &str) -> io::Result<()> {
    let p = format!("/proc/sys/{}", path.replace('.', "/"));
    std::fs::write(&p, value).map_err(|e| io::Error::new(e.kind(), format!("{p}: {e}")))
}

/// Interface index of a name in the current thread's namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::other("interface name with a NUL byte"))?;
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {name}"),
        ))
    } else {
        Ok(i)
    }
}

/// Interface flags (`IFF_UP`, `IFF_RUNNING`, ...) of a name in the current namespace.
pub fn if_flags(name: &str) -> io::Result<u32> {
    let s = unsafe {
        OwnedFd::from_raw_fd(check(libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?)
    };
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (i, b) in name.bytes().take(15).enumerate() {
        req.ifr_name[i] = b as libc::c_char;
    }
    check(unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) })?;
    Ok(unsafe { req.ifr_ifru.ifru_flags } as u16 as u32)
}

fn set_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &v as *const _ as *const libc::c_void,
            mem::size_of::<libc::c_int>() as u32,
        )
    })
    .map(|_| ())
}

fn enable_stamps(fd: RawFd) {
    // The first SIOCGSTAMPNS turns receive timestamps on (and fails with ENOENT).
    let mut ts: libc::timespec = unsafe { mem::zeroed() };
    unsafe { libc::ioctl(fd, SIOCGSTAMPNS, &mut ts) };
}

/// An AF_PACKET socket bound to `ifname` (current namespace) for every EtherType, that does not
/// see its own transmissions. Non-blocking.
pub fn packet_socket(ifname: &str) -> io::Result<OwnedFd> {
    let idx = ifindex(ifname)?;
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    let fd = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            proto,
        )
    })?;
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = idx as i32;
    check(unsafe {
        libc::bind(
            fd,
            &sll as *const _ as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    })?;
    set_int(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
    // the VLAN tag a device took off into the packet's metadata comes as auxiliary data
    // ([`recv_frame`] puts it back)
    set_int(fd, SOL_PACKET, PACKET_AUXDATA, 1)?;
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20)?;
    enable_stamps(fd);
    Ok(s)
}

/// A raw IP socket for one protocol (current namespace): receives a copy of every packet of
/// that protocol delivered to the local stack (after the `input` hook). Non-blocking.
pub fn raw_ip_socket(v6: bool, proto: u8) -> io::Result<OwnedFd> {
    let fam = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = check(unsafe {
        libc::socket(
            fam,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            proto as libc::c_int,
        )
    })?;
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 1 << 20)?;
    enable_stamps(fd);
    Ok(s)
}

/// Send one frame on a bound packet socket.
pub fn send(fd: &OwnedFd, frame: &[u8]) -> io::Result<()> {
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            frame.as_ptr() as *const libc::c_void,
            frame.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != frame.len() {
        return Err(io::Error::other(format!(
            "sent {n} of {} bytes",
            frame.len()
        )));
    }
    Ok(())
}

/// Receive one datagram if there is one (non-blocking): its length and the source address (for
/// raw IPv6 sockets, which do not deliver the IPv6 header).
pub fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<(usize, Option<IpAddr>)>> {
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let mut sl = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            &mut ss as *mut _ as *mut libc::sockaddr,
            &mut sl,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let src = if ss.ss_family as libc::c_int == libc::AF_INET6 {
        let a: &libc::sockaddr_in6 = unsafe { &*(&ss as *const _ as *const libc::sockaddr_in6) };
        Some(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
    } else {
        None
    };
    Ok(Some(((n as usize).min(buf.len()), src)))
}

/// Receive one frame from a [`packet_socket`] if there is one (non-blocking): its length in
/// `buf`, with the VLAN tag that the kernel keeps out of the frame's bytes (a tag in the
/// packet's metadata, as veth and its peer pass it: `TP_STATUS_VLAN_VALID`) put back after the
/// MAC addresses, as it would be on the wire.
pub fn recv_frame(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // room for a tag in front of the frame's tail
    let cap = buf.len().saturating_sub(4);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: cap,
    };
    let mut ctl = [0u64; 16];
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = mem::size_of_val(&ctl) as _;
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let mut n = (n as usize).min(cap);
    let mut aux = None;
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                aux = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(c) as *const TpacketAuxdata
                ));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if let Some(a) = aux.filter(|a| a.tp_status & TP_STATUS_VLAN_VALID != 0 && n >= 12) {
        let tpid = if a.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 {
            a.tp_vlan_tpid
        } else {
            0x8100
        };
        buf.copy_within(12..n, 16);
        buf[12..14].copy_from_slice(&tpid.to_be_bytes());
        buf[14..16].copy_from_slice(&a.tp_vlan_tci.to_be_bytes());
        n += 4;
    }
    Ok(Some(n))
}

/// Receive time of the last datagram read from a socket, nanoseconds since the epoch (the
/// current time if the kernel has none).
pub fn last_stamp_ns(fd: &OwnedFd) -> u64 {
    let mut ts: libc::timespec = unsafe { mem::zeroed() };
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCGSTAMPNS, &mut ts) };
    if r == 0 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }
}

/// Wait until one of the sockets is readable or `timeout_ms` passes; the indices of the
/// readable ones.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> io::Result<Vec<usize>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(Vec::new());
        }
        return Err(e);
    }
    Ok(p.iter()
        .enumerate()
        .filter(|(_, x)| x.revents != 0)
        .map(|(i, _)| i)
        .collect())
}

const NETLINK_NETFILTER: libc::c_int = 12;
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_ADD_MEMBERSHIP: libc::c_int = 1;

/// A netlink socket (current namespace) subscribed to nfnetlink multicast `group`
/// (`NFNLGRP_NFTRACE`: nftables' packet traces; 0: none, for requests), with a large receive
/// buffer. Non-blocking.
pub fn nfnetlink_group_socket(group: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned right after.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            NETLINK_NETFILTER,
        )
    })?;
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: sa is a valid sockaddr_nl of the length given.
    check(unsafe {
        libc::bind(
            fd,
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    })?;
    if group != 0 {
        set_int(
            fd,
            SOL_NETLINK,
            NETLINK_ADD_MEMBERSHIP,
            group as libc::c_int,
        )?;
    }
    // SO_RCVBUFFORCE needs CAP_NET_ADMIN (the lab runs as root); SO_RCVBUF otherwise
    if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20).is_err() {
        set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 32 << 20)?;
    }
    Ok(s)
}

/// Send one nfnetlink request (a whole netlink message, `NLM_F_ACK` set) on a netlink socket
/// and wait up to a second for its acknowledgement: Ok when the kernel says 0.
pub fn nfnetlink_request(fd: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    // SAFETY: msg is valid for reads of msg.len() bytes.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 4096];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        if poll_readable(&[fd.as_raw_fd()], 100)?.is_empty() {
            continue;
        }
        let Some(n) = recv_datagram(fd, &mut buf)? else {
            continue;
        };
        // NLMSG_ERROR (2): an int error after the header (0: the acknowledgement)
        if n >= 20 && u16::from_ne_bytes([buf[4], buf[5]]) == 2 {
            let err = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
            return if err == 0 {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(-err))
            };
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "no netlink acknowledgement",
    ))
}

/// Receive one netlink datagram if there is one (non-blocking): Ok(None) when there is none.
pub fn recv_datagram(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for buf.len() bytes of writes.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// A raw socket (current namespace) that sends whole IP packets, header included
/// (`IPPROTO_RAW`: `IP_HDRINCL`, `IPV6_HDRINCL`): they go through the `output` hook as a
/// local process's packets.
pub fn raw_send_socket(v6: bool) -> io::Result<OwnedFd> {
    let fam = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2); the descriptor is owned right after.
    let fd = check(unsafe {
        libc::socket(fam, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_RAW)
    })?;
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Send one IP packet (header included) on a [`raw_send_socket`] towards `dst`.
pub fn send_ip(fd: &OwnedFd, pkt: &[u8], dst: IpAddr) -> io::Result<()> {
    // SAFETY: sockaddr_storage is plain data; zeroed is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match dst {
        IpAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.octets());
            mem::size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = a.octets();
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: pkt is valid for reads of pkt.len() bytes; ss holds an address of `len` bytes.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            pkt.as_ptr() as *const libc::c_void,
            pkt.len(),
            libc::MSG_DONTWAIT,
            &ss as *const _ as *const libc::sockaddr,
            len as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pin the calling thread to the CPU it runs on (so that a frame and the barrier sent after it
/// are processed in order by the same CPU's backlog). Returns false if it could not.
pub fn pin_to_current_cpu() -> bool {
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu < 0 {
            return false;
        }
        let mut set: libc::cpu_set_t = mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Catch SIGINT and SIGTERM: the lab stops between packets and tears down its namespaces.
pub fn catch_interrupts() {
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// True once SIGINT or SIGTERM arrived (after [`catch_interrupts`]).
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}
