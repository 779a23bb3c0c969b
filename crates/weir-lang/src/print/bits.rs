//! Matches on bits as nft lists them: bitmask types (`tcp flags syn` is `tcp flags & syn !=
//! 0`, a mask with several flags in parentheses, `fin | syn` for a value of several), the
//! fields nft prints in hexadecimal, and raw payload narrower than a byte (`@ll,0,1 1` is
//! `@ll,0,8 & 0x80 == 0x80`).

use super::rule::{expr_text, Ctx};
use super::value;
use crate::ast::{CmpOp, Expr, Rhs, Val};
use crate::values;
use weir_wire::DataType;

/// Types whose plain match tests any of the bits (`ct state established,related`).
pub(super) fn is_bitmask(dt: DataType) -> bool {
    matches!(
        dt,
        DataType::TcpFlags | DataType::CtState | DataType::CtStatus
    )
}

/// Selectors whose integers nft lists in hexadecimal (its header templates' hex fields).
pub(super) fn is_hex(e: &Expr) -> bool {
    let Expr::Selector(ws, _) = e else {
        return false;
    };
    let w: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
    matches!(w.as_slice(), ["ip", "frag-off"] | ["comp", "flags"])
        || w.first().is_some_and(|h| h.starts_with('@'))
}

/// The width in bits of raw payload `@base,offset,length`, and its offset.
pub(super) fn raw_bits(e: &Expr) -> Option<(u32, u32)> {
    let Expr::Selector(ws, _) = e else {
        return None;
    };
    match ws.as_slice() {
        [b, off, len] if b.name.starts_with('@') => {
            Some((off.name.parse().ok()?, len.name.parse().ok()?))
        }
        _ => None,
    }
}

/// The bits a flags constant stands for: a name, a number, `syn,ack` or `(fin | syn)`.
pub(super) fn flag_bits(dt: DataType, v: &Val) -> Option<u128> {
    match v {
        Val::Word(w, _) => values::parse_scalar(dt, w).ok(),
        Val::List(vs, _) => vs
            .iter()
            .try_fold(0, |acc, x| Some(acc | flag_bits(dt, x)?)),
        _ => None,
    }
}

/// Flags joined as an operand of `|`: `fin | syn`, in parentheses when asked and several.
pub(super) fn union(dt: DataType, bits: u128, paren: bool) -> String {
    let text = value::format(dt, bits);
    let parts: Vec<&str> = text.split(',').collect();
    match parts.len() {
        1 => text,
        _ if paren => format!("({})", parts.join(" | ")),
        _ => parts.join(" | "),
    }
}

/// A match on a bitmask type as nft lists it, where it differs from the plain form.
pub(super) fn bitmask_match(
    dt: DataType,
    lhs: &Expr,
    op: Option<(CmpOp, crate::source::Span)>,
    rhs: &Rhs,
    bang: bool,
    src: &Ctx<'_>,
) -> Option<String> {
    let ne = matches!(op, Some((CmpOp::Ne, _)));
    let eq_op = if ne { "!=" } else { "==" };
    let set = |es: &[crate::ast::Elem]| -> Option<String> {
        let items: Option<Vec<String>> = es
            .iter()
            .map(|e| flag_bits(dt, &e.key).map(|b| union(dt, b, false)))
            .collect();
        Some(format!("{{ {} }}", items?.join(", ")))
    };
    match (lhs, rhs) {
        // `tcp flags & (fin | syn) == syn`; against nothing set, the short forms
        (Expr::Binop(crate::ast::BinOp::And, inner, m, _), Rhs::Val(v)) if !bang => {
            let mask = flag_bits(dt, m)?;
            let val = flag_bits(dt, v)?;
            let sel = expr_text(inner, src);
            if val == 0 && matches!(op, None | Some((CmpOp::Eq | CmpOp::Ne, _))) {
                let f = value::format(dt, mask);
                return Some(if ne {
                    format!("{sel} {f}")
                } else {
                    format!("{sel} ! {f}")
                });
            }
            if !matches!(op, None | Some((CmpOp::Eq | CmpOp::Ne, _))) {
                return None;
            }
            // a mask of every bit is no mask (nft lists the value as a number then)
            if mask == (1u128 << dt.bits()) - 1 {
                return Some(format!("{sel} {eq_op} 0x{val:x}"));
            }
            Some(format!(
                "{sel} & {} {eq_op} {}",
                union(dt, mask, true),
                union(dt, val, false)
            ))
        }
        (
            Expr::Binop(crate::ast::BinOp::And, inner, m, _),
            Rhs::Set(crate::ast::SetRef::Anon(es, _)),
        ) => {
            let mask = flag_bits(dt, m)?;
            let o = if ne { "!= " } else { "== " };
            Some(format!(
                "{} & {} {o}{}",
                expr_text(inner, src),
                union(dt, mask, true),
                set(es)?
            ))
        }
        // `tcp flags fin,syn / fin,syn`
        (Expr::Selector(..), Rhs::Val(Val::Prefix(v, m))) => Some(format!(
            "{} & {} {eq_op} {}",
            expr_text(lhs, src),
            union(dt, flag_bits(dt, m)?, true),
            union(dt, flag_bits(dt, v)?, false)
        )),
        // `tcp flags == syn` stays exact
        (Expr::Selector(..), Rhs::Val(v)) if matches!(op, Some((CmpOp::Eq, _))) => Some(format!(
            "{} == {}",
            expr_text(lhs, src),
            union(dt, flag_bits(dt, v)?, false)
        )),
        (Expr::Selector(..), Rhs::Set(crate::ast::SetRef::Anon(es, _)))
            if es.iter().any(|e| matches!(e.key, Val::List(..))) =>
        {
            let o = if ne { "!= " } else { "" };
            Some(format!("{} {o}{}", expr_text(lhs, src), set(es)?))
        }
        _ => None,
    }
}

/// Raw payload narrower than its bytes (`@ll,0,1 1`) as nft lists it: the bytes around it,
/// masked (`@ll,0,8 & 0x80 == 0x80`).
pub(super) fn raw_sub_byte(
    lhs: &Expr,
    op: Option<(CmpOp, crate::source::Span)>,
    rhs: &Rhs,
) -> Option<String> {
    let (off, len) = raw_bits(lhs)?;
    // (nft keeps the inner header's fields as written)
    let inner = matches!(lhs, Expr::Selector(ws, _) if ws[0].name == "@ih");
    if inner || (off % 8 == 0 && len % 8 == 0) {
        return None;
    }
    let Rhs::Val(Val::Word(w, _)) = rhs else {
        return None;
    };
    let v = values::parse_number(w)?;
    let start = off / 8 * 8;
    let end = (off + len).div_ceil(8) * 8;
    let width = end - start;
    if width > 128 || len == 0 {
        return None;
    }
    let shift = end - off - len;
    let mask = ((1u128 << len) - 1) << shift;
    let Expr::Selector(ws, _) = lhs else {
        return None;
    };
    let o = match op.map(|o| o.0) {
        None | Some(CmpOp::Eq) => "==",
        Some(CmpOp::Ne) => "!=",
        _ => return None,
    };
    Some(format!(
        "{},{start},{width} & 0x{mask:x} {o} 0x{:x}",
        ws[0].name,
        v << shift
    ))
}
