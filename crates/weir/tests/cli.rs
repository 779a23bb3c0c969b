//! The command-line tool end to end: exit codes, JSON output, written captures, the ClassBench
//! importer against the ClassBench reference.

use std::path::{Path, PathBuf};
use std::process::Command;

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn replay_example_json_is_consistent() {
    let out = weir()
        .args(["replay", "--example", "--json"])
        .output()
        .unwrap();
    let v = json(&out);
    let packets = v["packets"].as_u64().unwrap();
    assert_eq!(packets, 322);
    assert_eq!(
        v["accepted"].as_u64().unwrap() + v["dropped"].as_u64().unwrap(),
        packets
    );
    let malformed: u64 = v["malformed"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(malformed, 8, "{}", v["malformed"]);
    let rules = v["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 47);
    for r in rules {
        for k in ["table", "chain", "handle", "text", "packets", "bytes"] {
            assert!(r.get(k).is_some(), "rule without {k}: {r}");
        }
    }
    // the block list drops exactly the frames the capture has from blocked sources
    let blk = rules
        .iter()
        .find(|r| {
            r["text"]
                .as_str()
                .unwrap()
                .starts_with("ip saddr @blocklist4")
        })
        .unwrap();
    assert!(blk["packets"].as_u64().unwrap() > 0);
    // the compiled engine and the linear reference give the same output
    let lin = json(
        &weir()
            .args(["replay", "--example", "--json", "--linear"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["rules"], lin["rules"]);
    assert_eq!(v["accepted"], lin["accepted"]);
    // router mode with NAT: the kernel's verdicts (examples/README.md): 248 accepted, 69
    // dropped by a rule or a policy (9 rejects), 1 fragment held, 4 malformed
    assert_eq!(v["hook"], "router");
    assert_eq!(v["accepted"].as_u64().unwrap(), 248);
    assert_eq!(v["drop_reasons"]["fragment"], 1);
    assert_eq!(v["drop_reasons"]["malformed"], 4);
    assert_eq!(v["drop_reasons"]["reject"], 9);
    let by_rule =
        v["drop_reasons"]["rule"].as_u64().unwrap() + v["drop_reasons"]["policy"].as_u64().unwrap();
    assert_eq!(by_rule + 9, 69);
    let hits = |prefix: &str| {
        rules
            .iter()
            .find(|r| r["text"].as_str().unwrap().starts_with(prefix))
            .unwrap()["packets"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(hits("ct state established, related counter accept"), 217);
    assert_eq!(v["nat_bindings"].as_u64().unwrap(), 17);
    // the single-hook mode is still there
    let fwd = json(
        &weir()
            .args(["replay", "--example", "--json", "--hook", "forward"])
            .output()
            .unwrap(),
    );
    assert_eq!(fwd["hook"], "forward");
    assert!(fwd["accepted"].as_u64().unwrap() < 248);
}

#[test]
fn replay_example_out_is_translated() {
    let acc = tmp("nat-acc.pcap");
    let out = weir()
        .args(["replay", "--example", "--json", "--out"])
        .arg(&acc)
        .output()
        .unwrap();
    let v = json(&out);
    let cap = weir_wire::pcap::read_file(&acc).unwrap();
    assert_eq!(cap.packets.len() as u64, v["accepted"].as_u64().unwrap());
    let (mut lan_to_wan, mut to_gw, mut masqueraded) = (0, 0, 0);
    for p in &cap.packets {
        let pm = weir_wire::PacketMeta::parse(&p.data, p.link);
        if pm.l3 != weir_wire::L3::Ipv4 {
            continue;
        }
        let inside = |a: u128| a >> 8 == 0xc61200 || a >> 8 == 0xc61201;
        if pm.saddr >> 8 == 0xc61200 && !inside(pm.daddr) {
            lan_to_wan += 1;
        }
        if pm.daddr == 0xc6130002 {
            to_gw += 1;
        }
        if pm.saddr == 0xc6130002 {
            masqueraded += 1;
            assert!(pm.ipv4_checksum_ok(&p.data));
        }
    }
    // every desk packet to the internet leaves masqueraded; nothing forwarded is still
    // addressed to the gateway (replies and the port forward were translated)
    assert_eq!(lan_to_wan, 0);
    assert_eq!(to_gw, 0);
    assert!(masqueraded > 0);
}

#[test]
fn replay_writes_accepted_and_dropped_captures() {
    let rules = tmp("r.nft");
    std::fs::write(&rules, include_str!("../../../examples/gateway.nft")).unwrap();
    let pcap = tmp("in.pcap");
    std::fs::write(&pcap, include_bytes!("../../../examples/gateway.pcap")).unwrap();
    let (acc, drp) = (tmp("acc.pcap"), tmp("drp.pcap"));
    let out = weir()
        .args(["replay", "--rules"])
        .arg(&rules)
        .arg(&pcap)
        .arg("--out")
        .arg(&acc)
        .arg("--drops")
        .arg(&drp)
        .arg("--json")
        .output()
        .unwrap();
    let v = json(&out);
    let count = |p: &Path| weir_wire::pcap::read_file(p).unwrap().packets.len() as u64;
    assert_eq!(count(&acc), v["accepted"].as_u64().unwrap());
    assert_eq!(count(&drp), v["dropped"].as_u64().unwrap());
}

#[test]
fn check_exit_codes_and_errors() {
    let good = tmp("good.nft");
    std::fs::write(&good, "table ip t { chain c { type filter hook input priority 0; policy drop; tcp dport 22 accept } }\n").unwrap();
    let out = weir().arg("check").arg(&good).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("rules       1"));
    let v = json(
        &weir()
            .arg("check")
            .arg(&good)
            .arg("--json")
            .output()
            .unwrap(),
    );
    assert_eq!(v["rules"], 1);
    assert_eq!(v["base_chains"], 1);

    let bad = tmp("bad.nft");
    std::fs::write(
        &bad,
        "table ip t {\n  chain c {\n    tcp dport 99999 accept\n  }\n}\n",
    )
    .unwrap();
    let out = weir().arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.nft:3:15: error:"), "{err}");
    assert!(err.contains("^^^^^"), "{err}");

    let out = weir()
        .arg("check")
        .arg(tmp("missing.nft"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn replay_rejects_garbage_capture_cleanly() {
    let rules = tmp("g.nft");
    std::fs::write(
        &rules,
        "table ip t { chain c { type filter hook forward priority 0; accept } }\n",
    )
    .unwrap();
    let junk = tmp("junk.pcap");
    std::fs::write(&junk, b"this is not a capture at all").unwrap();
    let out = weir()
        .args(["replay", "--rules"])
        .arg(&rules)
        .arg(&junk)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// `weir import classbench` prints a ruleset whose first matching rule, for every header of
/// the trace whose protocol carries ports, is the first matching line of the ClassBench file.
#[test]
fn classbench_import_matches_classbench_semantics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/classbench");
    let (rules, trace) = (dir.join("rules/acl1_1k"), dir.join("traces/acl1_1k_trace"));
    if !rules.exists() {
        eprintln!("skipped: {} not found", rules.display());
        return;
    }
    let out = weir()
        .args(["import", "classbench"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let (rs, _) = weir_lang::load_str("imported.nft", &text).unwrap();
    let cb =
        weir_classify::classbench::parse_rules(&std::fs::read_to_string(&rules).unwrap()).unwrap();
    assert_eq!(rs.tables[0].chains[0].rules.len(), cb.len());
    let hdrs =
        weir_classify::classbench::parse_trace(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let lin = weir_classify::Linear::build(
        weir_classify::classbench::CB_WIDTHS,
        weir_classify::classbench::to_entries(&cb),
    );
    let mut e = weir_engine::Engine::new(weir_engine::Compiled::build(
        &rs,
        weir_engine::Mode::Compiled,
    ));
    let mut checked = 0;
    for h in &hdrs {
        let pm = weir_wire::PacketMeta::ipv4_tuple(h.src, h.dst, h.proto, h.sport, h.dport);
        let ports = pm.has_ports;
        let p = weir_engine::Pkt {
            frame: &[],
            pm: &pm,
            meta: &mut weir_engine::Meta::default(),
            now_ns: 0,
            conns: None,
        };
        let got = e.first_candidate(0, 0, &p);
        let want = lin.first_match(&h.key(), 0, |_| true).map(|x| x.1 as usize);
        if ports {
            assert_eq!(got, want, "header {h:?}");
            checked += 1;
        }
    }
    assert!(checked > 1000);
}

#[test]
fn import_iptables_then_check() {
    let rules = tmp("ipt.rules");
    std::fs::write(
        &rules,
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         -A FORWARD -s 198.18.0.5/32 -m state --state NEW,ESTABLISHED,RELATED -j ACCEPT\n\
         -A FORWARD -p tcp --dport 22 -m foo -j DROP\nCOMMIT\n",
    )
    .unwrap();
    // an unsupported match is an error naming the line
    let out = weir()
        .args(["import", "iptables"])
        .arg(&rules)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ipt.rules:6:"));
    // skipped with a warning, the rest imports and checks
    let out = weir()
        .args(["import", "iptables", "--skip-unsupported"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 rule(s) skipped"));
    let nft = tmp("ipt.nft");
    std::fs::write(&nft, &out.stdout).unwrap();
    let v = json(
        &weir()
            .arg("check")
            .arg(&nft)
            .arg("--json")
            .output()
            .unwrap(),
    );
    assert_eq!(v["rules"], 1);
    assert_eq!(v["base_chains"], 3);
}

#[test]
fn format_iptables_loads_directly_and_equals_the_import() {
    let rules = tmp("ipt-direct.rules");
    std::fs::write(
        &rules,
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         -N WEB\n\
         -A FORWARD -p tcp -m multiport --dports 22,23 -j DROP\n\
         -A FORWARD -s 198.18.0.0/24 -p tcp -j WEB\n\
         -A FORWARD -p udp ! --dport 53 -j DROP\n\
         -A WEB -p tcp --dport 443 -j ACCEPT\n\
         -A WEB -p tcp --syn -j DROP\nCOMMIT\n",
    )
    .unwrap();
    // check --format iptables
    let v = json(
        &weir()
            .args(["check", "--json", "--format", "iptables"])
            .arg(&rules)
            .output()
            .unwrap(),
    );
    assert_eq!(v["rules"], 5);
    // the same file as nft syntax fails to check (it is not nft)
    let out = weir().arg("check").arg(&rules).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // replay --format iptables gives what replaying the imported nft text gives
    let out = weir()
        .args(["import", "iptables"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(out.status.success());
    let nft = tmp("ipt-direct.nft");
    std::fs::write(&nft, &out.stdout).unwrap();
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway.pcap");
    let run = |args: &[&str], file: &Path| {
        json(
            &weir()
                .args(["replay", "--json", "--rules"])
                .arg(file)
                .args(args)
                .arg(&pcap)
                .output()
                .unwrap(),
        )
    };
    let direct = run(&["--format", "iptables"], &rules);
    let imported = run(&[], &nft);
    assert_eq!(direct["accepted"], imported["accepted"]);
    assert_eq!(direct["dropped"], imported["dropped"]);
    let hits = |v: &serde_json::Value| -> Vec<u64> {
        v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["packets"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(hits(&direct), hits(&imported));
    assert!(direct["dropped"].as_u64().unwrap() > 0);
    assert!(hits(&direct).iter().sum::<u64>() > 0);
    // an unknown format and an unsupported option are clear errors
    let out = weir()
        .args(["check", "--format", "pf"])
        .arg(&rules)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown format 'pf'"));
}

/// `weir run` refuses a bad configuration with a clear message before touching the kernel,
/// and `--print-kernel-rules` shows what it would install (no root needed for either).
#[test]
fn run_configuration_errors_and_kernel_rules() {
    let dir = tmp("run");
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("rules.nft");
    std::fs::write(
        &rules,
        "table inet f {\n chain fwd { type filter hook forward priority 0; policy accept; }\n chain inp { type filter hook input priority 0; policy accept; }\n}\n",
    )
    .unwrap();
    let cfg = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let run = |p: &Path, extra: &[&str]| {
        let out = weir()
            .arg("run")
            .arg("--config")
            .arg(p)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    // a missing file
    let (ok, text) = run(&dir.join("nope.toml"), &[]);
    assert!(!ok && text.contains("nope.toml"), "{text}");
    // a mode not built
    let p = cfg(
        "bypass.toml",
        "ruleset = \"rules.nft\"\nmode = \"bypass\"\n",
    );
    let (ok, text) = run(&p, &[]);
    assert!(
        !ok && text.contains("\"nfqueue\"") && text.contains("\"inline\""),
        "{text}"
    );
    // inline mode needs its interfaces
    let p = cfg(
        "inline.toml",
        "ruleset = \"rules.nft\"\nmode = \"inline\"\n[[interface]]\nname = \"lan0\"\n",
    );
    let (ok, text) = run(&p, &[]);
    assert!(!ok && text.contains("at least two [[interface]]"), "{text}");
    // a route through an interface that is not one of them, a bad MAC
    let p = cfg(
        "route.toml",
        "ruleset = \"rules.nft\"\nmode = \"inline\"\n[[interface]]\nname = \"a0\"\n[[interface]]\nname = \"b0\"\n[[route]]\nprefix = \"198.18.0.0/15\"\ninterface = \"c0\"\n",
    );
    let (ok, text) = run(&p, &[]);
    assert!(!ok && text.contains("'c0'"), "{text}");
    // the same prefix twice (host bits aside): which one would win is not the writer's guess
    let p = cfg(
        "twice.toml",
        "ruleset = \"rules.nft\"\nmode = \"inline\"\n[[interface]]\nname = \"a0\"\n[[interface]]\nname = \"b0\"\n[[route]]\nprefix = \"198.18.0.0/24\"\ninterface = \"a0\"\n[[route]]\nprefix = \"198.18.0.7/24\"\ninterface = \"b0\"\n",
    );
    let (ok, text) = run(&p, &[]);
    assert!(
        !ok && text.contains("route 198.18.0.7/24: configured twice"),
        "{text}"
    );
    let p = cfg(
        "mac.toml",
        "ruleset = \"rules.nft\"\nmode = \"inline\"\n[[interface]]\nname = \"a0\"\n[[interface]]\nname = \"b0\"\n[[neighbour]]\naddress = \"198.18.0.1\"\nmac = \"02:00:zz:00:00:01\"\n",
    );
    let (ok, text) = run(&p, &[]);
    assert!(!ok && text.contains("MAC address"), "{text}");
    // a misspelt key
    let p = cfg(
        "typo.toml",
        "ruleset = \"rules.nft\"\nmode = \"nfqueue\"\n[nfqueue]\nqeue = 3\n",
    );
    let (ok, text) = run(&p, &[]);
    assert!(!ok && text.contains("qeue"), "{text}");
    // a ruleset with errors: the diagnostics, then a refusal
    std::fs::write(
        dir.join("bad.nft"),
        "table inet f { chain c { tcp dport 99999 accept } }\n",
    )
    .unwrap();
    let p = cfg("bad.toml", "ruleset = \"bad.nft\"\nmode = \"nfqueue\"\n");
    let (ok, text) = run(&p, &[]);
    assert!(
        !ok && text.contains("bad.nft:1:") && text.contains("errors"),
        "{text}"
    );
    // NAT in NFQUEUE mode: the kernel routed the packet already; refused, naming the rule
    std::fs::write(
        dir.join("nat.nft"),
        "table ip n {\n chain post { type nat hook postrouting priority srcnat; oifname \"wan0\" masquerade }\n}\n",
    )
    .unwrap();
    let p = cfg("nat.toml", "ruleset = \"nat.nft\"\nmode = \"nfqueue\"\n");
    let (ok, text) = run(&p, &[]);
    assert!(
        !ok && text.contains("NAT in nfqueue mode")
            && text.contains("oifname \"wan0\" masquerade")
            && text.contains("inline"),
        "{text}"
    );
    // dup in NFQUEUE mode: the copy is routed and sent by the router; refused likewise
    std::fs::write(
        dir.join("dup.nft"),
        "table ip d {\n chain pre { type filter hook prerouting priority 0; icmp type echo-request dup to 198.18.0.9 }\n}\n",
    )
    .unwrap();
    let p = cfg("dup.toml", "ruleset = \"dup.nft\"\nmode = \"nfqueue\"\n");
    let (ok, text) = run(&p, &[]);
    assert!(
        !ok && text.contains("dup in nfqueue mode")
            && text.contains("dup to 198.18.0.9")
            && text.contains("inline"),
        "{text}"
    );
    // tproxy and the IPsec state in NFQUEUE mode: the kernel gives a packet to its socket and
    // keeps its security path before queueing it; refused likewise
    for (name, rule, what) in [
        (
            "tp",
            "meta l4proto tcp tproxy to :8080",
            "tproxy in nfqueue mode",
        ),
        ("ips", "meta ipsec exists accept", "IPsec state"),
    ] {
        std::fs::write(
            dir.join(format!("{name}.nft")),
            format!("table ip t {{\n chain pre {{ type filter hook prerouting priority 0; {rule} }}\n}}\n"),
        )
        .unwrap();
        let p = cfg(
            &format!("{name}.toml"),
            &format!("ruleset = \"{name}.nft\"\nmode = \"nfqueue\"\n"),
        );
        let (ok, text) = run(&p, &[]);
        // (the rule as its tokens: `tproxy to : 8080`)
        let head = rule.split(':').next().unwrap_or(rule);
        assert!(!ok && text.contains(what) && text.contains(head), "{text}");
    }
    // the kernel rules: forward always, input because the ruleset has an input chain
    let p = cfg(
        "ok.toml",
        "ruleset = \"rules.nft\"\nmode = \"nfqueue\"\n[nfqueue]\nqueue = 3\n",
    );
    let (ok, text) = run(&p, &["--print-kernel-rules"]);
    assert!(ok, "{text}");
    for want in [
        "iptables -w -N WEIR-NFQ3",
        "iptables -w -A WEIR-NFQ3 -j NFQUEUE --queue-num 3 --queue-bypass",
        // (what per-flow scripts send is never queued again)
        "iptables -w -I FORWARD 1 -m mark ! --mark 0x77656973 -j WEIR-NFQ3",
        "iptables -w -I INPUT 1 -m mark ! --mark 0x77656973 -j WEIR-NFQ3",
        "ip6tables -w -I FORWARD 1 -m mark ! --mark 0x77656973 -j WEIR-NFQ3",
    ] {
        assert!(text.contains(want), "missing '{want}' in:\n{text}");
    }
    assert!(!text.contains("OUTPUT"), "{text}");
    // two workers: the kernel balances connections over two queues
    let p = cfg(
        "two.toml",
        "ruleset = \"rules.nft\"\nmode = \"nfqueue\"\n[nfqueue]\nqueue = 3\nworkers = 2\n",
    );
    let (ok, text) = run(&p, &["--print-kernel-rules"]);
    assert!(
        ok && text.contains("--queue-balance 3:4 --queue-bypass"),
        "{text}"
    );
    let p = cfg(
        "none.toml",
        "ruleset = \"rules.nft\"\nmode = \"nfqueue\"\n[nfqueue]\nworkers = 0\n",
    );
    let (ok, text) = run(&p, &["--print-kernel-rules"]);
    assert!(!ok && text.contains("nfqueue.workers"), "{text}");
}

/// A ruleset that only hands packets to scripts: `--print-kernel-rules` queues only what
/// the profiles can act on (their ports, the first packets of each connection); one that
/// does more queues everything and says why.
#[test]
fn kernel_rules_queue_only_what_scripts_act_on() {
    let dir = tmp("narrow");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    write(
        "only.nft",
        "table inet z {\n chain c { type filter hook forward priority 0; policy accept;\n tcp dport { 80, 443 } counter queue num 7\n }\n}\n",
    );
    write(
        "more.nft",
        "table inet z {\n chain c { type filter hook forward priority 0; policy accept;\n tcp dport 23 drop\n tcp dport { 80, 443 } counter queue num 7\n }\n}\n",
    );
    let scripts = "[scripts]\n[[scripts.profile]]\nqueue = 7\nfilter_tcp = \"80,443\"\n[[scripts.profile.instance]]\ndesync = \"multisplit:pos=2\"\nout_range = \"-n5\"\n";
    let run = |cfg: &str| {
        let p = write("w.toml", cfg);
        let out = weir()
            .args(["run", "--print-kernel-rules", "--config"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let head = "mode = \"nfqueue\"\n[nfqueue]\nqueue = 4\n";
    let text = run(&format!("ruleset = \"only.nft\"\n{head}{scripts}"));
    for want in [
        "# the ruleset only hands packets to scripts",
        "iptables -w -A WEIR-NFQ4 -m conntrack --ctdir ORIGINAL -p tcp -m multiport --dports 80,443 -m connbytes --connbytes 1:5 --connbytes-dir original --connbytes-mode packets -j NFQUEUE --queue-num 4 --queue-bypass",
        "iptables -w -A WEIR-NFQ4 -m conntrack --ctdir REPLY -p tcp -m multiport --sports 80,443 -m connbytes --connbytes 1:1 --connbytes-dir reply --connbytes-mode packets -j NFQUEUE",
        "ip6tables -w -A WEIR-NFQ4 -p tcp -m multiport --ports 80,443 --tcp-flags RST RST -j NFQUEUE",
    ] {
        assert!(text.contains(want), "missing '{want}' in:\n{text}");
    }
    assert!(!text.contains("-A WEIR-NFQ4 -j NFQUEUE"), "{text}");
    // a rule that decides something: everything is queued, and the reason given
    let text = run(&format!("ruleset = \"more.nft\"\n{head}{scripts}"));
    assert!(
        text.contains("iptables -w -A WEIR-NFQ4 -j NFQUEUE --queue-num 4 --queue-bypass")
            && text.contains("`tcp dport 23 drop`")
            && !text.contains("connbytes"),
        "{text}"
    );
    // turned off in the configuration
    let text = run(&format!(
        "ruleset = \"only.nft\"\n{head}narrow = false\n{scripts}"
    ));
    assert!(!text.contains("connbytes"), "{text}");
}

/// `weir replay` holds a later fragment that comes before its first (as the kernel's
/// reassembly waits for it) and replays it after its first; one whose first never comes is
/// dropped after a second of capture time, counted and written with the drops.
#[test]
fn replay_holds_a_later_fragment_that_comes_first() {
    use std::net::Ipv4Addr;
    use weir_wire::build::Builder;
    use weir_wire::{LinkType, PacketMeta};
    let (c, s) = (Ipv4Addr::new(198, 18, 30, 2), Ipv4Addr::new(198, 18, 31, 2));
    let b = |id| Builder::new().ip_id(id);
    let first = b(77).fragment(0, true).udp(c, s, 1000, 53, &[1; 64]);
    let later = b(77).fragment(9, false).ip(c, s, 17, &[2; 40]);
    let orphan = b(78).fragment(9, false).ip(c, s, 17, &[3; 40]);
    let other = b(79).udp(c, s, 1001, 53, b"q");
    let cap = tmp("frag-order.pcap");
    let mut w = weir_wire::pcap::PcapWriter::new(
        std::io::BufWriter::new(std::fs::File::create(&cap).unwrap()),
        LinkType::Ethernet,
    )
    .unwrap();
    let sec = 1_000_000_000u64;
    for (t, f) in [
        (sec, &later),
        (sec + 100, &first),
        (sec + 200, &orphan),
        (3 * sec, &other),
    ] {
        w.write(t, f).unwrap();
    }
    w.into_inner().unwrap();
    let rules = tmp("frag-order.nft");
    std::fs::write(
        &rules,
        "table inet f { chain fwd { type filter hook forward priority 0; policy drop; ct state new udp dport 53 accept } }\n",
    )
    .unwrap();
    let (out, drops) = (tmp("frag-order-out.pcap"), tmp("frag-order-drops.pcap"));
    let o = weir()
        .args(["replay", "--hook", "router", "--json", "--rules"])
        .arg(&rules)
        .arg(&cap)
        .arg("--out")
        .arg(&out)
        .arg("--drops")
        .arg(&drops)
        .output()
        .unwrap();
    let v = json(&o);
    assert_eq!(v["accepted"], 3, "{v}");
    assert_eq!(v["dropped"], 1, "{v}");
    assert_eq!(v["drop_reasons"]["fragment"], 1, "{v}");
    assert_eq!(v["fragments_held"], 1, "{v}");
    assert_eq!(v["fragments_dropped"], 1, "{v}");
    // out: the first, then the later fragment that waited for it, then the other datagram
    let got = weir_wire::pcap::read_file(&out).unwrap();
    let frag_off = |d: &[u8]| {
        let pm = PacketMeta::parse(d, LinkType::Ethernet);
        let l3 = pm.l3_off as usize;
        (
            u16::from_be_bytes([d[l3 + 4], d[l3 + 5]]),
            u16::from_be_bytes([d[l3 + 6], d[l3 + 7]]) & 0x1fff,
        )
    };
    let order: Vec<_> = got.packets.iter().map(|p| frag_off(&p.data)).collect();
    assert_eq!(order, vec![(77, 0), (77, 9), (79, 0)]);
    assert_eq!(
        got.packets[1].ts_nanos,
        sec + 100,
        "sent when its first passed"
    );
    let dropped = weir_wire::pcap::read_file(&drops).unwrap();
    assert_eq!(dropped.packets.len(), 1);
    assert_eq!(dropped.packets[0].data, orphan);
}

/// `weir bench pipeline` on a small table: every packet of every path is forwarded (the
/// bench refuses to report otherwise: the table must fill, the flowtable must take every
/// established packet), the route cache and the flowtable are faster than nothing, and
/// the JSON has the keys the issue names.
#[test]
fn bench_pipeline_small_runs_every_path() {
    for rpf in ["off", "strict"] {
        let o = weir()
            .args([
                "bench",
                "pipeline",
                "--flows",
                "4096",
                "--rules",
                "50",
                "--routes",
                "5000",
                "--seconds",
                "0.05",
                "--json",
                "--rp-filter",
                rpf,
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v = json(&o);
        for k in [
            "flows",
            "full_mpps",
            "route_cache_mpps",
            "flowtable_mpps",
            "new_conn_per_s",
            "bytes_per_entry",
        ] {
            assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {v}");
        }
        assert_eq!(v["dropped"], 0, "{v}");
        assert_eq!(v["rp_filter"], rpf);
    }
}

/// What users see and scripts read of `weir check` and `weir replay` (summaries, JSON, an
/// error with its caret), byte for byte against `tests/golden/` (compile times and memory
/// figures masked). `UPDATE_GOLDEN=1` writes the files instead.
#[test]
fn golden_check_and_replay_outputs() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bad = tmp("golden-bad.nft");
    std::fs::write(
        &bad,
        "table ip t {\n  chain c {\n    tcp dport 99999 accept\n    ip saddr @nope drop\n  }\n}\n",
    )
    .unwrap();
    let ipt = tmp("golden.rules");
    std::fs::write(
        &ipt,
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A FORWARD -s 198.18.0.0/24 -p tcp --dport 443 -j ACCEPT\n-A FORWARD -p udp -m multiport --dports 53,123 -j ACCEPT\nCOMMIT\n",
    )
    .unwrap();
    let gateway = root.join("examples/gateway.nft");
    let cases: Vec<(&str, Vec<std::ffi::OsString>)> = vec![
        (
            "check-gateway.txt",
            vec!["check".into(), gateway.clone().into()],
        ),
        (
            "check-gateway.json",
            vec!["check".into(), gateway.into(), "--json".into()],
        ),
        (
            "check-iptables.txt",
            vec![
                "check".into(),
                ipt.clone().into(),
                "--format".into(),
                "iptables".into(),
            ],
        ),
        ("check-error.txt", vec!["check".into(), bad.into()]),
        (
            "replay-example.txt",
            vec!["replay".into(), "--example".into()],
        ),
        (
            "replay-example.json",
            vec!["replay".into(), "--example".into(), "--json".into()],
        ),
    ];
    let mask = |s: &str| -> String {
        let dir = std::env::temp_dir().join(format!("weir-cli-{}", std::process::id()));
        let s = s
            .replace(&*dir.to_string_lossy(), "TMP")
            .replace(&*root.to_string_lossy(), "ROOT");
        s.lines()
            .map(|l| {
                if l.trim_start().starts_with("compiled in")
                    || l.trim_start().starts_with("(classifiers")
                {
                    l.chars()
                        .map(|c| if c.is_ascii_digit() { 'N' } else { c })
                        .collect::<String>()
                } else if let Some(i) = l.find("\"compile_ms\":") {
                    let rest = &l[i..];
                    let end = rest.find(',').unwrap_or(rest.len());
                    let mem = |t: &str| -> String {
                        match t.find("\"memory_bytes\":") {
                            Some(j) => {
                                let r = &t[j..];
                                let e = r.find(',').or_else(|| r.find('}')).unwrap_or(r.len());
                                format!("{}\"memory_bytes\":N{}", &t[..j], &r[e..])
                            }
                            None => t.to_string(),
                        }
                    };
                    mem(&format!("{}\"compile_ms\":N{}", &l[..i], &rest[end..]))
                } else {
                    l.to_string()
                }
            })
            .map(|l| l + "\n")
            .collect()
    };
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut wrong = Vec::new();
    for (name, args) in cases {
        let out = weir().current_dir(&root).args(&args).output().unwrap();
        let got = mask(&format!(
            "exit {}\n{}{}",
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
        if update {
            std::fs::create_dir_all(&golden).unwrap();
            std::fs::write(golden.join(name), &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(golden.join(name))
            .unwrap_or_else(|e| panic!("tests/golden/{name}: {e} (UPDATE_GOLDEN=1 writes it)"));
        if got != want {
            wrong.push(format!("--- tests/golden/{name}\n{want}+++ now\n{got}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The systemd unit in dist/ is one systemd takes (`systemd-analyze verify`, with its
/// ExecStart pointing at the binary under test), notifies readiness and reloads with SIGHUP.
#[test]
fn systemd_unit_verifies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let unit = std::fs::read_to_string(root.join("dist/weir.service")).unwrap();
    assert!(unit.contains("\nType=notify\n"), "{unit}");
    assert!(
        unit.contains("\nExecReload=/bin/kill -HUP $MAINPID\n"),
        "{unit}"
    );
    let have = Command::new("sh")
        .args(["-c", "command -v systemd-analyze >/dev/null"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!("SKIP: systemd-analyze is not installed");
        return;
    }
    let dir = tmp("unit");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("weir.service");
    std::fs::write(
        &p,
        unit.replace("/usr/local/bin/weir", env!("CARGO_BIN_EXE_weir")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&p)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("weir.service:"),
        "{text}"
    );
}

/// A ruleset with a construct weir loads but does not evaluate yet (`ct helper set` with the
/// IRC helper; ftp, tftp and sip run) checks,
/// listed as such, and `weir replay` refuses it naming the rule, rather than pass it over.
#[test]
fn replay_refuses_what_it_does_not_evaluate() {
    let rules = tmp("helper.nft");
    std::fs::write(
        &rules,
        "table ip t {\n ct helper irc-tcp { type \"irc\" protocol tcp; }\n chain c {\n  type filter hook prerouting priority 0\n  ip protocol tcp ct helper set \"irc-tcp\"\n }\n}\n",
    )
    .unwrap();
    let out = weir().arg("check").arg(&rules).output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{so}");
    assert!(
        so.contains("not evaluated yet") && so.contains("ct helper set"),
        "{so}"
    );
    let out = weir()
        .args(["replay", "--rules"])
        .arg(&rules)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/gateway.pcap"
        ))
        .output()
        .unwrap();
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{se}");
    assert!(
        se.contains("helper.nft:5:") && se.contains("not evaluated yet"),
        "{se}"
    );
}

/// nft's JSON syntax: a file starting with `{` is read as `nft -j` writes it (`check`, and so
/// `replay` and `run`), `check --print` lists it as text, `check --print --json` as nft's
/// JSON, which reads back to the same listing; a wrong value is reported with its JSON path.
#[test]
fn check_reads_and_prints_nft_json() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ruleset.json");
    let out = weir().arg("check").arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("rules       3"));
    let text = weir()
        .args(["check", "--print"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    for want in [
        "type filter hook input priority filter; policy drop;",
        "ct state established,related accept",
        "ip saddr @admins tcp dport { 22, 8000-8080 } counter packets 0 bytes 0 accept comment \"ssh from the admins\"",
        "iifname \"lo\" accept",
        "elements = { 10.0.0.0/8, 192.168.1.1 }",
    ] {
        assert!(text.contains(want), "{want}\nnot in\n{text}");
    }
    let out = weir()
        .args(["check", "--print", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    let v = json(&out);
    let rules: Vec<&serde_json::Value> = v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("rule"))
        .collect();
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0]["expr"][0]["match"]["op"], "in");
    assert_eq!(rules[1]["comment"], "ssh from the admins");
    // what --json writes, --format json reads back to the same listing
    let back = tmp("back.json");
    std::fs::write(&back, &out.stdout).unwrap();
    let again = weir()
        .args(["check", "--print", "--format", "json"])
        .arg(&back)
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&again.stdout), text);
    // an error names the JSON path
    let bad = tmp("bad.json");
    std::fs::write(
        &bad,
        r#"{"nftables": [{"table": {"family": "ip", "name": "t"}},
            {"chain": {"family": "ip", "table": "t", "name": "c"}},
            {"rule": {"family": "ip", "table": "t", "chain": "c",
                      "expr": [{"match": {"op": "==", "left": {"frobnicate": 1}, "right": 2}}]}}]}"#,
    )
    .unwrap();
    let out = weir().arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "nftables[2].rule.expr[0].match.left.frobnicate: unknown expression 'frobnicate'"
        ),
        "{err}"
    );
}
