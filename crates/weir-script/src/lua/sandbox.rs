//! The sandbox: which standard library a script gets, the instruction budget (a count hook)
//! and the wrappers that keep a script from catching its own budget or memory overrun.
//!
//! Loaded: base, table, string, math, utf8, coroutine; `os` reduced to `time`, `clock`,
//! `date`, `getenv`; `io` reduced to `open`, read-only, for paths under the configured
//! directory after canonicalisation. `load` only takes text chunks; `loadfile` / `dofile`
//! only read text chunks under the directory. Absent: `debug`, `package`, `require`,
//! `string.dump`, `print`, `warn`, `io.popen`, `os.execute` and the rest of `io` and `os`;
//! `collectgarbage` takes only "collect", "count" and "step".
//!
//! The budget: a hook every `step` instructions adds `step` to the call's count and raises
//! an error once the count passes the budget (so a call gets its budget give or take one
//! step). `pcall`, `xpcall` and `coroutine.resume` / `wrap` / `close` re-raise a budget or
//! memory error instead of returning it, so the overrun ends the call. mlua keeps the count
//! hook on one thread at a time, so resuming (or closing, which runs `__close` handlers in
//! the coroutine) moves the hook to the coroutine and back, and charges [`RESUME_COST`]
//! instructions (the instructions run between a resume and the
//! next hook are not counted; the charge bounds how far that lets a call overrun).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use mlua::{
    ChunkMode, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Thread, Value,
    VmState,
};

use super::LuaConfig;

/// The instructions charged for each `coroutine.resume`.
pub const RESUME_COST: u64 = 100;

/// Nfqws2's verdict constants, set as globals.
pub const VERDICTS: [(&str, i64); 5] = [
    ("VERDICT_PASS", 0),
    ("VERDICT_MODIFY", 1),
    ("VERDICT_DROP", 2),
    ("VERDICT_MASK", 3),
    ("VERDICT_PRESERVE_NEXT", 4),
];

/// Files one call may open (`io.open`, `loadfile`, `dofile`): handles are closed by the
/// garbage collector, so this bounds how fast a script can use up descriptors.
pub const MAX_OPENS: u32 = 8;

/// The message a budget overrun raises.
pub const BUDGET_MESSAGE: &str = "instruction budget exceeded";

/// The instruction count of the call under way. Shared (`Arc`) by the hook and the
/// wrappers, which must be `Send` (mlua's `send` feature); only the thread that holds the
/// runtime touches it, so relaxed atomics are plain loads and stores.
pub(crate) struct Budget {
    limit: u64,
    step: u32,
    used: AtomicU64,
    /// The call ran out of instructions.
    pub(crate) exceeded: AtomicBool,
    /// A memory error was seen (and re-raised) by a `pcall` / `resume` wrapper.
    pub(crate) oom: AtomicBool,
    /// Resumes not yet matched by their return: the hook is not on the main thread.
    depth: AtomicU32,
    /// Files opened by the call under way.
    opens: AtomicU32,
}

impl Budget {
    pub(crate) fn new(limit: u32) -> Budget {
        Budget {
            limit: limit as u64,
            step: (limit / 100).clamp(1, 1000),
            used: AtomicU64::new(0),
            exceeded: AtomicBool::new(false),
            oom: AtomicBool::new(false),
            depth: AtomicU32::new(0),
            opens: AtomicU32::new(0),
        }
    }

    /// Starts a call: a full budget; the hook back on the main thread if a failed resume
    /// left it elsewhere.
    pub(crate) fn reset(self: &Arc<Self>, lua: &Lua) {
        self.used.store(0, Relaxed);
        self.exceeded.store(false, Relaxed);
        self.oom.store(false, Relaxed);
        self.opens.store(0, Relaxed);
        if self.depth.load(Relaxed) != 0 {
            self.depth.store(0, Relaxed);
            install_hook(lua, self);
        }
    }

    pub(crate) fn charge(&self, n: u64) -> mlua::Result<()> {
        let used = self.used.load(Relaxed) + n;
        self.used.store(used, Relaxed);
        if used > self.limit || self.exceeded.load(Relaxed) {
            self.exceeded.store(true, Relaxed);
            return Err(mlua::Error::runtime(BUDGET_MESSAGE));
        }
        Ok(())
    }

