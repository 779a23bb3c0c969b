//! Named objects as nft lists them (`obj_print_data`): each property on the line nft gives
//! it (`type "sip" protocol udp` then `l3proto ip`; a ct expectation's five lines; a
//! synproxy's `mss`, `wscale` and flags), counters with their values unless stateless.

use super::rule::{val_text, Ctx};
use crate::ast::{self, Val};
use crate::ir::Family;
use crate::values;

/// The lines of object `o`'s body (without the braces), in table family `family`.
pub(super) fn body(o: &ast::ObjDecl, family: Family, cx: &Ctx<'_>) -> Vec<String> {
    let words: Vec<String> = o.body.iter().map(|v| val_text(v, cx)).collect();
    let get = |key: &str| -> Option<&Val> {
        let i = o
            .body
            .iter()
            .position(|v| matches!(v, Val::Word(w, _) if w == key))?;
        o.body.get(i + 1)
    };
    let text = |key: &str| get(key).map(|v| val_text(v, cx));
    // nft's l3proto: the one given, else the table's family
    let l3 = || {
        format!(
            "l3proto {}",
            text("l3proto").unwrap_or_else(|| family.name().to_string())
        )
    };
    match o.kind.name.as_str() {
        "counter" => {
            if cx.opts.stateless {
                return vec![];
            }
            let n = |k: &str| text(k).unwrap_or_else(|| "0".into());
            vec![format!("packets {} bytes {}", n("packets"), n("bytes"))]
        }
        "quota" => {
            // `[over] N UNIT [used N UNIT]`; without its use when stateless
            let mut w = words.clone();
            if cx.opts.stateless {
                if let Some(i) = w.iter().position(|x| x == "used") {
                    w.truncate(i);
                }
            }
            // nft lists a quota used 0 bytes without its use
            if let Some(i) = w.iter().position(|x| x == "used") {
                if w.get(i + 1).is_some_and(|n| n == "0") {
                    w.truncate(i);
                }
            }
            if w.is_empty() {
                return vec!["0 bytes".into()];
            }
            vec![w.join(" ")]
        }
        "ct helper" => vec![
            format!(
                "type {} protocol {}",
                text("type")
                    .map(|t| if t.starts_with('"') {
                        t
                    } else {
                        format!("\"{t}\"")
                    })
                    .unwrap_or_default(),
                text("protocol").unwrap_or_default()
            ),
            l3(),
        ],
        "ct timeout" => {
            let mut out = vec![
                format!("protocol {}", text("protocol").unwrap_or_default()),
                l3(),
            ];
            if let Some(Val::Set(es, _)) = get("policy") {
                let items: Vec<String> = es
                    .iter()
                    .map(|e| {
                        let k = val_text(&e.key, cx);
                        let v = match &e.data {
                            Some(ast::MapData::Value(v)) => seconds(&val_text(v, cx)),
                            _ => String::new(),
                        };
                        format!("{k} : {v}")
                    })
                    .collect();
                out.push(format!("policy = {{ {} }}", items.join(", ")));
            }
            out
        }
        "ct expectation" => vec![
            format!("protocol {}", text("protocol").unwrap_or_default()),
            format!("dport {}", text("dport").unwrap_or_default()),
            format!(
                "timeout {}",
                text("timeout")
                    .map(|t| milliseconds(&t))
                    .unwrap_or_default()
            ),
            format!("size {}", text("size").unwrap_or_default()),
            l3(),
        ],
        "synproxy" => {
            let mut out = Vec::new();
            for k in ["mss", "wscale"] {
                if let Some(v) = text(k) {
                    out.push(format!("{k} {v}"));
                }
            }
            let ts = words.iter().any(|w| w == "timestamp");
            let sack = words.iter().any(|w| w == "sack-perm");
            match (ts, sack) {
                (true, true) => out.push("timestamp sack-perm".into()),
                (true, false) => out.push("timestamp".into()),
                (false, true) => out.push("sack-perm".into()),
                _ => {}
            }
            out
        }
        _ if words.is_empty() => vec![],
        _ => vec![words.join(" ")],
    }
}

/// A ct timeout policy's value: seconds when bare (`123`: `2m3s`), else as written with a
/// unit.
fn seconds(t: &str) -> String {
    match t.parse::<u128>() {
        Ok(s) => super::value::duration(s * 1000),
        Err(_) => milliseconds(t),
    }
}

/// A time as nft lists it (`90s`: `1m30s`); as written when it does not read as one.
fn milliseconds(t: &str) -> String {
    match values::parse_time_ms(t) {
        Ok(ms) => super::value::duration(ms as u128),
        Err(_) => t.to_string(),
    }
}
