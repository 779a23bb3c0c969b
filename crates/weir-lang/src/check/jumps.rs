//! Jump loops and the jump depth limit: the kernel refuses both when the ruleset loads.

use super::tables::{err, Cx};
use super::MAX_JUMP_DEPTH;
use crate::ir::*;
use crate::source::Span;

/// Jump loops and the jump depth limit (the kernel refuses both).
pub(super) fn check_jumps(cx: &mut Cx, chains: &[Chain]) {
    let n = chains.len();
    let mut adj: Vec<Vec<(usize, Span)>> = vec![Vec::new(); n];
    for &(a, b, s) in &cx.edges {
        adj[a].push((b, s));
    }
    // verdict maps, named and anonymous, jump too
    for (ci, c) in chains.iter().enumerate() {
        for r in &c.rules {
            for e in &r.exprs {
                if let Expr::Vmap { map, .. } = e {
                    let set: &Set = match map {
                        SetRef::Anon(s) => s,
                        SetRef::Named(i) => &cx.sets[*i],
                    };
                    let targets: Vec<usize> = set
                        .elements
                        .iter()
                        .filter_map(|el| match el.data {
                            Some(MapValue::Verdict(Verdict::Jump(t) | Verdict::Goto(t))) => Some(t),
                            _ => None,
                        })
                        .collect();
                    for t in targets {
                        if cx.base_chains.get(t).copied().unwrap_or(false) {
                            err(
                                cx,
                                r.span,
                                format!(
                                    "a verdict map of this rule jumps to base chain '{}'",
                                    chains[t].name
                                ),
                            );
                        }
                        adj[ci].push((t, r.span));
                    }
                }
            }
        }
    }
    // colour DFS for cycles; depth by memoised longest path (on an acyclic graph)
    let mut colour = vec![0u8; n];
    let mut depth = vec![0usize; n];
    let mut reported = false;
    fn dfs(
        v: usize,
        adj: &[Vec<(usize, Span)>],
        colour: &mut [u8],
        depth: &mut [usize],
        path: &mut Vec<usize>,
        out: &mut Option<(Span, Vec<usize>)>,
    ) {
        colour[v] = 1;
        path.push(v);
        let mut d = 0;
        for &(w, s) in &adj[v] {
            if colour[w] == 1 {
                if out.is_none() {
                    let start = path.iter().position(|&x| x == w).unwrap_or(0);
                    let mut cyc = path[start..].to_vec();
                    cyc.push(w);
                    *out = Some((s, cyc));
                }
                continue;
            }
            if colour[w] == 0 {
                dfs(w, adj, colour, depth, path, out);
            }
            d = d.max(depth[w] + 1);
        }
        depth[v] = d;
        path.pop();
        colour[v] = 2;
    }
    for v in 0..n {
        if colour[v] == 0 {
            let mut found = None;
            dfs(
                v,
                &adj,
                &mut colour,
                &mut depth,
                &mut Vec::new(),
                &mut found,
            );
            if let Some((s, cyc)) = found {
                if !reported {
                    let names: Vec<&str> = cyc.iter().map(|&i| chains[i].name.as_str()).collect();
                    err(cx, s, format!("jump loop: {}", names.join(" -> ")));
                    reported = true;
                }
            }
        }
    }
    if !reported {
        reached_nat(cx, chains, &adj);
    }
    if !reported {
        for (ci, c) in chains.iter().enumerate() {
            // (the kernel's jump stack holds 16 levels, the base chain's one of them)
            if c.base.is_some() && depth[ci] >= MAX_JUMP_DEPTH {
                err(
                    cx,
                    c.span,
                    format!(
                        "chain '{}' jumps {} chains deep; the limit is {MAX_JUMP_DEPTH}",
                        c.name, depth[ci]
                    ),
                );
            }
        }
    }
}

/// NAT statements of a regular chain meet the chain type and hook of every base chain that
/// jumps to it (the kernel validates each rule from each base chain): `masquerade` only in a
/// nat chain at postrouting, `snat` at postrouting or input, `dnat` and `redirect` at
/// prerouting or output.
fn reached_nat(cx: &mut Cx, chains: &[Chain], adj: &[Vec<(usize, Span)>]) {
    for (bi, b) in chains.iter().enumerate() {
        let Some(base) = &b.base else { continue };
        let mut seen = vec![false; chains.len()];
        let mut todo = vec![bi];
        seen[bi] = true;
        while let Some(v) = todo.pop() {
            for &(w, _) in &adj[v] {
                if !std::mem::replace(&mut seen[w], true) {
                    todo.push(w);
                }
            }
            if v == bi {
                continue;
            }
            for r in &chains[v].rules {
                for e in &r.exprs {
                    let Expr::Nat(n) = e else { continue };
                    let ok = base.ty == ChainType::Nat
                        && match n.kind {
                            NatKind::Masquerade => base.hook == Hook::Postrouting,
                            NatKind::Snat => matches!(base.hook, Hook::Postrouting | Hook::Input),
                            NatKind::Dnat | NatKind::Redirect => {
                                matches!(base.hook, Hook::Prerouting | Hook::Output)
                            }
                        };
                    if !ok {
                        err(
                            cx,
                            r.span,
                            format!(
                                "chain '{}' reaches this rule of chain '{}', and its NAT is not allowed in a {} chain at {}",
                                b.name,
                                chains[v].name,
                                match base.ty {
                                    ChainType::Nat => "nat",
                                    ChainType::Filter => "filter",
                                    ChainType::Route => "route",
                                },
                                base.hook.name()
                            ),
                        );
                        return;
                    }
                }
            }
        }
    }
}
