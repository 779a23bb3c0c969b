//! The part of a listing an `nft list ...` command asks for, cut from the whole ruleset's
//! listing: `ruleset [FAMILY]`, `tables [FAMILY]`, `table [FAMILY] NAME`, one object (`chain|
//! set|map|flowtable|counter|quota|limit|ct helper|... [FAMILY] TABLE NAME`, inside its
//! table's braces) or all objects of a kind (`chains|sets|maps|counters|... [FAMILY
//! [TABLE]]`; chains without their rules, sets without their elements, as nft lists them).

const FAMILIES: [&str; 6] = ["ip", "ip6", "inet", "arp", "bridge", "netdev"];

/// A table of a listing: its family, name, and lines (the header's and the closing brace's
/// included).
struct Table<'a> {
    family: &'a str,
    name: String,
    lines: Vec<&'a str>,
}

fn tables(text: &str) -> Vec<Table<'_>> {
    let mut out: Vec<Table<'_>> = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("table ") {
            let head = rest.split(" {").next().unwrap_or(rest);
            let mut w = head.split_whitespace();
            let family = w.next().unwrap_or("ip");
            let family = FAMILIES
                .iter()
                .find(|f| **f == family)
                .copied()
                .unwrap_or("ip");
            let name = w.next().unwrap_or("").trim_matches('"').to_string();
            out.push(Table {
                family,
                name,
                lines: Vec::new(),
            });
        }
        if let Some(t) = out.last_mut() {
            t.lines.push(l);
        }
    }
    out
}

/// The blocks of a table (`\tKIND NAME {` ... `\t}`): (kind, name, lines).
fn blocks<'a>(t: &Table<'a>) -> Vec<(String, String, Vec<&'a str>)> {
    let mut out: Vec<(String, String, Vec<&'a str>)> = Vec::new();
    let mut inside = false;
    for l in &t.lines[1..] {
        if !inside {
            let Some(head) = l.strip_prefix('\t') else {
                continue;
            };
            if head.starts_with('\t') || !head.contains(" {") {
                continue;
            }
            let head = head.split(" {").next().unwrap_or(head);
            let words: Vec<&str> = head.split_whitespace().collect();
            let (kind, name) = match words.as_slice() {
                ["ct", k, n] => (format!("ct {k}"), n.to_string()),
                [k, n] => (k.to_string(), n.to_string()),
                _ => continue,
            };
            out.push((kind, name.trim_matches('"').to_string(), vec![l]));
            inside = true;
        } else if let Some(b) = out.last_mut() {
            b.2.push(l);
            if *l == "\t}" {
                inside = false;
            }
        }
    }
    out
}

/// The singular kind of a plural list word (`chains`: `chain`).
fn singular(w: &str) -> Option<&'static str> {
    Some(match w {
        "chains" => "chain",
        "sets" => "set",
        "maps" => "map",
        "flowtables" => "flowtable",
        "counters" => "counter",
        "quotas" => "quota",
        "limits" => "limit",
        "meters" => "meter",
        "synproxys" => "synproxy",
        "secmarks" => "secmark",
        "helpers" => "ct helper",
        "timeouts" => "ct timeout",
        "expectations" => "ct expectation",
        _ => return None,
    })
}

/// A table's header, the blocks (one after the other, as nft lists a kind of object), `}`.
fn wrap(t: &Table<'_>, body: &[String]) -> String {
    let mut out = format!("{}\n", t.lines[0]);
    out.push_str(&body.concat());
    out.push_str("}\n");
    out
}

