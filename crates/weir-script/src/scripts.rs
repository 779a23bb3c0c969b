//! The per-flow processing that `queue` statements hand packets to: [`Scripts`], the
//! engine's [`FlowHook`].
//!
//! For each queued packet of a connection: its direction's counters (packets, data
//! packets, payload bytes, relative sequence) are counted; its payload type is detected, and
//! with it the flow's protocol and host name (a TLS ClientHello spanning segments is
//! reassembled, a QUIC Initial decrypted); the queue's profiles choose the flow's profile
//! (again when the protocol or host becomes known); the instances whose ranges and payload
//! filters take the packet run in order, each on the packet as the previous left it. Their
//! verdicts combine as nfqws2's: modify over pass, drop over both; what they send goes out
//! before the packet. A direction whose instances are all done costs a bit test from then
//! on. What a flow keeps lives in a bounded table here, keyed by the connection's original
//! tuple; when it is full, a flow not seen since the eviction hand last passed it goes
//! (CLOCK, second chance: O(1) per new flow; counted).
//!
//! An instance runs a native action ([`desync::Action`]) when its function is one, else
//! the Lua global function of that name from the `[scripts] lua` files (looked up at
//! [`Scripts::new`]: a missing one is a configuration error). A Lua function is called as
//! `f(pkt, args)` (see [`crate::lua`]) with all the instance's arguments, `payload` and
//! `dir` included (they filter on the Rust side before the call, as for native actions);
//! its flow is the connection (its `pkt.state` starts empty for a new connection), and
//! `pkt:desync` runs native actions with what native instances get (the packet's markers,
//! the server's last TTL, the blobs). A call that fails (an error, its instruction budget
//! or the memory limit) passes the packet as it was and is counted in [`ScriptStats`].

use crate::config::{split_desync, ScriptsConfig};
use crate::desync::ActionError;
use crate::desync::{self, Action, Blobs, Verdict};
use crate::hold::{self, Held, Part};
use crate::l7::{self, QuicReasm, Reasm, ReasmBudget, ReasmStatus, L4};
use crate::lua::{self, CallError, FlowId, FnId, LuaConfig, PacketView, Runtime};
use crate::payload::{Markers, PayloadType, Protocol};
use crate::profile::filter::FlowKey;
use crate::profile::range::{Counters, Range};
use crate::profile::{FlowState, Instance, PayloadFilter, Profile, Profiles};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::Path;
use weir_conntrack::Tuple;
use weir_engine::stateful::{FlowHook, QueueVerdict, Queued};

/// Which direction an action acts on (its `dir` argument; nfqws2's functions default to
/// `out`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Out,
    In,
    Any,
}

impl Direction {
    fn takes(self, outgoing: bool) -> bool {
        match self {
            Direction::Out => outgoing,
            Direction::In => !outgoing,
            Direction::Any => true,
        }
    }
}

/// What an instance calls: a native action or a Lua function.
#[derive(Debug)]
pub enum Call {
    Native(Box<Action>),
    Lua {
        f: FnId,
        /// All the instance's arguments, `payload` and `dir` included, in order.
        args: Vec<(String, String)>,
    },
}

/// An instance's function.
#[derive(Debug)]
pub struct Func {
    /// The instance as configured (`multisplit:pos=1,midsld`), for statistics and errors.
    pub text: String,
    pub call: Call,
    /// The function's own `payload` argument (nfqws2's functions: default `known`).
    pub payload: PayloadFilter,
    pub dir: Direction,
}

/// Per-flow processing's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptStats {
    /// Packets handed over.
    pub packets: u64,
    /// Of those, in a direction already done (one bit test).
    pub done: u64,
    /// Not tracked (no connection): passed.
    pub untracked: u64,
    /// Instance calls.
    pub calls: u64,
    pub dropped: u64,
    pub modified: u64,
    /// Packets sent by the instances.
    pub sent: u64,
    /// Flows started, and those pushed out of a full table.
    pub flows: u64,
    pub flows_evicted: u64,
    /// Flows whose host name became known.
    pub hosts: u64,
    /// Reassemblies refused (a flow's limit or the total reached: the parts passed as they
    /// were).
    pub reasm_refused: u64,
    /// Parts of a hello held until the whole was in (dropped where they came, sent on
    /// later), and holds given up because the client sent a held part again (or too many
    /// parts): the parts then went on as they came.
    pub held: u64,
    pub hold_released: u64,
    /// Lua calls (also in `calls`), and those that failed: a script error (or a bad return
    /// value), the instruction budget spent, the memory limit reached. A failed call passes
    /// the packet as it was and sends nothing.
    pub lua_calls: u64,
    pub lua_errors: u64,
    pub lua_budget: u64,
    pub lua_memory: u64,
    /// Lua timer calls, those that failed (an error, the budget or the memory limit: the
    /// timer is deleted), and the packets timers sent.
    pub timer_calls: u64,
    pub timer_failed: u64,
    pub timer_sent: u64,
}

