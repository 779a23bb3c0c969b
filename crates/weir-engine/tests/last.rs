//! `last`: a rule records when a packet last reached the statement (`nft_last`); a packet
//! the rule's earlier matches stop does not; `last used TIME` as `nft list ruleset` wrote it
//! loads and records from then on.

use std::net::Ipv4Addr;
use weir_engine::{Compiled, Decision, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::build::{tcp4, tcp_flags};
use weir_wire::{LinkType, PacketMeta};

fn run(e: &mut Engine, dport: u16, now_ns: u64) -> Decision {
    let f = tcp4(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 19, 0, 1),
        40000,
        dport,
        tcp_flags::SYN,
        b"",
    );
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut meta = Meta::default();
    let mut p = Pkt {
        frame: &f,
        pm: &pm,
        meta: &mut meta,
        now_ns,
        conns: None,
    };
    e.process(Hook::Input, &mut p)
}

#[test]
fn last_records_the_time_of_the_last_packet() {
    let text = "table ip t {\n chain c {\n  type filter hook input priority 0; policy accept;\n  tcp dport 22 last drop\n  tcp dport 23 last used 300s\n  tcp dport 24 counter\n }\n}\n";
    let rs = weir_lang::load_str("t.nft", text).unwrap().0;
    assert!(rs.unevaluated().is_empty(), "{:?}", rs.unevaluated());
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut e = Engine::new(Compiled::build(&rs, mode));
        let gid = |e: &Engine, port: &str| {
            e.rs.tables[0].chains[0]
                .rules()
                .find(|r| r.text.contains(port))
                .unwrap()
                .gid
        };
        let (g22, g23, g24) = (gid(&e, "22"), gid(&e, "23"), gid(&e, "24"));
        assert_eq!(e.st.rule_last[g22], 0, "never");
        assert!(matches!(run(&mut e, 22, 5_000), Decision::Drop(_)));
        assert!(run(&mut e, 80, 6_000).is_accept());
        assert_eq!(e.st.rule_last[g22], 5_000);
        assert!(!run(&mut e, 22, 9_000).is_accept());
        assert_eq!(e.st.rule_last[g22], 9_000);
        assert!(run(&mut e, 23, 10_000).is_accept());
        assert_eq!(e.st.rule_last[g23], 10_000);
        assert!(run(&mut e, 24, 11_000).is_accept());
        assert_eq!(e.st.rule_last[g24], 0, "no last in the rule");
    }
}