/// A block as a plural list shows it: a chain without its rules, a set without elements.
fn bare(kind: &str, lines: &[&str]) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for (i, l) in lines.iter().enumerate() {
        let last = i + 1 == lines.len();
        if kind == "chain" && i > 0 && !last && !l.starts_with("\t\ttype ") {
            continue;
        }
        if matches!(kind, "set" | "map" | "meter") {
            if l.starts_with("\t\telements = ") {
                skipping = !l.ends_with('}');
                continue;
            }
            if skipping {
                skipping = !l.ends_with('}');
                continue;
            }
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// What `nft list WORDS...` prints from `text`, the whole ruleset's listing.
pub fn select(text: &str, words: &[&str]) -> Result<String, String> {
    let (fam, rest): (Option<&str>, Vec<&str>) = match words.get(1) {
        Some(f) if FAMILIES.contains(f) => (Some(*f), words[2..].to_vec()),
        _ => (None, words.get(1..).unwrap_or_default().to_vec()),
    };
    let ts = tables(text);
    let fam_ok = |t: &Table<'_>| fam.is_none_or(|f| f == t.family);
    let head = words.first().copied().unwrap_or("ruleset");
    // `ct helper NAME`: two words of kind
    let (head, rest, fam) = if head == "ct" {
        let k = words.get(1).copied().unwrap_or("");
        let (f2, r2): (Option<&str>, Vec<&str>) = match words.get(2) {
            Some(f) if FAMILIES.contains(f) => (Some(*f), words[3..].to_vec()),
            _ => (None, words.get(2..).unwrap_or_default().to_vec()),
        };
        match k {
            "helper" | "timeout" | "expectation" => (format!("ct {k}"), r2, f2),
            "helpers" | "timeouts" | "expectations" => {
                (singular(k).unwrap_or("").to_string() + "s", r2, f2)
            }
            _ => return Err(format!("cannot list ct {k}")),
        }
    } else {
        (head.to_string(), rest, fam)
    };
    let fam_ok = |t: &Table<'_>| fam.is_none_or(|f| f == t.family) && fam_ok(t);
    let missing = |what: String| format!("No such file or directory: {what}");
    match (head.as_str(), rest.as_slice()) {
        ("ruleset", []) => Ok(ts
            .iter()
            .filter(|t| fam_ok(t))
            .map(|t| t.lines.join("\n") + "\n")
            .collect()),
        ("tables", []) => Ok(ts
            .iter()
            .filter(|t| fam_ok(t))
            .map(|t| format!("table {} {}\n", t.family, super::quote(&t.name)))
            .collect()),
        ("table", [name]) => ts
            .iter()
            .find(|t| t.family == fam.unwrap_or("ip") && t.name == *name)
            .map(|t| t.lines.join("\n") + "\n")
            .ok_or_else(|| missing(format!("table {} {name}", fam.unwrap_or("ip")))),
        // `list meters`: the dynamic sets (as nft lists them, the meters' and the others);
        // `list chains|sets|counters|...`: every one of the kind
        (plural, tabs)
            if plural == "meters"
                || singular(plural).is_some()
                || plural.ends_with("s") && plural.starts_with("ct ") =>
        {
            let kind = singular(plural).unwrap_or(match plural {
                "ct helpers" => "ct helper",
                "ct timeouts" => "ct timeout",
                _ => "ct expectation",
            });
            let wanted = |k: &str, lines: &[&str]| {
                if plural == "meters" {
                    k == "set"
                        && lines
                            .iter()
                            .any(|l| l.starts_with("\t\tflags ") && l.contains("dynamic"))
                } else {
                    k == kind
                }
            };
            let mut out = String::new();
            for t in ts.iter().filter(|t| fam_ok(t)) {
                if let [tn] = tabs {
                    if t.name != *tn {
                        continue;
                    }
                }
                let body: Vec<String> = blocks(t)
                    .iter()
                    .filter(|(k, _, lines)| wanted(k, lines))
                    .map(|(k, _, lines)| {
                        if matches!(k.as_str(), "chain" | "set" | "map" | "meter") {
                            bare(k, lines)
                        } else {
                            lines.join("\n") + "\n"
                        }
                    })
                    .collect();
                if !body.is_empty() {
                    out.push_str(&wrap(t, &body));
                }
            }
            Ok(out)
        }
        (kind, [table, name]) => {
            let fam = fam.unwrap_or("ip");
            let Some(t) = ts.iter().find(|t| t.family == fam && t.name == *table) else {
                return Err(missing(format!("table {fam} {table}")));
            };
            blocks(t)
                .into_iter()
                .find(|(k, n, _)| k == kind && n == name)
                .map(|(_, _, lines)| wrap(t, &[lines.join("\n") + "\n"]))
                .ok_or_else(|| missing(format!("{kind} {fam} {table} {name}")))
        }
        _ => Err(format!("cannot list {}", words.join(" "))),
    }
}

/// What `nft -e` prints for a batch: what is in listing `after` (with handles) and not in
/// `before`: `add table`, `add chain`, `add set|map`, `add rule ... # handle N`.
pub fn echo(before: &str, after: &str) -> String {
    let strip = |l: &str| l.split(" # handle ").next().unwrap_or(l).to_string();
    // (table, block, line) of every line of a listing
    let lines = |text: &str| -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let (mut table, mut block) = (String::new(), String::new());
        for l in text.lines() {
            if let Some(t) = l.strip_prefix("table ") {
                table = strip(t).trim_end_matches(" {").to_string();
                block.clear();
                out.push((table.clone(), String::new(), l.to_string()));
            } else if l.starts_with('\t') && !l.starts_with("\t\t") && l.ends_with('{')
                || l.starts_with('\t') && !l.starts_with("\t\t") && l.contains(" { # handle ")
            {
                block = strip(l).trim().trim_end_matches(" {").to_string();
                out.push((table.clone(), block.clone(), l.to_string()));
            } else if l.starts_with("\t\t") && l.contains(" # handle ") {
                out.push((table.clone(), block.clone(), l.to_string()));
            }
        }
        out
    };
    let old: std::collections::HashSet<(String, String, String)> =
        lines(before).into_iter().collect();
    let mut out = String::new();
    for (table, block, l) in lines(after) {
        if old.contains(&(table.clone(), block.clone(), l.clone())) {
            continue;
        }
        if block.is_empty() {
            out.push_str(&format!("add table {table}\n"));
        } else if l.starts_with("\t\t") {
            if let Some(chain) = block.strip_prefix("chain ") {
                out.push_str(&format!("add rule {table} {chain} {}\n", l.trim()));
            }
        } else {
            let (kind, name) = block.split_once(' ').unwrap_or((&block, ""));
            out.push_str(&format!("add {kind} {table} {name}\n"));
        }
    }
    out
}

/// What changes from listing `before` to `after`, per table: the lines removed (`-`) and
/// added (`+`) between what the two share at the start and at the end of the table, with the
/// table's header and the chain or set they are in as context. Empty when they are the same.
pub fn diff(before: &str, after: &str) -> String {
    let (old, new) = (tables(before), tables(after));
    let mut out = String::new();
    let key = |t: &Table<'_>| (t.family.to_string(), t.name.clone());
    for t in &old {
        if !new.iter().any(|n| key(n) == key(t)) {
            out.push_str(&format!("-table {} {}\n", t.family, super::quote(&t.name)));
        }
    }
    for n in &new {
        let Some(o) = old.iter().find(|o| key(o) == key(n)) else {
            for l in &n.lines {
                out.push_str(&format!("+{l}\n"));
            }
            continue;
        };
        let (a, b) = (&o.lines, &n.lines);
        let pre = a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count();
        let max_suf = a.len().min(b.len()) - pre;
        let suf = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take(max_suf)
            .take_while(|(x, y)| x == y)
            .count();
        if pre == a.len() && pre == b.len() {
            continue;
        }
        out.push_str(&format!("{}\n", n.lines[0]));
        // the block the change starts in, for context
        if let Some(ctx) = a[..pre]
            .iter()
            .rev()
            .find(|l| l.starts_with('\t') && !l.starts_with("\t\t") && l.ends_with('{'))
        {
            out.push_str(&format!(" {ctx}\n"));
        }
        out.push_str(&line_diff(&a[pre..a.len() - suf], &b[pre..b.len() - suf]));
    }
    out
}

/// The lines of `a` not in `b` (`-`) and of `b` not in `a` (`+`), in order, by their longest
/// common subsequence (every line of each, when the two are too long for it).
fn line_diff(a: &[&str], b: &[&str]) -> String {
    let mut out = String::new();
    if a.len().saturating_mul(b.len()) > 4_000_000 {
        a.iter().for_each(|l| out.push_str(&format!("-{l}\n")));
        b.iter().for_each(|l| out.push_str(&format!("+{l}\n")));
        return out;
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..]
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            (i, j) = (i + 1, j + 1);
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("-{}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+{}\n", b[j]));
            j += 1;
        }
    }
    out
}

