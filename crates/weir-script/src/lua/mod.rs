//! Sandboxed Lua (5.4, vendored) for per-flow scripts: what nfqws2 does with its `desync`
//! table, without building a table per packet.
//!
//! A [`Runtime`] is one Lua state. Scripts are loaded at configuration time
//! ([`Runtime::load`], [`Runtime::load_file`]); the functions the configuration names are
//! looked up then ([`Runtime::function`]), so a missing one is a configuration error. Per
//! packet, [`Runtime::call`] calls one as `f(pkt, args)`:
//!
//! - `pkt` is one userdata, made once per runtime; the [`PacketView`] is swapped into it for
//!   the call and out after, and its fields are read from the packet bytes only when a
//!   script asks (see [`packet`] for the fields and methods). `pkt.state` is the flow's
//!   table, kept across calls of the same [`FlowId`] (see [`flow`]).
//! - `args` is nil when there are none, else a table of the instance's arguments; the same
//!   arguments give the same table (kept, up to [`ARGS_CACHE`] sets), so treat it as
//!   read-only.
//! - `pkt:desync(spec, args)` runs one of weir's native desync actions ([`crate::desync`]:
//!   `multisplit`, `fake`, ...) on the packet as the script has left it, with the flow's
//!   markers, server TTL and blobs ([`Runtime::set_blobs`]): what it sends joins
//!   `pkt:send`'s, its verdict joins the call's; its arguments are parsed once per distinct
//!   (spec, args) pair (see [`desync`]).
//!
//! The function returns nil, `"pass"`, `"modify"`, `"drop"` or a `VERDICT_*` number. A
//! changed packet makes the verdict at least Modify, `pkt:drop()` makes it Drop. A call
//! that fails (an error, its instruction budget spent, the memory limit reached) passes the
//! packet unchanged (restored if the script had changed it), sends nothing, is counted in
//! [`Runtime::stats`], and the runtime goes on working.
//!
//! Timers (nfqws2's `timer_set`, `timer_del`, `timer_info`, `timer_enum`; see [`timers`])
//! call Lua functions by time: the caller runs those due with [`Runtime::run_timers`]
//! between batches, on its own clock, and sends what they queued with the global
//! `rawsend(packet)` (usable in packets' calls too, where it joins `pkt:send`'s). Each timer
//! call has its own budget; one that fails is deleted and counted
//! ([`Runtime::timer_stats`]). Packets `rawsend` queues at load time are dropped.
//!
//! The budget also covers Lua's own C functions, which the count hook cannot see: the
//! pattern functions are weir's, charged per matcher step ([`pattern`]), and the others
//! whose work grows with their arguments are charged by that work before they run
//! ([`costs`]).

pub mod costs;
pub mod desync;
pub mod flow;
pub mod packet;
pub mod pattern;
pub mod sandbox;
pub mod stats;
pub mod timers;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use mlua::{AnyUserData, ChunkMode, Function, Lua, Table, Value};

pub use costs::BYTES_PER_INSTRUCTION;
pub use desync::{DESYNC_CACHE, DESYNC_COST};
pub use flow::FlowId;
pub use packet::{Counters, PacketView, MAX_PACKET, MAX_SEND};
pub use stats::{FlowStats, FnStats};
pub use timers::{TimerStats, MAX_TIMERS};

use crate::desync::Blobs;
use packet::{lock, Pkt, Shared};
use sandbox::Budget;
use timers::SharedTimers;

/// Argument sets whose tables are kept for reuse.
pub const ARGS_CACHE: usize = 1024;

/// A runtime's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LuaConfig {
    /// Scripts may read files (io.open, loadfile, dofile) only under this directory; none
    /// at all when None.
    pub dir: Option<PathBuf>,
    /// The Lua state's memory limit, in bytes (0: none).
    pub memory_limit: usize,
    /// Lua VM instructions one call may run.
    pub instruction_budget: u32,
    /// Per-flow state tables kept (the least recently used goes when full; 0: none kept).
    pub max_flows: usize,
}

impl Default for LuaConfig {
    fn default() -> Self {
        LuaConfig {
            dir: None,
            memory_limit: 64 << 20,
            instruction_budget: 1_000_000,
            max_flows: 65_536,
        }
    }
}

/// The Lua state could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LuaError(pub String);

impl fmt::Display for LuaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lua: {}", self.0)
    }
}

impl std::error::Error for LuaError {}

