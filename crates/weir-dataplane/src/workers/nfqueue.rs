//! An NFQUEUE worker: one queue, the packets the kernel queues through weir's stateful engine
//! ([`process`]), verdicts in batches ([`Nfq::step`]), and the answers to rejected packets
//! that weir sends itself ([`NfqAnswer`], [`Answers`]: raw sockets, the kernel routes them).

use super::{now_ns, State};
use crate::config::Copy;
use crate::stats::Counts;
use crate::trace;
use std::collections::HashMap;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Decision, DropReason, Meta};
use weir_io::nfqueue::{self, Queue, Verdict};
use weir_lang::ir::Hook;
use weir_router::Reason;
use weir_wire::{Addr, LinkType, Mac, PacketMeta};

/// A worker's queue and what it keeps for it.
pub struct Nfq {
    pub queue: Queue,
    pub ifs: IfNames,
    pub copy_mode: Copy,
    /// The copy range the queue has now.
    pub copy: u16,
    /// The answers to rejected packets.
    pub answers: Answers,
}

impl Nfq {
    /// Receive a batch, decide every packet, send the verdicts.
    pub fn step(&mut self, w: &mut State) -> std::io::Result<()> {
        let q = &mut self.queue;
        let want = copy_range(self.copy_mode, &w.sf);
        if want != self.copy {
            // a reloaded ruleset rewrites packets (or no longer does)
            q.set_copy_range(want)?;
            self.copy = want;
        }
        // per-flow scripts' timers run between batches: with timers, wait for packets no
        // longer than their tick
        q.recv_batch(if w.sf.ticking() { 10 } else { 100 })?;
        // one clock read per batch
        let now = now_ns();
        self.ifs.refresh(now);
        w.sf.set_wall_offset(super::wall_offset());
        w.sf.set_cpu(super::this_cpu());
        // per-flow scripts' timers (at most every TICK_NS), before the batch's packets (their
        // scripts' timer_set see this clock): what they send goes first, with the batch's
        w.sf.tick(now);
        let timers_out = if w.sf.queue_out_pending() {
            w.sf.take_queue_out()
        } else {
            Vec::new()
        };
        // each packet's verdict (and rewritten bytes), what scripts sent for it, and its
        // direction's key
        let mut items: Vec<Item> = Vec::new();
        for (p, payload) in q.packets_mut() {
            let traced = w.trace.is_some()
                && trace::wants(
                    &w.trace,
                    &PacketMeta::parse_captured(
                        payload,
                        LinkType::RawIp,
                        p.cap_len.map_or(payload.len(), |c| c as usize),
                    ),
                );
            // `nft monitor trace` listening: the packets a rule marks (`meta nftrace set 1`)
            let hub = crate::monitor::hub();
            let watched = hub.tracing();
            if watched {
                w.sf.take_nftrace();
            }
            let before = (traced || watched).then(|| w.sf.engine().st.rule_hits.clone());
            let summary = (traced || watched).then(|| trace::packet_summary(&p, payload));
            let (dec, changed, answer) = process(&mut w.sf, &p, payload, &mut self.ifs, now);
            if let (Some(before), Some(summary)) = (before, summary) {
                let v = trace::verdict_text(dec, changed);
                if watched && w.sf.take_nftrace() {
                    let rules = trace::hits(&w.sf, &before);
                    hub.traced(&crate::monitor::trace_lines(
                        hub.trace_id(),
                        &summary,
                        &rules,
                        &v,
                    ));
                }
                if traced {
                    trace::record(&mut w.trace, &w.sf, &summary, &before, &v);
                }
            }
            let c = &mut w.counts;
            c.packets += 1;
            let (verdict, bytes) = match dec {
                Decision::Accept => {
                    c.accepted += 1;
                    let bytes = changed.then(|| {
                        c.rewritten += 1;
                        payload.to_vec()
                    });
                    (Verdict::Accept, bytes)
                }
                Decision::Drop(r) => {
                    c.dropped.add(Reason::of(r), 1);
                    (Verdict::Drop, None)
                }
            };
            if let Some(a) = answer {
                self.answers.send(&mut w.sf, c, a, now);
            }
            // what per-flow scripts sent, marked as weir's own so that it is not queued again
            let out = if w.sf.queue_out_pending() {
                w.sf.take_queue_out()
            } else {
                Vec::new()
            };
            items.push(Item {
                id: p.id,
                verdict,
                bytes,
                key: direction_key(payload),
                out,
            });
        }
        // on the wire in the order the packets came: what scripts sent for a packet goes
        // before its verdict; and when an earlier packet of the same direction of a flow is
        // accepted in this batch, its verdict goes first (the verdicts so far are issued,
        // then the scripts' packets sent). Verdicts and sends stay batched otherwise.
        let mut outbox: Vec<Vec<u8>> = timers_out;
        let mut from = 0;
        let mut accepted_keys: Vec<u64> = Vec::new();
        for i in 0..items.len() {
            if !items[i].out.is_empty() && accepted_keys.contains(&items[i].key) {
                if !outbox.is_empty() {
                    self.answers.send_raw(&mut w.counts, &outbox);
                    outbox.clear();
                }
                for it in &items[from..i] {
                    q.verdict(it.id, it.verdict, it.bytes.as_deref(), None);
                }
                q.flush()?;
                from = i;
                accepted_keys.clear();
            }
            outbox.append(&mut items[i].out);
            if items[i].verdict == Verdict::Accept {
                accepted_keys.push(items[i].key);
            }
        }
        if !outbox.is_empty() {
            self.answers.send_raw(&mut w.counts, &outbox);
        }
        for it in &items[from..] {
            q.verdict(it.id, it.verdict, it.bytes.as_deref(), None);
        }
        q.flush()?;
        w.sf.ct_mut().gc(now, 64);
        Ok(())
    }
}