    /// Counts a file about to be opened (a path that resolved under the directory); false
    /// past [`MAX_OPENS`].
    fn open(&self) -> bool {
        let n = self.opens.load(Relaxed) + 1;
        self.opens.store(n, Relaxed);
        n <= MAX_OPENS
    }

    fn triggers(&self) -> HookTriggers {
        HookTriggers::new().every_nth_instruction(self.step)
    }

    fn hook(
        self: &Arc<Self>,
    ) -> impl Fn(&Lua, mlua::Debug) -> mlua::Result<VmState> + Send + 'static {
        let b = self.clone();
        move |_, _| b.charge(b.step as u64).map(|()| VmState::Continue)
    }

    /// Re-raises a budget or memory error a protected call caught; else passes its
    /// results on.
    fn check(&self, r: MultiValue) -> mlua::Result<MultiValue> {
        if self.exceeded.load(Relaxed) {
            return Err(mlua::Error::runtime(BUDGET_MESSAGE));
        }
        let oom = match (r.front(), r.get(1)) {
            (Some(Value::Boolean(false)), Some(Value::String(s))) => {
                s.as_bytes() == &b"not enough memory"[..]
            }
            // raised through a Rust function (the charged and pattern functions)
            (Some(Value::Boolean(false)), Some(Value::Error(e))) => super::is_memory(e),
            _ => false,
        };
        if oom {
            self.oom.store(true, Relaxed);
            return Err(mlua::Error::MemoryError("not enough memory".into()));
        }
        Ok(r)
    }
}

/// Puts the budget hook on the main thread.
pub(crate) fn install_hook(lua: &Lua, b: &Arc<Budget>) {
    lua.set_hook(b.triggers(), b.hook());
}

/// `path` (relative paths taken from `dir`) canonicalised, if it is under `dir`.
fn resolve(dir: Option<&Path>, path: &str) -> Result<PathBuf, String> {
    let Some(dir) = dir else {
        return Err(format!("{path}: no script directory configured"));
    };
    let p = Path::new(path);
    let full = if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    };
    let c = full.canonicalize().map_err(|e| format!("{path}: {e}"))?;
    if !c.starts_with(dir) {
        return Err(format!("{path}: outside the script directory"));
    }
    Ok(c)
}

/// (nil, message), as Lua's io functions fail.
fn fail(lua: &Lua, msg: String) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Nil,
        Value::String(lua.create_string(msg)?),
    ]))
}

/// The Lua side of the wrappers; its arguments are the originals and the Rust helpers.
const WRAPPERS: &str = r#"
local opcall, oxpcall, ocreate, oresume, oclose, oload, ocg, check, enter, leave, sloadfile = ...
local select, error, tostring = select, error, tostring
pcall = function(...) return check(opcall(...)) end
xpcall = function(...) return check(oxpcall(...)) end
load = function(chunk, name, mode, ...)
  if select('#', ...) > 0 then return oload(chunk, name, "t", ...) end
  return oload(chunk, name, "t")
end
local function resume(co, ...)
  local prev = enter(co)
  return leave(prev, oresume(co, ...))
end
local function close(co)
  local prev = enter(co)
  return leave(prev, oclose(co))
end
coroutine.resume = resume
coroutine.close = close
local function unwrap(co, ok, ...)
  if ok then return ... end
  local e = ...
  close(co)
  error(e, 0)
end
coroutine.wrap = function(f)
  local co = ocreate(f)
  return function(...) return unwrap(co, resume(co, ...)) end
end
loadfile = sloadfile
dofile = function(path)
  local f, e = sloadfile(path)
  if not f then error(e, 2) end
  return f()
end
collectgarbage = function(opt, ...)
  if opt == nil or opt == "collect" or opt == "count" or opt == "step" then
    return ocg(opt, ...)
  end
  error("collectgarbage: option '" .. tostring(opt) .. "' not allowed", 2)
end
"#;

