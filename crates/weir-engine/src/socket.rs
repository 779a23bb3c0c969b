//! The host's local sockets, as `socket` expressions and the `tproxy` statement ask about
//! them (Linux's `nft_socket`, `nft_tproxy`): which socket would take a packet, and whether
//! it is transparent (`IP_TRANSPARENT`), its mark, whether it is bound to the wildcard
//! address.
//!
//! The engine does not know the host's sockets; the caller gives it a [`Sockets`]
//! ([`crate::stateful::Stateful::set_sockets`]): the daemon's asks the kernel (sock_diag,
//! `weir_dataplane`), [`SocketSet`] is a fixed list for tests and models. Without one, no
//! packet has a socket: `socket` matches and `tproxy` stop the rule, as the kernel's do when
//! its lookup finds nothing.

use std::net::IpAddr;
use std::sync::Arc;
use weir_lang::ir;

/// A lookup: the socket a packet from `remote` to `local` (arriving on device `ifindex`, 0:
/// any) would be delivered to. For TCP the kernel's `inet_lookup`: a connection with
/// exactly these addresses and ports (established or in TIME_WAIT) first, then a socket
/// listening on `local` (or the wildcard address) and its port; for UDP its
/// `__udp4_lib_lookup` / `__udp6_lib_lookup`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockQuery {
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
    pub remote: (IpAddr, u16),
    pub local: (IpAddr, u16),
    pub ifindex: u32,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockInfo {
    /// `IP_TRANSPARENT` / `IPV6_TRANSPARENT`.
    pub transparent: bool,
    /// `SO_MARK`.
    pub mark: u32,
    /// Bound to the wildcard address.
    pub wildcard: bool,
    /// The TCP state (`TCP_ESTABLISHED` 1, `TCP_TIME_WAIT` 6, `TCP_CLOSE` 7, `TCP_LISTEN`
    /// 10, `TCP_NEW_SYN_RECV` 12); a UDP socket is 1 when connected, 7 when not.
    pub state: u8,
}

impl SockInfo {
    pub const ESTABLISHED: u8 = 1;
    pub const TIME_WAIT: u8 = 6;
    pub const CLOSE: u8 = 7;
    pub const LISTEN: u8 = 10;
    pub const NEW_SYN_RECV: u8 = 12;

    /// A whole socket (the kernel's `sk_fullsock`): not a TIME_WAIT or request socket.
    pub fn full(&self) -> bool {
        !matches!(self.state, Self::TIME_WAIT | Self::NEW_SYN_RECV)
    }
}

/// The host's sockets as the engine asks them.
pub trait Sockets: Send + Sync {
    fn lookup(&self, q: &SockQuery) -> Option<SockInfo>;
}

/// A [`Sockets`] as the engine's state keeps it (`Debug` for the state).
#[derive(Clone)]
pub struct SocketTable(pub Arc<dyn Sockets>);

impl std::fmt::Debug for SocketTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SocketTable")
    }
}

/// One socket of a [`SocketSet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sock {
    pub proto: u8,
    /// Its own address (unspecified: the wildcard) and port.
    pub local: (IpAddr, u16),
    /// Its peer, for a connection (TCP established or TIME_WAIT, connected UDP); None for
    /// a listening or unconnected socket.
    pub remote: Option<(IpAddr, u16)>,
    pub transparent: bool,
    pub mark: u32,
    pub time_wait: bool,
}

/// A fixed list of sockets, looked up as the kernel does: a connection with the exact
/// addresses first, then a socket bound to the local address or the wildcard.
#[derive(Clone, Debug, Default)]
pub struct SocketSet(pub Vec<Sock>);

impl Sockets for SocketSet {
    fn lookup(&self, q: &SockQuery) -> Option<SockInfo> {
        let info = |s: &Sock| SockInfo {
            transparent: s.transparent,
            mark: s.mark,
            wildcard: s.local.0.is_unspecified(),
            state: match (s.remote, s.time_wait, q.proto) {
                (Some(_), true, _) => SockInfo::TIME_WAIT,
                (Some(_), false, _) => SockInfo::ESTABLISHED,
                (None, _, 6) => SockInfo::LISTEN,
                (None, _, _) => SockInfo::CLOSE,
            },
        };
        let conn = self
            .0
            .iter()
            .find(|s| s.proto == q.proto && s.local == q.local && s.remote == Some(q.remote));
        let bound = || {
            self.0.iter().find(|s| {
                s.proto == q.proto
                    && s.remote.is_none()
                    && s.local.1 == q.local.1
                    && (s.local.0 == q.local.0
                        || (s.local.0.is_unspecified()
                            && s.local.0.is_ipv4() == q.local.0.is_ipv4()))
            })
        };
        conn.or_else(bound).map(info)
    }
}

/// Whether a ruleset reads `socket` keys or `meta cgroup` (then the stateful layer looks the socket up for
/// each packet at the hooks where they run).
pub fn reads_socket(rs: &ir::Ruleset) -> bool {
    rs.reads(&|f| f.name().starts_with("socket ") || f == weir_wire::Field::MetaCgroup)
}