/// One packet of a batch, decided.
struct Item {
    id: u32,
    verdict: Verdict,
    /// The packet as weir rewrote it, if it did.
    bytes: Option<Vec<u8>>,
    /// What per-flow scripts sent for it (before it).
    out: Vec<Vec<u8>>,
    /// Its direction of its flow ([`direction_key`]).
    key: u64,
}

/// A key of an IP packet's direction of its flow: its addresses and the first four bytes
/// after the fixed IP header (the ports of TCP, UDP and the like; IPv6 extension headers
/// are not walked, which keeps the key the same for every packet of a direction).
fn direction_key(ip: &[u8]) -> u64 {
    let (addrs, l4) = match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let ihl = (ip[0] & 0x0f) as usize * 4;
            (ip.get(12..20), ip.get(ihl..ihl + 4))
        }
        Some(6) => (ip.get(8..40), ip.get(40..44)),
        _ => (None, None),
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    use std::hash::{Hash, Hasher};
    addrs.hash(&mut h);
    l4.hash(&mut h);
    h.finish()
}

/// Bytes of a queued packet copied to weir when only its headers are read: IPv4 or IPv6 with
/// extension headers and a TCP header with options fit.
const HEADER_COPY: u16 = 256;

/// Whether the ruleset may change packets (NAT, header writes) or hand them to per-flow
/// scripts (`queue`, which read payloads and rewrite them), or has connection-tracking helpers
/// (which read payloads): then weir needs them whole.
fn rewrites(sf: &Stateful) -> bool {
    sf.has_nat()
        || sf.ruleset().tables.iter().any(|t| {
            t.ir.chains.iter().any(|c| {
                c.rules.iter().any(|r| {
                    r.exprs.iter().any(|e| {
                        e.is_or_chooses(&|e| {
                            matches!(
                                e,
                                weir_lang::ir::Expr::Assign { .. }
                                    | weir_lang::ir::Expr::Queue(_)
                                    | weir_lang::ir::Expr::CtHelper { .. }
                            )
                        })
                    })
                })
            })
        })
}

/// The rewrites so far (NAT, header writes, per-flow scripts' changes).
fn writes(sf: &Stateful) -> u64 {
    let s = sf.stats();
    s.nat_rewritten + s.header_writes + s.queue_modified
}

