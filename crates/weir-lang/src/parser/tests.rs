//! Tests of the parser.

use super::*;

fn parse(s: &str) -> (File, Vec<Diagnostic>, SourceMap) {
    let mut sm = SourceMap::new();
    let (f, d) = parse_str(&mut sm, "t.nft", s);
    (f, d, sm)
}

#[test]
fn table_chain_rules() {
    let (f, d, _) = parse(
        "define lan = 198.18.0.0/24\n\
         table inet filter {\n\
           set allowed { type ipv4_addr . inet_service; flags interval; elements = { 1.2.3.4 . 22, 10.0.0.0/8 . 80-90 } }\n\
           chain forward {\n\
             type filter hook forward priority 0; policy drop;\n\
             ct state established,related accept\n\
             ip saddr $lan tcp dport { 22, 80 } counter accept\n\
             ip saddr . tcp dport @allowed accept\n\
             tcp flags & (syn|ack) == syn limit rate 10/second burst 5 packets accept\n\
             meta mark set 0x10 ip daddr vmap { 1.1.1.1 : drop, 2.2.2.2 : jump other }\n\
             dnat ip to ip saddr map { 198.18.0.1 : 198.19.0.1 }\n\
           }\n\
           chain other { return }\n\
         }\n",
    );
    assert!(d.is_empty(), "{d:?}");
    let Command::Table { items, .. } = &f.commands[0] else {
        panic!()
    };
    assert_eq!(items.len(), 3);
    let TableItem::Chain(c) = &items[1] else {
        panic!()
    };
    assert_eq!(c.rules.len(), 6);
    assert!(c.hook.is_some());
    assert_eq!(c.rules[1].items.len(), 4);
}

#[test]
fn errors_are_collected_and_located() {
    let (_, d, sm) =
        parse("table ip t {\n chain c {\n  ip saddr\n  bogus thing\n  accept\n }\n}\n");
    assert_eq!(d.len(), 2, "{d:?}");
    let r = d[0].render(&sm);
    assert!(r.starts_with("t.nft:3:3: error:"), "{r}");
    assert!(r.contains("^^^^^^^^"), "{r}");
    assert!(d[1].render(&sm).starts_with("t.nft:4:3:"));
}

#[test]
fn add_commands() {
    let (f, d, _) = parse(
        "add table ip t\nadd chain ip t c { type filter hook input priority filter + 10; }\nadd rule ip t c tcp dport 22 drop\ninsert rule t c position 3 accept\nadd element ip t s { 1.2.3.4 }\nflush ruleset\n",
    );
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(f.commands.len(), 6);
}

#[test]
fn undefined_variable() {
    let (_, d, _) = parse("table ip t { chain c { ip saddr $nope accept } }");
    assert_eq!(d.len(), 1);
    assert!(d[0].message.contains("$nope"));
}

/// `include` with wildcards takes every matching file in name order, and nothing (no error)
/// when none matches, as nft's glob does (OpenWrt fw4 includes `/etc/nftables.d/*.nft`); a
/// plain name that does not exist is still an error.
#[test]
fn include_globs() {
    let dir = std::env::temp_dir().join(format!("weir-include-glob-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("d")).unwrap();
    std::fs::write(dir.join("d/20-b.nft"), "define b = 2\n").unwrap();
    std::fs::write(dir.join("d/10-a.nft"), "define a = 1\n").unwrap();
    std::fs::write(dir.join("d/.hidden.nft"), "this is not nft\n").unwrap();
    std::fs::write(dir.join("d/notes.txt"), "nor this\n").unwrap();
    std::fs::write(dir.join("d/30-c.nft"), "define c = 3\n").unwrap();
    let main = dir.join("main.nft");
    std::fs::write(
        &main,
        "include \"d/[12]*.nft\"\ninclude \"none/*.nft\"\ninclude \"d/[3]?-?.nft\"\n\
         table ip t { chain c { meta mark $a meta mark $b meta mark $c accept } }\n",
    )
    .unwrap();
    let mut sm = SourceMap::new();
    let (f, d) = parse_file(&mut sm, &main);
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(f.commands.len(), 1);
    // the files in name order (a define may not be given twice: each file once)
    let names: Vec<String> = sm.files.iter().map(|f| f.name.clone()).collect();
    let a = names.iter().position(|n| n.ends_with("10-a.nft")).unwrap();
    let b = names.iter().position(|n| n.ends_with("20-b.nft")).unwrap();
    assert!(a < b, "{names:?}");
    assert!(!names
        .iter()
        .any(|n| n.contains("hidden") || n.ends_with(".txt")));
    std::fs::write(&main, "include \"d/missing.nft\"\n").unwrap();
    let (_, d) = parse_file(&mut SourceMap::new(), &main);
    assert!(d[0].message.contains("cannot include"), "{d:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