impl From<mlua::Error> for LuaError {
    fn from(e: mlua::Error) -> Self {
        LuaError(e.to_string())
    }
}

/// A script did not load, or a function it should define is not there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The chunk's name (a file's path for [`Runtime::load_file`]).
    pub chunk: String,
    /// The line the error is on, when Lua says.
    pub line: Option<u32>,
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.chunk, l, self.message),
            None => write!(f, "{}: {}", self.chunk, self.message),
        }
    }
}

impl std::error::Error for LoadError {}

impl LoadError {
    fn from_lua(chunk: &str, e: &mlua::Error) -> LoadError {
        let message = describe(e);
        let prefix = format!("{chunk}:");
        let line = message.find(&prefix).and_then(|at| {
            let rest = &message[at + prefix.len()..];
            let digits: &str = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(0)];
            digits.parse().ok()
        });
        LoadError {
            chunk: chunk.to_string(),
            line,
            message,
        }
    }
}

/// A function found by [`Runtime::function`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FnId(u32);

/// What the packet becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Verdict {
    /// As it came.
    #[default]
    Pass,
    /// As the script left it (in the [`PacketView`]).
    Modify,
    Drop,
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The script raised an error (the message, with chunk and line).
    Script(String),
    /// The call ran out of its instruction budget.
    Budget,
    /// The Lua state reached its memory limit.
    Memory,
    /// The function returned something that is not a verdict.
    BadReturn(String),
}

/// The outcome of one [`Runtime::call`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallResult {
    pub verdict: Verdict,
    /// Packets the script queued (`pkt:send`), in order.
    pub send: Vec<Vec<u8>>,
    /// The script is done with this flow direction (`pkt:cutoff()`).
    pub cutoff: bool,
    /// Why the call failed (then the verdict is Pass and nothing is sent).
    pub error: Option<CallError>,
}

struct Entry {
    name: String,
    f: Function,
    stats: FnStats,
}

/// One sandboxed Lua state with its scripts, functions and per-flow state. `Send` (mlua's
/// `send` feature), so it can live in the engine's per-flow hook, which moves between
/// threads; not for use from two threads at once (`&mut self` calls).
pub struct Runtime {
    lua: Lua,
    budget: Arc<Budget>,
    pkt: AnyUserData,
    st: Shared,
    fns: std::cell::RefCell<Vec<Entry>>,
    args: HashMap<Vec<(String, String)>, Table>,
    timers: SharedTimers,
}

/// An error's message: the text Lua gave, without mlua's wrapping or a traceback.
fn describe(e: &mlua::Error) -> String {
    let s = match e {
        mlua::Error::CallbackError { cause, .. } => return describe(cause),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) | mlua::Error::MemoryError(m) => m.clone(),
        e => e.to_string(),
    };
    match s.find("\nstack traceback") {
        Some(at) => s[..at].to_string(),
        None => s,
    }
}

pub(crate) fn is_memory(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory(cause),
        _ => false,
    }
}

fn verdict_of(v: &Value) -> Result<Verdict, String> {
    let n = match v {
        Value::Nil => return Ok(Verdict::Pass),
        Value::Integer(n) => *n,
        Value::Number(x) if x.fract() == 0.0 => *x as i64,
        Value::String(s) => {
            return match &*s.as_bytes() {
                b"pass" => Ok(Verdict::Pass),
                b"modify" => Ok(Verdict::Modify),
                b"drop" => Ok(Verdict::Drop),
                other => Err(format!(
                    "returned \"{}\", not a verdict",
                    String::from_utf8_lossy(other)
                )),
            }
        }
        other => return Err(format!("returned a {}, not a verdict", other.type_name())),
    };
    match n & 3 {
        0 => Ok(Verdict::Pass),
        1 => Ok(Verdict::Modify),
        2 => Ok(Verdict::Drop),
        _ => Err(format!("returned {n}, not a verdict")),
    }
}

impl Runtime {
    /// A fresh sandboxed state with `cfg`'s limits (the directory must exist).
    pub fn new(cfg: &LuaConfig) -> Result<Runtime, LuaError> {
        let budget = Arc::new(Budget::new(cfg.instruction_budget));
        let lua = sandbox::build(cfg, &budget)?;
        let (pkt, st) = Pkt::new(&lua, cfg.max_flows, budget.clone())?;
        let pkt = lua.create_userdata(pkt)?;
        let timers = SharedTimers::default();
        timers::install(&lua, &timers)?;
        let s = st.clone();
        let rawsend = lua.create_function(move |_, (raw, _opts): (mlua::String, Value)| {
            packet::try_lock(&s)?.queue_send(&raw.as_bytes())
        })?;
        lua.globals().set("rawsend", rawsend)?;
        lua.set_memory_limit(cfg.memory_limit)?;
        Ok(Runtime {
            lua,
            budget,
            pkt,
            st,
            fns: Default::default(),
            args: HashMap::new(),
            timers,
        })
    }