pub fn copy_range(mode: Copy, sf: &Stateful) -> u16 {
    match mode {
        Copy::Packet => 0xffff,
        Copy::Headers | Copy::Auto if !rewrites(sf) => HEADER_COPY,
        _ => 0xffff,
    }
}

/// Interface names by index, as the engine's packed name values: looked up once per index
/// (`if_indextoname`, not per packet) and forgotten every [`IfNames::TTL_NS`], so a renamed
/// or replaced interface is seen within that time.
#[derive(Default)]
pub struct IfNames {
    names: HashMap<u32, u128>,
    /// The devices' ARPHRD types (`/sys/class/net/NAME/type`: 1 Ethernet, 772 loopback...).
    types: HashMap<u32, u16>,
    /// The devices' groups (`/sys/class/net/NAME/netdev_group`).
    groups: HashMap<u32, u32>,
    /// The devices' MTUs (`/sys/class/net/NAME/mtu`).
    mtus: HashMap<u32, u32>,
    since: u64,
}

impl IfNames {
    /// How long a name is kept.
    pub const TTL_NS: u64 = 1_000_000_000;

    /// Forget the names when they are older than [`IfNames::TTL_NS`] at `now` (ns).
    pub fn refresh(&mut self, now: u64) {
        if now.saturating_sub(self.since) >= Self::TTL_NS {
            self.names.clear();
            self.types.clear();
            self.groups.clear();
            self.mtus.clear();
            self.since = now;
        }
    }

    /// The device's group (`meta iifgroup`), None without a device.
    fn group(&mut self, idx: u32) -> Option<u32> {
        if idx == 0 {
            return None;
        }
        Some(
            *self
                .groups
                .entry(idx)
                .or_insert_with(|| crate::config::netdev_group(&Self::lookup(idx))),
        )
    }

