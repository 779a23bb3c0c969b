//! Per-function counters: calls, script errors, budget overruns, memory overruns; and the
//! per-flow state table's counters.

/// What happened to the calls of one Lua function since the [`super::Runtime`] began.
///
/// A call that fails counts in exactly one of `errors`, `budget_exceeded` and
/// `memory_exceeded`; every call counts in `calls`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FnStats {
    /// Calls made, failed or not.
    pub calls: u64,
    /// Calls that raised an error (`error(...)`, a bad index, a bad return value, ...).
    pub errors: u64,
    /// Calls stopped because they ran out of their instruction budget.
    pub budget_exceeded: u64,
    /// Calls stopped because the Lua state reached its memory limit.
    pub memory_exceeded: u64,
}

/// The per-flow state tables: how many are kept, and what the bound did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// State tables kept now.
    pub live: usize,
    /// Tables dropped (least recently used first) to make room for a new flow's.
    pub evicted: u64,
    /// Tables not created because `max_flows` is 0.
    pub refused: u64,
}
