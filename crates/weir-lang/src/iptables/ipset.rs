//! `ipset save` files: the type, family and elements of the sets `-m set --match-set` names.

use super::short;
use super::values::{addr, plain_addr};
use std::collections::BTreeMap;

pub(super) struct Ipset {
    pub(super) v6: bool,
    pub(super) elems: Vec<String>,
}

/// `ipset save` text: `create NAME hash:ip|hash:net|bitmap:ip [family inet|inet6] ...` and
/// `add NAME ELEM [options]`.
pub(super) fn parse_ipsets(text: &str) -> Result<BTreeMap<String, Ipset>, Vec<(usize, String)>> {
    let mut sets: BTreeMap<String, Ipset> = BTreeMap::new();
    let mut errs = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let ln = idx + 1;
        let w: Vec<&str> = raw.split_whitespace().collect();
        match w.as_slice() {
            [] => {}
            [c, ..] if c.starts_with('#') => {}
            ["create" | "-N" | "-exist", name, ty, rest @ ..] => {
                if !matches!(*ty, "hash:ip" | "hash:net" | "bitmap:ip") {
                    errs.push((ln, format!(
                        "ipset '{}' has unsupported type '{}' (supported: hash:ip, hash:net, bitmap:ip)",
                        short(name), short(ty)
                    )));
                    continue;
                }
                let v6 = rest.windows(2).any(|p| p[0] == "family" && p[1] == "inet6");
                sets.insert(
                    name.to_string(),
                    Ipset {
                        v6,
                        elems: Vec::new(),
                    },
                );
            }
            ["add" | "-A", name, elem, rest @ ..] => {
                let Some(set) = sets.get_mut(*name) else {
                    errs.push((
                        ln,
                        format!("'add' to ipset '{}' before its 'create'", short(name)),
                    ));
                    continue;
                };
                if rest.contains(&"nomatch") {
                    errs.push((ln, "unsupported element option 'nomatch'".into()));
                    continue;
                }
                let e = match elem.split_once('-') {
                    Some((a, b)) => match (plain_addr(a, set.v6), plain_addr(b, set.v6)) {
                        (Ok(a), Ok(b)) if a.1 <= b.1 => Ok(format!("{}-{}", a.0, b.0)),
                        (Ok(_), Ok(_)) => Err(format!("empty range '{}'", short(elem))),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    },
                    None => addr(elem, set.v6).map(|a| {
                        if a == "*" {
                            if set.v6 {
                                "::/0".to_string()
                            } else {
                                "0.0.0.0/0".to_string()
                            }
                        } else {
                            a
                        }
                    }),
                };
                match e {
                    Ok(e) => set.elems.push(e),
                    Err(e) => errs.push((ln, e)),
                }
            }
            [c, ..] => errs.push((
                ln,
                format!(
                "unsupported ipset line '{}' (supported: create NAME TYPE ..., add NAME ELEMENT)",
                short(c)
            ),
            )),
        }
    }
    if errs.is_empty() {
        Ok(sets)
    } else {
        Err(errs)
    }
}