    /// The device's MTU, 0 when unknown.
    fn mtu(&mut self, idx: u32) -> u32 {
        if idx == 0 {
            return 0;
        }
        *self.mtus.entry(idx).or_insert_with(|| {
            let name = Self::lookup(idx);
            std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0)
        })
    }

    /// `rt mtu` after the kernel routed the packet out of `out` (arrived by `inp`, 0 for the
    /// router's own): the smaller MTU of the two devices (the route back to a forwarded
    /// packet's source is taken as its arrival device's) less the IP and TCP headers; 536
    /// when that leaves nothing; 0 without an output device.
    fn tcp_mss(&mut self, out: u32, inp: u32, v6: bool) -> u16 {
        let mut mtu = self.mtu(out);
        if mtu == 0 {
            return 0;
        }
        let back = self.mtu(inp);
        if back != 0 {
            mtu = mtu.min(back);
        }
        weir_engine::fib::tcp_mss(mtu as usize, v6)
    }

    /// The device's ARPHRD type (`meta iiftype`), 0 when unknown.
    fn kind(&mut self, idx: u32) -> u16 {
        if idx == 0 {
            return 0;
        }
        *self.types.entry(idx).or_insert_with(|| {
            let name = Self::lookup(idx);
            std::fs::read_to_string(format!("/sys/class/net/{name}/type"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0)
        })
    }

    fn value(&mut self, idx: u32) -> u128 {
        if idx == 0 {
            return 0;
        }
        *self.names.entry(idx).or_insert_with(|| {
            let name = Self::lookup(idx);
            if name.is_empty() {
                0
            } else {
                weir_wire::field::ifname_value(&name)
            }
        })
    }

    fn lookup(idx: u32) -> String {
        {
            let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
            // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes into `buf`.
            let p = unsafe { libc::if_indextoname(idx, buf.as_mut_ptr()) };
            if p.is_null() {
                return String::new();
            }
            // SAFETY: on success the buffer holds a NUL-terminated name.
            unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// One queued packet through weir, in place: the verdict, whether weir changed the bytes, and
/// for a rejected packet the answer weir sends its sender.
pub fn process(
    sf: &mut Stateful,
    p: &nfqueue::Packet,
    buf: &mut [u8],
    ifs: &mut IfNames,
    now: u64,
) -> (Decision, bool, Option<NfqAnswer>) {
    let before = writes(sf);
    let wire = p.cap_len.map_or(buf.len(), |c| c as usize);
    let mut pm = PacketMeta::parse_captured(buf, LinkType::RawIp, wire);
    let (iif, oif) = (ifs.value(p.indev), ifs.value(p.outdev));
    let (iiftype, oiftype) = (ifs.kind(p.indev), ifs.kind(p.outdev));
    let (iifgroup, oifgroup) = (ifs.group(p.indev), ifs.group(p.outdev));
    let hooks: &[Hook] = match p.hook {
        0 => &[Hook::Prerouting],
        1 => &[Hook::Prerouting, Hook::Input],
        2 => &[Hook::Prerouting, Hook::Forward, Hook::Postrouting],
        3 => &[Hook::Output, Hook::Postrouting],
        _ => &[Hook::Postrouting],
    };
    let mut pc = PacketCt::default();
    for &h in hooks {
        let mut meta = Meta::with_ifnames("", "");
        let has_in = !matches!(h, Hook::Output);
        let has_out = !matches!(h, Hook::Prerouting | Hook::Input);
        if has_in {
            (meta.iif, meta.iifname, meta.iiftype) = (p.indev, iif, iiftype);
            meta.iifgroup = iifgroup;
        }
        if has_out {
            (meta.oif, meta.oifname, meta.oiftype) = (p.outdev, oif, oiftype);
            meta.oifgroup = oifgroup;
            let inp = if has_in { p.indev } else { 0 };
            meta.rt_mss = ifs.tcp_mss(p.outdev, inp, pm.l3 == weir_wire::L3::Ipv6);
        }
        meta.mark = p.mark;
        (meta.skuid, meta.skgid) = (p.uid, p.gid);
        let d = sf.hook_mut(h, buf, &mut pm, &mut meta, now, &mut pc);
        if let Decision::Drop(why) = d {
            let answer = match why {
                DropReason::Reject(g) => nfq_answer(sf, g, buf, &pm, &pc, p, iif, now),
                _ => None,
            };
            return (d, false, answer);
        }
    }
    // the connection's helper reads the packet here (expectations; no NAT in this mode, so no
    // rewrite)
    let d = sf.finish_frame(buf, &mut pm, &mut pc, now, false);
    (d, writes(sf) != before, None)
}

/// What weir sends itself in NFQUEUE mode for a rejected packet (through
/// [`weir_io::raw::Answerer`]: the kernel routes it).
pub enum NfqAnswer {
    /// A whole IP packet: a TCP reset, already through weir's output and postrouting hooks.
    Packet(Vec<u8>),
    /// An ICMP or ICMPv6 error (type, code) quoting the packet as the rejecting hook saw it,
    /// to its sender, carrying the packet's connection (`ct`, as [`Stateful::answer_ct`]);
    /// made whole once the rate limits let it go ([`NfqAnswer::packet`]), from the source
    /// address the kernel would give it, and taken through weir's output hook (`iif`: the
    /// name value of the interface it leaves by, the packet's input interface).
    Icmp {
        typ: u8,
        code: u8,
        quote: Vec<u8>,
        to: Addr,
        ct: Box<PacketCt>,
        iif: u128,
    },
}

impl NfqAnswer {
    /// The IP packet to send: a reset as it is; an ICMP or ICMPv6 error made whole from
    /// address `src` and taken through weir's output and postrouting hooks (`local_out`,
    /// attached to the connection of the packet it answers, as the kernel's `icmp_send`
    /// does). None when the hooks drop it.
    pub fn packet(self, sf: &mut Stateful, src: Addr, now: u64) -> Option<Vec<u8>> {
        let (typ, code, quote, to, ct, iif) = match self {
            NfqAnswer::Packet(pkt) => return Some(pkt),
            NfqAnswer::Icmp {
                typ,
                code,
                quote,
                to,
                ct,
                iif,
            } => (typ, code, quote, to, ct, iif),
        };
        let none = Mac::default();
        let mut frame =
            weir_engine::answer::icmp_error(src, to, typ, code, 0, &quote, (none, none));
        let mut meta = Meta::with_ifnames("", "");
        meta.oifname = iif;
        sf.local_out(&mut frame, meta, *ct, now)
            .is_accept()
            .then(|| frame[14..].to_vec())
    }
}

/// The answer to queue packet `p` rejected by rule `g` (`buf`, `pm`, `pc`: the packet at the
/// rejecting hook; `iif`: the name value of its input interface, where a reset leaves), as
/// [`refused`] makes it in inline mode.
#[allow(clippy::too_many_arguments)]
fn nfq_answer(
    sf: &mut Stateful,
    g: usize,
    buf: &[u8],
    pm: &PacketMeta,
    pc: &PacketCt,
    p: &nfqueue::Packet,
    iif: u128,
    now: u64,
) -> Option<NfqAnswer> {
    use weir_engine::answer::{self, RejectAnswer};
    // as Linux: no answer to a segment or datagram whose checksum is wrong (the kernel may
    // have checked it already, or left it to the sender's offload)
    let why = DropReason::Reject(g);
    match answer::refused_answer(sf.ruleset(), why, buf, pm, p.checksum_trusted())? {
        RejectAnswer::Icmp(typ, code) => {
            if !answer::icmp_answerable(buf, pm) {
                return None;
            }
            let v6 = pm.l3 == weir_wire::L3::Ipv6;
            Some(NfqAnswer::Icmp {
                typ,
                code,
                quote: buf[..pm.l3_end().min(buf.len()).min(answer::icmp_quote_max(v6))].to_vec(),
                to: Addr::src_of(pm)?,
                ct: Box::new(sf.answer_ct(pc)),
                iif,
            })
        }
        RejectAnswer::Reset => {
            let mut rst = weir_engine::answer::tcp_reset(buf, pm, [0; 6], [0; 6])?;
            let mut meta = Meta::with_ifnames("", "");
            meta.oifname = iif;
            let apc = sf.answer_ct(pc);
            let sent = sf.local_out(&mut rst, meta, apc, now).is_accept();
            sent.then(|| NfqAnswer::Packet(rst[14..].to_vec()))
        }
    }
}

/// NFQUEUE mode: the raw sockets that send the answers to rejected packets (opened with the
/// first one), those that send what per-flow scripts made, and the ICMP rate limit of this
/// worker.
pub struct Answers {
    sock: Option<weir_io::raw::Answerer>,
    failed: bool,
    scripts: Option<weir_io::raw::Answerer>,
    scripts_failed: bool,
    limits: weir_router::IcmpLimits,
}

impl Answers {
    pub fn new(limits: weir_router::IcmpLimits) -> Answers {
        Answers {
            sock: None,
            failed: false,
            scripts: None,
            scripts_failed: false,
            limits,
        }
    }

    /// Send the IP packets per-flow scripts made (the kernel routes them), in order, in
    /// batches; counted in `c`.
    pub fn send_raw(&mut self, c: &mut Counts, pkts: &[Vec<u8>]) {
        if self.scripts.is_none() && !self.scripts_failed {
            match weir_io::raw::Answerer::open_marked(weir_io::raw::SCRIPT_MARK) {
                Ok(s) => self.scripts = Some(s),
                Err(e) => {
                    tracing::error!(error = %e, "cannot open raw sockets: packets per-flow scripts send are not sent");
                    self.scripts_failed = true;
                }
            }
        }
        match &self.scripts {
            Some(s) => {
                let (sent, failed) = s.send_packets(pkts);
                c.script_sent += sent as u64;
                c.script_unsent += failed as u64;
            }
            None => c.script_unsent += pkts.len() as u64,
        }
    }

    /// Send one answer, counted in `c` (an ICMP error first through the rate limits, then
    /// made whole and through weir's output hook).
    pub fn send(&mut self, sf: &mut Stateful, c: &mut Counts, a: NfqAnswer, now: u64) {
        let mut src = Addr::v4(0);
        if let NfqAnswer::Icmp { to, .. } = a {
            // (the kernel's routes are not known here: IPv6 gets the period of a host route)
            if !self.limits.allow(to, None, now) {
                c.icmp_limited += 1;
                return;
            }
            src = match weir_io::raw::source_for(to.ip()) {
                Ok(a) => Addr::from(a),
                Err(_) => {
                    // no route back: the kernel sends nothing either
                    c.answers_failed += 1;
                    return;
                }
            };
        }
        let Some(pkt) = a.packet(sf, src, now) else {
            return;
        };
        if self.sock.is_none() && !self.failed {
            match weir_io::raw::Answerer::open() {
                Ok(s) => self.sock = Some(s),
                Err(e) => {
                    tracing::error!(error = %e, "cannot open raw sockets to answer rejected packets; they are dropped without an answer");
                    self.failed = true;
                }
            }
        }
        let Some(s) = &self.sock else {
            c.answers_failed += 1;
            return;
        };
        let is_icmp = {
            let pm = PacketMeta::parse(&pkt, LinkType::RawIp);
            matches!(pm.l4proto, 1 | 58)
        };
        match s.send_packet(&pkt) {
            Ok(()) if is_icmp => c.icmp_errors += 1,
            Ok(()) => c.resets += 1,
            Err(_) => c.answers_failed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_kept_a_second_then_looked_up_again() {
        let mut ifs = IfNames::default();
        ifs.refresh(5_000_000_000);
        // index 1 is the loopback in every network namespace
        assert_eq!(ifs.value(1), weir_wire::field::ifname_value("lo"));
        assert_eq!(ifs.names.len(), 1);
        ifs.refresh(5_500_000_000);
        assert_eq!(ifs.names.len(), 1, "kept within the second");
        ifs.refresh(6_000_000_000);
        assert!(ifs.names.is_empty(), "forgotten after it");
        assert_eq!(ifs.value(0), 0);
    }

    /// A worker's engine for a ruleset text, with a default connection table.
    fn stateful_of(text: &str) -> Stateful {
        let rs = weir_lang::load_str("t.nft", text)
            .map_err(|_| "ruleset")
            .unwrap()
            .0;
        Stateful::new(
            crate::daemon::engines(&rs, 1).remove(0),
            weir_conntrack::Config::default(),
        )
    }

    #[test]
    fn nfqueue_answers_rejected_packets() {
        use std::net::{Ipv4Addr, Ipv6Addr};
        use weir_io::nfqueue::{SKB_CSUMNOTREADY, SKB_CSUM_NOTVERIFIED};
        use weir_wire::build::{Builder, Tcp};
        let text = r#"table inet f {
  chain fwd {
    type filter hook forward priority 0; policy accept;
    tcp dport 23 reject with tcp reset
    udp dport 9 reject
    ip6 daddr 2001:db8::4 reject with icmpv6 admin-prohibited
  }
  chain out { type filter hook output priority 0; tcp sport 7 tcp flags & rst == rst drop; }
}
"#;
        let mut sf = stateful_of(text);
        let mut ifs = IfNames::default();
        let (c, s) = (Ipv4Addr::new(198, 18, 20, 2), Ipv4Addr::new(198, 18, 21, 2));
        // a forwarded packet as the queue gives it
        fn queued(payload: &[u8], skb_info: u32) -> nfqueue::Packet<'_> {
            nfqueue::Packet {
                id: 1,
                hw_protocol: 0x0800,
                hook: 2,
                mark: 0,
                indev: 0,
                outdev: 0,
                payload,
                cap_len: None,
                skb_info,
                uid: None,
                gid: None,
            }
        }
        let mut ask = |payload: &[u8], skb_info: u32| {
            let mut buf = payload.to_vec();
            process(&mut sf, &queued(payload, skb_info), &mut buf, &mut ifs, 1)
        };
        // a SYN whose checksum the sender's offload fills in later: answered with RST|ACK
        // from the address and port it was sent to
        let mut syn = Builder::raw().tcp(c, s, &Tcp::new(40000, 23, 0x02).seq(7), &[]);
        let n = syn.len();
        syn[n - 3] ^= 0xff; // (inside the checksum: as a partial checksum, not the real one)
        let (d, _, a) = ask(&syn, SKB_CSUMNOTREADY);
        assert!(matches!(d, Decision::Drop(DropReason::Reject(_))));
        let Some(NfqAnswer::Packet(rst)) = a else {
            panic!("no reset")
        };
        let pm = PacketMeta::parse(&rst, LinkType::RawIp);
        assert_eq!(
            (pm.saddr, pm.daddr),
            (u32::from(s) as u128, u32::from(c) as u128)
        );
        assert_eq!((pm.sport, pm.dport, pm.tcp_flags), (23, 40000, 0x14));
        assert!(pm.transport_checksum_ok(&rst) && pm.ipv4_checksum_ok(&rst));
        // the same segment not yet verified by anybody: its checksum is wrong, no answer
        assert!(ask(&syn, SKB_CSUM_NOTVERIFIED).2.is_none());
        // the reset passes weir's output hook, which may drop it
        let syn7 = Builder::raw().tcp(c, s, &Tcp::new(40001, 7, 0x02), &[]);
        let mut sf7 = stateful_of(&text.replace("tcp dport 23 reject", "tcp dport 7 reject"));
        let mut buf = syn7.clone();
        let p = queued(&syn7, 0);
        let (d, _, a) = process(&mut sf7, &p, &mut buf, &mut IfNames::default(), 1);
        assert!(matches!(d, Decision::Drop(DropReason::Reject(_))) && a.is_none());
        // ICMP errors quote the packet as it arrived, to its sender, from the address the
        // kernel picks, through weir's output hook carrying the packet's connection
        let udp = Builder::raw().udp(c, s, 5000, 9, b"x");
        let router = u32::from(Ipv4Addr::new(198, 18, 20, 1)) as u128;
        let whole = |sf: &mut Stateful, a: Option<NfqAnswer>| {
            let a = a.expect("an ICMP answer");
            assert!(matches!(a, NfqAnswer::Icmp { .. }));
            a.packet(sf, Addr::v4(router as u32), 1)
        };
        match ask(&udp, 0).2 {
            Some(NfqAnswer::Icmp {
                typ: 3,
                code: 3,
                ref quote,
                to,
                ..
            }) => {
                assert_eq!(quote, &udp);
                assert_eq!(to, Addr::from(c));
            }
            _ => panic!("no port unreachable"),
        }
        let mut sfw = stateful_of(text);
        let mut buf = udp.clone();
        let (_, _, a) = process(
            &mut sfw,
            &queued(&udp, 0),
            &mut buf,
            &mut IfNames::default(),
            1,
        );
        let e = whole(&mut sfw, a).expect("the error passes an output hook that lets it");
        let pm = PacketMeta::parse(&e, LinkType::RawIp);
        assert_eq!((pm.saddr, pm.daddr), (router, u32::from(c) as u128));
        assert!(pm.ipv4_checksum_ok(&e));
        let l4 = pm.l4_off as usize;
        assert_eq!((e[l4], e[l4 + 1]), (3, 3));
        assert_eq!(weir_wire::checksum::checksum(&e[l4..]), 0);
        assert_eq!(&e[l4 + 8..], &udp[..]);
        // an output chain that drops related ICMP (the error carries the connection) stops it
        let mut sfo = stateful_of(&format!(
            "{text}\ntable inet o {{ chain out {{ type filter hook output priority 0; meta l4proto icmp ct state related drop; }} }}\n"
        ));
        let mut buf = udp.clone();
        let (_, _, a) = process(
            &mut sfo,
            &queued(&udp, 0),
            &mut buf,
            &mut IfNames::default(),
            1,
        );
        assert!(whole(&mut sfo, a).is_none(), "dropped by the output hook");
        let (c6, s6): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::2".parse().unwrap(),
            "2001:db8::4".parse().unwrap(),
        );
        let udp6 = Builder::raw().udp(c6, s6, 5000, 53, b"x");
        assert!(matches!(
            ask(&udp6, 0).2,
            Some(NfqAnswer::Icmp {
                typ: 1,
                code: 1,
                to,
                ..
            }) if to == Addr::from(c6)
        ));
    }
}
