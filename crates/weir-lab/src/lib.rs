//! `weir-lab`: the kernel as oracle. The same ruleset and the same packets go through a real
//! Linux router (nftables in network namespaces) and through a model of that router built on
//! the weir engine; every packet's fate and rewritten headers must agree.
//!
//! The layers, bottom up:
//!
//! - [`topology`]: the router both sides model (interfaces, addresses, IPv4 reverse path
//!   filters, routes, neighbours, the input interface of each packet) as the JSON file of issue 6, checked, with the routing
//!   lookups.
//! - [`model`] (no root): the weir side. Linux's receive/forward path in a few steps (netdev
//!   ingress, IP input checks, `prerouting`, routing and the reverse path filter, `input` or
//!   TTL decrement + `forward`, `postrouting`, neighbour, Ethernet rewrite, netdev egress) with
//!   [`weir_engine::Engine::process`] at each hook, through weir's own router path.
//! - [`kernel`] (root): the kernel side. Namespaces `weirlab-*`, veth pairs, `nft -f`, AF_PACKET
//!   injection and capture with an ARP barrier that closes each packet's window exactly, raw
//!   sockets for local delivery, teardown on drop and cleanup of stale namespaces. [`sys`] has
//!   the system calls under it.
//! - [`diff`]: the comparison, the known differences (`KNOWN_DIFFERENCES.md`), reports, the
//!   reproducer folders, `diff_files` (one given ruleset and capture) and the `campaign`.
//! - [`gen`] and [`rng`]: the campaign's router (two gateways on the DMZ and on the WAN,
//!   rp_filter strict and loose), random rulesets (netdev ingress and egress chains included)
//!   and random conversations (spoofed sources included) from a fixed seed.
//! - [`gen_ipt`] and [`ipt`]: the same for iptables: random stateless iptables-save /
//!   ip6tables-save rulesets, loaded in the kernel with `iptables-restore` and in weir with its
//!   importer, and their campaign.
//!
//! `weir lab` (crates/weir/src/lab.rs) is the command line over this crate.

pub mod diff;
pub mod gen;
pub mod gen_ipt;
pub mod ipt;
pub mod kernel;
pub mod model;
pub mod oracle;
pub mod pylab;
pub mod rng;
pub mod sys;
pub mod topology;

pub use diff::{campaign, diff_files, CampaignOptions, CampaignReport, Report};
pub use kernel::{IptBackend, Lab, LabOptions};
pub use topology::{Router, Topology};

use std::fmt;

/// Exit code of a lab command that cannot run here (the automake "skipped" convention).
pub const EXIT_UNAVAILABLE: u8 = 77;

/// Why a lab run failed.
#[derive(Debug)]
pub enum Error {
    /// The lab cannot run here: not root, or `ip` / `nft` missing.
    Unavailable(String),
    /// Bad input (a file that cannot be read, parsed or checked).
    Input(String),
    /// nft (or iptables-restore) refused the ruleset: its own message.
    KernelRefused(String),
    /// A system call or a command failed.
    System(String),
    /// SIGINT / SIGTERM: the lab stopped and cleaned up.
    Interrupted,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(s) => write!(f, "the kernel lab cannot run here: {s}"),
            Error::Input(s) => write!(f, "{s}"),
            Error::KernelRefused(s) => write!(f, "the kernel refuses the ruleset:\n{s}"),
            Error::System(s) => write!(f, "lab: {s}"),
            Error::Interrupted => write!(f, "interrupted; the lab's namespaces were removed"),
        }
    }
}

impl std::error::Error for Error {}
