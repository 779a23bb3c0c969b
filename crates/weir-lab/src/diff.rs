//! The differential runner: the same ruleset and packets through the kernel router
//! ([`crate::kernel`]) and the weir model ([`crate::model`]), compared packet by packet.
//!
//! For each injected packet, [`kernel_view`] sorts what the kernel did: the frames that left
//! the router and carry the packet (same addresses, protocol and first transport bytes) are
//! its forwarded copies; copies read on the router's raw sockets mean it was delivered locally;
//! anything else the router sent (ICMP errors, TCP resets, echo replies) is the router's own
//! answer and is shown but not compared. [`compare`] then checks: forwarded or not, the output
//! interface, and the bytes of the frame (Ethernet addresses, IP addresses, TTL / hop limit,
//! IPv4 header checksum, ports, transport checksum, payload), local delivery. weir's compiled
//! classifier and its linear reference must also agree.
//!
//! A difference is *explained* when a documented model [`Variant`] (listed in
//! `KNOWN_DIFFERENCES.md` with its reason) predicts exactly what the kernel did; the others
//! count as differences. [`campaign`] runs generated rulesets and captures; each ruleset with an
//! unexplained difference is minimised (one packet, then rule by rule while the difference
//! stays) and written as a reproducer folder: `rules.nft`, `packets.pcap`, `topology.json` and
//! a `README.md` with the command that reruns it.

#[cfg(doc)]
use crate::model::Variant;

mod campaigns;
mod describe;
mod files;
mod known;
mod observed;
mod report;
#[cfg(test)]
mod tests;

pub use campaigns::{campaign, generated, CampaignOptions, CampaignReport};
pub use describe::{compare, describe_frame, describe_kernel, describe_prediction, field_diffs};
pub(crate) use files::read_case;
pub use files::{diff_files, FileDiff};
pub use known::{
    rewrite_merged_flags, rewrite_xt_hotdrop, KnownDifference, KNOWN, KNOWN_DIFFERENCES_MD,
};
pub use observed::{kernel_view, KernelView};
pub use report::{
    compare_all, repro_parts, run_case, write_reproducer, PacketReport, Report, Status,
};
