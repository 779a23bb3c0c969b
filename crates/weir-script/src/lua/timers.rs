//! Timers, as nfqws2 has them: Lua functions called by time rather than by packets, between
//! batches, in the thread that runs the packets' calls.
//!
//! Globals (callable from a script's top level, a packet's call or a timer):
//!
//! - `timer_set(name, func, period_ms, oneshot, data)`: creates the timer `name`, or
//!   replaces it (its countdown restarts). `func` is a function, or the name of a global
//!   function, looked up now (not when the timer fires). `period_ms` is an integer >= 0;
//!   `oneshot` (default false) makes the timer fire once, after `period_ms`, and go;
//!   `data` is any Lua value, handed to the function. At most [`MAX_TIMERS`] timers:
//!   setting one more raises an error (replacing one does not); names of at most
//!   [`MAX_NAME`] bytes.
//! - `timer_del(name)`: deletes the timer (true if there was one).
//! - `timer_info(name)`: nil, or a table `{name, func, period, oneshot, fires, next}`:
//!   `period` in ms, `fires` the calls made, `next` the ms until it is due (0: due now).
//! - `timer_enum()`: the timers' names, sorted.
//! - `rawsend(packet)`: queues an IP packet (a string) to send, as `pkt:send` does (the
//!   same [`super::MAX_SEND`] per call and [`super::MAX_PACKET`] bytes); in a packet's call
//!   it joins that call's sends, in a timer the timer's.
//!
//! Time is the caller's clock ([`super::Runtime::run_timers`]'s `now_ns`, the engine's),
//! never the wall clock. A timer set while a clock is known (inside a timer, or after any
//! `run_timers`) is due `period_ms` after the last `now_ns` seen; one set before the
//! first `run_timers` (at load time) starts its countdown at the first `run_timers`.
//!
//! `run_timers(now_ns)` calls every timer due (its due time <= `now_ns`), earliest first,
//! as `func(name, data)`, each call with a whole instruction budget. A periodic timer is
//! next due one period after it was due (one period after `now_ns` if it has fallen more
//! than a period behind: missed periods are skipped, not made up). A one-shot timer is
//! removed before its call (the function may set it again). A timer whose call fails (an
//! error, the budget, the memory limit) is deleted (unless the call replaced it), its
//! sends dropped, and counted in [`TimerStats`]. A timer deleted or replaced by an
//! earlier timer of the same round is not called for the old entry.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use mlua::{Function, Lua, String as LuaString, Table, Value};

/// Timers a runtime may have at once.
pub const MAX_TIMERS: usize = 1024;

/// The longest timer name, in bytes.
pub const MAX_NAME: usize = 256;

/// What timers did since the runtime began. A failed call counts in exactly one of
/// `errors`, `budget_exceeded` and `memory_exceeded`, and deletes its timer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Timer calls made, failed or not.
    pub calls: u64,
    pub errors: u64,
    pub budget_exceeded: u64,
    pub memory_exceeded: u64,
    /// Packets the timers sent (their calls that did not fail).
    pub sent: u64,
}

pub(crate) struct Timer {
    pub(crate) func: Function,
    pub(crate) data: Value,
    pub(crate) period_ms: u64,
    pub(crate) oneshot: bool,
    /// When it is due (ns, the caller's clock); None: its countdown starts at the next
    /// `run_timers`.
    pub(crate) due: Option<u64>,
    pub(crate) fires: u64,
    /// Which `timer_set` made it (a replaced timer is another one).
    pub(crate) generation: u64,
}

/// The runtime's timers, shared by the Lua globals and the runtime.
#[derive(Default)]
pub(crate) struct TimerState {
    pub(crate) timers: BTreeMap<Vec<u8>, Timer>,
    /// The last `now_ns` given to `run_timers`.
    pub(crate) clock: Option<u64>,
    generation: u64,
    pub(crate) stats: TimerStats,
}

pub(crate) type SharedTimers = Arc<Mutex<TimerState>>;

/// Locks the timers for the runtime (never held across a Lua call).
pub(crate) fn lock(t: &SharedTimers) -> MutexGuard<'_, TimerState> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks the timers for a global, failing if they are held (a finalizer run by an
/// allocation of a timer global).
fn try_lock(t: &SharedTimers) -> mlua::Result<MutexGuard<'_, TimerState>> {
    match t.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
        Err(TryLockError::WouldBlock) => Err(mlua::Error::runtime("timers are busy")),
    }
}

impl TimerState {
    /// The timers due at `now`, earliest first (name, generation); countdowns not yet
    /// started start now.
    pub(crate) fn due(&mut self, now: u64) -> Vec<(Vec<u8>, u64)> {
        self.clock = Some(now);
        let mut due: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        for (name, t) in self.timers.iter_mut() {
            let at = *t
                .due
                .get_or_insert(now.saturating_add(t.period_ms.saturating_mul(1_000_000)));
            if at <= now {
                due.push((at, name.clone(), t.generation));
            }
        }
        due.sort();
        due.into_iter().map(|(_, n, g)| (n, g)).collect()
    }

