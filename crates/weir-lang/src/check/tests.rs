//! Tests of the checker: a good ruleset, and the errors of bad ones.

use crate::load_str;

fn errors(s: &str) -> Vec<String> {
    match load_str("t.nft", s) {
        Ok(_) => vec![],
        Err((_, d)) => d.into_iter().map(|d| d.message).collect(),
    }
}

#[test]
fn good_ruleset_checks() {
    let r = load_str(
        "t.nft",
        "table inet f {\n set blk { type ipv4_addr; flags interval; elements = { 198.18.0.0/16, 198.19.1.1 } }\n map svc { type inet_service : verdict; elements = { 22 : jump ssh, 80 : accept } }\n counter hits { }\n flowtable ft { hook ingress priority 0; devices = { veth0, veth1 }; }\n chain fwd { type filter hook forward priority filter; policy drop;\n  ip saddr @blk counter name hits drop\n  ct state established,related flow add @ft accept\n  tcp dport vmap @svc\n  meta l4proto udp udp dport 53 limit rate 10/second accept\n }\n chain ssh { ip saddr 198.18.0.0/15 accept; return }\n chain pre { type nat hook prerouting priority dstnat; dnat ip to jhash ip saddr mod 2 map { 0 : 198.18.1.1, 1 : 198.18.1.2 } }\n chain post { type nat hook postrouting priority srcnat; oifname \"wan*\" masquerade }\n}\n",
    );
    let (rs, _) = r
        .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
        .unwrap();
    assert_eq!(rs.summary().rules, 8);
    assert!(rs.uses_state());
}

#[test]
fn family_and_hook_errors() {
    assert!(
        errors("table ip6 t { chain c { ip saddr 1.2.3.4 accept } }")[0]
            .contains("can never match")
    );
    assert!(
        errors("table ip t { chain c { type nat hook forward priority 0; } }")[0]
            .contains("nat chain cannot hook forward")
    );
    assert!(
        errors("table netdev t { chain c { type filter hook forward priority 0; } }")[0]
            .contains("does not exist")
    );
    assert!(
        errors("table netdev t { chain c { type filter hook ingress priority 0; } }")[0]
            .contains("needs a device")
    );
    assert!(errors(
        "table ip t { chain c { type filter hook forward priority 0; dnat to 1.2.3.4 } }"
    )[0]
    .contains("only allowed in nat chains"));
}

#[test]
fn type_errors() {
    assert!(errors("table ip t { chain c { tcp dport 70000 accept } }")[0].contains("too large"));
    assert!(
        errors("table ip t { set s { type ipv4_addr; elements = { 1.2.3.0/24 } } }")[0]
            .contains("range or prefix")
    );
    assert!(
        errors("table ip t { set s { type ipv4_addr; elements = { 22 } } }")[0]
            .contains("not an IPv4")
    );
    assert!(
        errors("table ip t { set s { type inet_service; } chain c { ip saddr @s accept } }")[0]
            .contains("holds inet_service")
    );
    assert!(errors("table ip t { chain c { ip saddr @nope accept } }")[0].contains("no set"));
    assert!(errors(
        "table ip t { map m { type ipv4_addr : verdict; elements = { 1.2.3.4 : 5.6.7.8 } } }"
    )[0]
    .contains("holds verdicts"));
    assert!(errors("table ip t { chain c { ip frob 1 } }")[0].contains("unknown selector"));
}

#[test]
fn jump_errors() {
    assert!(
        errors("table ip t { chain a { jump b } chain b { jump a } }")[0]
            .contains("jump loop: a -> b -> a")
    );
    assert!(errors("table ip t { chain a { jump nope } }")[0].contains("no chain"));
    assert!(errors(
        "table ip t { chain b { type filter hook input priority 0; } chain a { jump b } }"
    )[0]
    .contains("base chain"));
    assert!(errors("table ip t { chain a { accept counter } }")[0].contains("follow a verdict"));
    let mut deep =
        String::from("table ip t { chain base { type filter hook input priority 0; jump c0 }\n");
    for i in 0..20 {
        deep.push_str(&format!("chain c{i} {{ jump c{} }}\n", i + 1));
    }
    deep.push_str("chain c20 { accept } }\n");
    assert!(errors(&deep)[0].contains("deep"));
}
