//! Named stateful objects (`counter NAME { }`, `quota NAME { }`, `limit NAME { }`) and the
//! references to them, as the kernel's `nft_objref` evaluates them: the object's state is the
//! table's, shared by every rule that names it (a counter counts what all its rules send it, a
//! quota's bytes grow across rules, a limit is one token bucket), and a key an object map
//! does not hold stops the rule (`nft_objref_map_eval`). The state survives a reload when the
//! table still has an object of that kind and name ([`carry`]).

use crate::compile::{CObjRef, CObjTarget, CTable};
use crate::eval::{limit_pass, set_get, Bucket, Engine, Pkt, State};
use crate::sets::MAX_KEY;
use std::sync::atomic::Ordering;
use weir_lang::ir::{MapValue, ObjKind};

/// A `quota` statement of a rule of table `ti` (its own, at `slot`, or a named one) consumes
/// `bytes`: whether the rule goes on.
pub(crate) fn quota(
    t: &CTable,
    ti: usize,
    q: &weir_lang::ir::Quota,
    slot: usize,
    st: &mut State,
    bytes: u64,
) -> bool {
    if let Some(n) = q.named {
        return named_quota(t, ti, n, st, bytes);
    }
    let used = match st.shared.as_deref().and_then(|s| s.quotas.get(slot)) {
        Some(a) => a.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes),
        None => match st.quotas.get_mut(slot) {
            Some(u) => {
                *u = u.saturating_add(bytes);
                *u
            }
            None => return false,
        },
    };
    // as nft_quota: over once the bytes consumed reach the quota; `quota until N` matches
    // while under, `quota over N` once over
    (used >= q.bytes) == q.over
}

/// A named quota of table `ti` consumes `bytes` (`nft_quota_do_eval`, under the shared
/// atomic when the workers share one): whether the rule goes on. As the kernel, the bytes are
/// counted first; the quota is over once they reach it, and `quota name` stops the rule then
/// (an `over` quota stops it until then).
pub(crate) fn named_quota(t: &CTable, ti: usize, q: usize, st: &mut State, bytes: u64) -> bool {
    let Some((_, cfg)) = t.ir.quotas.get(q) else {
        return false;
    };
    let shared = st
        .shared
        .as_deref()
        .and_then(|s| s.named_quotas.get(ti)?.get(q));
    let used = match shared {
        Some(a) => a.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes),
        None => match st.named_quotas.get_mut(ti).and_then(|v| v.get_mut(q)) {
            Some(u) => {
                *u = u.saturating_add(bytes);
                *u
            }
            None => return false,
        },
    };
    (used >= cfg.bytes) == cfg.over
}

/// A named limit of table `ti` (`nft_limit_obj_eval`): one token bucket for every rule that
/// names it (and every worker, when they share one). Whether the rule goes on.
fn named_limit(t: &CTable, ti: usize, l: usize, st: &mut State, now_ns: u64, bytes: u64) -> bool {
    let Some((_, cfg)) = t.ir.limits.get(l) else {
        return false;
    };
    match st
        .shared
        .as_deref()
        .and_then(|s| s.named_limits.get(ti)?.get(l))
    {
        Some(b) => {
            // (a poisoned lock held a bucket whose update was cut short: still a valid state)
            let mut b = b.lock().unwrap_or_else(|e| e.into_inner());
            limit_pass(&mut b, cfg, now_ns, bytes)
        }
        None => match st.named_limits.get_mut(ti).and_then(|v| v.get_mut(l)) {
            Some(b) => limit_pass(b, cfg, now_ns, bytes),
            None => false,
        },
    }
}

/// Evaluate an object reference of a rule of table `ti` for a packet of `bytes`: whether the
/// rule goes on.
pub(crate) fn objref(
    t: &CTable,
    ti: usize,
    o: &CObjRef,
    p: &Pkt,
    st: &mut State,
    bytes: u64,
) -> bool {
    let i = match &o.target {
        CObjTarget::Name(i) => *i,
        CObjTarget::Map { key, map } => {
            let mut kv = [0u128; MAX_KEY];
            let Some(n) = p.key(key, st, &mut kv) else {
                return false;
            };
            match set_get(t, map, &kv[..n], st, p.now_ns) {
                Some(MapValue::Value(v)) => match v.first() {
                    Some(&i) => i as usize,
                    None => return false,
                },
                // the key is not in the map: the rule stops (NFT_BREAK)
                _ => return false,
            }
        }
    };
    match o.kind {
        ObjKind::Counter => match st.named_counters.get_mut(ti).and_then(|v| v.get_mut(i)) {
            Some(c) => {
                c.0 += 1;
                c.1 += bytes;
                true
            }
            None => false,
        },
        ObjKind::Quota => named_quota(t, ti, i, st, bytes),
        ObjKind::Limit => named_limit(t, ti, i, st, p.now_ns, bytes),
    }
}

