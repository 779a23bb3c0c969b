//! `weir_io::sockdiag` against the kernel: sockets made here on 127.0.0.1 / ::1 with ephemeral
//! ports in the current network namespace, looked up as a packet to them would be. Needs
//! root (`IP_TRANSPARENT`, `SO_MARK`, `INET_DIAG_MARK`).

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};
use weir_io::sockdiag::{Found, Proto, SockDiag};

const IP_TRANSPARENT: libc::c_int = 19;
const IPV6_TRANSPARENT: libc::c_int = 75;
const IP_FREEBIND: libc::c_int = 15;
const TCP_ESTABLISHED: u8 = 1;
const TCP_TIME_WAIT: u8 = 6;
const TCP_CLOSE: u8 = 7;
const TCP_LISTEN: u8 = 10;

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, val: libc::c_int) {
    // SAFETY: `val` is a live c_int whose size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        0,
        "setsockopt({level}, {name}): {}",
        std::io::Error::last_os_error()
    );
}

/// A socket of `ty` with `opts` set, bound to `addr` (and listening if TCP).
fn socket(
    ty: libc::c_int,
    addr: SocketAddr,
    opts: &[(libc::c_int, libc::c_int, libc::c_int)],
) -> OwnedFd {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket(2) takes no pointers; checked below.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if addr.is_ipv6() {
        set_int(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0);
    }
    for &(level, name, val) in opts {
        set_int(fd.as_raw_fd(), level, name, val);
    }
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `ss` holds a sockaddr of `len` bytes and outlives the call.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "bind {addr}: {}", std::io::Error::last_os_error());
    if ty == libc::SOCK_STREAM {
        // SAFETY: listen(2) on our descriptor.
        let r = unsafe { libc::listen(fd.as_raw_fd(), 16) };
        assert_eq!(r, 0, "listen: {}", std::io::Error::last_os_error());
    }
    fd
}

fn tcp_listener(addr: &str, opts: &[(libc::c_int, libc::c_int, libc::c_int)]) -> TcpListener {
    TcpListener::from(socket(libc::SOCK_STREAM, a(addr), opts))
}

fn udp_socket(addr: &str, opts: &[(libc::c_int, libc::c_int, libc::c_int)]) -> UdpSocket {
    UdpSocket::from(socket(libc::SOCK_DGRAM, a(addr), opts))
}

/// A port nothing is bound to (as of now) on `addr` (an `ip:0`), for `proto`.
fn free_port(proto: Proto, addr: &str) -> SocketAddr {
    match proto {
        Proto::Tcp => tcp_listener(addr, &[]).local_addr().unwrap(),
        Proto::Udp => udp_socket(addr, &[]).local_addr().unwrap(),
    }
}

fn with_port(addr: SocketAddr, port: u16) -> SocketAddr {
    let mut x = addr;
    x.set_port(port);
    x
}

fn lookup(proto: Proto, remote: SocketAddr, local: SocketAddr) -> Option<Found> {
    SockDiag::open()
        .unwrap()
        .lookup(proto, remote, local, 0)
        .unwrap()
}

#[test]
fn tcp_listener_v4_flags_and_mark() {
    let plain = tcp_listener("127.0.0.1:0", &[]);
    let local = plain.local_addr().unwrap();
    let f = lookup(Proto::Tcp, a("127.0.0.1:40000"), local).expect("listener found");
    assert_eq!(
        f,
        Found {
            transparent: false,
            mark: 0,
            wildcard: false,
            listening: true,
            state: TCP_LISTEN
        }
    );

    let tp = tcp_listener(
        "127.0.0.1:0",
        &[
            (libc::SOL_IP, IP_TRANSPARENT, 1),
            (libc::SOL_SOCKET, libc::SO_MARK, 0x1234),
        ],
    );
    let f = lookup(Proto::Tcp, a("127.0.0.1:40000"), tp.local_addr().unwrap()).unwrap();
    assert!(f.transparent);
    assert_eq!(f.mark, 0x1234);
    assert!(f.listening && !f.wildcard);

    // Another sockopt bit (freebind, bit 2) set, not transparent: the bit order is right.
    let fb = tcp_listener("127.0.0.1:0", &[(libc::SOL_IP, IP_FREEBIND, 1)]);
    let f = lookup(Proto::Tcp, a("127.0.0.1:40000"), fb.local_addr().unwrap()).unwrap();
    assert!(!f.transparent);

    // The wildcard: found for any local address of that port, and says so.
    let wild = tcp_listener("0.0.0.0:0", &[(libc::SOL_SOCKET, libc::SO_MARK, 7)]);
    let port = wild.local_addr().unwrap().port();
    let f = lookup(
        Proto::Tcp,
        a("127.0.0.1:40000"),
        with_port(a("127.0.0.2:0"), port),
    )
    .unwrap();
    assert!(f.wildcard && f.listening && !f.transparent);
    assert_eq!(f.mark, 7);
}

