//! nft's rule optimizer (`nft -o`): the consecutive rules of a chain that differ only in the
//! values they match are merged into one rule — an anonymous set (`ip daddr { a, b }`), a
//! concatenation (`ip saddr . tcp dport { a . 22, b . 80 }`), a verdict map (`tcp dport vmap
//! { 80 : accept, 81 : drop }`, per-element counters when the rules counted) or a NAT map
//! (`dnat to ip saddr map { a : b }`) — by nft's own rules (its `optimize.c`), on the syntax
//! tree of a batch's `table { ... }` blocks, before the batch is checked.
//!
//! As nft: a rule is a row of statements placed in columns (one per kind of statement: a
//! match on one selector, the verdict, a counter, a log, a reject, a NAT statement); two rules
//! can be merged when they have the same columns and at least one of them is a match, a
//! verdict map or NAT; a run of such rules is merged unless two of them match the same
//! values (the set would hold a key twice). Anything else in a rule (other statements, a
//! comparison other than `==`) keeps it as it is. Each merge is reported as nft reports it
//! (`Merging:`, the rules' locations and lines, `into:`, the new rule).

use crate::ast::{
    CmpOp, Command, Elem, Expr, Ident, Item, MapData, Rhs, Rule, SetRef, TableItem, Val, VerdictAst,
};
use crate::source::{SourceMap, Span};

/// The chains of the batch's `table { ... }` commands optimized in place; what was merged,
/// as nft prints it.
pub fn optimize(commands: &mut [Command], src: &SourceMap) -> String {
    let mut out = String::new();
    for c in commands {
        if let Command::Table { family, items, .. } = c {
            let fam = family
                .as_ref()
                .map_or("ip", |f| f.name.as_str())
                .to_string();
            for it in items {
                if let TableItem::Chain(ch) = it {
                    chain(&mut ch.rules, &fam, src, &mut out);
                }
            }
        }
    }
    out
}

/// A kind of statement: a column of the matrix.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Match {
        op: Option<CmpOp>,
        lhs: String,
    },
    Verdict,
    Counter,
    Notrack,
    Log(String),
    Reject(String),
    Nat {
        kind: String,
        family: Option<String>,
        flags: Vec<String>,
    },
}

/// What a rule is made of: for each column, the index of its statement in the rule.
struct Row {
    cells: Vec<Option<usize>>,
    /// A statement the optimizer does not merge (the rule stays as it is).
    unsupported: bool,
}

fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn kind(item: &Item, src: &SourceMap) -> Option<Kind> {
    Some(match item {
        Item::Match { lhs, op, .. } => {
            let op = op.map(|(o, _)| o);
            if !matches!(op, None | Some(CmpOp::Eq)) || matches!(lhs, Expr::Concat(..)) {
                return None;
            }
            Kind::Match {
                op,
                lhs: words(src.text(lhs.span())),
            }
        }
        Item::Verdict(_) | Item::Vmap { .. } => Kind::Verdict,
        Item::Counter { name: None, .. } => Kind::Counter,
        Item::Notrack(_) => Kind::Notrack,
        Item::Log { span, .. } => Kind::Log(words(src.text(*span))),
        Item::Reject { span, .. } => Kind::Reject(words(src.text(*span))),
        Item::Nat {
            kind,
            family,
            addr,
            port,
            flags,
            ..
        } => {
            let plain = |e: &Option<Expr>| {
                e.as_ref().is_none_or(|e| {
                    matches!(
                        e,
                        Expr::Const(Val::Word(..) | Val::Range(..) | Val::Str(..))
                    )
                })
            };
            if !plain(addr) || !plain(port) {
                return None;
            }
            Kind::Nat {
                kind: kind.name.clone(),
                family: family.as_ref().map(|f| f.name.clone()),
                flags: flags.iter().map(|f| f.name.clone()).collect(),
            }
        }
        _ => return None,
    })
}

