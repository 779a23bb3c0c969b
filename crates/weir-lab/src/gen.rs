//! Generators with a fixed seed: the campaign's router ([`world`]), random stateless rulesets
//! ([`ruleset`]) and random conversations between hosts around the router ([`capture`]).
//!
//! The router: a LAN, a DMZ with two gateways on its link (198.18.1.254 for 198.18.100.0/24,
//! 198.18.0.128/25 and 2001:db8:100::/48, 198.18.1.253 for 198.18.101.0/24 and
//! 2001:db8:101::/48, each with its own MAC), a WAN with two gateways (198.19.0.0/16 and the
//! IPv6 default through 198.19.0.1, 198.19.128.0/17 and 2001:db8:beef::/48 through
//! 198.19.0.3; no IPv4 default route, so some sources have no route at all) and an IPv6-only
//! segment. IPv4's reverse path filter is strict on the LAN and the WAN, loose on the DMZ, off
//! on the IPv6-only segment (`rp_filter` in the topology; Linux has none for IPv6).
//!
//! Rulesets stay in the subset both nft and weir evaluate without connection tracking: `inet`,
//! `ip` and `ip6` tables; a `forward` base chain (policy accept or drop) and often `prerouting`,
//! `input`, `postrouting`, `output`, sometimes a second table at another priority; user chains
//! reached by `jump`/`goto` (only towards later chains: no loops) ending in `return` or
//! falling through; addresses, prefixes, ranges, inline sets, named sets with `flags
//! interval`, concatenations (`ip saddr . tcp dport`), verdict maps (inline and named),
//! `meta mark set` then `meta mark` matches, `iifname`/`oifname` (exact, sets, wildcards),
//! `tcp flags` in its several forms, ICMP types, `meta l4proto`, TTL/hop limit and length
//! comparisons, `counter`, `reject`, negations. The shapes are weighted towards what real
//! firewalls say: "LAN to WAN accept", block lists, published ports, marks set early and
//! read later. Set elements never overlap (nft refuses overlapping intervals). Also connection
//! tracking (`ct state` and friends, `raw` chains with `notrack`, `ct count`), sets filled from
//! the packet path, stateless NAT (`ip daddr set`) and `nat` tables.
//!
//! About a third of the rulesets add a `netdev` table whose chains are bound to devices:
//! `ingress` chains (`device "weirlan0"` and the others, several priorities) with drops
//! (`ip saddr ... drop`, `udp dport ... drop`), marks (`meta mark set 0x..`, then
//! `meta mark 0x.. drop|accept` in the forward chain), stateless rewrites (`ip daddr set`,
//! `ip saddr set`, `udp dport set`, `tcp dport set`, `ether daddr set`), `fwd to "DEV"` (the
//! frame leaves by that device as it came, sometimes with `ether saddr set`) and `fwd ip|ip6
//! to ADDR device "weirdmz0"`; `egress` chains with drops (addresses, ports, TTL, the marks),
//! counters and `ether daddr set`. Policies accept, and every rule that drops or forwards has
//! an IP match, so the lab's ARP barrier passes.
//!
//! Conversations: TCP handshakes with data and FIN/RST, UDP requests and answers, ICMP echo,
//! ICMP errors quoting a packet, odd TCP flag combinations, TTL 1 and 2, spoofed sources (a
//! source routed out of another interface than the arrival one, an IPv4 source no route
//! covers; to a host or to the router itself, sometimes answered), IPv4 fragments and IPv6
//! extension headers, packets to the router itself (its addresses, a subnet broadcast, the
//! subnet-router anycast address), hosts behind each of the four gateways; about a third
//! IPv6. Every address is in 198.18.0.0/15 or 2001:db8::/32.

mod conversations;
mod nat;
mod netdev;
mod router;
mod rulesets;
#[cfg(test)]
mod tests;

pub use conversations::{capture, GenCapture};
pub(crate) use router::IFS;
pub use router::{world, Host, HostKind, World};
pub(crate) use rulesets::{disjoint, prefix_interval, PORTS, PORT_RANGES};
pub use rulesets::{ruleset, Fam, GenChain, GenRuleset, GenSet, GenTable};
