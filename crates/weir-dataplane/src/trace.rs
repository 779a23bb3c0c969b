//! `weir ctl trace`: the next packets a filter matches, with the rules they hit and what
//! became of them ([`Trace`]), and the one-line summaries of frames and queued packets.

use crate::control::{Filter, Reply, Traced, TRACE_SECONDS};
use std::sync::mpsc;
use std::time::Instant;
use weir_engine::stateful::Stateful;
use weir_engine::Decision;
use weir_wire::{LinkType, PacketMeta};

/// A trace in progress on one worker.
pub struct Trace {
    pub filter: Filter,
    /// Packets still wanted.
    pub left: usize,
    pub traced: Vec<Traced>,
    pub reply: mpsc::Sender<Reply>,
    pub until: Instant,
}

impl Trace {
    pub fn new(n: usize, filter: Filter, reply: mpsc::Sender<Reply>) -> Trace {
        Trace {
            filter,
            left: n,
            traced: Vec::new(),
            reply,
            until: Instant::now() + std::time::Duration::from_secs(TRACE_SECONDS),
        }
    }

    /// Whether the trace is complete or out of time.
    pub fn done(&self) -> bool {
        self.left == 0 || Instant::now() >= self.until
    }

    /// Send what it traced.
    pub fn finish(self) {
        let _ = self.reply.send(Reply::Trace(self.traced));
    }
}

/// Whether a trace is on and wants this packet.
pub fn wants(trace: &Option<Trace>, pm: &PacketMeta) -> bool {
    trace.as_ref().is_some_and(|t| {
        t.filter.matches(&[weir_conntrack::Tuple {
            zone: 0,
            src: pm.saddr,
            dst: pm.daddr,
            sport: pm.sport,
            dport: pm.dport,
            proto: pm.l4proto,
            v6: pm.l3 == weir_wire::L3::Ipv6,
        }])
    })
}

/// Add a traced packet: the rules whose counters it moved (`before`: the counters before
/// it), its verdict.
pub fn record(
    trace: &mut Option<Trace>,
    sf: &Stateful,
    summary: &str,
    before: &[(u64, u64)],
    verdict: &str,
) {
    let Some(t) = trace.as_mut() else { return };
    t.left = t.left.saturating_sub(1);
    let rules = hits(sf, before);
    t.traced.push(Traced {
        summary: summary.to_string(),
        rules,
        verdict: verdict.to_string(),
    });
}

/// The rules whose counters a packet moved (`before`: the counters before it), each as
/// `FAMILY TABLE CHAIN handle N: TEXT`.
pub fn hits(sf: &Stateful, before: &[(u64, u64)]) -> Vec<String> {
    let rs = sf.ruleset();
    let hits = &sf.engine().st.rule_hits;
    let mut rules = Vec::new();
    for tb in &rs.tables {
        for c in &tb.chains {
            for r in c.rules() {
                let now = hits.get(r.gid).map_or(0, |h| h.0);
                if now > before.get(r.gid).map_or(0, |h| h.0) {
                    rules.push(format!(
                        "{} {} {} handle {}: {}",
                        tb.family.name(),
                        tb.name,
                        c.name,
                        r.handle,
                        r.text
                    ));
                }
            }
        }
    }
    rules
}

/// A verdict as a trace shows it.
pub fn verdict_text(d: Decision, changed: bool) -> String {
    match d {
        Decision::Accept if changed => "accept (rewritten)".into(),
        Decision::Accept => "accept".into(),
        Decision::Drop(r) => format!("drop ({})", weir_router::Reason::of(r).name()),
    }
}

/// An address and port as a trace or `ct list` shows them.
pub fn endpoint(a: u128, port: u16, v6: bool) -> String {
    if v6 {
        format!("[{}]:{port}", std::net::Ipv6Addr::from(a))
    } else {
        format!("{}:{port}", std::net::Ipv4Addr::from(a as u32))
    }
}

/// One line about a frame the inline router read (for traces).
pub fn frame_summary(frame: &[u8], port: &str) -> String {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let v6 = pm.l3 == weir_wire::L3::Ipv6;
    format!(
        "in {port}: proto {} {} -> {} len {}",
        pm.l4proto,
        endpoint(pm.saddr, pm.sport, v6),
        endpoint(pm.daddr, pm.dport, v6),
        pm.len
    )
}

/// One line about a queued packet (for traces).
pub fn packet_summary(p: &weir_io::nfqueue::Packet, payload: &[u8]) -> String {
    let pm = PacketMeta::parse_captured(
        payload,
        LinkType::RawIp,
        p.cap_len.map_or(payload.len(), |c| c as usize),
    );
    let v6 = pm.l3 == weir_wire::L3::Ipv6;
    let hook = ["prerouting", "input", "forward", "output", "postrouting"]
        .get(p.hook as usize)
        .unwrap_or(&"?");
    format!(
        "{hook}: proto {} {} -> {} len {} (in ifindex {}, out ifindex {})",
        pm.l4proto,
        endpoint(pm.saddr, pm.sport, v6),
        endpoint(pm.daddr, pm.dport, v6),
        pm.len,
        p.indev,
        p.outdev
    )
}
