//! The kernel's socket lookup, asked over `NETLINK_SOCK_DIAG`: which local socket would take a
//! packet, and is it transparent? This is the lookup nftables' `tproxy` and `socket`
//! expressions make (`nf_tproxy_get_sock_v4/v6`, `nft_socket`), answered by the kernel for
//! weir's inline mode, where weir sees packets before the kernel's own stack does and so
//! cannot find out from the packet.
//!
//! One [`SockDiag::lookup`] is one `SOCK_DIAG_BY_FAMILY` request with an exact
//! `inet_diag_req_v2` (not a dump): the kernel answers it with `inet_diag_find_one_icsk` for
//! TCP (`inet_lookup`: an established, request or `TIME_WAIT` socket for the exact 4-tuple
//! first, then a listener on the local address or the wildcard) and `udp_dump_one` for UDP
//! (`__udp4_lib_lookup` / `__udp6_lib_lookup`: connected sockets score above bound ones).
//!
//! Facts checked against the kernel by `tests/sockdiag.rs`:
//! - The request's `inet_diag_sockid` is the socket's point of view for TCP (`src` = local,
//!   `dst` = remote) and the other way round for UDP (`src` = remote, `dst` = local: "src
//!   and dst are swapped for historical reasons" in `udp_dump_one`).
//! - `INET_DIAG_SOCKOPT` (Linux 5.10+) is sent with every full socket and `INET_DIAG_MARK`
//!   with every full socket when the asker has `CAP_NET_ADMIN`, whatever `idiag_ext` says;
//!   so the request asks for no extensions (`idiag_ext` = 0, and it is 8 bits wide: it could
//!   not name attribute 22 anyway).
//! - The first byte of `struct inet_diag_sockopt` is a C bitfield, low bit first on
//!   little-endian targets: `transparent` is bit 5 (bit 2 on big-endian targets).
//!
//! Limits:
//! - `TIME_WAIT` and request (`SYN_RECV`) sockets are answered without attributes, so their
//!   `transparent` is false and `mark` 0 here, though the kernel's `nft_socket` would read
//!   `tw_transparent` / `no_srccheck` from them.
//! - `ifindex` is the lookup's `dif`: 0 means "no device", so a socket bound to a device
//!   (`SO_BINDTODEVICE`) is only found with that device's index. No VRF (`sdif`) support;
//!   an IPv6 scope id in the addresses is ignored.
//! - Without a packet the kernel picks a `SO_REUSEPORT` group member by the tuple's hash and
//!   runs no BPF reuseport program; BPF `sk_lookup` programs are run without a packet.
//! - IPv4 lookups are made as `AF_INET` (they still find a dual-stack `AF_INET6` socket
//!   bound to `::`, whose answer family is `AF_INET6`); v4-mapped IPv6 addresses are not
//!   translated.
//! - A kernel without `inet_diag` / `tcp_diag` / `udp_diag` answers `ENOENT` to everything,
//!   which reads as "no socket".
//! - The answer is the state at the time of the question: a socket may come or go before the
//!   packet reaches the kernel.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
/// `struct inet_diag_req_v2`: 8 bytes, then the 48-byte `inet_diag_sockid`.
const REQ_LEN: usize = NLMSG_HDRLEN + 8 + 48;
/// `struct inet_diag_msg`: 4 bytes, the sockid, then 5 `u32`s.
const DIAG_MSG_LEN: usize = 4 + 48 + 20;
const INET_DIAG_NOCOOKIE: u32 = !0;
const INET_DIAG_MARK: u16 = 15;
const INET_DIAG_SOCKOPT: u16 = 22;
const NLA_TYPE_MASK: u16 = 0x3fff;
const TCP_LISTEN: u8 = 10;
const TCP_CLOSE: u8 = 7;
/// `inet_diag_sockopt.transparent` in the struct's first byte (C bitfields fill from the
/// low bit on little-endian targets and from the high bit on big-endian ones).
#[cfg(target_endian = "little")]
const SOCKOPT_TRANSPARENT: u8 = 1 << 5;
#[cfg(target_endian = "big")]
const SOCKOPT_TRANSPARENT: u8 = 1 << 2;
const RECV_TIMEOUT_US: libc::suseconds_t = 100_000;

/// The transport protocol of a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    Tcp,
    Udp,
}

