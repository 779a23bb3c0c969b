//! `weir run` in NFQUEUE mode on a three-namespace lab (tests/lab/nfqueue.sh): ICMP and TCP
//! through weir, drops as the ruleset says, a reload under load, a refused reload, clean
//! shutdown. Needs root, iproute2, iptables, iperf3 and ping; the script prints SKIP and a
//! reason when it cannot run, and this test passes over it then.

use std::process::Command;

#[test]
fn nfqueue_mode_in_a_namespace_lab() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .arg(format!("{root}/tests/lab/nfqueue.sh"))
        .arg(env!("CARGO_BIN_EXE_weir"))
        .output()
        .expect("running bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    if text.contains("SKIP:") {
        eprintln!("nfqueue lab skipped: {}", text.trim());
        return;
    }
    assert!(out.status.success() && text.contains("PASS"), "{text}");
}
