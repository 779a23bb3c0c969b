//! Phase 2: lower each table: its named counters and quotas, flowtables, sets, chains (base
//! chain hooks, priorities and policies), then its rules and the jump graph.

use super::gather::{val_u64, TableAcc};
use super::jumps::check_jumps;
use super::limits::{lower_limit, lower_quota_words};
use super::rules::lower_rule;
use super::sets::lower_set;
use crate::ast::{self, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::source::Span;
use std::collections::HashMap;

pub(super) struct Cx<'d> {
    pub(super) diags: &'d mut Vec<Diagnostic>,
    pub(super) family: Family,
    pub(super) sets: Vec<Set>,
    pub(super) set_names: HashMap<String, usize>,
    pub(super) chain_names: HashMap<String, usize>,
    pub(super) base_chains: Vec<bool>,
    pub(super) flowtables: HashMap<String, usize>,
    pub(super) counters: HashMap<String, usize>,
    pub(super) quotas: HashMap<String, usize>,
    /// (from chain, to chain, span) for loop detection
    pub(super) edges: Vec<(usize, usize, Span)>,
    /// The chain whose rules are being lowered (None: a named set's or map's elements,
    /// whose jumps count from each chain that uses the map, in `check_jumps`).
    pub(super) cur_chain: Option<usize>,
    /// The table's `ct helper` objects (`ct helper set "NAME"` names one).
    pub(super) ct_helpers: std::collections::HashSet<String>,
    /// The `ct timeout` objects weir evaluates: name -> index into the table's list.
    pub(super) ct_timeouts: HashMap<String, usize>,
    /// Their protocols, by index.
    pub(super) ct_timeout_protos: Vec<u8>,
    /// The `ct expectation` objects weir evaluates.
    pub(super) ct_expects: HashMap<String, crate::ir::CtExpectation>,
    /// The table's `synproxy` objects.
    pub(super) synproxies: HashMap<String, crate::ir::Synproxy>,
    /// The `ct helper` objects whose helper weir runs: name -> (type, protocol number).
    pub(super) ct_helper_kinds: std::collections::HashMap<String, (String, u8)>,
    /// Its `ct timeout` and `ct expectation` objects.
    pub(super) ct_objects: std::collections::HashSet<String>,
    pub(super) cur_hook: Option<(ChainType, Hook)>,
    /// What the rule being lowered reads that the engine does not evaluate yet (each
    /// becomes an [`Expr::Unevaluated`] of the rule).
    pub(super) uneval: Vec<&'static str>,
    /// Whether the rule being lowered has matched `udp dport` yet (VXLAN and Geneve need it).
    pub(super) udp_dport_seen: bool,
    /// The width of the field a `set` statement being lowered writes (0 outside one): a
    /// value computed for it may set bits its operand's own type does not have.
    pub(super) set_target_bits: u32,
    /// The element just lowered was a catch-all (`*`): the set's `catchall`, taken by the
    /// caller.
    pub(super) catchall: Option<crate::ir::Element>,
    /// Sets weir loads but does not evaluate (object maps, sets with statements on their
    /// elements): a rule that reads one is not evaluated either.
    pub(super) uneval_sets: HashMap<String, &'static str>,
    /// The key types of the named set a key is looked up in or added to: the types of the
    /// constants in its concatenation (`ip saddr . 22`).
    pub(super) key_hint: Option<Vec<weir_wire::DataType>>,
    /// The table's secmark objects, by name.
    pub(super) secmarks: std::collections::HashSet<String>,
    /// The family of the rule's transport protocol match so far (`meta l4proto`: Inet,
    /// `ip protocol`: Ip, `ip6 nexthdr`: Ip6); tproxy needs one.
    pub(super) l4_dep: Option<Family>,
    /// The rule's equalities with one value so far (`meta nfproto ipv6`, `icmp type 3`).
    pub(super) eq_seen: Vec<(weir_wire::Field, u128)>,
    /// The table's named `limit` objects, by name: their index in `Table::limits`.
    pub(super) limits: HashMap<String, usize>,
    /// Named object maps of counters, quotas or limits (`type ipv4_addr : counter`), by name.
    pub(super) obj_maps: HashMap<String, ObjKind>,
    /// The kind of object whose names the elements being lowered give as data (an object
    /// map's elements: each name becomes the object's index).
    pub(super) obj_data: Option<ObjKind>,
    /// The table's `ct helper`, `ct timeout`, `ct expectation` and `synproxy` objects by
    /// kind: name -> index, and each as the statement that names it (None: one weir does
    /// not evaluate), for the maps that choose one per packet ([`Expr::ObjStmt`]).
    pub(super) stmt_objs: HashMap<&'static str, StmtObjs>,
    /// Named maps whose data are such objects (`type inet_service : ct helper`): their kind.
    pub(super) stmt_obj_maps: HashMap<String, &'static str>,
    /// The kind of such objects whose names the elements being lowered give as data.
    pub(super) stmt_obj_data: Option<&'static str>,
    /// Whether the rule has matched a transport field so far (NAT to a port needs one).
    pub(super) l4_seen: bool,
    /// The family of the IP addresses the rule has matched so far (`ip saddr`: Ip).
    pub(super) l3_seen: Option<Family>,
    /// The rule matched its transport protocol against a set of several (`meta l4proto {
    /// tcp, udp }`): a protocol's own header cannot follow.
    pub(super) proto_set_seen: bool,
}

