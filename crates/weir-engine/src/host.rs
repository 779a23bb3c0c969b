//! Keys of the host's state around a packet rather than of the packet itself, as the kernel
//! reads them for the packets weir sees:
//!
//! - `socket transparent|mark|wildcard`: the local socket the stateful layer looked up
//!   (`Meta::sock`, [`crate::socket`]); none: the rule stops (`nft_socket`).
//! - `meta cgroup`: the net_cls class id of the socket the packet carries (0 without a
//!   net_cls hierarchy); none: the rule stops.
//! - The packet's IPsec state: weir decrypts nothing and its routes carry no IPsec policy, so
//!   none of its packets has a security path: `meta ipsec` (`secpath`) is 0, `ipsec in|out
//!   ...` stops the rule (`nft_xfrm`), `rt ipsec` is 0 where the packet has a route.
//! - A route's realm (`meta rtclassid`, `rt classid`: 0 where the packet has a route),
//!   weir's routes having none; a VRF slave device (`meta sdif` 0, `meta sdifname` the empty
//!   name), weir having no VRFs; a tunnel's metadata (`tunnel path` 0, `tunnel id` stops the
//!   rule), weir's ports being no metadata-collecting tunnels.

use crate::socket::SockInfo;
use weir_lang::ir::Hook;
use weir_wire::Field;

/// The value of host-state key `f` for a packet with metadata `meta` (None: the rule stops).
pub(crate) fn field(f: Field, meta: &crate::eval::Meta) -> Option<u128> {
    use Field as F;
    let s = meta.sock;
    // a route: after routing (`skb_dst`); before it (prerouting, netdev) the rule stops
    let routed = || match meta.hook {
        Some(Hook::Prerouting | Hook::Ingress | Hook::Egress) | None => None,
        _ => Some(0),
    };
    match f {
        F::SocketTransparent => s.map(|s| s.transparent as u128),
        F::SocketMark => s.filter(|s| s.full()).map(|s| s.mark as u128),
        F::SocketWildcard => s.filter(|s| s.full()).map(|s| s.wildcard as u128),
        // nft_meta_get_eval_cgroup: the packet's full socket (`skb->sk`): the sender's at
        // output (NFQUEUE mode: the kernel names its owner), at input the one early demux
        // attached (an established TCP or connected UDP socket); its net_cls class id is 0
        // where no net_cls hierarchy is mounted (weir refuses the key where one is)
        F::MetaCgroup => {
            let attached = match meta.hook {
                _ if meta.skuid.is_some() => true,
                Some(Hook::Input) => {
                    s.is_some_and(|s| s.full() && s.state == SockInfo::ESTABLISHED)
                }
                Some(Hook::Output) => s.is_some_and(|s| s.full()),
                _ => false,
            };
            attached.then_some(0)
        }
        F::MetaIpsec | F::MetaSecpath | F::MetaSdif | F::MetaSdifname | F::TunnelPath => Some(0),
        F::RtIpsec | F::RtClassid | F::MetaRtclassid => routed(),
        _ => None,
    }
}

/// Whether `f` is one of [`field`]'s keys.
pub(crate) fn is_host(f: Field) -> bool {
    (Field::SocketTransparent..=Field::TunnelId).contains(&f)
}
