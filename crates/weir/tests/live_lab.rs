//! `weir run` on three-namespace labs (the scripts in tests/lab/): NFQUEUE mode (ICMP, TCP,
//! UDP through weir with two workers, drops as the ruleset says, reloads under load, refused
//! reloads, run-time set elements, traces, metrics, a busy queue, clean shutdown) and inline
//! mode over AF_PACKET (ICMP with TTL, TCP through masquerade, drops, refusals). They need
//! root, iproute2, iptables, iperf3, ping and ethtool; a script prints SKIP and a reason when
//! it cannot run, and its test passes over it then.

use std::process::Command;

/// The labs run one at a time (each measures weir's CPU time).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lab(script: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .arg(format!("{root}/tests/lab/{script}"))
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
        eprintln!("{script} skipped: {}", text.trim());
        return;
    }
    assert!(out.status.success() && text.contains("PASS"), "{text}");
}

#[test]
fn nfqueue_mode_in_a_namespace_lab() {
    lab("nfqueue.sh");
}

#[test]
fn inline_mode_in_a_namespace_lab() {
    lab("inline.sh");
}