/// A table's objects of one statement kind: name -> index, and by index the statement.
pub(super) type StmtObjs = (HashMap<String, usize>, Vec<Option<crate::ir::Expr>>);

/// The statement kinds of objects a map can choose (`type ... : ct helper`).
pub(super) fn stmt_obj_kind(name: &str) -> Option<&'static str> {
    ["ct helper", "ct timeout", "ct expectation", "synproxy"]
        .into_iter()
        .find(|k| *k == name)
}

/// Each of the table's statement objects as the statement that names it, by kind.
fn stmt_objects(cx: &mut Cx, objs: &[&crate::ast::ObjDecl]) {
    for o in objs {
        let Some(kind) = stmt_obj_kind(&o.kind.name) else {
            continue;
        };
        let n = &o.name.name;
        let stmt = match kind {
            "ct helper" => cx
                .ct_helper_kinds
                .get(n)
                .map(|(h, l4)| crate::ir::Expr::CtHelper {
                    helper: h.clone(),
                    l4proto: *l4,
                }),
            "ct timeout" => cx
                .ct_timeouts
                .get(n)
                .map(|&obj| crate::ir::Expr::CtTimeout {
                    obj,
                    l4proto: cx.ct_timeout_protos[obj],
                }),
            "ct expectation" => cx.ct_expects.get(n).map(|x| crate::ir::Expr::CtExpect(*x)),
            _ => cx.synproxies.get(n).map(|x| crate::ir::Expr::Synproxy(*x)),
        };
        let e = cx.stmt_objs.entry(kind).or_default();
        if !e.0.contains_key(n) {
            e.0.insert(n.clone(), e.1.len());
            e.1.push(stmt);
        }
    }
}

pub(super) fn err(cx: &mut Cx, span: Span, msg: impl Into<String>) {
    cx.diags.push(Diagnostic::error(span, msg));
}

