//! `osf` fingerprinting as nfnetlink_osf's `nf_osf_find` does it, against a small pf.os file
//! read as iptables' `nfnl_osf -f` reads it.

use proptest::prelude::*;
use weir_engine::osf::{OsfDb, OsfMatch, OsfTtl};

const DB: &str = "\
# weir test fingerprints, pf.os format
# wsize:ttl:df:syn_size:options:genre:version:subtype:description

S20:64:1:60:M*,S,T,N,W7:\tLinux:3.11 and newer::Linux 3.11+
S4:64:1:60:M*,S,T,N,W7:Linux:2.6::Linux 2.6
65535:128:1:48:M*,N,N,S:@Windows:XP:SP1:Windows XP SP1
%8192:255:0:44:M*:TestOS:mod::window a multiple of 8192, no DF
T2:64:1:44:M1400:MtuOS:1::window twice the MTU
*:32:1:40:.:AnyOS:bare::no options, any window
*:64:1:60:M*,S,T,N,W*:Generic:any::any window, Linux's options
";

/// TCP options, written as the sender puts them on the wire.
#[derive(Clone, Copy)]
enum Opt {
    Mss(u16),
    Sack,
    Ts,
    Nop,
    Ws(u8),
}

fn opt_bytes(opts: &[Opt]) -> Vec<u8> {
    let mut v = Vec::new();
    for o in opts {
        match *o {
            Opt::Mss(m) => v.extend_from_slice(&[2, 4, (m >> 8) as u8, m as u8]),
            Opt::Sack => v.extend_from_slice(&[4, 2]),
            Opt::Ts => v.extend_from_slice(&[8, 10, 0, 1, 2, 3, 0, 0, 0, 0]),
            Opt::Nop => v.push(1),
            Opt::Ws(s) => v.extend_from_slice(&[3, 3, s]),
        }
    }
    v
}

#[derive(Clone)]
struct Syn {
    ttl: u8,
    df: bool,
    window: u16,
    opts: Vec<u8>,
    payload: usize,
    flags: u8,
    proto: u8,
}

