//! `limit` and `quota`: rates, bursts and byte amounts as nft writes them.

use super::tables::{err, other_text, Cx};
use crate::ast::Val;
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::source::Span;

pub(super) fn lower_quota_words(cx: &mut Cx, words: &[&Val], span: Span) -> Option<Quota> {
    let mut over = false;
    let mut i = 0;
    let text = |v: &Val| other_text(v);
    if words.first().map(|w| text(w)) == Some("over".into()) {
        over = true;
        i = 1;
    } else if words.first().map(|w| text(w)) == Some("until".into()) {
        i = 1;
    }
    let (bytes, n) = bytes_amount(cx, &words[i..], span)?;
    i += n;
    let mut used = 0;
    if words.get(i).map(|w| text(w)) == Some("used".into()) {
        used = bytes_amount(cx, &words[i + 1..], span)?.0;
    }
    Some(Quota {
        bytes,
        used,
        over,
        named: None,
    })
}

/// `N unit` or `Nunit` -> bytes, and how many words were used.
fn bytes_amount(cx: &mut Cx, words: &[&Val], span: Span) -> Option<(u64, usize)> {
    let Some(first) = words.first() else {
        err(cx, span, "expected an amount such as 100 mbytes");
        return None;
    };
    let t = other_text(first);
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, mut unit) = (t[..split].to_string(), t[split..].to_string());
    let mut used = 1;
    if unit.is_empty() {
        if let Some(u) = words.get(1) {
            let u = other_text(u);
            if u.ends_with("bytes") {
                unit = u;
                used = 2;
            }
        }
    }
    let n: u64 = match num.parse() {
        Ok(n) => n,
        Err(_) => {
            err(cx, first.span(), format!("'{t}' is not an amount of bytes"));
            return None;
        }
    };
    let mult = match unit.as_str() {
        "" | "bytes" => 1,
        "kbytes" => 1 << 10,
        "mbytes" => 1 << 20,
        "gbytes" => 1 << 30,
        other => {
            err(
                cx,
                first.span(),
                format!("unknown unit '{other}' (bytes, kbytes, mbytes, gbytes)"),
            );
            return None;
        }
    };
    Some((n.saturating_mul(mult), used))
}

pub(super) fn lower_limit(
    cx: &mut Cx,
    over: bool,
    rate: &[Val],
    burst: &Option<Vec<Val>>,
    span: Span,
) -> Option<Limit> {
    let text: String = rate.iter().map(other_text).collect::<Vec<_>>().join(" ");
    let bad = |cx: &mut Cx| {
        cx.diags.push(
            Diagnostic::error(span, format!("'{text}' is not a rate"))
                .note("for example: limit rate 10/second, limit rate over 1 mbytes/second burst 64 kbytes"),
        );
    };
    let Some((amount, per)) = text.rsplit_once('/') else {
        bad(cx);
        return None;
    };
    let unit = match per.trim() {
        "second" => RateUnit::Second,
        "minute" => RateUnit::Minute,
        "hour" => RateUnit::Hour,
        "day" => RateUnit::Day,
        "week" => RateUnit::Week,
        _ => {
            bad(cx);
            return None;
        }
    };
    let amount = amount.trim();
    let (n, u) = match amount.split_once(' ') {
        Some((n, u)) => (n, u),
        None => {
            let s = amount
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(amount.len());
            (&amount[..s], &amount[s..])
        }
    };
    let Ok(n) = n.parse::<u64>() else {
        bad(cx);
        return None;
    };
    let (bytes, mult) = match u {
        "" => (false, 1),
        "bytes" => (true, 1),
        "kbytes" => (true, 1 << 10),
        "mbytes" => (true, 1 << 20),
        // (nft's rates stop at mbytes: `1 gbytes/second` is refused; write 1024 mbytes)
        _ => {
            bad(cx);
            return None;
        }
    };
    let burst = match burst {
        None => {
            if bytes {
                0
            } else {
                5
            }
        }
        Some(b) => {
            let refs: Vec<&Val> = b.iter().collect();
            let last = refs.last().map(|v| other_text(v)).unwrap_or_default();
            let in_bytes = last.ends_with("bytes");
            if (bytes && last == "packets") || (!bytes && in_bytes) {
                err(
                    cx,
                    b[0].span(),
                    if bytes {
                        "a rate in bytes has a burst in bytes, not packets"
                    } else {
                        "a rate in packets has a burst in packets, not bytes"
                    },
                );
                return None;
            }
            if refs.len() == 2 && last == "packets" {
                other_text(refs[0]).parse().unwrap_or(5)
            } else if bytes {
                bytes_amount(cx, &refs, span)?.0
            } else {
                match other_text(refs[0]).parse() {
                    Ok(n) => n,
                    Err(_) => {
                        err(cx, b[0].span(), "burst must be a number of packets");
                        return None;
                    }
                }
            }
        }
    };
    if n == 0 {
        err(
            cx,
            span,
            "a rate of 0 never lets anything through: use drop",
        );
        return None;
    }
    Some(Limit {
        rate: n.saturating_mul(mult),
        unit,
        bytes,
        burst,
        over,
    })
}