    /// How a call ended: its value, or why it failed (the budget and memory flags read).
    fn outcome(&self, r: mlua::Result<Value>) -> Result<Value, CallError> {
        match r {
            Ok(_) if self.budget.exceeded.load(Relaxed) => Err(CallError::Budget),
            Ok(v) => Ok(v),
            Err(_) if self.budget.exceeded.load(Relaxed) => Err(CallError::Budget),
            Err(e) if self.budget.oom.load(Relaxed) || is_memory(&e) => Err(CallError::Memory),
            Err(e) => Err(CallError::Script(describe(&e))),
        }
    }

    /// The blobs `pkt:desync`'s actions read (a new runtime has the `fake_default_*` ones).
    pub fn set_blobs(&mut self, blobs: Blobs) {
        lock(&self.st).blobs = blobs;
    }

    /// Runs a script's top level (under the instruction budget), typically defining
    /// functions. Errors name `chunk_name` and the line.
    pub fn load(&mut self, chunk_name: &str, code: &str) -> Result<(), LoadError> {
        self.budget.reset(&self.lua);
        let r = self
            .lua
            .load(code)
            .set_name(format!("={chunk_name}"))
            .set_mode(ChunkMode::Text)
            .exec()
            .map_err(|e| LoadError::from_lua(chunk_name, &e));
        // packets `rawsend` queued at load time go nowhere
        lock(&self.st).send.clear();
        r
    }