pub(super) fn lower_table(t: &TableAcc, diags: &mut Vec<Diagnostic>) -> Table {
    let mut cx = Cx {
        diags,
        family: t.family,
        sets: Vec::new(),
        set_names: HashMap::new(),
        chain_names: t
            .chains
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect(),
        base_chains: t.chains.iter().map(|c| c.hook.is_some()).collect(),
        flowtables: HashMap::new(),
        counters: HashMap::new(),
        quotas: HashMap::new(),
        edges: Vec::new(),
        cur_chain: None,
        ct_helpers: Default::default(),
        ct_helper_kinds: Default::default(),
        ct_timeouts: Default::default(),
        ct_timeout_protos: Vec::new(),
        ct_expects: Default::default(),
        synproxies: Default::default(),
        ct_objects: Default::default(),
        cur_hook: None,
        uneval: Vec::new(),
        udp_dport_seen: false,
        set_target_bits: 0,
        catchall: None,
        uneval_sets: Default::default(),
        key_hint: None,
        secmarks: Default::default(),
        l4_dep: None,
        eq_seen: Vec::new(),
        limits: Default::default(),
        obj_maps: Default::default(),
        obj_data: None,
        stmt_objs: Default::default(),
        stmt_obj_maps: Default::default(),
        stmt_obj_data: None,
        l4_seen: false,
        l3_seen: None,
        proto_set_seen: false,
    };
    // named objects
    let mut counters = Vec::new();
    let mut quotas = Vec::new();
    let mut limits = Vec::new();
    let mut ct_timeouts = Vec::new();
    for o in &t.objs {
        // (the kernel keeps at most 128 bytes of a comment)
        if o.comment.as_ref().is_some_and(|c| c.len() > 128) {
            err(
                &mut cx,
                o.name.span,
                format!("the comment of '{}' is longer than 128 bytes", o.name.name),
            );
            continue;
        }
        match o.kind.name.as_str() {
            "counter" => {
                let mut nc = NamedCounter {
                    name: o.name.name.clone(),
                    packets: 0,
                    bytes: 0,
                };
                let mut it = o.body.iter();
                while let Some(k) = it.next() {
                    let (Val::Word(k, ks), Some(v)) = (k, it.next()) else {
                        break;
                    };
                    let n = val_u64(v).unwrap_or(0);
                    match k.as_str() {
                        "packets" => nc.packets = n,
                        "bytes" => nc.bytes = n,
                        _ => err(
                            &mut cx,
                            *ks,
                            format!("unknown counter property '{k}' (packets, bytes)"),
                        ),
                    }
                }
                cx.counters.insert(nc.name.clone(), counters.len());
                counters.push(nc);
            }
            "quota" => {
                let words: Vec<&Val> = o.body.iter().collect();
                // (a quota declared without an amount is one of 0 bytes, as nft's)
                let q = if words.is_empty() {
                    Some(crate::ir::Quota {
                        bytes: 0,
                        used: 0,
                        over: false,
                        named: None,
                    })
                } else {
                    lower_quota_words(&mut cx, &words, o.name.span)
                };
                if let Some(q) = q {
                    cx.quotas.insert(o.name.name.clone(), quotas.len());
                    quotas.push((o.name.name.clone(), q));
                }
            }
            "ct helper" => {
                // type "NAME" protocol tcp|udp [l3proto ip|ip6|inet]: as nft requires
                let w: Vec<String> = o.body.iter().map(other_text).collect();
                let at = |k: &str| w.iter().position(|x| x == k).and_then(|i| w.get(i + 1));
                match (at("type"), at("protocol")) {
                    (Some(t), Some(p)) if p == "tcp" || p == "udp" => {
                        cx.ct_helpers.insert(o.name.name.clone());
                        let l4 = if p == "tcp" { 6 } else { 17 };
                        let t = t.trim_matches('"').to_string();
                        // the helpers weir runs (weir_engine::helper)
                        if matches!(
                            (t.as_str(), l4),
                            ("ftp", 6) | ("tftp", 17) | ("sip", 6 | 17)
                        ) {
                            cx.ct_helper_kinds.insert(o.name.name.clone(), (t, l4));
                        }
                    }
                    _ => err(
                        &mut cx,
                        o.name.span,
                        format!(
                            "ct helper '{}' needs type \"NAME\" and protocol tcp or udp",
                            o.name.name
                        ),
                    ),
                }
            }
            // loaded and listed; rules that name them are checked as they are written
            "secmark" => {
                cx.secmarks.insert(o.name.name.clone());
            }
            "tunnel" => {}
            "ct timeout" | "ct expectation" | "synproxy" => {
                cx.ct_objects.insert(o.name.name.clone());
                if o.kind.name == "ct timeout" {
                    if let Some(p) = super::ctobj::timeout_policy(&o.body) {
                        cx.ct_timeouts
                            .insert(o.name.name.clone(), ct_timeouts.len());
                        cx.ct_timeout_protos.push(p.l4proto);
                        ct_timeouts.push((o.name.name.clone(), p));
                    }
                } else if o.kind.name == "ct expectation" {
                    if let Some(x) = super::ctobj::expectation(&o.body) {
                        cx.ct_expects.insert(o.name.name.clone(), x);
                    }
                } else if let Some(x) = super::ctobj::synproxy(&o.body) {
                    cx.synproxies.insert(o.name.name.clone(), x);
                }
            }
            // `limit NAME { rate [over] N/UNIT [burst N packets|bytes] }`: checked as a
            // `limit` statement is; rules reach it with `limit name "NAME"`
            "limit" => {
                let mut words: Vec<Val> = o.body.clone();
                let rate_at = words
                    .iter()
                    .position(|v| matches!(v, Val::Word(w, _) if w == "rate"));
                let Some(r) = rate_at else {
                    err(
                        &mut cx,
                        o.name.span,
                        format!("limit '{}' needs a rate", o.name.name),
                    );
                    continue;
                };
                words.drain(..=r);
                let over = matches!(words.first(), Some(Val::Word(w, _)) if w == "over");
                if over {
                    words.remove(0);
                }
                let burst = words
                    .iter()
                    .position(|v| matches!(v, Val::Word(w, _) if w == "burst"))
                    .map(|b| {
                        let rest = words.split_off(b);
                        rest[1..].to_vec()
                    });
                if let Some(l) = lower_limit(&mut cx, over, &words, &burst, o.name.span) {
                    cx.limits.insert(o.name.name.clone(), limits.len());
                    limits.push((o.name.name.clone(), l));
                }
            }
            other => err(
                &mut cx,
                o.kind.span,
                format!(
                    "named '{other}' objects are not supported (counter, quota, limit, ct helper)"
                ),
            ),
        }
    }
    stmt_objects(&mut cx, &t.objs);
    // flowtables
    let mut flowtables = Vec::new();
    for (f, &fh) in t.flowtables.iter().zip(&t.flowtable_handles) {
        let hook = match f.hook.as_ref().map(|h| h.name.as_str()) {
            Some("ingress") | None => Hook::Ingress,
            Some(other) => {
                err(
                    &mut cx,
                    f.hook.as_ref().unwrap().span,
                    format!("a flowtable hooks at ingress, not {other}"),
                );
                Hook::Ingress
            }
        };
        let priority = if f.priority.is_empty() {
            0
        } else {
            lower_priority(&mut cx, &f.priority, Family::Netdev, hook).unwrap_or(0)
        };
        let devices = f
            .devices
            .iter()
            .map(|d| match d {
                Val::Word(w, _) | Val::Str(w, _) => w.clone(),
                other => other_text(other),
            })
            .collect();
        cx.flowtables.insert(f.name.name.clone(), flowtables.len());
        flowtables.push(Flowtable {
            name: f.name.name.clone(),
            hook,
            priority,
            devices,
            handle: fh,
        });
    }
    // sets (before rules: rules may refer to sets declared after them)
    for (i, (d, _)) in t.sets.iter().enumerate() {
        cx.set_names.insert(d.name.name.clone(), i);
    }
    for ((d, extra), &h) in t.sets.iter().zip(&t.set_handles) {
        let mut s = lower_set(&mut cx, d, &extra.list);
        s.handle = h;
        s.listed = extra.list.iter().map(|e| (*e).clone()).collect();
        cx.sets.push(s);
    }
    // chains
    let mut chains = Vec::new();
    for (ci, c) in t.chains.iter().enumerate() {
        cx.cur_chain = Some(ci);
        let base = c.hook.map(|h| lower_base(&mut cx, t.family, h, c.policy));
        if base.is_none() {
            if let Some(p) = c.policy {
                err(
                    &mut cx,
                    p.span,
                    format!(
                        "chain '{}' has a policy but no hook: only base chains have a policy",
                        c.name
                    ),
                );
            }
        }
        cx.cur_hook = base.as_ref().map(|b| (b.ty, b.hook));
        let mut rules = Vec::new();
        for (h, r) in &c.rules {
            if let Some(rule) = lower_rule(&mut cx, *h, r) {
                rules.push(rule);
            }
        }
        chains.push(Chain {
            name: c.name.clone(),
            base,
            rules,
            span: c.span,
            handle: c.handle,
            comment: c.comment.map(str::to_string),
        });
    }
    cx.cur_chain = None;
    check_jumps(&mut cx, &chains);
    Table {
        family: t.family,
        name: t.name.clone(),
        chains,
        sets: cx.sets,
        flowtables,
        counters,
        quotas,
        limits,
        ct_timeouts,
        dormant: t.dormant,
        span: t.span,
        handle: t.handle,
        flags: t.flags.clone(),
        comment: t.comment.clone(),
        objects: t
            .obj_handles
            .iter()
            .zip(&t.objs)
            .map(|(&h, o)| (h, (*o).clone()))
            .collect(),
    }
}

