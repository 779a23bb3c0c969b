use super::*;
use weir_wire::LinkType;

fn info(flags: u8) -> Info {
    Info {
        mss: 1460,
        wscale: 7,
        flags,
    }
}

const ALL: u8 = Info::MSS | Info::WSCALE | Info::TIMESTAMP | Info::SACK_PERM;

/// A SYN as Linux sends it: MSS, SACK permitted, timestamps, window scale.
fn client_opts() -> Vec<u8> {
    let mut o = vec![2, 4, 0x05, 0xb4, 4, 2, 8, 10];
    o.extend_from_slice(&1234u32.to_be_bytes());
    o.extend_from_slice(&0u32.to_be_bytes());
    o.extend_from_slice(&[1, 3, 3, 9]);
    o
}

#[test]
fn options_read_and_written_as_linux_lays_them_out() {
    let seg = segment(
        false,
        &[198, 18, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[198, 18, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        40000,
        80,
        1,
        0,
        SYN,
        64240,
        &Opts::default(),
    );
    let pm = PacketMeta::parse(&seg, LinkType::RawIp);
    assert!(pm.transport_checksum_ok(&seg) && pm.ipv4_checksum_ok(&seg));
    assert_eq!(parse_options(&seg, &pm), Some(Opts::default()));
    // the client's SYN, parsed
    let t = weir_wire::build::Tcp::new(40000, 80, SYN).options(&client_opts());
    let f = weir_wire::build::tcp_segment(
        "198.18.0.2".parse().unwrap(),
        "198.18.1.2".parse().unwrap(),
        &t,
        b"",
    );
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 2, 198, 18, 1, 2,
    ];
    let n = (20 + f.len()) as u16;
    ip[2..4].copy_from_slice(&n.to_be_bytes());
    ip.extend_from_slice(&f);
    let pm = PacketMeta::parse(&ip, LinkType::RawIp);
    let o = parse_options(&ip, &pm).unwrap();
    assert_eq!(o.options, ALL);
    assert_eq!(
        (o.mss_option, o.wscale, o.tsval, o.tsecr),
        (1460, 9, 1234, 0)
    );
    // the SYN-ACK's: the statement's MSS and scale, the client's scale in the timestamp
    let a = synack_options(&info(ALL), SYN, o, 0x1000_0040);
    assert_eq!(a.mss_encode, 1460);
    assert_eq!(a.wscale, 7);
    assert_eq!(a.tsecr, 1234);
    assert_eq!(a.tsval, 0x1000_0040 | 9 | 1 << 4);
    assert_eq!(
        build_options(&a),
        [2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0x10, 0, 0, 0x59, 0, 0, 0x04, 0xd2, 1, 3, 3, 7]
    );
    // the ACK echoes the timestamp: the client's scale and SACK come back
    let mut back = Opts {
        options: Info::TIMESTAMP,
        tsval: 1300,
        tsecr: a.tsval,
        ..Opts::default()
    };
    check_timestamp_cookie(&mut back);
    assert_eq!(
        back.options,
        Info::TIMESTAMP | Info::WSCALE | Info::SACK_PERM
    );
    assert_eq!(back.wscale, 9);
    // without timestamps the scale and SACK cannot be kept
    let a = synack_options(
        &info(Info::MSS | Info::WSCALE | Info::SACK_PERM),
        SYN,
        o,
        64,
    );
    assert_eq!(a.options, Info::MSS);
    assert_eq!(build_options(&a), [2, 4, 0x05, 0xb4]);
    // `synproxy` alone: no option at all, the client's MSS still in the cookie
    let a = synack_options(&Info::default(), SYN, o, 64);
    assert_eq!((a.options, a.mss_encode), (0, 1460));
    assert!(build_options(&a).is_empty());
}

#[test]
fn timestamps_shift_with_the_checksum_kept_right() {
    let o = Opts {
        options: Info::TIMESTAMP,
        tsval: 5000,
        tsecr: 7000,
        ..Opts::default()
    };
    let mut seg = segment(
        true,
        &[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        &[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        80,
        40000,
        9,
        10,
        ACK,
        100,
        &o,
    );
    let pm = PacketMeta::parse(&seg, LinkType::RawIp);
    assert!(tstamp_adjust(&mut seg, &pm, true, 1000));
    assert!(pm.transport_checksum_ok(&seg));
    assert_eq!(parse_options(&seg, &pm).unwrap().tsval, 4000);
    assert!(tstamp_adjust(&mut seg, &pm, false, 1000));
    assert!(pm.transport_checksum_ok(&seg));
    let back = parse_options(&seg, &pm).unwrap();
    assert_eq!((back.tsval, back.tsecr), (4000, 8000));
    assert!(!tstamp_adjust(&mut seg, &pm, false, 0));
}