impl Syn {
    fn new(ttl: u8, df: bool, window: u16, opts: &[Opt]) -> Syn {
        Syn {
            ttl,
            df,
            window,
            opts: opt_bytes(opts),
            payload: 0,
            flags: 0x02,
            proto: 6,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        assert_eq!(self.opts.len() % 4, 0, "test options must fill whole words");
        let tcp_len = 20 + self.opts.len();
        let total = 20 + tcp_len + self.payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        if self.df {
            p[6] = 0x40;
        }
        p[8] = self.ttl;
        p[9] = self.proto;
        p[12..16].copy_from_slice(&[192, 0, 2, 1]);
        p[16..20].copy_from_slice(&[198, 51, 100, 7]);
        let t = &mut p[20..];
        t[0..2].copy_from_slice(&40000u16.to_be_bytes());
        t[2..4].copy_from_slice(&80u16.to_be_bytes());
        t[4..8].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        t[12] = ((tcp_len / 4) as u8) << 4;
        t[13] = self.flags;
        t[14..16].copy_from_slice(&self.window.to_be_bytes());
        t[20..20 + self.opts.len()].copy_from_slice(&self.opts);
        p
    }
}

const LINUX_OPTS: [Opt; 5] = [Opt::Mss(1460), Opt::Sack, Opt::Ts, Opt::Nop, Opt::Ws(7)];
const XP_OPTS: [Opt; 4] = [Opt::Mss(1460), Opt::Nop, Opt::Nop, Opt::Sack];

fn db() -> OsfDb {
    OsfDb::parse(DB).expect("test database parses")
}

fn find(db: &OsfDb, p: &[u8], ttl: OsfTtl) -> Option<(String, String)> {
    db.find(p, ttl, false)
        .map(|m: OsfMatch<'_>| (m.genre.to_owned(), m.version.to_owned()))
}

fn hit(genre: &str, version: &str) -> Option<(String, String)> {
    Some((genre.to_owned(), version.to_owned()))
}

#[test]
fn loads_the_file() {
    let db = db();
    assert_eq!(db.len(), 7);
    assert!(!db.is_empty());
    assert!(OsfDb::parse("# nothing\n\n\r\n").unwrap().is_empty());
}

#[test]
fn linux_by_mss_multiple_first_match_wins() {
    let db = db();
    let p = Syn::new(64, true, 29200, &LINUX_OPTS).bytes();
    // Both "S20" and the catch-all "Generic" line match; the earlier line wins.
    assert_eq!(find(&db, &p, OsfTtl::True), hit("Linux", "3.11 and newer"));
    let swapped =
        OsfDb::parse("*:64:1:60:M*,S,T,N,W*:Generic:any::\nS20:64:1:60:M*,S,T,N,W7:Linux:3.11::\n")
            .unwrap();
    assert_eq!(find(&swapped, &p, OsfTtl::True), hit("Generic", "any"));

    // 4 x 1460.
    let p = Syn::new(64, true, 5840, &LINUX_OPTS).bytes();
    assert_eq!(find(&db, &p, OsfTtl::True), hit("Linux", "2.6"));
    // 4 x the packet's own MSS.
    let mut opts = LINUX_OPTS;
    opts[0] = Opt::Mss(1400);
    let p = Syn::new(64, true, 5600, &opts).bytes();
    assert_eq!(find(&db, &p, OsfTtl::True), hit("Linux", "2.6"));
    // 4 x 1448, the "smart modem" MSS, whatever the packet's MSS.
    let p = Syn::new(64, true, 5792, &opts).bytes();
    assert_eq!(find(&db, &p, OsfTtl::True), hit("Linux", "2.6"));
    // Not a multiple S4 or S20 knows: only the catch-all takes it.
    opts[0] = Opt::Mss(1300);
    let p = Syn::new(64, true, 5600, &opts).bytes();
    assert_eq!(find(&db, &p, OsfTtl::True), hit("Generic", "any"));
}

#[test]
fn ttl_modes() {
    let db = db();
    let at = |ttl| Syn::new(ttl, true, 65535, &XP_OPTS).bytes();
    assert_eq!(find(&db, &at(128), OsfTtl::True), hit("Windows", "XP"));
    // One hop away: wrong under the exact compare, fine when not compared or loosely.
    assert_eq!(find(&db, &at(127), OsfTtl::True), None);
    assert_eq!(find(&db, &at(127), OsfTtl::Skip), hit("Windows", "XP"));
    assert_eq!(find(&db, &at(127), OsfTtl::Loose), hit("Windows", "XP"));
    assert_eq!(find(&db, &at(128), OsfTtl::Loose), hit("Windows", "XP"));
    assert_eq!(find(&db, &at(1), OsfTtl::Loose), hit("Windows", "XP"));
    // Above the fingerprint's TTL: loose refuses, whether the source is local or not.
    assert_eq!(find(&db, &at(129), OsfTtl::Loose), None);
    assert_eq!(db.find(&at(129), OsfTtl::Loose, true), None);
    assert!(db.find(&at(129), OsfTtl::Skip, true).is_some());
    assert_eq!(find(&db, &at(200), OsfTtl::Skip), hit("Windows", "XP"));
}

#[test]
fn windows_plain_window_and_df_list() {
    let db = db();
    let p = Syn::new(128, true, 65535, &XP_OPTS).bytes();
    let m = db.find(&p, OsfTtl::True, false).unwrap();
    assert_eq!((m.genre, m.version), ("Windows", "XP"));
    // Another window, no DF: no fingerprint (the DF-less list holds only TestOS).
    assert_eq!(
        find(
            &db,
            &Syn::new(128, true, 65534, &XP_OPTS).bytes(),
            OsfTtl::True
        ),
        None
    );
    assert_eq!(
        find(
            &db,
            &Syn::new(128, false, 65535, &XP_OPTS).bytes(),
            OsfTtl::True
        ),
        None
    );
}

#[test]
fn plain_window_is_exact() {
    let db = OsfDb::parse("8192:64:1:40:.:Plain:1::\n").unwrap();
    let at = |w| Syn::new(64, true, w, &[]).bytes();
    assert_eq!(find(&db, &at(8192), OsfTtl::True), hit("Plain", "1"));
    assert_eq!(find(&db, &at(8193), OsfTtl::True), None);
    assert_eq!(find(&db, &at(8191), OsfTtl::True), None);
    assert_eq!(find(&db, &at(16384), OsfTtl::True), None);
}

#[test]
fn option_order_kinds_and_lengths() {
    let db = db();
    let swapped = [Opt::Mss(1460), Opt::Sack, Opt::Ts, Opt::Ws(7), Opt::Nop];
    assert_eq!(
        find(
            &db,
            &Syn::new(64, true, 29200, &swapped).bytes(),
            OsfTtl::Skip
        ),
        None
    );
    // Options missing altogether: the size differs.
    let p = Syn::new(
        64,
        true,
        29200,
        &[Opt::Mss(1460), Opt::Nop, Opt::Nop, Opt::Sack],
    )
    .bytes();
    assert_eq!(find(&db, &p, OsfTtl::Skip), None);
    // The kernel reads each option's kind where the fingerprint's lengths put it, never the
    // packet's own length byte: a window-scale option claiming 9 bytes still matches.
    let mut s = Syn::new(64, true, 29200, &LINUX_OPTS);
    s.opts[18] = 9;
    assert_eq!(
        find(&db, &s.bytes(), OsfTtl::True),
        hit("Linux", "3.11 and newer")
    );
    // ...but a different kind at that place does not.
    s.opts[17] = 4;
    assert_eq!(find(&db, &s.bytes(), OsfTtl::True), None);
}

#[test]
fn modulo_window_no_df() {
    let db = db();
    let at = |w, df| Syn::new(255, df, w, &[Opt::Mss(536)]).bytes();
    assert_eq!(
        find(&db, &at(16384, false), OsfTtl::True),
        hit("TestOS", "mod")
    );
    assert_eq!(find(&db, &at(0, false), OsfTtl::True), hit("TestOS", "mod"));
    assert_eq!(find(&db, &at(16385, false), OsfTtl::True), None);
    assert_eq!(find(&db, &at(8191, false), OsfTtl::True), None);
    assert_eq!(find(&db, &at(16384, true), OsfTtl::True), None);
}

#[test]
fn mtu_window() {
    let db = db();
    let at = |w, mss| Syn::new(64, true, w, &[Opt::Mss(mss)]).bytes();
    assert_eq!(
        find(&db, &at(2 * 1440, 1400), OsfTtl::True),
        hit("MtuOS", "1")
    );
    assert_eq!(
        find(&db, &at(2 * 1040, 1000), OsfTtl::True),
        hit("MtuOS", "1")
    );
    assert_eq!(
        find(&db, &at(2 * 1500, 1000), OsfTtl::True),
        hit("MtuOS", "1")
    );
    assert_eq!(
        find(&db, &at(2 * 1488, 1000), OsfTtl::True),
        hit("MtuOS", "1")
    );
    assert_eq!(find(&db, &at(2 * 1440 + 1, 1400), OsfTtl::True), None);
    // Twice the MSS is an MSS multiple, not an MTU one.
    assert_eq!(find(&db, &at(2 * 1400, 1400), OsfTtl::True), None);
}

#[test]
fn wildcard_window_no_options() {
    let db = db();
    for w in [0, 1, 12345, 65535] {
        let p = Syn::new(32, true, w, &[]).bytes();
        assert_eq!(
            find(&db, &p, OsfTtl::True),
            hit("AnyOS", "bare"),
            "window {w}"
        );
    }
    assert_eq!(
        find(&db, &Syn::new(20, true, 9, &[]).bytes(), OsfTtl::Loose),
        hit("AnyOS", "bare")
    );
    assert_eq!(
        find(&db, &Syn::new(33, true, 9, &[]).bytes(), OsfTtl::Loose),
        None
    );
}

#[test]
fn length_flags_and_protocol() {
    let db = db();
    let base = Syn::new(64, true, 29200, &LINUX_OPTS);
    // Four payload bytes: the total length is no longer the fingerprint's 60.
    let mut s = base.clone();
    s.payload = 4;
    assert_eq!(find(&db, &s.bytes(), OsfTtl::Skip), None);
    // Bytes after the IP total length (link padding) are not part of the packet.
    let mut p = base.bytes();
    p.extend_from_slice(&[0; 6]);
    assert_eq!(find(&db, &p, OsfTtl::True), hit("Linux", "3.11 and newer"));
    // A bare ACK is not fingerprinted; a SYN/ACK is (only the SYN bit is asked for).
    let mut s = base.clone();
    s.flags = 0x10;
    assert_eq!(find(&db, &s.bytes(), OsfTtl::Skip), None);
    s.flags = 0x12;
    assert_eq!(
        find(&db, &s.bytes(), OsfTtl::True),
        hit("Linux", "3.11 and newer")
    );
    let mut s = base.clone();
    s.proto = 17;
    assert_eq!(find(&db, &s.bytes(), OsfTtl::Skip), None);
}

#[test]
fn truncated_and_hostile_packets() {
    let db = db();
    let good = Syn::new(64, true, 29200, &LINUX_OPTS).bytes();
    assert!(db.find(&good, OsfTtl::True, false).is_some());
    for n in 0..good.len() {
        assert_eq!(
            find(&db, &good[..n], OsfTtl::Skip),
            None,
            "prefix of {n} bytes"
        );
    }
    let mutate = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut p = good.clone();
        f(&mut p);
        find(&db, &p, OsfTtl::Skip)
    };
    // IHL of 15 words: the TCP header would start past the data.
    assert_eq!(mutate(&|p| p[0] = 0x4f), None);
    // IHL below 5, and not IPv4.
    assert_eq!(mutate(&|p| p[0] = 0x44), None);
    assert_eq!(mutate(&|p| p[0] = 0x40), None);
    assert_eq!(mutate(&|p| p[0] = 0x65), None);
    // Total length beyond the data, and below the IP header.
    assert_eq!(
        mutate(&|p| p[2..4].copy_from_slice(&65535u16.to_be_bytes())),
        None
    );
    assert_eq!(
        mutate(&|p| p[2..4].copy_from_slice(&10u16.to_be_bytes())),
        None
    );
    assert_eq!(
        mutate(&|p| p[2..4].copy_from_slice(&0u16.to_be_bytes())),
        None
    );
    // TCP data offset of 15 words: options would run past the packet.
    assert_eq!(mutate(&|p| p[32] = 0xf0), None);
    // Data offset below 5 reads as "no options": sizes differ from every fingerprint.
    assert_eq!(mutate(&|p| p[32] = 0x10), None);
}

#[test]
fn parse_quirks_of_nfnl_osf() {
    // '@' and '*' before the genre are dropped; blanks after ':' skipped, trailing ones kept.
    let db = OsfDb::parse("*:64:1:40:.:*Foo:  1.0 :x:d\n").unwrap();
    let m = db
        .find(&Syn::new(64, true, 1, &[]).bytes(), OsfTtl::True, false)
        .unwrap();
    assert_eq!((m.genre, m.version), ("Foo", "1.0 "));

    // Names are kept to 31 bytes.
    let long = "G".repeat(40);
    let db = OsfDb::parse(&format!("*:64:1:40:.:{long}:{long}::\n")).unwrap();
    let m = db
        .find(&Syn::new(64, true, 1, &[]).bytes(), OsfTtl::True, false)
        .unwrap();
    assert_eq!((m.genre.len(), m.version.len()), (31, 31));

    // Exact duplicates are loaded once (the description is not part of a fingerprint); a
    // different subtype is another fingerprint.
    let line = "S4:64:1:60:M*,S,T,N,W7:Linux:2.6::a\n";
    let dup = format!("{line}{line}S4:64:1:60:M*,S,T,N,W7:Linux:2.6::b\n");
    assert_eq!(OsfDb::parse(&dup).unwrap().len(), 1);
    let sub = format!("{line}S4:64:1:60:M*,S,T,N,W7:Linux:2.6:x:a\n");
    assert_eq!(OsfDb::parse(&sub).unwrap().len(), 2);

    // CRLF lines load.
    let crlf = "# c\r\n\r\nS4:64:1:60:M*,S,T,N,W7:Linux:2.6::a\r\n";
    assert_eq!(OsfDb::parse(crlf).unwrap().len(), 1);

    // The last byte of every line is dropped, newline or not: a final line ending in its
    // eighth ':' loses it.
    assert_eq!(OsfDb::parse("*:64:1:40:.:A:1::d").unwrap().len(), 1);
    let err = OsfDb::parse("*:64:1:40:.:A:1::\n*:64:1:40:.:B:1::").unwrap_err();
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn parse_errors_name_the_line() {
    let seven = "# c\n\n65535:128:1:48:M*,N,N,S:Windows:XP:\n";
    let err = OsfDb::parse(seven).unwrap_err();
    assert!(err.contains("line 3") && err.contains("7"), "{err}");

    let blank = "S4:64:1:60:M*,S,T,N,W7:Linux:2.6::a\n   \n";
    assert!(OsfDb::parse(blank).unwrap_err().contains("line 2"));

    let modulo0 = "%0:64:1:60:M*:X:1::\n";
    assert!(OsfDb::parse(modulo0).unwrap_err().contains("modulo"));

    let too_many = format!("*:64:1:60:{}:X:1::\n", vec!["N"; 41].join(","));
    assert!(OsfDb::parse(&too_many).unwrap_err().contains("line 1"));
    let too_long = "*:64:1:60:T,T,T,T,T:X:1::\n";
    assert!(OsfDb::parse(too_long).unwrap_err().contains("50"));
    // 40 option bytes are allowed.
    assert!(OsfDb::parse("*:64:1:60:T,T,T,T:X:1::\n").is_ok());
}

proptest! {
    #[test]
    fn random_bytes_never_panic(p in proptest::collection::vec(any::<u8>(), 0..120)) {
        let db = db();
        for ttl in [OsfTtl::True, OsfTtl::Loose, OsfTtl::Skip] {
            let _ = db.find(&p, ttl, true);
        }
    }

    #[test]
    fn mutated_syns_never_panic(
        edits in proptest::collection::vec((0usize..60, any::<u8>()), 1..6),
        extra in 0usize..8,
    ) {
        let db = db();
        let mut p = Syn::new(64, true, 29200, &LINUX_OPTS).bytes();
        for (at, b) in edits {
            p[at] = b;
        }
        p.truncate(p.len().saturating_sub(extra));
        for ttl in [OsfTtl::True, OsfTtl::Loose, OsfTtl::Skip] {
            let _ = db.find(&p, ttl, false);
        }
    }

    #[test]
    fn random_files_never_panic(
        text in proptest::collection::vec(
            prop::sample::select(b"0123456789SWTMNE%*.@:, \t\n\r#x-".to_vec()), 0..300),
        p in proptest::collection::vec(any::<u8>(), 40..70),
    ) {
        let text = String::from_utf8(text).unwrap();
        if let Ok(db) = OsfDb::parse(&text) {
            let _ = db.find(&p, OsfTtl::Skip, false);
        }
    }
}