#[test]
fn tcp_listener_v6() {
    let tp = tcp_listener(
        "[::1]:0",
        &[
            (libc::SOL_IPV6, IPV6_TRANSPARENT, 1),
            (libc::SOL_SOCKET, libc::SO_MARK, 99),
        ],
    );
    let f = lookup(Proto::Tcp, a("[::1]:40000"), tp.local_addr().unwrap()).unwrap();
    assert_eq!(
        f,
        Found {
            transparent: true,
            mark: 99,
            wildcard: false,
            listening: true,
            state: TCP_LISTEN
        }
    );

    let plain = tcp_listener("[::1]:0", &[]);
    let f = lookup(Proto::Tcp, a("[::1]:40000"), plain.local_addr().unwrap()).unwrap();
    assert!(!f.transparent && !f.wildcard && f.listening);

    // A dual-stack listener on [::] is found by IPv6 and by IPv4 lookups, as the wildcard.
    let wild = tcp_listener("[::]:0", &[]);
    let port = wild.local_addr().unwrap().port();
    let f = lookup(Proto::Tcp, a("[::1]:40000"), with_port(a("[::1]:0"), port)).unwrap();
    assert!(f.wildcard && f.listening);
    let f = lookup(
        Proto::Tcp,
        a("127.0.0.1:40000"),
        with_port(a("127.0.0.1:0"), port),
    )
    .unwrap();
    assert!(f.wildcard && f.listening);

    let free = free_port(Proto::Tcp, "[::1]:0");
    assert_eq!(
        SockDiag::open()
            .unwrap()
            .lookup(Proto::Tcp, a("[::1]:40000"), free, 0)
            .unwrap(),
        None
    );
}

fn established(server_addr: &str) {
    let listener = tcp_listener(server_addr, &[(libc::SOL_SOCKET, libc::SO_MARK, 3)]);
    let server = listener.local_addr().unwrap();
    let client = TcpStream::connect(server).unwrap();
    let (conn, peer) = listener.accept().unwrap();
    assert_eq!(peer, client.local_addr().unwrap());
    let mut sd = SockDiag::open().unwrap();

    // The server side's view of a packet from the client: the accepted socket.
    let f = sd.lookup(Proto::Tcp, peer, server, 0).unwrap().unwrap();
    assert_eq!(f.state, TCP_ESTABLISHED);
    assert!(!f.listening && !f.wildcard);
    assert_eq!(f.mark, 3, "accepted sockets inherit the listener's mark");
    // And the client's own socket, seen from its side.
    let f = sd.lookup(Proto::Tcp, server, peer, 0).unwrap().unwrap();
    assert_eq!(f.state, TCP_ESTABLISHED);
    assert_eq!(f.mark, 0);

    // Another remote port: no such connection, so the listener.
    let other = with_port(
        peer,
        if peer.port() == 65535 {
            1024
        } else {
            peer.port() + 1
        },
    );
    let f = sd.lookup(Proto::Tcp, other, server, 0).unwrap().unwrap();
    assert_eq!(f.state, TCP_LISTEN);
    assert!(f.listening);

    // The client closes first, so its socket ends in TIME_WAIT (answered without attributes).
    drop(client);
    let mut conn = conn;
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    drop(conn);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let f = sd.lookup(Proto::Tcp, server, peer, 0).unwrap();
        if let Some(f) = f.filter(|f| f.state == TCP_TIME_WAIT) {
            assert!(!f.listening && !f.transparent);
            break;
        }
        assert!(Instant::now() < deadline, "no TIME_WAIT socket: {f:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn tcp_established_v4() {
    established("127.0.0.1:0");
}

#[test]
fn tcp_established_v6() {
    established("[::1]:0");
}

#[test]
fn tcp_no_socket() {
    let mut sd = SockDiag::open().unwrap();
    let free = free_port(Proto::Tcp, "127.0.0.1:0");
    assert_eq!(
        sd.lookup(Proto::Tcp, a("127.0.0.1:40000"), free, 0)
            .unwrap(),
        None
    );
    // The socket still answers after a miss.
    let l = tcp_listener("127.0.0.1:0", &[]);
    assert!(sd
        .lookup(Proto::Tcp, a("127.0.0.1:40000"), l.local_addr().unwrap(), 0)
        .unwrap()
        .is_some());
}

#[test]
fn mixed_families_rejected() {
    let e = SockDiag::open()
        .unwrap()
        .lookup(Proto::Tcp, a("127.0.0.1:1"), a("[::1]:1"), 0)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn bound_to_device_needs_its_ifindex() {
    let l = tcp_listener("127.0.0.1:0", &[]);
    let name = b"lo\0";
    // SAFETY: `name` is a live buffer of the length passed.
    let r = unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            name.as_ptr().cast(),
            3,
        )
    };
    assert_eq!(r, 0);
    // SAFETY: a NUL-terminated name.
    let lo = unsafe { libc::if_nametoindex(name.as_ptr().cast()) };
    assert!(lo > 0);
    let mut sd = SockDiag::open().unwrap();
    let local = l.local_addr().unwrap();
    assert!(sd
        .lookup(Proto::Tcp, a("127.0.0.1:40000"), local, lo)
        .unwrap()
        .is_some());
    assert_eq!(
        sd.lookup(Proto::Tcp, a("127.0.0.1:40000"), local, 0)
            .unwrap(),
        None
    );
}

