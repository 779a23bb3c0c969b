//! `weir run` on namespace labs (the scripts in tests/lab/): NFQUEUE mode (ICMP, TCP, UDP
//! through weir with two workers, drops as the ruleset says, reloads under load, refused
//! reloads, run-time set elements, traces, metrics, a busy queue, clean shutdown) and inline
//! mode over AF_XDP and AF_PACKET (ICMP with TTL, IPv6 with neighbour discovery, ICMP errors
//! from the router, traces, TCP through masquerade, drops, refusals, clean shutdown); inline
//! mode as the load balancer of nftlb's testbed (lb.sh: wrk clients, nginx backends, DNAT and
//! SNAT farms); the conntrack helpers ftp, tftp and sip with real clients and servers through
//! a NAT router, the kernel first, then weir inline (helpers.sh: curl and vsftpd, tftp and
//! in.tftpd, a python SIP user agent); nftables' synproxy with python clients and servers, the
//! kernel first, then weir inline, checked in tcpdump captures at both ends (synproxy.sh);
//! per-flow scripts against a DPI stand-in (scripts.sh) and each desync action's packets on the
//! wire (scripts-wire.sh); and `weir bench lab`'s harness on a short run. They need root,
//! iproute2, iptables, nftables, iperf3, ping and ethtool (lb.sh also nginx, wrk and curl;
//! helpers.sh curl, vsftpd, tftpd-hpa, tftp-hpa and python3, tcpdump optional; synproxy.sh
//! python3, tcpdump for its capture checks; the scripts labs python3); a test prints SKIP and a
//! reason when it cannot run, and passes over it then.

use std::process::Command;

/// The labs run one at a time (each measures weir's CPU time).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lab(script: &str) {
    lab_with(script, &[]);
}

/// [`lab`] with environment variables (a script's options: `HL_WORKERS=2`).
fn lab_with(script: &str, env: &[(&str, &str)]) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .arg(format!("{root}/tests/lab/{script}"))
        .arg(env!("CARGO_BIN_EXE_weir"))
        .envs(env.iter().copied())
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