/// What the lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// `IP_TRANSPARENT` / `IPV6_TRANSPARENT` (from the `INET_DIAG_SOCKOPT` attribute, struct
    /// `inet_diag_sockopt`, Linux 5.10+; false if absent, as for `TIME_WAIT` sockets).
    pub transparent: bool,
    /// `SO_MARK` (`INET_DIAG_MARK` attribute, given to `CAP_NET_ADMIN`; 0 if absent).
    pub mark: u32,
    /// Bound to the wildcard address (`idiag_src` all zero in the answer).
    pub wildcard: bool,
    /// TCP `LISTEN` state (or an unconnected UDP socket, whose state is `TCP_CLOSE`).
    pub listening: bool,
    /// `idiag_state` (`TCP_ESTABLISHED` = 1, ..., `TCP_TIME_WAIT` = 6, `TCP_CLOSE` = 7,
    /// `TCP_LISTEN` = 10; a connected UDP socket is 1).
    pub state: u8,
}

/// A `NETLINK_SOCK_DIAG` socket for [`lookup`](SockDiag::lookup)s.
pub struct SockDiag {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("sock_diag answer: {what}"),
    )
}

impl SockDiag {
    /// `socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)` with a receive
    /// timeout of 100 ms, so that a lookup never hangs.
    pub fn open() -> io::Result<SockDiag> {
        // SAFETY: socket(2) takes no pointers; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: RECV_TIMEOUT_US,
        };
        // SAFETY: `tv` is a valid timeval that outlives the call, and its size is passed.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SockDiag {
            fd,
            seq: std::process::id().wrapping_mul(0x9e37_79b9),
            buf: vec![0; 16384],
        })
    }

    /// The socket a packet from `remote` to `local` (arriving on interface `ifindex`; 0 = no
    /// device, see the module's limits) would be delivered to: for TCP as the kernel's
    /// `inet_lookup` (an established, request or `TIME_WAIT` socket for the exact 4-tuple
    /// first, then a listener on the local address or the wildcard : local port); for UDP as
    /// `__udp4_lib_lookup` / `__udp6_lib_lookup`. `Ok(None)`: no socket. `remote` and `local`
    /// must be of the same family (else `InvalidInput`); no answer within 100 ms is
    /// `TimedOut`.
    pub fn lookup(
        &mut self,
        proto: Proto,
        remote: SocketAddr,
        local: SocketAddr,
        ifindex: u32,
    ) -> io::Result<Option<Found>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let req = request(seq, proto, remote, local, ifindex)?;
        // SAFETY: all-zero is a valid sockaddr_nl.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        loop {
            // SAFETY: `req` and `sa` are valid for the lengths passed and outlive the call.
            let n = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    req.as_ptr().cast(),
                    req.len(),
                    0,
                    (&sa as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if n >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        loop {
            // SAFETY: `self.buf` is valid for writes of its length for the whole call.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "sock_diag: no answer within 100 ms",
                        ))
                    }
                    _ => return Err(e),
                }
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(invalid(&format!(
                    "{n}-byte datagram larger than the {}-byte buffer",
                    self.buf.len()
                )));
            }
            if let Some(answer) = parse(&self.buf[..n], seq, proto)? {
                return Ok(answer);
            }
        }
    }
}

fn addr_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&a.octets());
            b
        }
        IpAddr::V6(a) => a.octets(),
    }
}