#[derive(Default)]
struct Flow {
    st: FlowState,
    isn: [Option<u32>; 2],
    count: [Counters; 2],
    l7: Option<Protocol>,
    host: Option<String>,
    reasm: Option<Reasm>,
    /// The hello's parts held while `reasm` gathers it.
    held: Held,
    quic: Option<QuicReasm>,
    /// The TTL / hop limit of the last packet from the server.
    incoming_ttl: Option<u8>,
    /// The queue whose profiles the flow's state refers to (the last that handed it over).
    queue: u16,
    /// The first packet seen was the client's SYN (`oob` needs the connection from there).
    from_syn: bool,
    /// Seen since the eviction hand last passed (CLOCK's reference bit).
    referenced: bool,
    /// Which entry of the eviction ring is this flow's (a tuple made afresh has a new one).
    generation: u64,
}

/// Per-flow scripts: the queues' profiles and the flows' state.
pub struct Scripts {
    queues: BTreeMap<u16, Profiles<Func>>,
    blobs: Blobs,
    /// The Lua state, when `[scripts] lua` names files.
    lua: Option<Runtime>,
    flows: HashMap<Tuple, Flow>,
    max_flows: usize,
    reasm_flow_limit: usize,
    budget: ReasmBudget,
    /// The eviction ring: flows in the order they were made, with their generation.
    ring: std::collections::VecDeque<(Tuple, u64)>,
    clock: u64,
    stats: ScriptStats,
}

