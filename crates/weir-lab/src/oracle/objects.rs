//! The named objects of a rule test's table (`%cnt1 type counter;ok`, `%qt1 type quota 25
//! mbytes;ok`, `%lim1 type limit rate 400/minute;ok`), read from the table's text as the case
//! declares them (`quota qt1 { 25 mbytes }`), so that the block's `objref` expressions
//! evaluate as the kernel's `nft_objref` does on a fresh object: the object's own `eval`
//! (`nft_counter`: nothing stops; `nft_quota`, `nft_limit` as their statements).
//!
//! Read here, independently of weir's parser: quotas `[over|until] N UNIT [used N UNIT]`,
//! limits `rate [over] N/UNIT [burst N packets]` and `rate [over] N BYTES/UNIT [burst N
//! BYTES]`; units as nft's (`kbytes` 1024 bytes, `mbytes` 1024², `gbytes` 1024³).

use super::bytecode::{Block, ElemData, Expr};
use std::collections::BTreeMap;

/// The kind of object an object map of the rule gives (`counter name KEY map ...` 1,
/// `quota name` 2, `limit name` 4; `ct helper set` 3, `ct timeout set` 7, `ct expectation
/// set` 9, `synproxy name` 11): nft prints a map's object type nowhere in the block. 0 when
/// the rule names none of these.
pub fn map_kind(rule: &str) -> u8 {
    let w: Vec<&str> = rule.split_whitespace().collect();
    for p in w.windows(3) {
        match (p[0], p[1], p[2]) {
            ("counter", "name", _) => return 1,
            ("quota", "name", _) => return 2,
            ("limit", "name", _) => return 4,
            ("synproxy", "name", _) => return 11,
            ("ct", "helper", "set") => return 3,
            ("ct", "timeout", "set") => return 7,
            ("ct", "expectation", "set") => return 9,
            _ => {}
        }
    }
    0
}

fn byte_unit(u: &str) -> Option<u64> {
    Some(match u {
        "bytes" => 1,
        "kbytes" => 1 << 10,
        "mbytes" => 1 << 20,
        "gbytes" => 1 << 30,
        _ => return None,
    })
}

fn time_unit(u: &str) -> Option<u64> {
    Some(match u {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        "day" => 86400,
        "week" => 604800,
        _ => return None,
    })
}

/// A quota's body (`over 1 kbytes`, `25 mbytes used 1 kbytes`) as [`Expr::Quota`].
fn quota(body: &[&str]) -> Option<Expr> {
    let mut w = body;
    let invert = w.first() == Some(&"over");
    if matches!(w.first(), Some(&"over") | Some(&"until")) {
        w = &w[1..];
    }
    let bytes = w.first()?.parse::<u64>().ok()? * byte_unit(w.get(1)?)?;
    let consumed = match w.get(2) {
        Some(&"used") => w.get(3)?.parse::<u64>().ok()? * byte_unit(w.get(4)?)?,
        None => 0,
        Some(_) => return None,
    };
    Some(Expr::Quota {
        bytes,
        consumed,
        invert,
    })
}

/// A limit's body (`rate 400/minute`, `rate over 1024 bytes/second burst 512 bytes`) as
/// [`Expr::Limit`] (a burst of packets left 0: the kernel takes 5).
fn limit(body: &[&str]) -> Option<Expr> {
    let mut w = body.strip_prefix(&["rate"])?;
    let invert = w.first() == Some(&"over");
    if invert {
        w = &w[1..];
    }
    let (rate, unit_secs, bytes, rest) = match w.first()?.split_once('/') {
        Some((n, u)) => (n.parse::<u64>().ok()?, time_unit(u)?, false, &w[1..]),
        None => {
            let (bu, u) = w.get(1)?.split_once('/')?;
            let n = w.first()?.parse::<u64>().ok()? * byte_unit(bu)?;
            (n, time_unit(u)?, true, &w[2..])
        }
    };
    let burst = match rest {
        [] => 0,
        ["burst", n, u] if *u == "packets" && !bytes => n.parse().ok()?,
        ["burst", n, u] if bytes => n.parse::<u64>().ok()? * byte_unit(u)?,
        _ => return None,
    };
    Some(Expr::Limit {
        rate,
        unit_secs,
        burst,
        bytes,
        invert,
    })
}

