//! The scripts' counters added together (workers' snapshots summed at the edge), and named
//! for `weir ctl status` and the metrics: one list, so both show the same.

use crate::lua::FnStats;
use crate::scripts::ScriptStats;
use std::ops::AddAssign;

impl AddAssign<&ScriptStats> for ScriptStats {
    fn add_assign(&mut self, o: &ScriptStats) {
        // every field named: a new counter that is not added does not compile
        let ScriptStats {
            packets,
            done,
            untracked,
            calls,
            dropped,
            modified,
            sent,
            flows,
            flows_evicted,
            hosts,
            reasm_refused,
            held,
            hold_released,
            lua_calls,
            lua_errors,
            lua_budget,
            lua_memory,
            timer_calls,
            timer_failed,
            timer_sent,
        } = *o;
        self.packets += packets;
        self.done += done;
        self.untracked += untracked;
        self.calls += calls;
        self.dropped += dropped;
        self.modified += modified;
        self.sent += sent;
        self.flows += flows;
        self.flows_evicted += flows_evicted;
        self.hosts += hosts;
        self.reasm_refused += reasm_refused;
        self.held += held;
        self.hold_released += hold_released;
        self.lua_calls += lua_calls;
        self.lua_errors += lua_errors;
        self.lua_budget += lua_budget;
        self.lua_memory += lua_memory;
        self.timer_calls += timer_calls;
        self.timer_failed += timer_failed;
        self.timer_sent += timer_sent;
    }
}

impl ScriptStats {
    /// Each counter: its metric's name (`weir_scripts_...`), its help, its value.
    pub fn named(&self) -> [(&'static str, &'static str, u64); 20] {
        [
            (
                "weir_scripts_packets",
                "Packets handed to per-flow scripts.",
                self.packets,
            ),
            (
                "weir_scripts_done",
                "Of those, in a flow direction the scripts were done with (one bit test).",
                self.done,
            ),
            (
                "weir_scripts_untracked",
                "Of those, of no connection (passed).",
                self.untracked,
            ),
            (
                "weir_scripts_calls",
                "Instance calls (native actions and Lua functions).",
                self.calls,
            ),
            (
                "weir_scripts_dropped",
                "Packets the scripts dropped (a split sends the original in pieces).",
                self.dropped,
            ),
            (
                "weir_scripts_modified",
                "Packets the scripts changed.",
                self.modified,
            ),
            (
                "weir_scripts_sent",
                "Packets the scripts sent (segments, fakes, held parts sent on).",
                self.sent,
            ),
            ("weir_scripts_flows", "Flows given state.", self.flows),
            (
                "weir_scripts_flows_evicted",
                "Flows pushed out of the full flow table.",
                self.flows_evicted,
            ),
            (
                "weir_scripts_hosts",
                "Flows whose host name became known.",
                self.hosts,
            ),
            (
                "weir_scripts_reasm_refused",
                "Reassemblies given up (limits, conflicts): the parts passed as they were.",
                self.reasm_refused,
            ),
            (
                "weir_scripts_held",
                "Parts of a ClientHello held until the whole was in.",
                self.held,
            ),
            (
                "weir_scripts_hold_released",
                "Holds ended by the client sending a held part again (the parts went on).",
                self.hold_released,
            ),
            (
                "weir_scripts_lua_calls",
                "Lua function calls.",
                self.lua_calls,
            ),
            (
                "weir_scripts_lua_errors",
                "Lua calls that raised an error (the packet passed unchanged).",
                self.lua_errors,
            ),
            (
                "weir_scripts_lua_budget",
                "Lua calls stopped by the instruction budget (the packet passed unchanged).",
                self.lua_budget,
            ),
            (
                "weir_scripts_lua_memory",
                "Lua calls stopped by the memory limit (the packet passed unchanged).",
                self.lua_memory,
            ),
            (
                "weir_scripts_timer_calls",
                "Lua timer calls.",
                self.timer_calls,
            ),
            (
                "weir_scripts_timer_failed",
                "Lua timer calls that failed (an error, the budget, the memory limit): the timer deleted.",
                self.timer_failed,
            ),
            (
                "weir_scripts_timer_sent",
                "Packets Lua timers sent.",
                self.timer_sent,
            ),
        ]
    }
}

impl AddAssign<&FnStats> for FnStats {
    fn add_assign(&mut self, o: &FnStats) {
        let FnStats {
            calls,
            errors,
            budget_exceeded,
            memory_exceeded,
        } = *o;
        self.calls += calls;
        self.errors += errors;
        self.budget_exceeded += budget_exceeded;
        self.memory_exceeded += memory_exceeded;
    }
}

/// Per-function counters of several workers, summed by function name (in first-seen order).
pub fn sum_functions<'a>(
    lists: impl IntoIterator<Item = &'a [(String, FnStats)]>,
) -> Vec<(String, FnStats)> {
    let mut out: Vec<(String, FnStats)> = Vec::new();
    for list in lists {
        for (name, s) in list {
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, t)) => *t += s,
                None => out.push((name.clone(), *s)),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_add_field_by_field() {
        let mut a = ScriptStats {
            packets: 1,
            held: 2,
            lua_memory: 3,
            ..Default::default()
        };
        let b = ScriptStats {
            packets: 10,
            held: 20,
            lua_memory: 30,
            sent: 5,
            ..Default::default()
        };
        a += &b;
        assert_eq!((a.packets, a.held, a.lua_memory, a.sent), (11, 22, 33, 5));
        let named = a.named();
        assert!(named
            .iter()
            .any(|&(n, _, v)| n == "weir_scripts_held" && v == 22));
        let mut names: Vec<_> = named.iter().map(|x| x.0).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), named.len());
    }

    #[test]
    fn functions_sum_by_name() {
        let f = |c, e| FnStats {
            calls: c,
            errors: e,
            ..Default::default()
        };
        let w0 = [("a".to_string(), f(1, 0)), ("b".to_string(), f(2, 1))];
        let w1 = [("b".to_string(), f(3, 1)), ("c".to_string(), f(4, 0))];
        let s = sum_functions([&w0[..], &w1[..]]);
        assert_eq!(
            s,
            vec![
                ("a".to_string(), f(1, 0)),
                ("b".to_string(), f(5, 2)),
                ("c".to_string(), f(4, 0))
            ]
        );
    }
}