#[test]
fn udp_v4() {
    let mut sd = SockDiag::open().unwrap();
    let s = udp_socket("127.0.0.1:0", &[]);
    let local = s.local_addr().unwrap();
    // Any remote reaches an unconnected bound socket; src/dst the wrong way round would look
    // up port 40000 as the local one and find nothing.
    let f = sd
        .lookup(Proto::Udp, a("127.0.0.1:40000"), local, 0)
        .unwrap()
        .expect("bound UDP socket");
    assert_eq!(
        f,
        Found {
            transparent: false,
            mark: 0,
            wildcard: false,
            listening: true,
            state: TCP_CLOSE
        }
    );

    let tp = udp_socket(
        "0.0.0.0:0",
        &[
            (libc::SOL_IP, IP_TRANSPARENT, 1),
            (libc::SOL_SOCKET, libc::SO_MARK, 11),
        ],
    );
    let port = tp.local_addr().unwrap().port();
    let f = sd
        .lookup(
            Proto::Udp,
            a("127.0.0.1:40000"),
            with_port(a("127.0.0.1:0"), port),
            0,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        f,
        Found {
            transparent: true,
            mark: 11,
            wildcard: true,
            listening: true,
            state: TCP_CLOSE
        }
    );

    // A connected socket: found for packets from its peer only.
    let peer = udp_socket("127.0.0.1:0", &[]);
    let c = udp_socket("127.0.0.1:0", &[]);
    c.connect(peer.local_addr().unwrap()).unwrap();
    let f = sd
        .lookup(
            Proto::Udp,
            peer.local_addr().unwrap(),
            c.local_addr().unwrap(),
            0,
        )
        .unwrap()
        .unwrap();
    assert_eq!(f.state, TCP_ESTABLISHED);
    assert!(!f.listening);
    let stranger = free_port(Proto::Udp, "127.0.0.1:0");
    assert_eq!(
        sd.lookup(Proto::Udp, stranger, c.local_addr().unwrap(), 0)
            .unwrap(),
        None
    );

    let free = free_port(Proto::Udp, "127.0.0.1:0");
    assert_eq!(
        sd.lookup(Proto::Udp, a("127.0.0.1:40000"), free, 0)
            .unwrap(),
        None
    );
}

#[test]
fn udp_v6() {
    let mut sd = SockDiag::open().unwrap();
    let tp = udp_socket("[::1]:0", &[(libc::SOL_IPV6, IPV6_TRANSPARENT, 1)]);
    let f = sd
        .lookup(Proto::Udp, a("[::1]:40000"), tp.local_addr().unwrap(), 0)
        .unwrap()
        .unwrap();
    assert_eq!(
        f,
        Found {
            transparent: true,
            mark: 0,
            wildcard: false,
            listening: true,
            state: TCP_CLOSE
        }
    );
    let plain = udp_socket("[::]:0", &[]);
    let port = plain.local_addr().unwrap().port();
    let f = sd
        .lookup(
            Proto::Udp,
            a("[::1]:40000"),
            with_port(a("[::1]:0"), port),
            0,
        )
        .unwrap()
        .unwrap();
    assert!(!f.transparent && f.wildcard && f.listening);
    let free = free_port(Proto::Udp, "[::1]:0");
    assert_eq!(
        sd.lookup(Proto::Udp, a("[::1]:40000"), free, 0).unwrap(),
        None
    );
}