/// A Lua state with the sandboxed library and the budget hook on its main thread (no
/// memory limit yet: the caller sets it once the state is built).
pub(crate) fn build(cfg: &LuaConfig, budget: &Arc<Budget>) -> mlua::Result<Lua> {
    let dir: Option<PathBuf> =
        match &cfg.dir {
            Some(d) => Some(d.canonicalize().map_err(|e| {
                mlua::Error::runtime(format!("script directory {}: {e}", d.display()))
            })?),
            None => None,
        };
    let libs = StdLib::TABLE
        | StdLib::STRING
        | StdLib::MATH
        | StdLib::UTF8
        | StdLib::COROUTINE
        | StdLib::OS
        | StdLib::IO;
    let lua = Lua::new_with(libs, LuaOptions::default())?;
    let g = lua.globals();

    // os: time, clock, date, getenv only.
    let os: Table = g.get("os")?;
    let new_os = lua.create_table()?;
    for k in ["time", "clock", "date", "getenv"] {
        new_os.set(k, os.get::<Value>(k)?)?;
    }
    g.set("os", new_os)?;

    // io: open only, read-only, under dir.
    let io: Table = g.get("io")?;
    let oopen: Function = io.get("open")?;
    let open_dir = dir.clone();
    let b = budget.clone();
    let open = lua.create_function(move |lua, (path, mode): (String, Option<String>)| {
        let mode = mode.unwrap_or_else(|| "r".into());
        if mode != "r" && mode != "rb" {
            return fail(lua, format!("{path}: only reading (mode \"r\") allowed"));
        }
        match resolve(open_dir.as_deref(), &path) {
            Ok(_) if !b.open() => fail(lua, format!("{path}: at most {MAX_OPENS} files per call")),
            Ok(p) => oopen.call::<MultiValue>((p.to_string_lossy().into_owned(), mode)),
            Err(msg) => fail(lua, msg),
        }
    })?;
    let new_io = lua.create_table()?;
    new_io.set("open", open)?;
    g.set("io", new_io)?;

    // loadfile: text chunks under dir.
    let load_dir = dir;
    let b = budget.clone();
    let sloadfile = lua.create_function(
        move |lua, (path, _mode, env): (String, Option<String>, Option<Table>)| {
            let p = match resolve(load_dir.as_deref(), &path) {
                Ok(_) if !b.open() => {
                    return fail(lua, format!("{path}: at most {MAX_OPENS} files per call"))
                }
                Ok(p) => p,
                Err(msg) => return fail(lua, msg),
            };
            let code = match std::fs::read(&p) {
                Ok(c) => c,
                Err(e) => return fail(lua, format!("{path}: {e}")),
            };
            let mut chunk = lua
                .load(code)
                .set_name(format!("@{path}"))
                .set_mode(ChunkMode::Text);
            if let Some(env) = env {
                chunk = chunk.set_environment(env);
            }
            match chunk.into_function() {
                Ok(f) => Ok(MultiValue::from_vec(vec![Value::Function(f)])),
                Err(e) => fail(lua, e.to_string()),
            }
        },
    )?;

    let b = budget.clone();
    let check = lua.create_function(move |_, r: MultiValue| b.check(r))?;
    let b = budget.clone();
    let enter = lua.create_function(move |lua, co: Thread| {
        b.charge(RESUME_COST)?;
        b.depth.store(b.depth.load(Relaxed) + 1, Relaxed);
        co.set_hook(b.triggers(), b.hook());
        Ok(lua.current_thread())
    })?;
    let b = budget.clone();
    let leave = lua.create_function(move |_, (prev, r): (Thread, MultiValue)| {
        prev.set_hook(b.triggers(), b.hook());
        b.depth
            .store(b.depth.load(Relaxed).saturating_sub(1), Relaxed);
        b.check(r)
    })?;

    let co: Table = g.get("coroutine")?;
    let string: Table = g.get("string")?;
    string.set("dump", Value::Nil)?;
    // C functions charged by the work they are asked, the pattern functions counted per
    // step (before `load` and `collectgarbage` are taken by WRAPPERS)
    super::costs::install(&lua, &g, budget)?;
    lua.load(WRAPPERS)
        .set_name("=sandbox")
        .set_mode(ChunkMode::Text)
        .call::<()>((
            g.get::<Function>("pcall")?,
            g.get::<Function>("xpcall")?,
            co.get::<Function>("create")?,
            co.get::<Function>("resume")?,
            co.get::<Function>("close")?,
            g.get::<Function>("load")?,
            g.get::<Function>("collectgarbage")?,
            check,
            enter,
            leave,
            sloadfile,
        ))?;
    for k in ["print", "warn", "require", "package", "debug"] {
        g.set(k, Value::Nil)?;
    }
    for (k, v) in VERDICTS {
        g.set(k, v)?;
    }
    drop(g);
    install_hook(&lua, budget);
    Ok(lua)
}