/// What users see and scripts read of a running weir (`weir ctl status`, `counters`, `ct
/// list`, `ct count`, `set list`, the Prometheus metrics), in inline and NFQUEUE mode after a
/// fixed exchange of packets, byte for byte against `tests/golden/` (times, CPU and
/// timeouts masked by the script). `UPDATE_GOLDEN=1` writes the files instead.
#[test]
fn golden_outputs_of_a_running_weir() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let out_dir = std::env::temp_dir().join(format!("weir-golden-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = Command::new("bash")
        .arg(format!("{root}/tests/lab/golden.sh"))
        .arg(env!("CARGO_BIN_EXE_weir"))
        .arg(&out_dir)
        .output()
        .expect("running bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("SKIP:") {
        eprintln!("golden.sh skipped: {}", text.trim());
        return;
    }
    assert!(out.status.success() && text.contains("PASS"), "{text}");
    let mut names: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 12, "{names:?}");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut wrong = Vec::new();
    for n in &names {
        let got = std::fs::read_to_string(out_dir.join(n)).unwrap();
        if update {
            std::fs::create_dir_all(&golden).unwrap();
            std::fs::write(golden.join(n), &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(golden.join(n))
            .unwrap_or_else(|e| panic!("tests/golden/{n}: {e} (UPDATE_GOLDEN=1 writes it)"));
        if got != want {
            wrong.push(format!("--- tests/golden/{n}\n{want}+++ now\n{got}"));
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn nfqueue_mode_in_a_namespace_lab() {
    lab("nfqueue.sh");
}

/// NFQUEUE mode with a netdev table: installed in the kernel's nftables as `netdev weir_t`,
/// its drops counted in `weir ctl counters`, its set changed at run time, a reload nft refuses
/// refused with the old table kept, leftovers of a killed weir removed, removed at exit.
#[test]
fn nfqueue_netdev_tables_in_the_kernel() {
    lab("nfqueue-netdev.sh");
}

/// Per-flow scripts against a DPI stand-in (a per-packet string match that resets the
/// connection): without a strategy the connection is reset; with a profile splitting the TLS
/// ClientHello inside the host name and a fake with TTL 1 and a bad checksum first, it
/// completes and the server receives the ClientHello exactly; a Lua function drops one
/// datagram of a flow.
#[test]
fn scripts_against_a_dpi_stand_in() {
    lab("scripts.sh");
}

/// Each desync action of the per-flow scripts on the wire (scripts-wire.sh), over IPv4 and
/// IPv6: the segments, their order, sequence offsets from the ISN, payloads, flags, TTLs,
/// checksums (valid or bad on purpose), MD5 options and IPv4 ids one hop past weir and at the
/// server, fakes with TTL 1 seen past weir and not at the server, `wsize`'s SYN,ACK at the
/// client, UDP lengths and IP fragments, and exactly the payload in the server's socket.
#[test]
fn scripts_desync_actions_on_the_wire() {
    lab("scripts-wire.sh");
}

#[test]
fn inline_mode_in_a_namespace_lab() {
    lab("inline.sh");
}

/// Local delivery in inline mode: services on the router (an SSH-like TCP service, a BGP
/// session with bird), a connection the router opens, and its input chain, through weir.
#[test]
fn local_delivery_in_a_namespace_lab() {
    lab("local.sh");
}

/// nftlb's benchmark testbed with weir inline as the load balancer: two wrk clients, three
/// nginx backends, nftlb's DNAT and SNAT farms, over AF_XDP and AF_PACKET, default offloads.
#[test]
fn load_balancer_in_a_namespace_lab() {
    lab("lb.sh");
}

/// The conntrack helpers with real clients through a NAT router (helpers.sh), the kernel as the
/// router and then weir inline, same ruleset (`ct helper set` for ftp, tftp and sip, a forward
/// chain that lets data and media through only as related), SNAT and DNAT: curl downloads from
/// vsftpd in EPSV, PASV, EPRT and PORT mode, tftp from in.tftpd, a SIP call's RTP both ways,
/// each byte for byte with related packets counted; without the helpers the data is dropped.
#[test]
fn conntrack_helpers_with_real_clients() {
    lab("helpers.sh");
}

/// The helpers with two inline workers, weir alone (helpers.sh with `HL_WORKERS=2`): an
/// expected connection is steered by its own tuple, so it often reaches the other worker,
/// which must find its master's expectation (shared) and bind its NAT so that the reply
/// comes back to it.
#[test]
fn helpers_with_two_workers() {
    lab_with("helpers.sh", &[("HL_ROUTERS", "weir"), ("HL_WORKERS", "2")]);
}

/// nftables' synproxy with real clients (synproxy.sh), the kernel as the router and then weir
/// inline, same ruleset (SYNs to 8080 and 8081 notrack, `synproxy` inline on 8080 and the
/// `synproxy web` object on 8081, 8082 not proxied as the control), nf_conntrack_tcp_loose off,
/// IPv4 and IPv6: 100 kB up and 200 kB down byte for byte and both ways of closing through the
/// router's sequence and timestamp translation; captured at both ends, the router answers the
/// SYN (window 0, MSS 1460, wscale 7, SACK-permitted, timestamps) and opens the connection to
/// the server only after the client's ACK, with the client's ISN and the cookie's MSS, wscale
/// and SACK; checksums, sequence numbers and timestamps continuous; a forged ACK never reaches
/// the server; the rules counted; weir's normalised summary equal to the kernel's.
#[test]
fn synproxy_with_real_clients() {
    lab("synproxy.sh");
}

/// tests/lab/dup.sh: nftables' `dup` with real traffic, the kernel as the router and then
/// weir inline: a client's echo requests duplicated at prerouting and its UDP datagrams at
/// forward (to a monitor's address out of a third port, one with the gateway from a map and no
/// device), IPv4 and IPv6; the originals reach the server; one copy of each at the monitor
/// from the router's port, TTL or hop limit as Linux makes it, IPv4's don't-fragment set, the
/// server's payload; weir counts its copies; weir's summary equal to the kernel's.
#[test]
fn dup_with_real_traffic() {
    lab("dup.sh");
}

/// `tproxy` and `socket transparent` with a real transparent proxy (IP_TRANSPARENT, TCP and
/// UDP, both families): what the client, the proxy and the server see through weir is what
/// they see through the kernel (tests/lab/tproxy.sh).
#[test]
fn tproxy_with_a_transparent_proxy() {
    lab("tproxy.sh");
}

/// `weir nft` (and `nft` as a symlink to weir) changing a running weir: fail2ban's ban and
/// unban, a batch that flushes and refills a chain with an established connection living
/// on, refused batches changing nothing, `nft monitor` and its traces, kube-proxy's partial
/// syncs and nftlb's farm regeneration equal to the kernel's, a reload (tests/lab/nft.sh).
#[test]
fn nft_commands_change_a_running_weir() {
    lab("nft.sh");
}

/// The same in NFQUEUE mode (the kernel forwarding and queueing to weir; the DNAT steps
/// skipped there, as weir refuses NAT in that mode).
#[test]
fn nft_commands_change_a_running_weir_in_nfqueue_mode() {
    lab_with("nft.sh", &[("WEIR_NFT_MODE", "nfqueue")]);
}

/// nftables' own shell tests (../shared/nftables-tests/shell), the ones that are only `nft`
/// commands against a ruleset, run with `$NFT` set to `weir nft` against a running weir: at
/// least the floor's share pass and leave their shipped `dumps/` listing
/// (tests/lab/nft-shell.sh; every failure is listed with its reason).
#[test]
fn nftables_shell_tests_drive_a_running_weir() {
    lab("nft-shell.sh");
}

/// `weir bench lab` on a short run: every mode forwards, every figure is there, the lab is
/// gone afterwards. (The figures themselves are a benchmark's, not checked here.)
#[test]
fn bench_lab_measures_every_mode() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: bench lab needs root");
        return;
    }
    for t in ["nft", "iptables-restore", "ethtool"] {
        if !Command::new("sh")
            .args(["-c", &format!("command -v {t} >/dev/null")])
            .status()
            .is_ok_and(|s| s.success())
        {
            eprintln!("SKIP: {t} is not installed");
            return;
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "bench",
            "lab",
            "--n",
            "1,100",
            "--duration",
            "1",
            "--warmup",
            "0.5",
            "--json",
        ])
        .output()
        .expect("running weir bench lab");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(v["n"], serde_json::json!([1, 100]));
    for m in [
        "kernel_norules",
        "iptables",
        "nft_linear",
        "nft_set",
        "weir",
    ] {
        for key in [format!("{m}_pps"), format!("{m}_us_per_pkt")] {
            let l = v[&key]
                .as_array()
                .unwrap_or_else(|| panic!("{key} missing: {v}"));
            assert_eq!(l.len(), 2, "{key}: {v}");
            for x in l {
                assert!(x.as_f64().is_some_and(|x| x > 0.0), "{key}: {v}\n{err}");
            }
        }
    }
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains("weirb"),
        "lab namespaces left behind"
    );
}