/// The `SOCK_DIAG_BY_FAMILY` request for one exact lookup.
fn request(
    seq: u32,
    proto: Proto,
    remote: SocketAddr,
    local: SocketAddr,
    ifindex: u32,
) -> io::Result<[u8; REQ_LEN]> {
    let family = match (remote, local) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => libc::AF_INET,
        (SocketAddr::V6(_), SocketAddr::V6(_)) => libc::AF_INET6,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "sock_diag lookup: remote and local addresses of different families",
            ))
        }
    };
    // TCP's sockid is the socket's view (src = local); UDP's is the packet's (src = remote).
    let (protocol, src, dst) = match proto {
        Proto::Tcp => (libc::IPPROTO_TCP, local, remote),
        Proto::Udp => (libc::IPPROTO_UDP, remote, local),
    };
    let mut m = [0u8; REQ_LEN];
    m[0..4].copy_from_slice(&(REQ_LEN as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid 0: the kernel fills in our port id.
    let r = &mut m[NLMSG_HDRLEN..];
    r[0] = family as u8;
    r[1] = protocol as u8;
    r[2] = 0; // idiag_ext: SOCKOPT and MARK come without asking
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // idiag_states: all
    let id = &mut r[8..];
    id[0..2].copy_from_slice(&src.port().to_be_bytes());
    id[2..4].copy_from_slice(&dst.port().to_be_bytes());
    id[4..20].copy_from_slice(&addr_bytes(src.ip()));
    id[20..36].copy_from_slice(&addr_bytes(dst.ip()));
    id[36..40].copy_from_slice(&ifindex.to_ne_bytes());
    id[40..44].copy_from_slice(&INET_DIAG_NOCOOKIE.to_ne_bytes());
    id[44..48].copy_from_slice(&INET_DIAG_NOCOOKIE.to_ne_bytes());
    Ok(m)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One received datagram: `Ok(None)` if it holds no answer to `seq` (a stale answer to an
/// earlier, timed-out lookup), `Ok(Some(answer))` otherwise.
fn parse(buf: &[u8], seq: u32, proto: Proto) -> io::Result<Option<Option<Found>>> {
    let mut off = 0;
    while off < buf.len() {
        let rest = &buf[off..];
        if rest.len() < NLMSG_HDRLEN {
            return Err(invalid(&format!("{}-byte netlink header", rest.len())));
        }
        let len = u32_at(rest, 0) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(invalid(&format!(
                "netlink message length {len} with {} bytes left",
                rest.len()
            )));
        }
        let ty = u16_at(rest, 4);
        let body = &rest[NLMSG_HDRLEN..len];
        if u32_at(rest, 8) == seq {
            return match ty {
                NLMSG_ERROR => {
                    if body.len() < 4 {
                        return Err(invalid("truncated NLMSG_ERROR"));
                    }
                    let e = u32_at(body, 0) as i32;
                    if e == -libc::ENOENT {
                        Ok(Some(None))
                    } else if e == 0 {
                        Err(invalid("an acknowledgement instead of an answer"))
                    } else {
                        Err(io::Error::from_raw_os_error(e.wrapping_neg()))
                    }
                }
                SOCK_DIAG_BY_FAMILY => parse_msg(body, proto).map(|f| Some(Some(f))),
                _ => Err(invalid(&format!("unexpected message type {ty}"))),
            };
        }
        off = off.saturating_add((len + 3) & !3);
    }
    Ok(None)
}

/// An `inet_diag_msg` and its attributes.
fn parse_msg(b: &[u8], proto: Proto) -> io::Result<Found> {
    if b.len() < DIAG_MSG_LEN {
        return Err(invalid(&format!("{}-byte inet_diag_msg", b.len())));
    }
    let state = b[1];
    // idiag_src: 4 (family, state, timer, retrans) + 2 (sport) + 2 (dport).
    let wildcard = b[8..24].iter().all(|&x| x == 0);
    let listening = state == TCP_LISTEN || (proto == Proto::Udp && state == TCP_CLOSE);
    let mut found = Found {
        transparent: false,
        mark: 0,
        wildcard,
        listening,
        state,
    };
    let mut attrs = &b[DIAG_MSG_LEN..];
    while attrs.len() >= 4 {
        let len = u16_at(attrs, 0) as usize;
        if len < 4 || len > attrs.len() {
            return Err(invalid(&format!(
                "attribute length {len} with {} bytes left",
                attrs.len()
            )));
        }
        let payload = &attrs[4..len];
        match u16_at(attrs, 2) & NLA_TYPE_MASK {
            INET_DIAG_MARK => {
                if payload.len() < 4 {
                    return Err(invalid("short INET_DIAG_MARK"));
                }
                found.mark = u32_at(payload, 0);
            }
            INET_DIAG_SOCKOPT => {
                let Some(&bits) = payload.first() else {
                    return Err(invalid("empty INET_DIAG_SOCKOPT"));
                };
                found.transparent = bits & SOCKOPT_TRANSPARENT != 0;
            }
            _ => {}
        }
        attrs = &attrs[((len + 3) & !3).min(attrs.len())..];
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(seq: u32, state: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = vec![0u8; DIAG_MSG_LEN];
        body[0] = libc::AF_INET as u8;
        body[1] = state;
        body[8..12].copy_from_slice(&[127, 0, 0, 1]);
        for (ty, p) in attrs {
            body.extend_from_slice(&((4 + p.len()) as u16).to_ne_bytes());
            body.extend_from_slice(&ty.to_ne_bytes());
            body.extend_from_slice(p);
            while body.len() & 3 != 0 {
                body.push(0);
            }
        }
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn parses_attributes_and_skips_stale_answers() {
        let m = answer(
            7,
            TCP_LISTEN,
            &[
                (INET_DIAG_MARK, &5u32.to_ne_bytes()),
                (INET_DIAG_SOCKOPT, &[SOCKOPT_TRANSPARENT, 0]),
            ],
        );
        let f = parse(&m, 7, Proto::Tcp).unwrap().unwrap().unwrap();
        assert_eq!(
            f,
            Found {
                transparent: true,
                mark: 5,
                wildcard: false,
                listening: true,
                state: 10
            }
        );
        assert!(parse(&m, 8, Proto::Tcp).unwrap().is_none());
        // A stale answer and then ours in one datagram.
        let mut two = answer(6, 1, &[]);
        two.extend_from_slice(&answer(7, 1, &[]));
        let f = parse(&two, 7, Proto::Tcp).unwrap().unwrap().unwrap();
        assert_eq!(f.state, 1);
        assert!(!f.listening);
    }

    #[test]
    fn errors_and_enoent() {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&3u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&(-libc::ENOENT).to_ne_bytes());
        m.extend_from_slice(&[0; 16]);
        assert_eq!(parse(&m, 3, Proto::Udp).unwrap(), Some(None));
        m[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        let e = parse(&m, 3, Proto::Udp).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        m[16..20].copy_from_slice(&i32::MIN.to_ne_bytes());
        assert!(parse(&m, 3, Proto::Udp).is_err());
    }

    #[test]
    fn no_panic_on_any_truncation_or_odd_length() {
        let full = answer(
            9,
            TCP_LISTEN,
            &[
                (INET_DIAG_MARK, &5u32.to_ne_bytes()),
                (INET_DIAG_SOCKOPT, &[0x20, 0]),
            ],
        );
        for cut in 0..full.len() {
            let mut m = full[..cut].to_vec();
            // As received: a cut datagram, and one whose header claims only `cut` bytes.
            let _ = parse(&m, 9, Proto::Tcp);
            if cut >= 4 {
                m[0..4].copy_from_slice(&(cut as u32).to_ne_bytes());
                let r = parse(&m, 9, Proto::Tcp);
                if cut < NLMSG_HDRLEN + DIAG_MSG_LEN {
                    assert!(r.is_err(), "cut {cut}");
                }
            }
        }
        // Garbage attribute lengths.
        for bad in [0u16, 1, 3, 200, u16::MAX] {
            let mut m = full.clone();
            let at = NLMSG_HDRLEN + DIAG_MSG_LEN;
            m[at..at + 2].copy_from_slice(&bad.to_ne_bytes());
            assert!(parse(&m, 9, Proto::Tcp).is_err(), "attr len {bad}");
        }
        // Odd netlink lengths.
        for bad in [0u32, 1, 15, u32::MAX] {
            let mut m = full.clone();
            m[0..4].copy_from_slice(&bad.to_ne_bytes());
            assert!(parse(&m, 9, Proto::Tcp).is_err(), "nlmsg len {bad}");
        }
    }

    #[test]
    fn request_layout() {
        let r = request(
            1,
            Proto::Udp,
            "10.0.0.1:1000".parse().unwrap(),
            "10.0.0.2:53".parse().unwrap(),
            3,
        )
        .unwrap();
        assert_eq!(u32_at(&r, 0) as usize, r.len());
        assert_eq!(r.len(), 72);
        let id = &r[24..];
        assert_eq!(&id[0..2], &1000u16.to_be_bytes()); // UDP: src = remote
        assert_eq!(&id[2..4], &53u16.to_be_bytes());
        assert_eq!(&id[4..8], &[10, 0, 0, 1]);
        assert_eq!(&id[20..24], &[10, 0, 0, 2]);
        assert_eq!(u32_at(id, 36), 3);
        assert!(request(
            1,
            Proto::Tcp,
            "10.0.0.1:1".parse().unwrap(),
            "[::1]:1".parse().unwrap(),
            0
        )
        .is_err());
    }
}