/// The counters, quotas and limits a table's text declares (`  quota qt1 { 25 mbytes }`), by
/// name, as the expression each evaluates as.
pub fn declarations(text: &str) -> BTreeMap<String, Expr> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let l = l.trim();
        let Some((head, body)) = l.split_once('{') else {
            continue;
        };
        let mut hw = head.split_whitespace();
        let (Some(kind), Some(name), None) = (hw.next(), hw.next(), hw.next()) else {
            continue;
        };
        let Some(body) = body.trim().strip_suffix('}') else {
            continue;
        };
        let body: Vec<&str> = body.split_whitespace().collect();
        let e = match kind {
            "counter" => Some(Expr::Counter),
            "quota" => quota(&body),
            "limit" => limit(&body),
            _ => None,
        };
        if let Some(e) = e {
            out.insert(name.trim_matches('"').to_string(), e);
        }
    }
    out
}

/// The error of a block whose objects [`fill`] has not found yet (the oracle does not use it).
pub const UNDECLARED: &str = "unknown: objref quota/limit without its declaration";

/// Whether a block names objects whose declarations it needs (a quota or a limit, directly
/// or through a map): without them the oracle cannot evaluate it.
pub fn needs_declarations(b: &Block) -> bool {
    b.exprs.iter().any(|e| {
        matches!(
            e,
            Expr::Objref { kind: 2 | 4, .. }
                | Expr::Lookup {
                    objref: Some(2 | 4),
                    ..
                }
        )
    })
}

/// Give a block its table's objects (`text`: the case's table): a counter, quota or limit
/// named directly becomes the expression it evaluates as (so a quota or limit is seen as the
/// fresh state it is), and an object map's names find theirs in [`Block::objs`].
pub fn fill(b: &mut Block, text: &str) {
    let decl = declarations(text);
    for e in &mut b.exprs {
        if let Expr::Objref { kind, name } = e {
            let want = match *kind {
                1 => "counter",
                2 => "quota",
                4 => "limit",
                _ => continue,
            };
            let found = decl.get(name.as_str()).filter(|d| {
                matches!(
                    (want, d),
                    ("counter", Expr::Counter)
                        | ("quota", Expr::Quota { .. })
                        | ("limit", Expr::Limit { .. })
                )
            });
            if let Some(d) = found {
                *e = d.clone();
            }
        }
    }
    b.objs = decl;
    // usable once every quota and limit it names is known
    let known = b.exprs.iter().all(|e| match e {
        Expr::Objref { kind, .. } => !matches!(kind, 2 | 4),
        Expr::Lookup {
            objref: Some(2 | 4),
            set,
            ..
        } => b.sets.get(*set).is_some_and(|s| {
            s.elems
                .iter()
                .all(|el| matches!(&el.data, Some(ElemData::Object(n)) if b.objs.contains_key(n)))
        }),
        _ => true,
    });
    if known && b.error.as_deref() == Some(UNDECLARED) {
        b.error = None;
    }
}

/// Fill every block of `rule` (in any family: a case may borrow another family's block)
/// that names objects, from the case's table text.
pub fn fill_case(
    blocks: &mut std::collections::HashMap<(String, String), Block>,
    rule: &str,
    text: &str,
) {
    for ((_, r), b) in blocks.iter_mut() {
        let names = b.exprs.iter().any(|e| {
            matches!(
                e,
                Expr::Objref { .. }
                    | Expr::Lookup {
                        objref: Some(_),
                        ..
                    }
            )
        });
        if r == rule && names {
            fill(b, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_declarations_as_nft_units() {
        let text = "table ip t {\n  counter cnt1 {  }\n  quota qt1 { 25 mbytes }\n  quota \"qt2\" { over 1 kbytes used 3 bytes }\n  limit lim1 { rate 400/minute }\n  limit lim2 { rate over 1024 bytes/second burst 512 bytes }\n  ct helper h { type \"ftp\" protocol tcp; }\n  chain c {\n  }\n}\n";
        let d = declarations(text);
        assert_eq!(d.len(), 5, "{d:?}");
        assert_eq!(d["cnt1"], Expr::Counter);
        assert_eq!(
            d["qt1"],
            Expr::Quota {
                bytes: 25 << 20,
                consumed: 0,
                invert: false
            }
        );
        assert_eq!(
            d["qt2"],
            Expr::Quota {
                bytes: 1024,
                consumed: 3,
                invert: true
            }
        );
        assert_eq!(
            d["lim1"],
            Expr::Limit {
                rate: 400,
                unit_secs: 60,
                burst: 0,
                bytes: false,
                invert: false
            }
        );
        assert_eq!(
            d["lim2"],
            Expr::Limit {
                rate: 1024,
                unit_secs: 1,
                burst: 512,
                bytes: true,
                invert: true
            }
        );
        assert_eq!(map_kind("quota name tcp dport map {443 : \"qt1\"}"), 2);
        assert_eq!(map_kind("ip saddr 1.2.3.4 counter"), 0);
    }
}