pub(super) fn other_text(v: &Val) -> String {
    match v {
        Val::Word(w, _) | Val::Str(w, _) => w.clone(),
        _ => String::new(),
    }
}

/// A chain's (or flowtable's) priority: a number, or a standard name that fits the family
/// and hook (nft's `std_prio_family_hook_compat`: `srcnat` at postrouting and input,
/// `dstnat` at prerouting and output, only `filter` in the netdev family and flowtables).
fn lower_priority(cx: &mut Cx, words: &[Val], family: Family, hook: Hook) -> Option<i32> {
    // (a define may hold a quoted priority: "filter - 100")
    let text: String = words
        .iter()
        .map(other_text)
        .collect::<Vec<_>>()
        .join("")
        .replace(' ', "");
    let span = words[0].span().to(words[words.len() - 1].span());
    if let Ok(n) = text.parse::<i32>() {
        return Some(n);
    }
    let named = |n: &str| -> Option<i32> {
        Some(match n {
            "raw" => -300,
            "mangle" => -150,
            "dstnat" => -100,
            "filter" => 0,
            "security" => 50,
            "srcnat" => 100,
            "out" => 100,
            _ => return None,
        })
    };
    let (name, off) = match text.find(['+', '-']) {
        Some(i) if i > 0 => {
            let off: i32 = match text[i + 1..].parse() {
                Ok(o) => o,
                Err(_) => {
                    err(cx, span, format!("'{text}' is not a priority"));
                    return None;
                }
            };
            (&text[..i], if &text[i..i + 1] == "-" { -off } else { off })
        }
        _ => (text.as_str(), 0),
    };
    let fits = match family {
        Family::Netdev | Family::Arp => name == "filter",
        Family::Bridge => true,
        _ => match name {
            "srcnat" => matches!(hook, Hook::Postrouting | Hook::Input),
            "dstnat" => matches!(hook, Hook::Prerouting | Hook::Output),
            _ => true,
        },
    };
    match named(name) {
        Some(_) if !fits => {
            err(
                cx,
                span,
                format!(
                    "'{name}' is not a priority name of the {} family at {}",
                    family.name(),
                    hook.name()
                ),
            );
            None
        }
        Some(b) => Some(b + off),
        None => {
            cx.diags.push(
                Diagnostic::error(span, format!("'{text}' is not a priority"))
                    .note("a number, or raw, mangle, dstnat, filter, security, srcnat (optionally + or - a number)"),
            );
            None
        }
    }
}