    /// [`Runtime::load`] of a file (read by the daemon, not the sandbox: any path), named
    /// by its path.
    pub fn load_file(&mut self, path: impl AsRef<Path>) -> Result<(), LoadError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let code = std::fs::read_to_string(path).map_err(|e| LoadError {
            chunk: name.clone(),
            line: None,
            message: e.to_string(),
        })?;
        self.load(&name, &code)
    }

    /// The global function `name`, as it is now.
    pub fn function(&self, name: &str) -> Result<FnId, LoadError> {
        let missing = |what: &str| LoadError {
            chunk: name.to_string(),
            line: None,
            message: format!("no global function {name} ({what})"),
        };
        let f = match self.lua.globals().get::<Value>(name) {
            Ok(Value::Function(f)) => f,
            Ok(Value::Nil) => return Err(missing("not defined")),
            Ok(v) => return Err(missing(&format!("a {}", v.type_name()))),
            Err(e) => return Err(missing(&describe(&e))),
        };
        let mut fns = self.fns.borrow_mut();
        if let Some(i) = fns.iter().position(|e| e.name == name && e.f == f) {
            return Ok(FnId(i as u32));
        }
        fns.push(Entry {
            name: name.to_string(),
            f,
            stats: FnStats::default(),
        });
        Ok(FnId(fns.len() as u32 - 1))
    }

    /// The args table for `args` (nil if none).
    fn args_value(&mut self, args: &[(String, String)]) -> mlua::Result<Value> {
        if args.is_empty() {
            return Ok(Value::Nil);
        }
        if let Some(t) = self.args.get(args) {
            return Ok(Value::Table(t.clone()));
        }
        let t = self.lua.create_table_with_capacity(0, args.len())?;
        for (k, v) in args {
            t.raw_set(k.as_str(), v.as_str())?;
        }
        if self.args.len() < ARGS_CACHE {
            self.args.insert(args.to_vec(), t.clone());
        }
        Ok(Value::Table(t))
    }

    /// Calls `f(pkt, args)` for a packet of `flow`. Panics if `f` is not from this runtime.
    pub fn call(
        &mut self,
        f: FnId,
        pkt: &mut PacketView,
        flow: FlowId,
        args: &[(String, String)],
    ) -> CallResult {
        self.budget.reset(&self.lua);
        let was_modified = pkt.modified;
        let args = self.args_value(args);
        {
            let mut p = lock(&self.st);
            std::mem::swap(&mut p.view, pkt);
            p.flow = flow;
        }
        let fns = self.fns.get_mut();
        let entry = &mut fns[f.0 as usize];
        let r = args.and_then(|a| entry.f.call::<Value>((&self.pkt, a)));
        let mut p = lock(&self.st);
        std::mem::swap(&mut p.view, pkt);
        let backup = p.backup.take();
        let send = std::mem::take(&mut p.send);
        let (cutoff, dropped) = (p.cutoff, p.drop);
        p.cutoff = false;
        p.drop = false;
        drop(p);

        let outcome = self
            .outcome(r)
            .and_then(|v| verdict_of(&v).map_err(CallError::BadReturn));
        let entry = &mut self.fns.get_mut()[f.0 as usize];
        entry.stats.calls += 1;
        match outcome {
            Ok(v) => {
                let verdict = if dropped || v == Verdict::Drop {
                    Verdict::Drop
                } else if v == Verdict::Modify || backup.is_some() {
                    Verdict::Modify
                } else {
                    Verdict::Pass
                };
                CallResult {
                    verdict,
                    send,
                    cutoff,
                    error: None,
                }
            }
            Err(e) => {
                match e {
                    CallError::Budget => entry.stats.budget_exceeded += 1,
                    CallError::Memory => entry.stats.memory_exceeded += 1,
                    _ => entry.stats.errors += 1,
                }
                if let Some(b) = backup {
                    pkt.packet = b;
                    pkt.modified = was_modified;
                }
                if e == CallError::Memory {
                    let _ = self.lua.gc_collect();
                }
                CallResult {
                    verdict: Verdict::Pass,
                    send: Vec::new(),
                    cutoff: false,
                    error: Some(e),
                }
            }
        }
    }

    /// The flow ended: its state table goes.
    pub fn forget(&mut self, flow: FlowId) {
        lock(&self.st).flows.remove(flow);
    }

    /// Each function's counters, in the order they were looked up.
    pub fn stats(&self) -> Vec<(String, FnStats)> {
        self.fns
            .borrow()
            .iter()
            .map(|e| (e.name.clone(), e.stats))
            .collect()
    }

    /// The per-flow state tables' counters.
    pub fn flow_stats(&self) -> FlowStats {
        lock(&self.st).flows.stats()
    }

    /// The (spec, args) pairs of `pkt:desync` whose parsed action (or error) is kept.
    pub fn desync_actions(&self) -> usize {
        lock(&self.st).actions.len()
    }

    /// Calls the timers due at `now_ns` (the caller's clock: see [`timers`]); what they
    /// sent, in order.
    pub fn run_timers(&mut self, now_ns: u64) -> Vec<Vec<u8>> {
        let due = timers::lock(&self.timers).due(now_ns);
        let mut out = Vec::new();
        for (name, generation) in due {
            let Some((f, data)) = timers::lock(&self.timers).fire(&name, generation, now_ns) else {
                continue;
            };
            self.budget.reset(&self.lua);
            let r = self
                .lua
                .create_string(&name)
                .and_then(|n| f.call::<Value>((n, data)));
            let outcome = self.outcome(r);
            let mut p = lock(&self.st);
            let send = std::mem::take(&mut p.send);
            // (`pkt` is not a timer's: whatever a timer did to it is forgotten)
            p.backup = None;
            p.view.modified = false;
            p.cutoff = false;
            p.drop = false;
            drop(p);
            let mut t = timers::lock(&self.timers);
            match outcome {
                Ok(_) => {
                    t.stats.sent += send.len() as u64;
                    out.extend(send);
                }
                Err(e) => {
                    match e {
                        CallError::Budget => t.stats.budget_exceeded += 1,
                        CallError::Memory => t.stats.memory_exceeded += 1,
                        _ => t.stats.errors += 1,
                    }
                    let old = t.remove_if(&name, generation);
                    drop(t);
                    drop(old);
                    if e == CallError::Memory {
                        let _ = self.lua.gc_collect();
                    }
                }
            }
        }
        out
    }

    /// The timers there are now.
    pub fn timers(&self) -> usize {
        timers::lock(&self.timers).timers.len()
    }

    /// What the timers did.
    pub fn timer_stats(&self) -> TimerStats {
        timers::lock(&self.timers).stats
    }

    /// Bytes the Lua state uses now.
    pub fn memory_used(&self) -> usize {
        self.lua.used_memory()
    }
}

/// The runtime must stay `Send` (the engine's hooks move between threads).
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<Runtime>();
};
