//! Named stateful objects (`counter`, `quota`, `limit`, `ct helper`, `ct timeout`, `ct
//! expectation`, `synproxy`, `secmark`): their JSON as the body nft text declares them with.

use super::exprs::{expr, flags_of, int_of, ms_text, opt_int, opt_str, quoted, str_of};
use super::input::{err, R};
use serde_json::{Map, Value};

/// The body of `KIND NAME { BODY }` for the object's JSON.
pub(super) fn body(k: &str, o: &Map<String, Value>, p: &str) -> R<String> {
    let inv = matches!(o.get("inv"), Some(Value::Bool(true)));
    let mut w: Vec<String> = Vec::new();
    match k {
        "counter" => {
            w.push(format!(
                "packets {}",
                opt_int(o, "packets", p)?.unwrap_or(0)
            ));
            w.push(format!("bytes {}", opt_int(o, "bytes", p)?.unwrap_or(0)));
        }
        "quota" => {
            if inv {
                w.push("over".into());
            }
            w.push(format!("{} bytes", int_of(o, "bytes", p)?));
            if let Some(u) = opt_int(o, "used", p)? {
                w.push(format!("used {u} bytes"));
            }
        }
        "limit" => {
            w.push("rate".into());
            if inv {
                w.push("over".into());
            }
            let rate = int_of(o, "rate", p)?;
            let per = opt_str(o, "per", p)?.unwrap_or("second");
            let unit = opt_str(o, "rate_unit", p)?.or(opt_str(o, "unit", p)?);
            let bytes = unit.is_some_and(|u| u != "packets");
            match unit {
                Some(u) if bytes => w.push(format!("{rate} {u}/{per}")),
                _ => w.push(format!("{rate}/{per}")),
            }
            if let Some(b) = opt_int(o, "burst", p)? {
                if b != 0 {
                    let bu = opt_str(o, "burst_unit", p)?.unwrap_or(if bytes {
                        "bytes"
                    } else {
                        "packets"
                    });
                    w.push(format!("burst {b} {bu}"));
                }
            }
        }
        "ct helper" => {
            w.push(format!("type {}", quoted(str_of(o, "type", p)?)));
            if let Some(pr) = opt_str(o, "protocol", p)? {
                w.push(format!("protocol {pr};"));
            }
            if let Some(l) = opt_str(o, "l3proto", p)? {
                w.push(format!("l3proto {l};"));
            }
        }
        "ct timeout" => {
            if let Some(pr) = opt_str(o, "protocol", p)? {
                w.push(format!("protocol {pr};"));
            }
            if let Some(l) = opt_str(o, "l3proto", p)? {
                w.push(format!("l3proto {l};"));
            }
            if let Some(pol) = o.get("policy") {
                let Value::Object(po) = pol else {
                    return err(
                        &format!("{p}.policy"),
                        "expected an object of state: seconds",
                    );
                };
                let mut items = Vec::new();
                for (s, v) in po {
                    items.push(format!("{s} : {}", expr(v, &format!("{p}.policy.{s}"))?));
                }
                w.push(format!("policy = {{ {} }}", items.join(", ")));
            }
        }
        "ct expectation" => {
            if let Some(pr) = opt_str(o, "protocol", p)? {
                w.push(format!("protocol {pr};"));
            }
            if let Some(d) = o.get("dport") {
                w.push(format!("dport {};", expr(d, &format!("{p}.dport"))?));
            }
            if let Some(t) = opt_int(o, "timeout", p)? {
                w.push(format!("timeout {};", ms_text(t)));
            }
            if let Some(s) = opt_int(o, "size", p)? {
                w.push(format!("size {s};"));
            }
            if let Some(l) = opt_str(o, "l3proto", p)? {
                w.push(format!("l3proto {l};"));
            }
        }
        "synproxy" => {
            if let Some(m) = opt_int(o, "mss", p)? {
                w.push(format!("mss {m}"));
            }
            if let Some(s) = opt_int(o, "wscale", p)? {
                w.push(format!("wscale {s}"));
            }
            w.extend(flags_of(o, "flags", p)?);
        }
        "secmark" => w.push(quoted(str_of(o, "context", p)?)),
        _ => return err(p, format!("unknown object '{k}'")),
    }
    Ok(w.join(" "))
}
