//! Sets and maps from the packet path (`nft_dynset`): the elements rules add (`add @s`,
//! `update @s`, `delete @s`), kept per worker beside the ruleset's static elements, and the
//! lookups that see both.

use crate::compile::{CTable, SetSlot};
use crate::eval::{limit_pass, Bucket, ConnList, Pkt, State};
use crate::sets::MAX_KEY;
use weir_lang::ir::{self, MapValue};

/// An element added from the packet path (`add @s`, `update @s`).
#[derive(Clone, Debug, Default)]
pub(crate) struct DynElem {
    /// When it expires (0: never).
    pub(crate) expires_ns: u64,
    /// Its own `limit`, `counter`, `ct count`.
    pub(crate) bucket: Bucket,
    pub(crate) conns: ConnList,
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
    /// A map's element: its value (`add @m { ip saddr : meta mark }`), set when it was added.
    pub(crate) data: Option<MapValue>,
}

/// The elements a set gained from the packet path (exact keys), beside its static elements.
#[derive(Clone, Debug, Default)]
pub struct DynSet {
    pub(crate) elems: std::collections::HashMap<Vec<u128>, DynElem>,
}

impl DynSet {
    pub(crate) fn live(&self, k: &[u128], now_ns: u64) -> bool {
        self.elems
            .get(k)
            .is_some_and(|e| e.expires_ns == 0 || e.expires_ns > now_ns)
    }

    /// Live elements now.
    pub fn len_at(&self, now_ns: u64) -> usize {
        self.elems
            .values()
            .filter(|e| e.expires_ns == 0 || e.expires_ns > now_ns)
            .count()
    }

    /// Live elements with their (packets, bytes) counters and expiry (0: none).
    pub fn elements(&self, now_ns: u64) -> Vec<(Vec<u128>, u64, u64, u64)> {
        let mut v: Vec<_> = self
            .elems
            .iter()
            .filter(|(_, e)| e.expires_ns == 0 || e.expires_ns > now_ns)
            .map(|(k, e)| (k.clone(), e.packets, e.bytes, e.expires_ns))
            .collect();
        v.sort();
        v
    }
}

/// Default size of a set filled from the packet path when it gives none (nftables: 65535).
pub const DYNSET_DEFAULT_SIZE: usize = 65535;

#[inline]
pub(crate) fn set_contains(t: &CTable, s: &SetSlot, k: &[u128], st: &State, now_ns: u64) -> bool {
    match s {
        SetSlot::Named(i) => {
            t.sets[*i].contains(k)
                || st
                    .dynsets
                    .get(t.index)
                    .and_then(|v| v.get(*i))
                    .is_some_and(|d| d.live(k, now_ns))
        }
        SetSlot::Anon(b) => b.contains(k),
        SetSlot::Small { comps, ranges } => ranges
            .chunks_exact(*comps)
            .any(|e| e.iter().zip(k).all(|((lo, hi), v)| lo <= v && v <= hi)),
    }
}

/// The map data for a key: a static element's, else a live element the packet path added,
/// else the catch-all's (the kernel's set holds the first two alike; nft_set_catchall_lookup
/// comes after both).
#[inline]
pub(crate) fn set_get<'a>(
    t: &'a CTable,
    s: &'a SetSlot,
    k: &[u128],
    st: &'a State,
    now_ns: u64,
) -> Option<&'a MapValue> {
    match s {
        SetSlot::Named(i) => {
            let set = &t.sets[*i];
            if let Some(e) = set.lookup_own(k) {
                return e.data.as_ref();
            }
            let added = st
                .dynsets
                .get(t.index)
                .and_then(|v| v.get(*i))
                .and_then(|d| d.elems.get(k))
                .filter(|e| e.expires_ns == 0 || e.expires_ns > now_ns);
            match added {
                Some(e) => e.data.as_ref(),
                None => set.catchall().and_then(|e| e.data.as_ref()),
            }
        }
        SetSlot::Anon(b) => b.get(k),
        SetSlot::Small { .. } => None,
    }
}

/// `add @s { key ... }`, `update @s { key ... }`, `delete @s { key }` from the packet path
/// (`nft_dynset`): false stops the rule (the key cannot be built, the set is full, or the
/// element's own `limit` does not let the packet on).
pub(crate) fn dynset_op(t: &CTable, op: &ir::SetOp, p: &Pkt, st: &mut State, bytes: u64) -> bool {
    let mut kv = [0u128; MAX_KEY];
    let Some(n) = p.key(&op.key, st, &mut kv) else {
        return false;
    };
    let key = &kv[..n];
    let now = p.now_ns;
    // a map's value, as nft_dynset reads its sreg_data: read here (a value that cannot be
    // built stops the rule), made an element's value only when an element is added (a live
    // one keeps its own): no allocation for a packet that refreshes an element
    let mut dv = [0u128; MAX_KEY];
    let data_len = match &op.data {
        None | Some(ir::ValueExpr::Const(_)) => 0,
        Some(ir::ValueExpr::Key(k)) => match p.key(k, st, &mut dv) {
            Some(m) => m,
            None => return false,
        },
        // the checker marks other values not evaluated
        Some(_) => return false,
    };
    let data = || match &op.data {
        Some(ir::ValueExpr::Const(c)) => Some(MapValue::Value(c.clone())),
        Some(ir::ValueExpr::Key(_)) => Some(MapValue::Value(dv[..data_len].to_vec())),
        _ => None,
    };
    let set = &t.ir.sets[op.set];
    let size = set.size.map_or(DYNSET_DEFAULT_SIZE, |s| s as usize);
    let timeout_ms = op.timeout_ms.or(set.timeout_ms);
    let expires = timeout_ms.map_or(0, |ms| {
        now.saturating_add(ms.saturating_mul(1_000_000)).max(1)
    });
    if st.dynsets.len() <= t.index {
        st.dynsets.resize(t.index + 1, Vec::new());
    }
    let sets = &mut st.dynsets[t.index];
    if sets.len() <= op.set {
        sets.resize(op.set + 1, DynSet::default());
    }
    let ds = &mut sets[op.set];
    if op.op == ir::SetOpKind::Delete {
        ds.elems.remove(key);
        return true;
    }
    let live = ds.live(key, now);
    if !live {
        // a static element counts as present (not the catch-all: the kernel adds beside it)
        if t.sets[op.set].lookup_own(key).is_some() && op.limit.is_none() && !op.counter {
            return true;
        }
        if ds.elems.len() >= size {
            ds.elems
                .retain(|_, e| e.expires_ns == 0 || e.expires_ns > now);
        }
        if ds.elems.len() >= size && !ds.elems.contains_key(key) {
            st.dynset_full += 1;
            return false;
        }
        ds.elems.insert(
            key.to_vec(),
            DynElem {
                expires_ns: expires,
                data: data(),
                ..DynElem::default()
            },
        );
    }
    let e = ds.elems.get_mut(key).expect("inserted");
    if live && op.op == ir::SetOpKind::Update {
        e.expires_ns = expires;
    }
    e.packets += 1;
    e.bytes += bytes;
    if let Some(l) = &op.limit {
        if !limit_pass(&mut e.bucket, l, now, bytes) {
            return false;
        }
    }
    if let (Some((count, over)), Some(conns)) = (op.ct_count, p.conns) {
        let n = e.conns.add(&p.conn_tuple(), conns, now);
        if (n as u64 > count as u64) != over {
            return false;
        }
    }
    true
}