/// What `nft get element [FAMILY] TABLE SET { KEY, ... }` prints (`words` from `element` on,
/// as tokens): the set's declaration with, for each key asked, the element that holds it
/// (in an interval set, the range it falls in; a range asked must lie in one element).
/// An error when one is not there (nft: No such file or directory).
pub fn get_element(
    file: &crate::ast::File,
    rs: &crate::ir::Ruleset,
    words: &[&str],
) -> Result<String, String> {
    let rest = match words.first() {
        Some(&"element") => &words[1..],
        _ => return Err(format!("cannot get {}", words.join(" "))),
    };
    let (fam, rest) = match rest.first() {
        Some(f) if FAMILIES.contains(f) => (*f, &rest[1..]),
        _ => ("ip", rest),
    };
    let (Some(table), Some(set)) = (rest.first(), rest.get(1)) else {
        return Err("get element needs a table, a set and elements".into());
    };
    let missing = || "Could not process rule: No such file or directory".to_string();
    let t = rs
        .tables
        .iter()
        .find(|t| t.family.name() == fam && t.name == *table)
        .ok_or_else(missing)?;
    let s = t.sets.iter().find(|s| s.name == *set).ok_or_else(missing)?;
    // the keys asked: components split at `.`, keys at `,`
    let mut keys: Vec<Vec<String>> = vec![vec![String::new()]];
    for w in rest[2..].iter().filter(|w| !matches!(**w, "{" | "}")) {
        match *w {
            "," => keys.push(vec![String::new()]),
            "." => keys.last_mut().unwrap().push(String::new()),
            w => keys.last_mut().unwrap().last_mut().unwrap().push_str(w),
        }
    }
    let mut found = Vec::new();
    for k in keys.iter().filter(|k| k.iter().any(|c| !c.is_empty())) {
        if k.len() != s.key_types.len() {
            return Err(format!("{} does not match the set's key", k.join(" . ")));
        }
        let mut want = Vec::new();
        for (c, &dt) in k.iter().zip(&s.key_types) {
            want.push(crate::values::parse_range(dt, c)?);
        }
        let e = s
            .elements
            .iter()
            .find(|e| {
                e.key.iter().zip(&want).all(|(&(lo, hi), &(a, b))| {
                    if s.interval {
                        lo <= a && b <= hi
                    } else {
                        lo == a && hi == b
                    }
                })
            })
            .ok_or_else(missing)?;
        found.push(super::element(t, s, e));
    }
    let text = super::ruleset(file, rs, &super::Options::default());
    let kind = if s.is_map { "map" } else { "set" };
    let block = select(&text, &[kind, fam, table, set])?;
    let mut out = String::new();
    let mut skipping = false;
    for l in block.lines() {
        if l.starts_with("\t\telements = ") || skipping {
            skipping = !l.ends_with('}');
            continue;
        }
        if l == "\t}" {
            out.push_str(&format!("\t\telements = {{ {} }}\n", found.join(", ")));
        }
        out.push_str(l);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_commands_pick_their_part() {
        let text = "table inet t {\n\tcounter k {\n\t\tpackets 1 bytes 2\n\t}\n\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { 1.1.1.1,\n\t\t\t     2.2.2.2 }\n\t}\n\n\tchain c {\n\t\ttype filter hook input priority filter; policy accept;\n\t\taccept\n\t}\n}\ntable ip u {\n}\n";
        assert_eq!(select(text, &["ruleset"]).unwrap(), text);
        assert_eq!(
            select(text, &["ruleset", "ip"]).unwrap(),
            "table ip u {\n}\n"
        );
        assert_eq!(
            select(text, &["tables"]).unwrap(),
            "table inet t\ntable ip u\n"
        );
        assert_eq!(
            select(text, &["table", "ip", "u"]).unwrap(),
            "table ip u {\n}\n"
        );
        assert_eq!(
            select(text, &["chain", "inet", "t", "c"]).unwrap(),
            "table inet t {\n\tchain c {\n\t\ttype filter hook input priority filter; policy accept;\n\t\taccept\n\t}\n}\n"
        );
        assert_eq!(
            select(text, &["chains"]).unwrap(),
            "table inet t {\n\tchain c {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\n"
        );
        assert_eq!(
            select(text, &["sets", "inet"]).unwrap(),
            "table inet t {\n\tset s {\n\t\ttype ipv4_addr\n\t}\n}\n"
        );
        assert_eq!(
            select(text, &["counter", "inet", "t", "k"]).unwrap(),
            "table inet t {\n\tcounter k {\n\t\tpackets 1 bytes 2\n\t}\n}\n"
        );
        assert!(select(text, &["chain", "inet", "t", "nope"]).is_err());
        assert!(select(text, &["table", "inet", "nope"]).is_err());
    }

    #[test]
    fn echo_lists_what_a_batch_added() {
        let before =
            "table ip t { # handle 1\n\tchain c { # handle 1\n\t\taccept # handle 2\n\t}\n}\n";
        let after = "table ip t { # handle 1\n\tchain c { # handle 1\n\t\taccept # handle 2\n\t\tdrop # handle 4\n\t}\n\n\tchain d { # handle 3\n\t}\n}\ntable inet u { # handle 2\n}\n";
        assert_eq!(
            echo(before, after),
            "add rule ip t c drop # handle 4\nadd chain ip t d\nadd table inet u\n"
        );
        assert_eq!(echo(after, after), "");
    }

    #[test]
    fn diff_shows_what_changes() {
        let a = "table ip t {\n\tchain c {\n\t\taccept\n\t}\n}\ntable ip gone {\n}\n";
        let b = "table ip t {\n\tchain c {\n\t\tdrop\n\t}\n}\ntable ip new {\n}\n";
        assert_eq!(
            diff(a, b),
            "-table ip gone\ntable ip t {\n \tchain c {\n-\t\taccept\n+\t\tdrop\n+table ip new {\n+}\n"
        );
        assert_eq!(diff(a, a), "");
    }
}