/// The values a match compares with, one per element (a list or an anonymous set opened).
fn expand(rhs: &Rhs, src: &SourceMap) -> Vec<Val> {
    match rhs {
        // (a comma list; `syn | ack` is one value)
        Rhs::Val(Val::List(v, sp)) if src.text(*sp).contains(',') => v.clone(),
        Rhs::Val(Val::Set(es, _)) | Rhs::Set(SetRef::Anon(es, _)) => {
            es.iter().map(|e| e.key.clone()).collect()
        }
        Rhs::Val(v) => vec![v.clone()],
        Rhs::Set(SetRef::Named(_)) => vec![],
    }
}

/// The right side as one value (a key of a NAT map), when it is one.
fn single(rhs: &Rhs) -> Option<Val> {
    match rhs {
        Rhs::Val(v @ (Val::Word(..) | Val::Str(..) | Val::Range(..) | Val::Prefix(..))) => {
            Some(v.clone())
        }
        _ => None,
    }
}

fn rhs_supported(rhs: &Rhs) -> bool {
    !matches!(rhs, Rhs::Set(SetRef::Named(_)))
}

fn verdict_eq(a: &Item, b: &Item, src: &SourceMap) -> bool {
    match (a, b) {
        (Item::Verdict(x), Item::Verdict(y)) => match (x, y) {
            (VerdictAst::Jump(c, _), VerdictAst::Jump(d, _))
            | (VerdictAst::Goto(c, _), VerdictAst::Goto(d, _)) => c.name == d.name,
            _ => std::mem::discriminant(x) == std::mem::discriminant(y),
        },
        (Item::Vmap { key: k1, .. }, Item::Vmap { key: k2, .. }) => {
            words(src.text(k1.span())) == words(src.text(k2.span()))
        }
        _ => false,
    }
}

/// Two statements of one column, as nft compares them before merging their rules.
fn cell_eq(a: &Item, b: &Item, src: &SourceMap) -> bool {
    match (a, b) {
        (Item::Match { rhs: r1, .. }, Item::Match { rhs: r2, .. }) => {
            rhs_supported(r1) && rhs_supported(r2)
        }
        (Item::Verdict(_), Item::Verdict(_)) => true,
        (Item::Vmap { .. }, Item::Vmap { .. }) => verdict_eq(a, b, src),
        (Item::Verdict(_), _) | (Item::Vmap { .. }, _) => false,
        (
            Item::Nat {
                kind: k, port: p1, ..
            },
            Item::Nat { port: p2, .. },
        ) => k.name != "redirect" || p1.is_some() == p2.is_some(),
        _ => true,
    }
}

fn mergeable(item: &Item) -> bool {
    matches!(
        item,
        Item::Match { .. } | Item::Vmap { .. } | Item::Nat { .. }
    )
}

