//! Per-flow state: one Lua table per flow, created the first time a script reads
//! `pkt.state` for that flow, kept across calls, dropped by [`super::Runtime::forget`] or
//! when the table of tables is full (least recently used first).

use std::collections::{BTreeMap, HashMap};

use mlua::{Lua, Table};

use super::stats::FlowStats;

/// A flow (connection) as the caller names it; only equality matters here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowId(pub u64);

/// The bounded side table of per-flow state tables, in least-recently-used order.
pub(crate) struct FlowTable {
    max: usize,
    /// Flow -> (its table, its last use).
    map: HashMap<FlowId, (Table, u64)>,
    /// Last use -> flow: the first entry is the least recently used.
    order: BTreeMap<u64, FlowId>,
    clock: u64,
    evicted: u64,
    refused: u64,
}

impl FlowTable {
    pub(crate) fn new(max: usize) -> FlowTable {
        FlowTable {
            max,
            map: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
            evicted: 0,
            refused: 0,
        }
    }

    /// The flow's table, created if it has none (evicting the least recently used one if
    /// the table is full). None when `max` is 0.
    pub(crate) fn get_or_create(&mut self, lua: &Lua, flow: FlowId) -> mlua::Result<Option<Table>> {
        self.clock += 1;
        let now = self.clock;
        if let Some((t, used)) = self.map.get_mut(&flow) {
            self.order.remove(used);
            *used = now;
            self.order.insert(now, flow);
            return Ok(Some(t.clone()));
        }
        if self.max == 0 {
            self.refused += 1;
            return Ok(None);
        }
        let t = lua.create_table()?;
        while self.map.len() >= self.max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
            self.evicted += 1;
        }
        self.map.insert(flow, (t.clone(), now));
        self.order.insert(now, flow);
        Ok(Some(t))
    }

    /// Drops the flow's table, if it has one.
    pub(crate) fn remove(&mut self, flow: FlowId) {
        if let Some((_, used)) = self.map.remove(&flow) {
            self.order.remove(&used);
        }
    }

    pub(crate) fn stats(&self) -> FlowStats {
        FlowStats {
            live: self.map.len(),
            evicted: self.evicted,
            refused: self.refused,
        }
    }
}
