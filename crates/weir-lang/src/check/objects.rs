//! References to the table's named stateful objects (`counter name`, `quota name`, `limit
//! name`): a name, or a key looked up in an object map whose data are names, lowered to
//! [`Expr::ObjRef`] (or, for a counter or quota named directly, the older
//! [`Expr::Counter`] / [`Expr::Quota`] forms the engine already evaluates).

use super::rules::{lower_key, map_ref};
use super::tables::{err, other_text, Cx};
use crate::ast::{self, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use weir_wire::DataType;

/// The kind of object a pending statement of the parser names (`limit name`, `counter name
/// map`, `quota name map`).
pub(super) fn objref_kind(what: &str) -> Option<ObjKind> {
    match what {
        "limit name" => Some(ObjKind::Limit),
        "counter name map" => Some(ObjKind::Counter),
        "quota name map" => Some(ObjKind::Quota),
        _ => None,
    }
}

fn objects<'a>(cx: &'a Cx, kind: ObjKind) -> &'a std::collections::HashMap<String, usize> {
    match kind {
        ObjKind::Counter => &cx.counters,
        ObjKind::Quota => &cx.quotas,
        ObjKind::Limit => &cx.limits,
    }
}

/// The index of the object `v` names among the table's objects of `kind`; an error naming
/// it when there is none (nft: No such file or directory), saying so when the table has an
/// object of that name of another kind.
pub(super) fn object_index(cx: &mut Cx, kind: ObjKind, v: &Val) -> Option<usize> {
    let name = other_text(v);
    if let Some(&i) = objects(cx, kind).get(&name) {
        return Some(i);
    }
    let mut d = Diagnostic::error(
        v.span(),
        format!("no {} '{name}' in this table", kind.name()),
    );
    let other = [ObjKind::Counter, ObjKind::Quota, ObjKind::Limit]
        .into_iter()
        .find(|&k| k != kind && objects(cx, k).contains_key(&name));
    d = match other {
        Some(k) => d.note(format!("'{name}' is a {}, not a {}", k.name(), kind.name())),
        None => d.note(format!("declare it: {} {name} {{ ... }}", kind.name())),
    };
    cx.diags.push(d);
    None
}

/// `limit name "l"`, `counter name tcp dport map { 443 : "c1" }`, `quota name ip saddr map
/// @m`: the object a rule sends its packets to.
pub(super) fn lower_objref(cx: &mut Cx, kind: ObjKind, e: &ast::Expr) -> Option<Expr> {
    match e {
        ast::Expr::Const(v @ (Val::Word(..) | Val::Str(..))) => {
            let i = object_index(cx, kind, v)?;
            Some(match kind {
                ObjKind::Counter => Expr::Counter { named: Some(i) },
                ObjKind::Quota => Expr::Quota(Quota {
                    bytes: 0,
                    used: 0,
                    over: false,
                    named: Some(i),
                }),
                ObjKind::Limit => Expr::ObjRef(ObjRef {
                    kind,
                    target: ObjTarget::Name(i),
                }),
            })
        }
        ast::Expr::Map(k, m, span) => {
            let key = lower_key(cx, k)?;
            if let ast::SetRef::Named(id) = m {
                // the map must hold objects of this kind
                let mk = cx.obj_maps.get(&id.name).map(|k| k.name());
                if !map_of_kind(cx, id, mk, kind.name()) {
                    return None;
                }
            }
            let saved = cx.obj_data.replace(kind);
            let map = map_ref(cx, &key, m, false, &[DataType::IfName], *span);
            cx.obj_data = saved;
            Some(Expr::ObjRef(ObjRef {
                kind,
                target: ObjTarget::Map { key, map: map? },
            }))
        }
        other => {
            err(
                cx,
                other.span(),
                format!(
                    "{} name takes a name or a map: {} name \"NAME\"",
                    kind.name(),
                    kind.name()
                ),
            );
            None
        }
    }
}

/// `ct helper set tcp dport map { 21 : "ftp" }`, `synproxy name ip saddr map @m`: a map
/// choosing one of the table's objects of `kind` (`ct helper`, `ct timeout`, `ct
/// expectation`, `synproxy`) per packet, lowered to [`Expr::ObjStmt`]; a named map must hold
/// objects of that kind. When the table has an object of the kind weir does not evaluate
/// (a helper it does not run), the statement is not evaluated either.
pub(super) fn lower_obj_stmt(cx: &mut Cx, kind: &'static str, e: &ast::Expr) -> Option<Expr> {
    let ast::Expr::Map(k, m, span) = e else {
        err(cx, e.span(), format!("{kind}: a name or a map"));
        return None;
    };
    let key = lower_key(cx, k)?;
    if let ast::SetRef::Named(id) = m {
        let mk = cx.stmt_obj_maps.get(&id.name).copied();
        if !map_of_kind(cx, id, mk, kind) {
            return None;
        }
    }
    let saved = cx.stmt_obj_data.replace(kind);
    let map = map_ref(cx, &key, m, false, &[DataType::IfName], *span);
    cx.stmt_obj_data = saved;
    let map = map?;
    let stmts: Vec<Option<Expr>> = cx
        .stmt_objs
        .get(kind)
        .map(|o| o.1.clone())
        .unwrap_or_default();
    if stmts.iter().any(|s| s.is_none()) {
        return Some(Expr::Unevaluated(match kind {
            "ct helper" => "ct helper set",
            "ct timeout" => "ct timeout set",
            "ct expectation" => "ct expectation set",
            _ => "synproxy name map",
        }));
    }
    Some(Expr::ObjStmt {
        key,
        map,
        stmts: stmts.into_iter().flatten().collect(),
    })
}

/// Whether the named map `id`, whose objects are of kind `found` (None: not an object map of
/// this family of kinds), gives objects of kind `want`; an error saying why not (an unknown
/// map is left to `map_ref`).
fn map_of_kind(cx: &mut Cx, id: &ast::Ident, found: Option<&str>, want: &str) -> bool {
    let msg = match found {
        Some(k) if k == want => return true,
        Some(k) => format!("map '@{}' gives {k} objects, not {want} objects", id.name),
        None if cx.set_names.contains_key(&id.name) => format!(
            "'@{}' is not a map of {want} objects (type ... : {want})",
            id.name
        ),
        None => return true,
    };
    err(cx, id.span, msg);
    false
}
