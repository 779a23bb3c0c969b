//! `nft monitor [trace]`: the event stream of a running weir. The dispatcher publishes what
//! each applied batch changed (as nft's monitor prints it: `add rule ...`, `delete element
//! ...`), the workers the traces of packets a rule marked (`meta nftrace set 1`: `trace id
//! ... rule ... (verdict ...)`); each `nft monitor` client holds a subscription and gets the
//! lines as they come.
//!
//! Publishing costs nothing while nobody listens (one atomic load per packet in the workers;
//! the dispatcher lists the ruleset before and after a batch only for a listener). A client
//! that does not keep up loses lines, counted, rather than stalling the dataplane.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};

/// What a subscription wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wants {
    pub changes: bool,
    pub traces: bool,
}

struct Sub {
    tx: mpsc::SyncSender<String>,
    wants: Wants,
}

/// The subscribers of the process's event stream.
pub struct Hub {
    subs: Mutex<Vec<Sub>>,
    tracing: AtomicBool,
    changes: AtomicBool,
    /// Lines a slow client did not take.
    pub lost: AtomicU64,
    next_trace_id: AtomicU64,
}

/// Lines a subscription may have waiting before more are lost.
const BACKLOG: usize = 4096;

/// The process's hub.
pub fn hub() -> &'static Hub {
    static HUB: OnceLock<Hub> = OnceLock::new();
    HUB.get_or_init(|| Hub {
        subs: Mutex::new(Vec::new()),
        tracing: AtomicBool::new(false),
        changes: AtomicBool::new(false),
        lost: AtomicU64::new(0),
        next_trace_id: AtomicU64::new(0x5eed_0001),
    })
}

impl Hub {
    /// A new subscription: the lines it wants, until the receiver is dropped.
    pub fn subscribe(&self, wants: Wants) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::sync_channel(BACKLOG);
        let mut subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        subs.push(Sub { tx, wants });
        self.update(&subs);
        rx
    }

    fn update(&self, subs: &[Sub]) {
        self.tracing
            .store(subs.iter().any(|s| s.wants.traces), Ordering::Relaxed);
        self.changes
            .store(subs.iter().any(|s| s.wants.changes), Ordering::Relaxed);
    }

    /// Whether a subscriber wants traces (the workers then watch for traced packets).
    pub fn tracing(&self) -> bool {
        self.tracing.load(Ordering::Relaxed)
    }

    /// Whether a subscriber wants the changes.
    pub fn changes(&self) -> bool {
        self.changes.load(Ordering::Relaxed)
    }

    /// A number naming one traced packet's lines.
    pub fn trace_id(&self) -> u64 {
        self.next_trace_id.fetch_add(1, Ordering::Relaxed)
    }

    fn publish(&self, text: &str, trace: bool) {
        if text.is_empty() {
            return;
        }
        let mut subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        let before = subs.len();
        subs.retain(|s| {
            let wanted = if trace {
                s.wants.traces
            } else {
                s.wants.changes
            };
            if !wanted {
                return true;
            }
            match s.tx.try_send(text.to_string()) {
                Ok(()) => true,
                Err(mpsc::TrySendError::Full(_)) => {
                    self.lost.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(mpsc::TrySendError::Disconnected(_)) => false,
            }
        });
        if subs.len() != before {
            self.update(&subs);
        }
    }

    /// What a batch changed (lines as nft's monitor prints them).
    pub fn changed(&self, text: &str) {
        self.publish(text, false)
    }

    /// A traced packet's lines.
    pub fn traced(&self, text: &str) {
        self.publish(text, true)
    }
}

/// A traced packet's lines as nft's monitor prints them: the packet, each rule it matched
/// with the verdict that rule gave, the packet's verdict. `rules` are `FAMILY TABLE CHAIN
/// handle N: TEXT` (what [`crate::trace`] records).
pub fn trace_lines(id: u64, summary: &str, rules: &[String], verdict: &str) -> String {
    let mut out = String::new();
    let mut last_chain = String::new();
    for (i, r) in rules.iter().enumerate() {
        let (head, text) = r.split_once(": ").unwrap_or((r.as_str(), ""));
        let chain = head.split(" handle ").next().unwrap_or(head).to_string();
        if i == 0 {
            out.push_str(&format!("trace id {id:08x} {chain} packet: {summary}\n"));
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let v = match words.as_slice() {
            [.., "jump" | "goto", c] => format!("{} {c}", words[words.len() - 2]),
            [.., w @ ("accept" | "drop" | "return" | "continue")] => w.to_string(),
            _ if words.contains(&"reject") => "drop".to_string(),
            _ => "continue".to_string(),
        };
        out.push_str(&format!(
            "trace id {id:08x} {chain} rule {text} (verdict {v})\n"
        ));
        last_chain = chain;
    }
    if last_chain.is_empty() {
        out.push_str(&format!("trace id {id:08x} packet: {summary}\n"));
    }
    let v = verdict.split_whitespace().next().unwrap_or(verdict);
    let prefix = if last_chain.is_empty() {
        String::new()
    } else {
        format!("{last_chain} ")
    };
    out.push_str(&format!("trace id {id:08x} {prefix}verdict {v}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subscriber gets what it asked for, in order; a dropped one is forgotten; traces are
    /// watched for only while someone wants them.
    #[test]
    fn subscribers_get_what_they_asked_for() {
        let h = hub();
        assert!(!h.tracing());
        let all = h.subscribe(Wants {
            changes: true,
            traces: true,
        });
        let changes = h.subscribe(Wants {
            changes: true,
            traces: false,
        });
        assert!(h.tracing() && h.changes());
        h.changed("add table ip x\n");
        h.traced("trace id 1 ...\n");
        assert_eq!(all.try_recv().unwrap(), "add table ip x\n");
        assert_eq!(all.try_recv().unwrap(), "trace id 1 ...\n");
        assert_eq!(changes.try_recv().unwrap(), "add table ip x\n");
        assert!(changes.try_recv().is_err());
        drop(all);
        h.traced("trace id 2 ...\n");
        assert!(!h.tracing(), "the only trace subscriber is gone");
        drop(changes);
        h.changed("x\n");
        assert!(!h.changes());
    }

    #[test]
    fn trace_lines_as_nft_prints_them() {
        let t = trace_lines(
            0xabc,
            "iif \"eth0\" ip saddr 198.18.0.2",
            &[
                "ip x y handle 2: meta nftrace set 1".into(),
                "ip x y handle 3: icmp type echo-request drop".into(),
            ],
            "drop (dropped by a rule)",
        );
        assert_eq!(
            t,
            "trace id 00000abc ip x y packet: iif \"eth0\" ip saddr 198.18.0.2\n\
             trace id 00000abc ip x y rule meta nftrace set 1 (verdict continue)\n\
             trace id 00000abc ip x y rule icmp type echo-request drop (verdict drop)\n\
             trace id 00000abc ip x y verdict drop\n"
        );
    }
}
