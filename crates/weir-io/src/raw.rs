//! Raw IP sockets for the packets weir itself sends in NFQUEUE mode: the answers to rejected
//! packets (TCP resets, ICMP errors). The kernel routes them out as its own packets. Every
//! socket marks its packets with [`ANSWER_MARK`], so the kernel rules that queue the output
//! hook to weir let them pass (weir has already taken them through its output hook).

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The firewall mark of weir's own answers ("weir" in ASCII).
pub const ANSWER_MARK: u32 = 0x7765_6972;

/// The firewall mark of the packets per-flow scripts send ("weis"): never queued again, at
/// any hook (they are variants of a packet weir has already decided).
pub const SCRIPT_MARK: u32 = 0x7765_6973;

/// The sockets: IPv4 and IPv6 with the IP header included.
pub struct Answerer {
    ip4: OwnedFd,
    ip6: OwnedFd,
}

/// The source address the kernel gives its own packets to `dst` (the route's preferred
/// source, or the address of its output interface: what `icmp_send` puts in an ICMP error),
/// found by connecting a UDP socket marked as weir's answers are and reading its address.
/// An error: no route back.
pub fn source_for(dst: IpAddr) -> io::Result<IpAddr> {
    let any: IpAddr = match dst {
        IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let s = std::net::UdpSocket::bind((any, 0))?;
    // (the mark may choose the routing table, as for the answer itself; without
    // CAP_NET_ADMIN the main table's route is as good a guess)
    // SAFETY: setsockopt on a live socket with a live u32 of the size passed.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&ANSWER_MARK as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    s.connect((dst, 9))?;
    Ok(s.local_addr()?.ip())
}

fn socket(family: i32, proto: i32, mark: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before it is owned.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            proto,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt(&fd, libc::SOL_SOCKET, libc::SO_MARK, &mark)?;
    Ok(fd)
}

fn setsockopt<T>(fd: &OwnedFd, level: i32, name: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` points to a live value of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Answerer {
    /// Open the sockets (needs CAP_NET_RAW, and CAP_NET_ADMIN for the mark).
    pub fn open() -> io::Result<Answerer> {
        Answerer::open_marked(ANSWER_MARK)
    }

    /// As [`Answerer::open`], the packets marked `mark` ([`SCRIPT_MARK`] for what per-flow
    /// scripts send).
    pub fn open_marked(mark: u32) -> io::Result<Answerer> {
        let ip4 = socket(libc::AF_INET, libc::IPPROTO_RAW, mark)?;
        // (an IPv6 raw socket of protocol IPPROTO_RAW includes the header, as IPv4's does)
        let ip6 = socket(libc::AF_INET6, libc::IPPROTO_RAW, mark)?;
        // (the receive side of the IPPROTO_RAW sockets never gets packets)
        Ok(Answerer { ip4, ip6 })
    }

    /// A whole IPv4 or IPv6 packet, header included, sent as it is (an IPv4 source address of
    /// 0 is filled in by the kernel with the address of the route's interface).
    pub fn send_packet(&self, pkt: &[u8]) -> io::Result<()> {
        match pkt.first().map(|b| b >> 4) {
            Some(4) if pkt.len() >= 20 => {
                let dst = [pkt[16], pkt[17], pkt[18], pkt[19]];
                self.send_to(&self.ip4, IpAddr::from(dst), pkt)
            }
            Some(6) if pkt.len() >= 40 => {
                let dst: [u8; 16] = pkt[24..40].try_into().expect("16 bytes");
                self.send_to(&self.ip6, IpAddr::from(dst), pkt)
            }
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not an IPv4 or IPv6 packet",
            )),
        }
    }

    fn send_to(&self, fd: &OwnedFd, dst: IpAddr, buf: &[u8]) -> io::Result<()> {
        match dst {
            IpAddr::V4(a) => sendto(
                fd,
                buf,
                &libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: 0,
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.octets()),
                    },
                    sin_zero: [0; 8],
                },
            ),
            IpAddr::V6(a) => sendto(
                fd,
                buf,
                &libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: 0,
                    sin6_flowinfo: 0,
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.octets(),
                    },
                    sin6_scope_id: 0,
                },
            ),
        }
    }
}

impl Answerer {
    /// Whole IPv4 and IPv6 packets, in order, each run of one family in one `sendmmsg`
    /// (per-flow scripts send several per packet they act on). Returns how many were sent
    /// and how many failed (not IP, or refused by the kernel: each refused one is skipped and
    /// the rest tried).
    pub fn send_packets(&self, pkts: &[Vec<u8>]) -> (usize, usize) {
        let (mut sent, mut failed) = (0, 0);
        let mut i = 0;
        while i < pkts.len() {
            let v6 = match pkts[i].first().map(|b| b >> 4) {
                Some(4) if pkts[i].len() >= 20 => false,
                Some(6) if pkts[i].len() >= 40 => true,
                _ => {
                    failed += 1;
                    i += 1;
                    continue;
                }
            };
            let run_end = pkts[i..]
                .iter()
                .position(|p| {
                    let fam = p.first().map(|b| b >> 4);
                    !(if v6 {
                        fam == Some(6) && p.len() >= 40
                    } else {
                        fam == Some(4) && p.len() >= 20
                    })
                })
                .map_or(pkts.len(), |n| i + n);
            let run = &pkts[i..run_end];
            let fd = if v6 { &self.ip6 } else { &self.ip4 };
            let (s, f) = sendmmsg_to(fd, run, v6);
            sent += s;
            failed += f;
            i = run_end;
        }
        (sent, failed)
    }
}

/// `sendmmsg` of IP packets of one family on `fd`, each to its own destination address
/// (read from its header); a refused packet is skipped and the rest sent. (sent, failed).
fn sendmmsg_to(fd: &OwnedFd, pkts: &[Vec<u8>], v6: bool) -> (usize, usize) {
    // SAFETY: sockaddr_storage is plain old data; all zeros is a valid value.
    let mut names: Vec<libc::sockaddr_storage> =
        pkts.iter().map(|_| unsafe { std::mem::zeroed() }).collect();
    let namelen = if v6 {
        std::mem::size_of::<libc::sockaddr_in6>()
    } else {
        std::mem::size_of::<libc::sockaddr_in>()
    } as libc::socklen_t;
    for (p, n) in pkts.iter().zip(names.iter_mut()) {
        if v6 {
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: p[24..40].try_into().expect("16 bytes"),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: a sockaddr_in6 fits in a sockaddr_storage, which is aligned for it.
            unsafe { std::ptr::write((n as *mut libc::sockaddr_storage).cast(), sa) };
        } else {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes([p[16], p[17], p[18], p[19]]),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: as above, for a sockaddr_in.
            unsafe { std::ptr::write((n as *mut libc::sockaddr_storage).cast(), sa) };
        }
    }
    let mut iov: Vec<libc::iovec> = pkts
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain old data; zeroed, then each points at its own name and iovec.
    let mut msgs: Vec<libc::mmsghdr> = pkts.iter().map(|_| unsafe { std::mem::zeroed() }).collect();
    for ((m, n), v) in msgs.iter_mut().zip(names.iter_mut()).zip(iov.iter_mut()) {
        m.msg_hdr.msg_name = (n as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = namelen;
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let (mut done, mut failed) = (0usize, 0usize);
    while done < msgs.len() {
        // SAFETY: every header points at a name, an iovec and a packet that live until the
        // function returns; the count is the headers left.
        let r = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                msgs[done..].as_mut_ptr(),
                (msgs.len() - done) as libc::c_uint,
                0,
            )
        };
        if r <= 0 {
            // the first one left was refused: skip it, try the rest
            failed += 1;
            done += 1;
        } else {
            done += r as usize;
        }
    }
    (msgs.len() - failed, failed)
}

/// sendto(2) of `buf` on `fd` to socket address `sa` (a `sockaddr_in` or `sockaddr_in6`).
fn sendto<A>(fd: &OwnedFd, buf: &[u8], sa: &A) -> io::Result<()> {
    // SAFETY: `buf` and `sa` are live for the call, with their sizes passed; `sa` is a
    // socket address of the family of `fd`.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (sa as *const A).cast(),
            std::mem::size_of::<A>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