impl Scripts {
    /// Build from the configuration (`base`: the configuration file's directory, for the
    /// files it names). Every error names the profile and the instance.
    pub fn new(cfg: &ScriptsConfig, base: &Path) -> Result<Scripts, String> {
        let mut blobs = Blobs::new();
        for (name, v) in &cfg.blobs {
            let data = if let Some(f) = v.strip_prefix('@') {
                let p = base.join(f);
                std::fs::read(&p).map_err(|e| format!("blob {name}: {}: {e}", p.display()))?
            } else {
                desync::blobs::parse_hex(v)
                    .ok_or_else(|| format!("blob {name}: {v:?} is neither @FILE nor 0xHEX"))?
            };
            blobs.insert(name, data);
        }
        let rt = if cfg.lua.is_empty() {
            None
        } else {
            let dir = cfg.dir.as_ref().map(|d| base.join(d));
            let def = LuaConfig::default();
            let lcfg = LuaConfig {
                dir: dir.clone(),
                memory_limit: cfg.memory_limit.unwrap_or(def.memory_limit),
                instruction_budget: cfg.instruction_budget.unwrap_or(def.instruction_budget),
                max_flows: cfg.max_flows.unwrap_or(def.max_flows),
            };
            let mut rt = Runtime::new(&lcfg).map_err(|e| format!("scripts: {e}"))?;
            rt.set_blobs(blobs.clone());
            let from = dir.as_deref().unwrap_or(base);
            for f in &cfg.lua {
                rt.load_file(from.join(f))
                    .map_err(|e| format!("scripts.lua: loading Lua: {e}"))?;
            }
            Some(rt)
        };
        let mut by_queue: BTreeMap<u16, Vec<Profile<Func>>> = BTreeMap::new();
        for (pi, p) in cfg.profile.iter().enumerate() {
            let pname = if p.name.is_empty() {
                format!("#{}", pi + 1)
            } else {
                p.name.clone()
            };
            let filters = p.filters(base)?;
            let mut instances = Vec::new();
            for ic in &p.instance {
                let ctx = |e: String| format!("profile {pname:?}, instance {:?}: {e}", ic.desync);
                let (name, mut args) = split_desync(&ic.desync).map_err(ctx)?;
                let all_args = args.clone();
                let mut take = |k: &str| {
                    args.iter()
                        .position(|(a, _)| a == k)
                        .map(|i| args.remove(i).1)
                };
                // `oob` takes every packet of both directions from the SYN on (it cannot be
                // filtered: once begun, the byte must go in); it has no such arguments
                let lasting = name == "oob";
                let (def_payload, def_dir) = desync::defaults(&name);
                let payload = match take("payload") {
                    Some(v) if !lasting => PayloadFilter::parse(&v).map_err(ctx)?,
                    Some(_) => return Err(ctx("oob: cannot be filtered by payload".into())),
                    None => def_payload,
                };
                let dir = match take("dir").as_deref() {
                    None => def_dir,
                    Some("out") => Direction::Out,
                    Some("in") => Direction::In,
                    Some("any") => Direction::Any,
                    Some(o) => return Err(ctx(format!("dir={o}: out, in or any"))),
                };
                let call = match Action::parse(&name, &args) {
                    Ok(a) => Call::Native(Box::new(a)),
                    Err(ActionError::UnknownFunction(_)) => match &rt {
                        Some(rt) => Call::Lua {
                            f: rt.function(&name).map_err(|e| {
                                ctx(format!("{name}: not a native action, and {}", e.message))
                            })?,
                            args: all_args,
                        },
                        None => {
                            return Err(ctx(format!(
                                "unknown desync function '{name}' (not a native action, and \
                                 scripts.lua loads no Lua)"
                            )))
                        }
                    },
                    Err(e) => return Err(ctx(e.to_string())),
                };
                let range = |r: &Option<String>, def: Range| match r {
                    Some(t) => Range::parse(t).map_err(|e| ctx(e.to_string())),
                    None => Ok(def),
                };
                instances.push(Instance {
                    payload: match &ic.payload {
                        Some(t) => PayloadFilter::parse(t).map_err(ctx)?,
                        None => PayloadFilter::All,
                    },
                    in_range: range(&ic.in_range, Range::Never)?,
                    out_range: range(&ic.out_range, Range::Always)?,
                    func: Func {
                        text: ic.desync.clone(),
                        call,
                        payload,
                        dir,
                    },
                });
            }
            by_queue.entry(p.queue).or_default().push(Profile {
                name: pname,
                filters,
                instances,
            });
        }
        let mut queues = BTreeMap::new();
        for (q, list) in by_queue {
            queues.insert(q, Profiles::new(list).map_err(|e| e.0)?);
        }
        Ok(Scripts {
            queues,
            blobs,
            lua: rt,
            flows: HashMap::new(),
            max_flows: cfg.max_flows.unwrap_or(65_536).max(1),
            reasm_flow_limit: cfg.reasm_flow_limit.unwrap_or(16 << 10),
            budget: ReasmBudget::new(cfg.reasm_total_limit.unwrap_or(16 << 20)),
            ring: std::collections::VecDeque::new(),
            clock: 0,
            stats: ScriptStats::default(),
        })
    }

    pub fn stats(&self) -> ScriptStats {
        let mut s = self.stats;
        if let Some(rt) = &self.lua {
            let t = rt.timer_stats();
            s.timer_calls = t.calls;
            s.timer_failed = t.errors + t.budget_exceeded + t.memory_exceeded;
            s.timer_sent = t.sent;
        }
        s
    }

