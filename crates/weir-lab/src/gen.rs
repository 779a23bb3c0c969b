//! Generators with a fixed seed: the campaign's router ([`world`]), random stateless rulesets
//! ([`ruleset`]) and random conversations between hosts around the router ([`capture`]).
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
//! read later. Set elements never overlap (nft refuses overlapping intervals).
//!
//! Conversations: TCP handshakes with data and FIN/RST, UDP requests and answers, ICMP echo,
//! ICMP errors quoting a packet, odd TCP flag combinations, TTL 1 and 2, spoofed sources, IPv4
//! fragments and IPv6 extension headers, packets to the router itself (its addresses, a subnet
//! broadcast, the subnet-router anycast address); about a third IPv6. Every address is in
//! 198.18.0.0/15 or 2001:db8::/32.

mod conversations;
mod router;
mod rulesets;
#[cfg(test)]
mod tests;

pub use conversations::{capture, GenCapture};
pub(crate) use router::IFS;
pub use router::{world, Host, HostKind, World};
pub(crate) use rulesets::{disjoint, prefix_interval, PORTS, PORT_RANGES};
pub use rulesets::{ruleset, Fam, GenChain, GenRuleset, GenSet, GenTable};
