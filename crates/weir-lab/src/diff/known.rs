//! The known differences between weir and the kernel ([`KNOWN`], documented in
//! `KNOWN_DIFFERENCES.md`): the model variant, ruleset rewrite or fix that reproduces each.

use crate::model::Variant;

/// A documented, intentional (or acknowledged) difference between weir and the kernel.
#[derive(Clone, Copy, Debug)]
pub struct KnownDifference {
    /// The heading of its section in `KNOWN_DIFFERENCES.md`.
    pub id: &'static str,
    pub summary: &'static str,
    /// The model variant that reproduces the kernel.
    pub variant: Variant,
    /// Or a rewrite of the ruleset text into weir syntax that means what nft means (None when
    /// the text has nothing to rewrite).
    pub rewrite: Option<fn(&str) -> Option<String>>,
    /// Or a change of the compiled ruleset (false when it changes nothing).
    pub fix: Option<fn(&mut weir_engine::Compiled) -> bool>,
    /// The variant changes state that later packets see (a set an earlier packet filled, a
    /// connection it opened): a packet is then predicted again by a model that ran the
    /// packets before it with the variant too, not only from weir's state before it.
    pub replays: bool,
}

/// nft 1.0.6 merges adjacent payload matches into one compare and, doing so, turns the
/// implicit "any of these bits" test of `tcp flags ack` into an exact `tcp flags == ack`
/// (`nft --debug=netlink`: `payload load 3b @ transport header + 13 ... cmp eq 0x00f0fa10`).
/// Spell that out where `tcp flags X` and `tcp window N` are consecutive matches.
pub fn rewrite_merged_flags(text: &str) -> Option<String> {
    let mut changed = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let (indent, body) = l.split_at(l.len() - l.trim_start().len());
            let t: Vec<&str> = body.split(' ').collect();
            let mut out: Vec<String> = t.iter().map(|s| s.to_string()).collect();
            for i in 0..t.len() {
                let flags_at =
                    |j: usize| t.get(j) == Some(&"tcp") && t.get(j + 1) == Some(&"flags");
                let window_at =
                    |j: usize| t.get(j) == Some(&"tcp") && t.get(j + 1) == Some(&"window");
                if !flags_at(i) {
                    continue;
                }
                let Some(v) = t.get(i + 2) else { continue };
                let bare =
                    v.starts_with(|c: char| c.is_ascii_alphabetic()) && t.get(i + 3) != Some(&"/");
                if bare && (window_at(i + 3) || (i >= 3 && window_at(i - 3))) {
                    out[i + 1] = "flags ==".into();
                    changed = true;
                }
            }
            format!("{indent}{}", out.join(" "))
        })
        .collect();
    changed.then(|| lines.join("\n"))
}

/// iptables' `-m icmp --icmp-type` / `-m icmp6 --icmpv6-type` (xt_icmp, used through
/// nft_compat by iptables-nft too) *drops* the packet ("hotdrop") when its ICMP header is
/// shorter than 8 bytes, whatever the rule says; nft's `icmp type` (what weir's importer emits)
/// just does not match. Spell the drop out before each imported rule (lines tagged
/// `comment "iptables line N"`) with an ICMP type match: the rule's matches before it, then
/// "ICMP header shorter than 8 bytes" (IPv4 without options: `ip length < 28`; IPv6 without
/// extension headers: `ip6 length < 8`), then `drop`.
pub fn rewrite_xt_hotdrop(text: &str) -> Option<String> {
    let mut changed = false;
    let mut out = Vec::new();
    for l in text.lines() {
        if l.contains("comment \"iptables line ") {
            let (indent, body) = l.split_at(l.len() - l.trim_start().len());
            // the matches: the importer puts `counter` after them (`reject with icmp type`
            // is a statement)
            let matches = body.split(" counter").next().unwrap_or(body);
            let mut drop_at = None;
            for (sel, short) in [
                ("icmp type ", "ip hdrlength 5 ip length < 28"),
                ("icmpv6 type ", "ip6 nexthdr ipv6-icmp ip6 length < 8"),
            ] {
                let at = matches
                    .find(&format!(" {sel}"))
                    .map(|i| i + 1)
                    .or_else(|| matches.starts_with(sel).then_some(0));
                if let Some(i) = at {
                    drop_at = Some((body[..i].to_string(), short));
                    break;
                }
            }
            // `-m icmp --icmp-type any` imports as no type match at all, and xt_icmp still
            // reads the header: the drop follows the protocol match
            let any = "meta l4proto icmp ";
            if drop_at.is_none() {
                if let Some(i) = format!(" {matches} ").find(&format!(" {any}")) {
                    let end = (i + any.len()).min(body.len());
                    drop_at = Some((
                        format!("{} ", body[..end].trim_end()),
                        "ip hdrlength 5 ip length < 28",
                    ));
                }
            }
            if let Some((before, short)) = drop_at {
                out.push(format!("{indent}{before}{short} drop"));
                changed = true;
            }
        }
        out.push(l.to_string());
    }
    changed.then(|| out.join("\n"))
}

/// Every known difference. Each has a section in `KNOWN_DIFFERENCES.md` (a test checks it).
pub const KNOWN: &[KnownDifference] = &[
    KnownDifference {
        id: "fragment-transport",
        summary: "open: the kernel reads a non-first fragment's payload as its transport header, weir gives it none",
        variant: Variant { fragment_transport: true, ..Variant::WEIR },
        rewrite: None,
        fix: None,
        replays: true,
    },
    KnownDifference {
        id: "fragment-reassembly",
        summary: "intentional: with connection tracking the kernel holds fragments until their datagram is whole; weir forwards each one after its first",
        variant: Variant { holds_fragments: true, ..Variant::WEIR },
        rewrite: None,
        fix: None,
        replays: true,
    },
    KnownDifference {
        id: "malformed-transport",
        summary: "open: the kernel reads a broken transport header byte by byte, weir gives it no transport fields",
        variant: Variant { raw_transport: true, ..Variant::WEIR },
        rewrite: None,
        fix: None,
        replays: true,
    },
    KnownDifference {
        id: "nft-merges-flags",
        summary: "nft 1.0.6 bug: `tcp flags ack` next to `tcp window N` is merged into an exact compare of the flags",
        variant: Variant::WEIR,
        rewrite: Some(rewrite_merged_flags),
        fix: None,
        replays: false,
    },
    KnownDifference {
        id: "xt-icmp-hotdrop",
        summary: "iptables' icmp/icmp6 match drops a packet whose ICMP header is cut short; nft's `icmp type` (weir's import) does not match it",
        variant: Variant::WEIR,
        rewrite: Some(rewrite_xt_hotdrop),
        fix: None,
        replays: false,
    },
];

/// The text of `KNOWN_DIFFERENCES.md`.
pub const KNOWN_DIFFERENCES_MD: &str = include_str!("../../KNOWN_DIFFERENCES.md");