    /// The queues that have profiles.
    pub fn queues(&self) -> impl Iterator<Item = u16> + '_ {
        self.queues.keys().copied()
    }

    /// The most packets of a connection's direction any profile of `queue` can act on
    /// (what the kernel must queue: `connbytes 1:N`); None: no bound in packets.
    pub fn packet_bound(&self, queue: u16, outgoing: bool) -> Option<u64> {
        self.queues.get(&queue)?.packet_bound(outgoing)
    }

    /// What the profiles of every queue can act on: what the kernel must queue when the
    /// ruleset hands packets to scripts and does nothing else.
    pub fn scope(&self) -> crate::scope::Scope {
        let mut s = crate::scope::Scope::default();
        for p in self.queues.values() {
            let (orig, reply) = (p.packet_bound(true), p.packet_bound(false));
            for prof in p.iter() {
                s.add(&prof.filters, orig, reply);
            }
        }
        s
    }

    /// The Lua state (its per-function counters: [`Runtime::stats`]), if any.
    pub fn lua(&self) -> Option<&Runtime> {
        self.lua.as_ref()
    }

    /// The flows with state.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// The flow of `orig`, made (or made afresh for a new connection); when the table is
    /// full, one not seen since the hand last passed goes first.
    fn flow(&mut self, orig: Tuple, new: bool) {
        if !new {
            if let Some(f) = self.flows.get_mut(&orig) {
                f.referenced = true;
                return;
            }
        }
        if let Some(old) = self.flows.remove(&orig) {
            self.release(old);
        }
        if let Some(rt) = &mut self.lua {
            // a new connection on this tuple: its Lua state starts empty
            rt.forget(flow_id(&orig));
        }
        if self.flows.len() >= self.max_flows {
            self.evict_one();
        }
        self.clock += 1;
        self.stats.flows += 1;
        self.ring.push_back((orig, self.clock));
        self.flows.insert(
            orig,
            Flow {
                generation: self.clock,
                ..Flow::default()
            },
        );
        // entries of flows gone (made afresh, or ended) are dropped as the hand meets them;
        // keep the ring within twice the table
        if self.ring.len() > 2 * self.max_flows + 16 {
            let flows = &self.flows;
            self.ring
                .retain(|(t, g)| flows.get(t).is_some_and(|f| f.generation == *g));
        }
    }

    /// Push one flow out (CLOCK): the first in the ring not referenced since the hand last
    /// passed; those referenced get a second chance. At most two turns of the ring.
    fn evict_one(&mut self) {
        for _ in 0..2 * self.ring.len() + 1 {
            let Some((t, g)) = self.ring.pop_front() else {
                return;
            };
            let Some(f) = self.flows.get_mut(&t) else {
                continue;
            };
            if f.generation != g {
                continue;
            }
            if f.referenced {
                f.referenced = false;
                self.ring.push_back((t, g));
                continue;
            }
            if let Some(old) = self.flows.remove(&t) {
                self.release(old);
            }
            if let Some(rt) = &mut self.lua {
                rt.forget(flow_id(&t));
            }
            self.stats.flows_evicted += 1;
            return;
        }
    }

    /// The verdict for the packet that completed a held hello, after the instances ran on
    /// the whole: dropped (what they sent stands for all parts), or the parts sent on as
    /// they came (nothing changed: this one accepted after them), or the changed whole sent
    /// in segments no longer than the longest part (this one dropped).
    fn after_whole(
        flow: &mut Flow,
        stats: &mut ScriptStats,
        send: &mut Vec<Vec<u8>>,
        verdict: Verdict,
        packet: Option<Vec<u8>>,
        this_len: usize,
    ) -> QueueVerdict {
        let parts = flow.held.release();
        match (verdict, packet) {
            (Verdict::Drop, _) => {
                stats.dropped += 1;
                QueueVerdict::Drop
            }
            (Verdict::Modify, Some(m)) => {
                stats.modified += 1;
                let longest = parts.iter().map(Vec::len).max().unwrap_or(0).max(this_len);
                let hdr = desync::with_payload(&m, &[]).map_or(0, |h| h.len());
                let segs = desync::resegment(&m, longest.saturating_sub(hdr).max(1));
                stats.sent += segs.len() as u64;
                send.extend(segs);
                QueueVerdict::Drop
            }
            _ => {
                stats.sent += parts.len() as u64;
                send.extend(parts);
                QueueVerdict::Accept
            }
        }
    }

    fn release(&mut self, mut f: Flow) {
        if let Some(mut r) = f.reasm.take() {
            r.finish(&mut self.budget);
        }
    }
}

/// The Lua flow of a connection: a hash of its original tuple (stable for the process's
/// life; the same for both directions).
fn flow_id(orig: &Tuple) -> FlowId {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    orig.hash(&mut h);
    FlowId(h.finish())
}

/// Where an IP packet's payload starts, its TCP sequence and its TTL / hop limit.
fn locate(ip: &[u8], l4: usize, proto: u8) -> (usize, Option<u32>, Option<u8>) {
    let ttl = match ip.first().map(|b| b >> 4) {
        Some(4) => ip.get(8).copied(),
        Some(6) => ip.get(7).copied(),
        _ => None,
    };
    match proto {
        6 => {
            let off = ip.get(l4 + 12).map_or(20, |b| (b >> 4) as usize * 4);
            let seq = ip
                .get(l4 + 4..l4 + 8)
                .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]));
            ((l4 + off).min(ip.len()), seq, ttl)
        }
        17 => ((l4 + 8).min(ip.len()), None, ttl),
        _ => (ip.len(), None, ttl),
    }
}