fn lower_base(
    cx: &mut Cx,
    family: Family,
    h: &ast::HookSpec,
    policy: Option<&ast::Ident>,
) -> BaseChain {
    let ty = match h.ty.name.as_str() {
        "filter" => ChainType::Filter,
        "nat" => ChainType::Nat,
        "route" => ChainType::Route,
        other => {
            cx.diags.push(
                Diagnostic::error(h.ty.span, format!("unknown chain type '{other}'"))
                    .note("chain types: filter, nat, route"),
            );
            ChainType::Filter
        }
    };
    let hook = match Hook::from_name(&h.hook.name) {
        Some(x) => x,
        None => {
            cx.diags.push(
                Diagnostic::error(h.hook.span, format!("unknown hook '{}'", h.hook.name)).note(
                    "hooks: ingress, prerouting, input, forward, output, postrouting, egress",
                ),
            );
            Hook::Forward
        }
    };
    let allowed: &[Hook] = match family {
        Family::Ip | Family::Ip6 => &[
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ],
        Family::Inet => &[
            Hook::Ingress,
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ],
        Family::Arp => &[Hook::Input, Hook::Output],
        Family::Bridge => &[
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ],
        Family::Netdev => &[Hook::Ingress, Hook::Egress],
    };
    if !allowed.contains(&hook) {
        cx.diags.push(
            Diagnostic::error(
                h.hook.span,
                format!(
                    "hook {} does not exist in the {} family",
                    hook.name(),
                    family.name()
                ),
            )
            .note(format!(
                "{} hooks: {}",
                family.name(),
                allowed
                    .iter()
                    .map(|h| h.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    match ty {
        ChainType::Nat => {
            if !matches!(family, Family::Ip | Family::Ip6 | Family::Inet) {
                err(
                    cx,
                    h.ty.span,
                    format!(
                        "nat chains exist only in ip, ip6 and inet tables, not {}",
                        family.name()
                    ),
                );
            } else if !matches!(
                hook,
                Hook::Prerouting | Hook::Input | Hook::Output | Hook::Postrouting
            ) {
                cx.diags.push(
                    Diagnostic::error(
                        h.hook.span,
                        format!("a nat chain cannot hook {}", hook.name()),
                    )
                    .note(
                        "nat chains hook prerouting or output (dnat), postrouting or input (snat)",
                    ),
                );
            }
        }
        ChainType::Route => {
            if hook != Hook::Output || !matches!(family, Family::Ip | Family::Ip6 | Family::Inet) {
                err(
                    cx,
                    h.hook.span,
                    "route chains exist only at the output hook of ip, ip6 and inet tables",
                );
            }
        }
        ChainType::Filter => {}
    }
    let devices = match &h.device {
        None => Vec::new(),
        Some(Val::Set(els, span)) => {
            let names: Vec<String> = els.iter().map(|e| other_text(&e.key)).collect();
            if names.is_empty() || names.iter().any(|n| n.is_empty()) {
                err(cx, *span, "devices = { ... } holds device names");
            }
            names
        }
        Some(v) => {
            let n = other_text(v);
            if n.is_empty() {
                err(cx, v.span(), "a device is a name: device \"eth0\"");
            }
            vec![n]
        }
    };
    if family == Family::Netdev && devices.is_empty() {
        cx.diags.push(
            Diagnostic::error(h.span, "a netdev base chain needs a device")
                .note("for example: type filter hook ingress device \"eth0\" priority 0;"),
        );
    }
    let priority = lower_priority(cx, &h.priority, family, hook).unwrap_or(0);
    let policy = match policy.map(|p| p.name.as_str()) {
        None | Some("accept") => Policy::Accept,
        Some("drop") => Policy::Drop,
        Some(other) => {
            err(
                cx,
                policy.unwrap().span,
                format!("policy must be accept or drop, not '{other}'"),
            );
            Policy::Accept
        }
    };
    BaseChain {
        ty,
        hook,
        priority,
        policy,
        devices,
    }
}
