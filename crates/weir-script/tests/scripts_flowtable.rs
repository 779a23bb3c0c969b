//! A ruleset that offloads established connections to a flowtable and queues them to
//! scripts: a connection stays on the slow path while the scripts still act on it (its
//! packets must keep reaching `queue`), and goes to the flowtable once they are done.

use std::path::Path;
use weir_engine::stateful::Stateful;
use weir_engine::Decision;
use weir_script::config::ScriptsConfig;
use weir_script::Scripts;

mod scripts_common;
use scripts_common::*;

const RULES: &str = "table inet z {
  flowtable ft { hook ingress priority 0; devices = { lan0, wan0 }; }
  chain fwd {
    type filter hook forward priority 0;
    ct state established flow add @ft
  }
  chain post {
    type filter hook postrouting priority 101;
    tcp dport 443 queue num 200
  }
}
";

fn setup(range: &str) -> Stateful {
    let mut sf = engine(RULES);
    let cfg: ScriptsConfig = serde_json::from_str(&format!(
        r#"{{"profile": [{{"queue": 200, "filter_tcp": "443",
            "instance": [{{"desync": "send", "out_range": "{range}"}}]}}]}}"#
    ))
    .unwrap();
    sf.set_flow_hook(Some(Box::new(Scripts::new(&cfg, Path::new("/")).unwrap())));
    sf
}

/// The client's data packets after the handshake; the packet index (1-based, counting the
/// SYN as 1 and the handshake's ACK as 2) at which the connection went to the flowtable.
fn offloaded_at(sf: &mut Stateful) -> Option<u32> {
    handshake_at(sf, 1_000);
    let mut seq = ISN;
    for n in 3..12u32 {
        let (d, _, _) = forward(sf, tcp(0x18, seq, b"data", true));
        assert_eq!(d, Decision::Accept, "packet {n}");
        seq += 4;
        if sf.stats().offloaded > 0 {
            return Some(n);
        }
    }
    None
}

#[test]
fn offload_waits_until_the_scripts_are_done() {
    // the instance acts on the client's first 5 packets: the connection is offloaded by the
    // first packet after them (the range is seen to be past when that packet is queued,
    // after the forward chain's `flow add`: the next one)
    let mut sf = setup("-n5");
    assert_eq!(offloaded_at(&mut sf), Some(7));
    assert!(sf.stats().offload_deferred >= 3);
    // no bound: never offloaded
    let mut sf = setup("a");
    assert_eq!(offloaded_at(&mut sf), None);
    assert!(sf.stats().offload_deferred > 0);
    // nothing to do at all (`x`): offloaded at once, at the handshake's ACK
    let mut sf = setup("x");
    handshake_at(&mut sf, 1_000);
    assert_eq!(sf.stats().offloaded, 1);
}