impl FlowHook for Scripts {
    fn listens(&self, num: u16) -> bool {
        self.queues.contains_key(&num)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn tick(&mut self, now_ns: u64, send: &mut Vec<Vec<u8>>) -> bool {
        // the Lua timers (crate::lua::timers)
        let Some(rt) = &mut self.lua else {
            return false;
        };
        send.extend(rt.run_timers(now_ns));
        rt.timers() > 0
    }

    fn holds(&self, orig: &Tuple) -> bool {
        self.flows
            .get(orig)
            .is_some_and(|f| self.queues.get(&f.queue).is_some_and(|p| p.active(&f.st)))
    }

    fn queued(&mut self, q: Queued<'_>) -> QueueVerdict {
        self.stats.packets += 1;
        let Some(c) = q.conn else {
            self.stats.untracked += 1;
            return QueueVerdict::Accept;
        };
        let outgoing = !c.reply;
        let d = if outgoing { 0 } else { 1 };
        let l3 = q.pm.l3_off as usize;
        let end = q.pm.l3_end().min(q.frame.len());
        if l3 >= end {
            return QueueVerdict::Accept;
        }
        let l4 = (q.pm.l4_off as usize).saturating_sub(l3);
        let proto = q.pm.l4proto;
        let (pay, seq, ttl) = locate(&q.frame[l3..end], l4, proto);
        let plen = (end - l3 - pay) as u64;
        let reasm_limit = self.reasm_flow_limit;
        self.flow(c.orig, c.new);
        let Scripts {
            flows,
            budget,
            stats,
            queues,
            blobs,
            lua: rt,
            ..
        } = self;
        let Some(flow) = flows.get_mut(&c.orig) else {
            return QueueVerdict::Accept;
        };
        flow.queue = q.num;
        if flow.count[0].packets == 0 && flow.count[1].packets == 0 {
            // the connection's first packet here: its client's SYN?
            flow.from_syn = outgoing && proto == 6 && q.pm.tcp_flags & 0x12 == 0x02;
        }
        // this direction's counters, this packet counted
        let cnt = &mut flow.count[d];
        cnt.packets += 1;
        if plen > 0 {
            cnt.data_packets += 1;
        }
        if let Some(s) = seq {
            let isn = *flow.isn[d].get_or_insert(s);
            cnt.seq = s.wrapping_sub(isn) as u64;
        }
        cnt.len = plen;
        let counters = *cnt;
        cnt.bytes += plen;
        if !outgoing {
            flow.incoming_ttl = ttl;
        }
        // the connection entry keeps a direction's bit only once no instance may act on
        // the flow any more in either direction: while the other direction's instances may
        // act, they read this one's counters (`oob`'s reverse position, Lua's `rn`...), so
        // its packets are still counted here
        let num = q.num;
        let both = |st: &FlowState| queues.get(&num).is_some_and(|p| !p.active(st));
        if flow.st.done(outgoing) {
            *q.done = both(&flow.st);
            stats.done += 1;
            return QueueVerdict::Accept;
        }
        // the payload's type, and what it tells of the flow
        let payload = &q.frame[l3 + pay..end];
        let l4k = if proto == 6 { L4::Tcp } else { L4::Udp };
        let mut det = if matches!(proto, 6 | 17) {
            l7::detect(l4k, payload)
        } else {
            l7::Detection::plain(PayloadType::Unknown)
        };
        let mut host_found = false;
        // a ClientHello over several segments: its parts held until the whole is in, the
        // instances then run on one packet with all of it (see `crate::hold`)
        let mut whole: Option<Vec<u8>> = None;
        if proto == 6
            && outgoing
            && (det.incomplete.is_some() || flow.reasm.is_some())
            && flow.host.is_none()
        {
            let s = seq.unwrap_or(0);
            if flow.reasm.is_none() {
                flow.held = Held {
                    base: s,
                    parts: Vec::new(),
                };
            }
            let r = flow.reasm.get_or_insert_with(|| Reasm::new(reasm_limit));
            // a part held already, sent again: the client has waited long enough
            let status = if flow.held.has(s) || flow.held.parts.len() >= hold::MAX_PARTS {
                None
            } else {
                Some(r.feed(budget, s.wrapping_sub(flow.held.base), payload))
            };
            match status {
                Some(ReasmStatus::NeedMore) => {
                    flow.held.parts.push(Part {
                        seq: s,
                        packet: q.frame[l3..end].to_vec(),
                    });
                    stats.held += 1;
                    return QueueVerdict::Drop;
                }
                Some(ReasmStatus::Complete) => {
                    if let Some(all) = r.finish(budget) {
                        let w = l7::detect(L4::Tcp, &all);
                        if !flow.held.parts.is_empty() {
                            whole = flow.held.join((s, &q.frame[l3..end]), &all);
                            if whole.is_some() {
                                det.ptype = w.ptype;
                                det.markers = w.markers;
                            }
                        }
                        if w.host.is_some() {
                            det.host = w.host;
                            det.ptype = w.ptype;
                        }
                    }
                    flow.reasm = None;
                    if whole.is_none() {
                        // (nothing held, or no packet could carry it: the parts go as
                        // they came, before this one)
                        let parts = flow.held.release();
                        stats.sent += parts.len() as u64;
                        q.send.extend(parts);
                    }
                }
                Some(ReasmStatus::Refused(_)) | None => {
                    if status.is_some() {
                        stats.reasm_refused += 1;
                    } else {
                        stats.hold_released += 1;
                    }
                    if let Some(mut r) = flow.reasm.take() {
                        r.finish(budget);
                    }
                    let parts = flow.held.release();
                    stats.sent += parts.len() as u64;
                    q.send.extend(parts);
                }
            }
        }
        if proto == 17
            && det.ptype == PayloadType::QuicInitial
            && det.host.is_none()
            && flow.host.is_none()
        {
            let qr = flow.quic.get_or_insert_with(|| QuicReasm::new(reasm_limit));
            qr.feed(payload);
            if let Some(h) = qr.host() {
                det.host = Some(h.to_string());
                flow.quic = None;
            }
        }
        if let Some(p) = det.ptype.protocol() {
            flow.l7.get_or_insert(p);
        }
        if flow.host.is_none() {
            if let Some(h) = det.host.take() {
                flow.host = Some(h);
                host_found = true;
            }
        }
        if host_found {
            stats.hosts += 1;
        }
        let ip_src = |v: u128| -> std::net::IpAddr {
            if c.orig.v6 {
                std::net::IpAddr::V6(v.into())
            } else {
                std::net::IpAddr::V4((v as u32).into())
            }
        };
        let icmp = matches!(proto, 1 | 58).then(|| ((c.orig.dport >> 8) as u8, c.orig.dport as u8));
        let key = FlowKey {
            v6: c.orig.v6,
            proto: c.orig.proto,
            port: c.orig.dport,
            icmp,
            remote: ip_src(c.orig.dst),
            l7: flow.l7,
            host: flow.host.as_deref(),
        };
        let planned = queues.get(&q.num).and_then(|profiles| {
            let (p, mask) = profiles.plan(&mut flow.st, &key, outgoing, det.ptype, &counters)?;
            (mask != 0).then_some((profiles, p, mask))
        });
        *q.done = both(&flow.st);
        let Some((profiles, p, mask)) = planned else {
            if whole.is_some() {
                // nothing acts on the whole: the parts go as they came
                let parts = flow.held.release();
                stats.sent += parts.len() as u64;
                q.send.extend(parts);
            }
            return QueueVerdict::Accept;
        };
        let prof = profiles.get(p).expect("the chosen profile");
        let markers: Markers = det.markers;
        let incoming_ttl = flow.incoming_ttl;
        let joined = whole.is_some();
        let mut packet: Option<Vec<u8>> = whole;
        let mut verdict = Verdict::Pass;
        for (i, inst) in prof.instances.iter().enumerate() {
            if mask & (1 << i) == 0 {
                continue;
            }
            let f = &inst.func;
            if !f.dir.takes(outgoing) || !f.payload.accepts(det.ptype) {
                continue;
            }
            stats.calls += 1;
            let cur: &[u8] = packet.as_deref().unwrap_or(&q.frame[l3..end]);
            let out = match &f.call {
                Call::Native(action) => desync::apply_at(
                    action,
                    &desync::Input {
                        packet: cur,
                        ptype: det.ptype,
                        markers,
                        incoming_ttl,
                    },
                    desync::FlowPos {
                        outgoing,
                        own_seq: counters.seq,
                        reverse_seq: flow.count[1 - d].seq,
                        from_syn: flow.from_syn,
                    },
                    blobs,
                ),
                Call::Lua { f: id, args } => {
                    let Some(rt) = rt.as_mut() else { continue };
                    stats.lua_calls += 1;
                    let mut view = PacketView::new(cur.to_vec(), outgoing);
                    view.ptype = det.ptype;
                    view.l7 = flow.l7;
                    view.host = flow.host.clone();
                    view.own = counters;
                    view.reverse = flow.count[1 - d];
                    view.markers = markers;
                    view.incoming_ttl = incoming_ttl;
                    let r = rt.call(*id, &mut view, flow_id(&c.orig), args);
                    match r.error {
                        None => {}
                        Some(CallError::Budget) => stats.lua_budget += 1,
                        Some(CallError::Memory) => stats.lua_memory += 1,
                        Some(CallError::Script(_) | CallError::BadReturn(_)) => {
                            stats.lua_errors += 1
                        }
                    }
                    if r.cutoff {
                        flow.st.cut(outgoing, i);
                    }
                    let verdict = match r.verdict {
                        lua::Verdict::Pass => Verdict::Pass,
                        lua::Verdict::Modify => Verdict::Modify,
                        lua::Verdict::Drop => Verdict::Drop,
                    };
                    desync::Output {
                        verdict,
                        modified: (verdict == Verdict::Modify).then_some(view.packet),
                        send: r.send,
                        // (the runtime's cutoff is taken above)
                        cutoff: false,
                    }
                }
            };
            if out.cutoff {
                flow.st.cut(outgoing, i);
            }
            stats.sent += out.send.len() as u64;
            q.send.extend(out.send);
            match out.verdict {
                Verdict::Pass => {}
                Verdict::Modify => {
                    if let Some(m) = out.modified {
                        packet = Some(m);
                    }
                    if verdict == Verdict::Pass {
                        verdict = Verdict::Modify;
                    }
                }
                Verdict::Drop => verdict = Verdict::Drop,
            }
        }
        profiles.settle(&mut flow.st, outgoing);
        *q.done = both(&flow.st);
        if joined {
            return Self::after_whole(flow, stats, q.send, verdict, packet, end - l3);
        }
        match (verdict, packet) {
            (Verdict::Drop, _) => {
                stats.dropped += 1;
                QueueVerdict::Drop
            }
            (Verdict::Modify, Some(m)) if m.len() == end - l3 => {
                stats.modified += 1;
                q.frame[l3..end].copy_from_slice(&m);
                QueueVerdict::Modified
            }
            (Verdict::Modify, Some(m)) => {
                // another length: sent as a new packet, this one dropped
                stats.modified += 1;
                stats.sent += 1;
                q.send.push(m);
                QueueVerdict::Drop
            }
            _ => QueueVerdict::Accept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scripts(max_flows: usize) -> Scripts {
        let cfg: ScriptsConfig = serde_json::from_str(&format!(
            r#"{{"max_flows": {max_flows}, "profile": [{{"queue": 1, "instance": [{{"desync": "drop"}}]}}]}}"#
        ))
        .unwrap();
        Scripts::new(&cfg, Path::new("/")).unwrap()
    }

    fn t(n: u16) -> Tuple {
        Tuple {
            zone: 0,
            src: 1,
            dst: 2,
            sport: n,
            dport: 443,
            proto: 6,
            v6: false,
        }
    }

    #[test]
    fn a_full_table_pushes_out_a_flow_not_seen_since_the_hand_passed() {
        let mut s = scripts(2);
        s.flow(t(1), true);
        s.flow(t(2), true);
        // flow 1 seen again: it gets a second chance, flow 2 goes
        s.flow(t(1), false);
        s.flow(t(3), true);
        assert!(s.flows.contains_key(&t(1)) && s.flows.contains_key(&t(3)));
        assert!(!s.flows.contains_key(&t(2)));
        assert_eq!((s.stats.flows, s.stats.flows_evicted), (3, 1));
        // a tuple made afresh (a new connection) keeps one live entry
        s.flow(t(3), true);
        assert_eq!(s.flows.len(), 2);
    }

    #[test]
    fn many_flows_through_a_small_table_stay_bounded() {
        let mut s = scripts(100);
        for n in 0..20_000u16 {
            s.flow(t(n), true);
            // every other flow seen again
            if n % 2 == 0 {
                s.flow(t(n), false);
            }
        }
        assert_eq!(s.flows.len(), 100);
        assert_eq!(s.stats.flows_evicted, 20_000 - 100);
        assert!(s.ring.len() <= 2 * 100 + 16, "{}", s.ring.len());
    }
}