    /// Takes timer `name` of `generation` for its call: its function and data, the timer
    /// counted and rescheduled (a one-shot removed). None if it is gone or was replaced.
    pub(crate) fn fire(
        &mut self,
        name: &[u8],
        generation: u64,
        now: u64,
    ) -> Option<(Function, Value)> {
        let t = self.timers.get_mut(name)?;
        if t.generation != generation {
            return None;
        }
        t.fires += 1;
        let call = (t.func.clone(), t.data.clone());
        if t.oneshot {
            self.timers.remove(name);
        } else {
            let period = t.period_ms.saturating_mul(1_000_000);
            let mut next = t.due.unwrap_or(now).saturating_add(period);
            if next <= now && period > 0 {
                next = now.saturating_add(period);
            }
            t.due = Some(next);
        }
        self.stats.calls += 1;
        Some(call)
    }

    /// Deletes timer `name` if it is still of `generation` (its call failed).
    pub(crate) fn remove_if(&mut self, name: &[u8], generation: u64) -> Option<Timer> {
        if self
            .timers
            .get(name)
            .is_some_and(|t| t.generation == generation)
        {
            return self.timers.remove(name);
        }
        None
    }
}

/// Installs `timer_set`, `timer_del`, `timer_info` and `timer_enum`.
pub(crate) fn install(lua: &Lua, timers: &SharedTimers) -> mlua::Result<()> {
    let g = lua.globals();

    let t = timers.clone();
    let set = lua.create_function(
        move |lua,
              (name, func, period, oneshot, data): (
            LuaString,
            Value,
            Value,
            Option<bool>,
            Value,
        )| {
            let name = name.as_bytes().to_vec();
            if name.len() > MAX_NAME {
                return Err(mlua::Error::runtime(format!(
                    "timer_set: a name of at most {MAX_NAME} bytes"
                )));
            }
            let func = match func {
                Value::Function(f) => f,
                Value::String(s) => match lua.globals().get::<Value>(s.clone())? {
                    Value::Function(f) => f,
                    _ => {
                        return Err(mlua::Error::runtime(format!(
                            "timer_set: no global function {}",
                            s.to_string_lossy()
                        )))
                    }
                },
                v => {
                    return Err(mlua::Error::runtime(format!(
                        "timer_set: func must be a function or a global's name, not a {}",
                        v.type_name()
                    )))
                }
            };
            let period_ms = match period {
                Value::Integer(n) if n >= 0 => n as u64,
                Value::Number(x) if x >= 0.0 && x.fract() == 0.0 && x < 1e15 => x as u64,
                v => {
                    return Err(mlua::Error::runtime(format!(
                        "timer_set: period must be a whole number of ms >= 0, not {}",
                        v.to_string().unwrap_or_else(|_| v.type_name().into())
                    )))
                }
            };
            let mut st = try_lock(&t)?;
            if !st.timers.contains_key(&name) && st.timers.len() >= MAX_TIMERS {
                return Err(mlua::Error::runtime(format!(
                    "timer_set: at most {MAX_TIMERS} timers"
                )));
            }
            st.generation += 1;
            let due = st
                .clock
                .map(|c| c.saturating_add(period_ms.saturating_mul(1_000_000)));
            let timer = Timer {
                func,
                data,
                period_ms,
                oneshot: oneshot.unwrap_or(false),
                due,
                fires: 0,
                generation: st.generation,
            };
            // the replaced timer (its data) is dropped after the lock is released
            let old = st.timers.insert(name, timer);
            drop(st);
            drop(old);
            Ok(())
        },
    )?;
    g.set("timer_set", set)?;

    let t = timers.clone();
    let del = lua.create_function(move |_, name: LuaString| {
        let old = try_lock(&t)?.timers.remove(&name.as_bytes()[..]);
        Ok(old.is_some())
    })?;
    g.set("timer_del", del)?;

    let t = timers.clone();
    let info = lua.create_function(move |lua, name: LuaString| {
        let st = try_lock(&t)?;
        let Some(timer) = st.timers.get(&name.as_bytes()[..]) else {
            return Ok(Value::Nil);
        };
        let next = match (timer.due, st.clock) {
            (Some(due), Some(now)) => due.saturating_sub(now) / 1_000_000,
            _ => timer.period_ms,
        };
        let (func, period, oneshot, fires) = (
            timer.func.clone(),
            timer.period_ms,
            timer.oneshot,
            timer.fires,
        );
        drop(st);
        let tb: Table = lua.create_table_with_capacity(0, 6)?;
        tb.raw_set("name", name)?;
        tb.raw_set("func", func)?;
        tb.raw_set("period", period)?;
        tb.raw_set("oneshot", oneshot)?;
        tb.raw_set("fires", fires)?;
        tb.raw_set("next", next)?;
        Ok(Value::Table(tb))
    })?;
    g.set("timer_info", info)?;

    let t = timers.clone();
    let enumerate = lua.create_function(move |lua, ()| {
        let names: Vec<Vec<u8>> = try_lock(&t)?.timers.keys().cloned().collect();
        let tb = lua.create_table_with_capacity(names.len(), 0)?;
        for (i, n) in names.iter().enumerate() {
            tb.raw_set(i + 1, lua.create_string(n)?)?;
        }
        Ok(tb)
    })?;
    g.set("timer_enum", enumerate)?;
    Ok(())
}
