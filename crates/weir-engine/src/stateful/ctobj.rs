//! `ct timeout` and `ct expectation` objects on connections (`nft_ct_timeout_obj_eval`,
//! `nft_ct_expect_obj_eval`).
//!
//! - `ct timeout set "NAME"` gives a new connection the object's timeout policy: the
//!   connection table holds the ruleset's policies (each the configured timeouts with the
//!   states the object names replaced) and each entry its policy's number; the entry is
//!   refreshed with its state's timeout at once, as the kernel does. A reload installs the new
//!   ruleset's policies; entries keep their numbers.
//! - `ct expectation set "NAME"` on a connection's first packet makes, once the connection
//!   is confirmed, an expectation of a connection from its peer to `dport` (any source port),
//!   `related` when it comes; the expected connection is translated by the `nat` chains as any
//!   new one. At most `size` per connection.

use super::{CtPkt, PacketCt, Stateful};
use crate::eval::{Engine, Meta};
use weir_conntrack::{Dir, EntryId, Follow, Timeouts, Tuple};
use weir_lang::ir::{CtExpectation, CtTimeoutPolicy};

/// The timeouts a policy sets over `base`.
fn timeouts_of(p: &CtTimeoutPolicy, base: &Timeouts) -> Timeouts {
    let mut t = *base;
    for (state, ms) in &p.values {
        let d = std::time::Duration::from_millis(*ms);
        let field = match (p.l4proto, state.as_str()) {
            (6, "syn_sent") => &mut t.tcp_syn_sent,
            (6, "syn_recv") => &mut t.tcp_syn_recv,
            (6, "established") => &mut t.tcp_established,
            (6, "fin_wait") => &mut t.tcp_fin_wait,
            (6, "close_wait") => &mut t.tcp_close_wait,
            (6, "last_ack") => &mut t.tcp_last_ack,
            (6, "time_wait") => &mut t.tcp_time_wait,
            (6, "close") => &mut t.tcp_close,
            (6, "syn_sent2") => &mut t.tcp_syn_sent2,
            (6, "retrans") => &mut t.tcp_retrans,
            (6, "unack") => &mut t.tcp_unack,
            (17 | 136, "unreplied") => &mut t.udp,
            (17 | 136, "replied") => &mut t.udp_stream,
            (1 | 58, "timeout") => &mut t.icmp,
            _ => continue,
        };
        *field = d;
    }
    t
}

/// The policies of a ruleset's `ct timeout` objects, and each object's number (1-based).
pub(super) fn policies(eng: &Engine, base: &Timeouts) -> (Vec<Timeouts>, Vec<Vec<u8>>) {
    let mut all = Vec::new();
    let mut ids = Vec::new();
    for t in &eng.rs.tables {
        let mut mine = Vec::new();
        for (_, p) in &t.ir.ct_timeouts {
            if all.len() < 255 {
                all.push(timeouts_of(p, base));
                mine.push(all.len() as u8);
            } else {
                mine.push(0);
            }
        }
        ids.push(mine);
    }
    (all, ids)
}

impl Stateful {
    /// After a chain: what its `ct timeout set` / `ct expectation set` asked of a new
    /// connection.
    pub(super) fn ct_objects(&mut self, meta: &mut Meta, pc: &mut PacketCt, now_ns: u64) {
        if let Some((ti, oi)) = meta.ct_timeout.take() {
            let id = self
                .timeout_ids
                .get(ti as usize)
                .and_then(|t| t.get(oi as usize))
                .copied()
                .unwrap_or(0);
            if let (CtPkt::New(pend), true) = (&mut pc.ct, id != 0) {
                self.ct.set_policy(pend, id, now_ns);
                self.stats.ct_timeout_set += 1;
            }
        }
        if let Some(x) = meta.ct_expect.take() {
            if let CtPkt::New(_) = pc.ct {
                pc.expect = Some(x);
            }
        }
    }

    /// A connection just confirmed expects one from its peer (`ct expectation set`).
    pub(super) fn expect_object(&mut self, id: EntryId, x: &CtExpectation, now_ns: u64) {
        let Some(reply) = self.ct.tuple(id, Dir::Reply) else {
            return;
        };
        let mine = self
            .ct
            .expectations()
            .iter()
            .filter(|e| e.master == id)
            .count();
        if mine >= x.size as usize {
            return;
        }
        let tuple = Tuple {
            zone: 0,
            src: reply.src,
            dst: reply.dst,
            sport: 0,
            dport: x.dport,
            proto: x.l4proto,
            v6: reply.v6,
        };
        let timeout = x.timeout_ms.saturating_mul(1_000_000);
        match self
            .ct
            .expect(id, tuple, true, Follow::default(), timeout, now_ns)
        {
            Ok(()) => self.stats.helper_expectations += 1,
            Err(_) => self.stats.helper_expect_refused += 1,
        }
    }
}