fn chain(rules: &mut Vec<Rule>, fam: &str, src: &SourceMap, out: &mut String) {
    // 1. the columns, in the order their kinds first appear
    let mut cols: Vec<Kind> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    for r in rules.iter() {
        let mut row = Row {
            cells: Vec::new(),
            unsupported: false,
        };
        for (i, it) in r.items.iter().enumerate() {
            if matches!(it, Item::Comment(..)) {
                continue;
            }
            let Some(k) = kind(it, src) else {
                row.unsupported = true;
                continue;
            };
            let c = match cols.iter().position(|x| *x == k) {
                Some(c) => c,
                None => {
                    cols.push(k);
                    cols.len() - 1
                }
            };
            if row.cells.len() <= c {
                row.cells.resize(c + 1, None);
            }
            if row.cells[c].is_some() {
                // (one statement of a kind per rule)
                row.unsupported = true;
            }
            row.cells[c] = Some(i);
        }
        rows.push(row);
    }
    for row in &mut rows {
        row.cells.resize(cols.len(), None);
    }
    let cell = |r: usize, c: usize| rows[r].cells[c].map(|i| &rules[r].items[i]);
    let rules_eq = |i: usize, j: usize| -> bool {
        if rows[i].unsupported || rows[j].unsupported {
            return false;
        }
        let mut any = false;
        for c in 0..cols.len() {
            match (cell(i, c), cell(j, c)) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    any |= mergeable(a);
                    if !cell_eq(a, b, src) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        any
    };
    // 2. runs of rules like their first
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < rules.len() {
        let mut j = i + 1;
        while j < rules.len() && rules_eq(i, j) {
            j += 1;
        }
        if j - i > 1 {
            runs.push((i, j - 1));
        }
        i = j;
    }
    // 3. not merged: a run where two rules match the same values
    let match_cols: Vec<usize> = (0..cols.len())
        .filter(|c| matches!(cols[*c], Kind::Match { .. }))
        .collect();
    let rhs_text = |r: usize, c: usize| match cell(r, c) {
        Some(Item::Match { rhs, .. }) => Some(words(src.text(rhs.span()))),
        _ => None,
    };
    runs.retain(|&(from, to)| {
        for r1 in from..=to {
            for r2 in r1 + 1..=to {
                let seen = match_cols.iter().any(|c| cell(r1, *c).is_some());
                if seen
                    && match_cols
                        .iter()
                        .all(|c| rhs_text(r1, *c) == rhs_text(r2, *c))
                {
                    return false;
                }
            }
        }
        true
    });
    // 4. each run merged into its first rule
    let verdict_col = cols.iter().position(|k| *k == Kind::Verdict);
    let mut done = Vec::new();
    for (from, to) in runs {
        let merge: Vec<usize> = (0..cols.len())
            .filter(|c| matches!(cell(from, *c), Some(Item::Match { .. } | Item::Vmap { .. })))
            .collect();
        let Some(new) = merged(rules, &rows, &merge, verdict_col, from, to, fam, src) else {
            continue;
        };
        out.push_str("Merging:\n");
        for r in &rules[from..=to] {
            out.push_str(&location_line(src, r.span));
        }
        let text = render_rule(&new, src);
        out.push_str(&format!("into:\n\t{text}\n"));
        done.push((from, to, new, text));
    }
    let mut gone = vec![false; rules.len()];
    for (from, to, items, text) in done {
        rules[from] = Rule {
            items,
            span: rules[from].span,
            text,
        };
        for g in &mut gone[from + 1..=to] {
            *g = true;
        }
    }
    let mut k = 0;
    rules.retain(|_| {
        k += 1;
        !gone[k - 1]
    });
}

/// `file:line:first-last: ` and the rule's line, as nft's `Merging:` lists a rule.
fn location_line(src: &SourceMap, span: Span) -> String {
    let f = src.file(span.file);
    let (l, c1) = f.line_col(span.lo);
    let (_, c2) = f.line_col(span.hi.saturating_sub(1));
    format!("{}:{l}:{c1}-{c2}: {}\n", f.name, f.line_text(l))
}

/// The statements of rules `from..=to` merged into one rule (None when nft would not).
#[allow(clippy::too_many_arguments)]
fn merged(
    rules: &[Rule],
    rows: &[Row],
    merge: &[usize],
    verdict_col: Option<usize>,
    from: usize,
    to: usize,
    fam: &str,
    src: &SourceMap,
) -> Option<Vec<Item>> {
    let at = |r: usize, c: usize| rows[r].cells[c].map(|i| &rules[r].items[i]);
    let nat = (from..=to).find_map(|r| {
        rules[r]
            .items
            .iter()
            .position(|i| matches!(i, Item::Nat { .. }))
            .map(|i| (r, i))
    });
    let first = &rules[from];
    let sp = first.span;
    let mut items: Vec<Option<Item>> = first
        .items
        .iter()
        .filter(|i| !matches!(i, Item::Comment(..)))
        .cloned()
        .map(Some)
        .collect();
    // (indices into `items`: comments were left out)
    let pos = |i: usize| {
        i - first.items[..i]
            .iter()
            .filter(|x| matches!(x, Item::Comment(..)))
            .count()
    };
    let lhs_of = |c: usize| match at(from, c) {
        Some(Item::Match { lhs, .. }) => Some(lhs.clone()),
        _ => None,
    };
    let rhs_of = |r: usize, c: usize| match at(r, c) {
        Some(Item::Match { rhs, .. }) => Some(rhs),
        _ => None,
    };
    let counter_of = |r: usize| {
        rules[r]
            .items
            .iter()
            .any(|i| matches!(i, Item::Counter { .. }))
    };
    let remove_counter = |items: &mut Vec<Option<Item>>| {
        for i in items.iter_mut() {
            if matches!(i, Some(Item::Counter { .. })) {
                *i = None;
            }
        }
    };
    let elem = |key: Val, data: Option<MapData>, counter: bool| Elem {
        key,
        data,
        options: if counter {
            vec![(
                Ident {
                    name: "counter".into(),
                    span: sp,
                },
                None,
            )]
        } else {
            vec![]
        },
        span: sp,
    };
    // the keys of rule r: one value per element, the merged columns concatenated
    let keys = |r: usize| -> Option<Vec<Val>> {
        let mut combos: Vec<Vec<Val>> = vec![vec![]];
        for &c in merge {
            let vals = expand(rhs_of(r, c)?, src);
            combos = combos
                .into_iter()
                .flat_map(|p| {
                    vals.iter().map(move |v| {
                        let mut p = p.clone();
                        p.push(v.clone());
                        p
                    })
                })
                .collect();
        }
        Some(
            combos
                .into_iter()
                .map(|mut p| {
                    if p.len() == 1 {
                        p.pop().unwrap()
                    } else {
                        Val::Concat(p, sp)
                    }
                })
                .collect(),
        )
    };
    let key_expr = || -> Option<Expr> {
        let l: Vec<Expr> = merge.iter().map(|&c| lhs_of(c)).collect::<Option<_>>()?;
        Some(if l.len() == 1 {
            l.into_iter().next().unwrap()
        } else {
            Expr::Concat(l, sp)
        })
    };
    let first_pos = pos(rows[from].cells[*merge.first()?]?);
    let drop_merged_rest = |items: &mut Vec<Option<Item>>| {
        for &c in &merge[1..] {
            if let Some(i) = rows[from].cells[c] {
                items[pos(i)] = None;
            }
        }
    };
    let vmap_in_merge = merge
        .iter()
        .any(|&c| matches!(at(from, c), Some(Item::Vmap { .. })));
    let nat_simple = nat.is_some_and(|(r, i)| {
        matches!(&rules[r].items[i], Item::Nat { kind, port, .. }
            if kind.name == "masquerade" || (kind.name == "redirect" && port.is_none()))
    });
    if nat.is_some() && !nat_simple {
        // a NAT map: the matched values to each rule's address (and port)
        if vmap_in_merge {
            return None;
        }
        let (_, ni) = nat?;
        let ni = pos(ni);
        let mut elems = Vec::new();
        let mut concat_data = false;
        let mut v6_data = false;
        for (r, rule) in rules.iter().enumerate().take(to + 1).skip(from) {
            let key: Vec<Val> = merge
                .iter()
                .map(|&c| rhs_of(r, c).and_then(single))
                .collect::<Option<_>>()?;
            let key = if key.len() == 1 {
                key.into_iter().next().unwrap()
            } else {
                Val::Concat(key, sp)
            };
            let Some(Item::Nat { addr, port, .. }) =
                rule.items.iter().find(|i| matches!(i, Item::Nat { .. }))
            else {
                return None;
            };
            let c = |e: &Option<Expr>| match e {
                Some(Expr::Const(v)) => Some(v.clone()),
                _ => None,
            };
            let (addr, port) = match (c(addr), c(port)) {
                (Some(a), None) => match split_port(&a) {
                    Some((a, p)) => (Some(a), Some(p)),
                    None => (Some(a), None),
                },
                x => x,
            };
            if let Some(Val::Word(a, _)) = &addr {
                v6_data |= a.contains(':');
            }
            let data = match (addr, port) {
                (Some(a), Some(p)) => {
                    concat_data = true;
                    Val::Concat(vec![a, p], sp)
                }
                (Some(a), None) => a,
                (None, Some(p)) => p,
                (None, None) => return None,
            };
            elems.push(elem(key, Some(MapData::Value(data)), false));
        }
        let key = key_expr()?;
        // the family nft gives the statement and lists: an inet table's (from the key or the
        // addresses), or an ip/ip6 table's when the map gives address and port
        let family_name = match fam {
            "inet" => Some(
                src_family(&key, src)
                    .unwrap_or_else(|| if v6_data { "ip6" } else { "ip" }.to_string()),
            ),
            "ip" | "ip6" if concat_data => Some(fam.to_string()),
            _ => None,
        };
        let map = Expr::Map(Box::new(key), SetRef::Anon(elems, sp), sp);
        let Some(Item::Nat {
            kind,
            family,
            addr,
            port,
            ..
        }) = items[ni].as_mut()
        else {
            return None;
        };
        if family.is_none() && kind.name != "redirect" {
            *family = family_name.map(|name| Ident { name, span: sp });
        }
        if kind.name == "redirect" {
            *port = Some(map);
            *addr = None;
        } else {
            *addr = Some(map);
            *port = None;
        }
        remove_counter(&mut items);
        for &c in merge {
            if let Some(i) = rows[from].cells[c] {
                items[pos(i)] = None;
            }
        }
        return Some(items.into_iter().flatten().collect());
    }
    let same_verdict = match verdict_col {
        None => true,
        Some(k) => (from..to).all(|r| match (at(r, k), at(r + 1, k)) {
            (None, None) => true,
            (Some(a), Some(b)) => verdict_eq(a, b, src),
            _ => false,
        }),
    };
    if same_verdict || nat_simple {
        if merge.len() == 1 && vmap_in_merge {
            // verdict maps on one key: their elements together
            let mut all = Vec::new();
            for r in from..=to {
                match at(r, merge[0]) {
                    Some(Item::Vmap {
                        map: SetRef::Anon(es, _),
                        ..
                    }) => all.extend(es.iter().cloned()),
                    _ => return None,
                }
            }
            if let Some(Item::Vmap { map, .. }) = items[first_pos].as_mut() {
                *map = SetRef::Anon(all, sp);
            }
            return Some(items.into_iter().flatten().collect());
        }
        if vmap_in_merge {
            return None;
        }
        let mut elems = Vec::new();
        for r in from..=to {
            elems.extend(keys(r)?.into_iter().map(|k| elem(k, None, false)));
        }
        let key = key_expr()?;
        if let Some(Item::Match { lhs, op, rhs, .. }) = items[first_pos].as_mut() {
            *lhs = key;
            *op = None;
            *rhs = Rhs::Set(SetRef::Anon(elems, sp));
        }
        drop_merged_rest(&mut items);
        return Some(items.into_iter().flatten().collect());
    }
    // a verdict map: the matched values to each rule's verdict
    if vmap_in_merge {
        return None;
    }
    let k = verdict_col?;
    let mut elems = Vec::new();
    for r in from..=to {
        let Some(Item::Verdict(v)) = at(r, k) else {
            return None;
        };
        let counter = counter_of(r);
        elems.extend(
            keys(r)?
                .into_iter()
                .map(|key| elem(key, Some(MapData::Verdict(v.clone())), counter)),
        );
    }
    let key = key_expr()?;
    items[first_pos] = Some(Item::Vmap {
        key,
        map: SetRef::Anon(elems, sp),
        span: sp,
    });
    drop_merged_rest(&mut items);
    if let Some(vi) = rows[from].cells[k] {
        items[pos(vi)] = None;
    }
    remove_counter(&mut items);
    Some(items.into_iter().flatten().collect())
}

/// `ip` or `ip6` when a key reads the IPv4 or IPv6 header.
fn src_family(key: &Expr, src: &SourceMap) -> Option<String> {
    let parts: Vec<&Expr> = match key {
        Expr::Concat(v, _) => v.iter().collect(),
        e => vec![e],
    };
    parts.iter().find_map(|e| {
        let t = words(src.text(e.span()));
        let w = t.split(' ').next()?;
        matches!(w, "ip" | "ip6").then(|| w.to_string())
    })
}

/// `ADDR:PORT` (one word as the lexer reads `1.1.1.1:80`, or `[2001:db8::1]:80`) as its
/// address and port.
fn split_port(v: &Val) -> Option<(Val, Val)> {
    let Val::Word(w, sp) = v else { return None };
    let (a, p) = if let Some(rest) = w.strip_prefix('[') {
        let (a, p) = rest.split_once("]:")?;
        (a.to_string(), p.to_string())
    } else {
        let (a, p) = w.split_once(':')?;
        if p.contains(':') {
            return None;
        }
        (a.to_string(), p.to_string())
    };
    Some((Val::Word(a, *sp), Val::Word(p, *sp)))
}

fn render_val(v: &Val, src: &SourceMap) -> String {
    match v {
        Val::Word(..) | Val::Str(..) => words(src.text(v.span())),
        Val::Range(a, b) => format!("{}-{}", render_val(a, src), render_val(b, src)),
        Val::Prefix(a, b) => format!("{}/{}", render_val(a, src), render_val(b, src)),
        Val::List(vs, _) => vs
            .iter()
            .map(|v| render_val(v, src))
            .collect::<Vec<_>>()
            .join(","),
        Val::Concat(vs, _) => vs
            .iter()
            .map(|v| render_val(v, src))
            .collect::<Vec<_>>()
            .join(" . "),
        Val::Set(es, _) => render_set(es, src),
    }
}

fn render_set(es: &[Elem], src: &SourceMap) -> String {
    let parts: Vec<String> = es
        .iter()
        .map(|e| {
            let mut s = render_val(&e.key, src);
            for (k, v) in &e.options {
                s.push(' ');
                s.push_str(&k.name);
                if let Some(v) = v {
                    s.push(' ');
                    s.push_str(&render_val(v, src));
                }
            }
            match &e.data {
                Some(MapData::Value(v)) => format!("{s} : {}", render_val(v, src)),
                Some(MapData::Verdict(v)) => format!("{s} : {}", words(src.text(v.span()))),
                None => s,
            }
        })
        .collect();
    format!("{{ {} }}", parts.join(", "))
}

fn render_expr(e: &Expr, src: &SourceMap) -> String {
    match e {
        Expr::Concat(v, _) => v
            .iter()
            .map(|e| render_expr(e, src))
            .collect::<Vec<_>>()
            .join(" . "),
        Expr::Map(k, SetRef::Anon(es, _), _) => {
            format!("{} map {}", render_expr(k, src), render_set(es, src))
        }
        Expr::Const(v) => render_val(v, src),
        e => words(src.text(e.span())),
    }
}

/// A merged rule as text (what `into:` shows).
fn render_rule(items: &[Item], src: &SourceMap) -> String {
    items
        .iter()
        .map(|i| match i {
            Item::Match { lhs, rhs, .. } => {
                let r = match rhs {
                    Rhs::Set(SetRef::Anon(es, _)) => render_set(es, src),
                    Rhs::Val(v) => render_val(v, src),
                    Rhs::Set(s) => words(src.text(s.span())),
                };
                format!("{} {r}", render_expr(lhs, src))
            }
            Item::Vmap {
                key,
                map: SetRef::Anon(es, _),
                ..
            } => format!("{} vmap {}", render_expr(key, src), render_set(es, src)),
            Item::Nat {
                kind,
                family,
                addr,
                port,
                flags,
                ..
            } => {
                let mut s = kind.name.clone();
                if let Some(f) = family {
                    s = format!("{s} {}", f.name);
                }
                if addr.is_some() || port.is_some() {
                    s.push_str(" to ");
                }
                if let Some(a) = addr {
                    s.push_str(&render_expr(a, src));
                }
                if let Some(p) = port {
                    s = format!("{s}:{}", render_expr(p, src));
                }
                for f in flags {
                    s = format!("{s} {}", f.name);
                }
                s
            }
            i => words(src.text(i.span())),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