/// The bytes named quota `qi` of table `ti` has used (the workers' shared value when they
/// share one).
pub fn quota_used(eng: &Engine, ti: usize, qi: usize) -> Option<u64> {
    match eng.st.shared.as_deref() {
        Some(s) => s
            .named_quotas
            .get(ti)?
            .get(qi)
            .map(|a| a.load(Ordering::Relaxed)),
        None => eng.st.named_quotas.get(ti)?.get(qi).copied(),
    }
}

/// Carry the named objects' state of `old` into `fresh` (a reload): each counter, quota and
/// limit of a table of the same family and name that still has an object of the same kind
/// and name keeps its counts, bytes used, or tokens. Objects that are new start from their
/// declaration. With state shared between workers, the shared values are carried too (each
/// worker's reload copies the same values).
pub fn carry(fresh: &mut Engine, old: &Engine) {
    for (ti, t) in fresh.rs.tables.iter().enumerate() {
        let Some(oi) = old
            .rs
            .tables
            .iter()
            .position(|o| o.family == t.family && o.name == t.name)
        else {
            continue;
        };
        let ot = &old.rs.tables[oi].ir;
        let (fst, ost) = (&mut fresh.st, &old.st);
        for (ci, c) in t.ir.counters.iter().enumerate() {
            let Some(oc) = ot.counters.iter().position(|x| x.name == c.name) else {
                continue;
            };
            if let (Some(d), Some(v)) = (
                fst.named_counters.get_mut(ti).and_then(|v| v.get_mut(ci)),
                ost.named_counters.get(oi).and_then(|v| v.get(oc)),
            ) {
                *d = *v;
            }
        }
        for (qi, (name, _)) in t.ir.quotas.iter().enumerate() {
            let Some(oq) = ot.quotas.iter().position(|x| &x.0 == name) else {
                continue;
            };
            let used = match ost.shared.as_deref() {
                Some(s) => s
                    .named_quotas
                    .get(oi)
                    .and_then(|v| v.get(oq))
                    .map(|a| a.load(Ordering::Relaxed)),
                None => ost.named_quotas.get(oi).and_then(|v| v.get(oq)).copied(),
            };
            let Some(used) = used else { continue };
            if let Some(a) = fst
                .shared
                .as_deref()
                .and_then(|s| s.named_quotas.get(ti)?.get(qi))
            {
                a.store(used, Ordering::Relaxed);
            }
            if let Some(d) = fst.named_quotas.get_mut(ti).and_then(|v| v.get_mut(qi)) {
                *d = used;
            }
        }
        for (li, (name, _)) in t.ir.limits.iter().enumerate() {
            let Some(ol) = ot.limits.iter().position(|x| &x.0 == name) else {
                continue;
            };
            let bucket: Option<Bucket> = match ost.shared.as_deref() {
                Some(s) => s
                    .named_limits
                    .get(oi)
                    .and_then(|v| v.get(ol))
                    .map(|b| *b.lock().unwrap_or_else(|e| e.into_inner())),
                None => ost.named_limits.get(oi).and_then(|v| v.get(ol)).copied(),
            };
            let Some(bucket) = bucket else { continue };
            if let Some(b) = fst
                .shared
                .as_deref()
                .and_then(|s| s.named_limits.get(ti)?.get(li))
            {
                *b.lock().unwrap_or_else(|e| e.into_inner()) = bucket;
            }
            if let Some(d) = fst.named_limits.get_mut(ti).and_then(|v| v.get_mut(li)) {
                *d = bucket;
            }
        }
    }
}

/// The statement a map chooses among the table's objects of one kind (`ct helper set tcp
/// dport map { 21 : "ftp" }`): the map's data is the object's index; None when the key
/// cannot be built or is not in the map (the rule stops, `nft_objref_map_eval`).
pub(crate) fn choose<'a>(
    t: &CTable,
    key: &weir_lang::ir::Key,
    map: &crate::compile::SetSlot,
    stmts: &'a [crate::compile::CExpr],
    p: &Pkt,
    st: &mut State,
) -> Option<&'a crate::compile::CExpr> {
    let mut kv = [0u128; MAX_KEY];
    let n = p.key(key, st, &mut kv)?;
    match set_get(t, map, &kv[..n], st, p.now_ns) {
        Some(MapValue::Value(v)) => stmts.get(*v.first()? as usize),
        _ => None,
    }
}
