//! Expectations and sequence adjustment: an expected connection is `related` once, until its
//! reply; expectations end with their timeout, their master, or a newer one of the same
//! master; a helper's shift of one direction's sequence numbers is read through by the TCP
//! tracker in the other direction's acknowledgements.

use std::net::Ipv4Addr;
use weir_conntrack::{expect, Config, Conntrack, CtInfo, Dir, EntryId, Follow, Track, Tuple};
use weir_wire::build::{tcp4, udp4, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

const C: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const S: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const SEC: u64 = 1_000_000_000;

fn track(ct: &mut Conntrack<()>, f: &[u8], now: u64) -> Track<()> {
    let pm = PacketMeta::parse(f, LinkType::Ethernet);
    ct.track(&pm, f, now)
}

fn confirm(ct: &mut Conntrack<()>, f: &[u8], now: u64) -> EntryId {
    match track(ct, f, now) {
        Track::New(p) => ct.confirm(p, now).unwrap(),
        t => panic!("{t:?}"),
    }
}

/// A control connection C:40000 -> S:21 (SYN, SYN/ACK, ACK).
fn control(ct: &mut Conntrack<()>) -> EntryId {
    let id = confirm(ct, &tcp4(C, S, 40000, 21, 0x02, b""), 0);
    let b = Builder::new();
    let sa = b.tcp(S, C, &Tcp::new(21, 40000, 0x12).seq(5000).ack(1001), b"");
    assert!(matches!(track(ct, &sa, 1), Track::Existing { .. }));
    let a = b.tcp(C, S, &Tcp::new(40000, 21, 0x10).seq(1001).ack(5001), b"");
    assert!(matches!(track(ct, &a, 2), Track::Existing { .. }));
    id
}

/// S may connect from any port to C:40001.
fn data_tuple(sport: u16) -> Tuple {
    Tuple {
        zone: 0,
        src: u32::from(S) as u128,
        dst: u32::from(C) as u128,
        sport,
        dport: 40001,
        proto: 6,
        v6: false,
    }
}

#[test]
fn an_expected_connection_is_related_once_until_its_reply() {
    let mut ct: Conntrack<()> = Conntrack::new(Config::default());
    let m = control(&mut ct);
    ct.expect(m, data_tuple(0), true, Follow::default(), 300 * SEC, 3)
        .unwrap();
    assert_eq!(ct.expectations().len(), 1);
    // another source does not meet it
    let other = tcp4(Ipv4Addr::new(198, 18, 1, 9), C, 20, 40001, 0x02, b"");
    match track(&mut ct, &other, 4) {
        Track::New(p) => assert!(p.master.is_none()),
        t => panic!("{t:?}"),
    }
    let syn = tcp4(S, C, 20, 40001, 0x02, b"");
    let t = track(&mut ct, &syn, 5);
    assert_eq!(t.info(), Some(CtInfo::Related));
    let Track::New(p) = t else { panic!() };
    assert_eq!(p.master, Some(m));
    assert_eq!(p.follow, None, "no NAT: the nat chains decide");
    let id = ct.confirm(p, 5).unwrap();
    assert!(ct.get(id).unwrap().expected());
    assert_eq!(ct.expectations().len(), 0, "taken");
    // a retransmitted SYN: still related (no reply yet)
    assert_eq!(track(&mut ct, &syn, 6).info(), Some(CtInfo::Related));
    let b = Builder::new();
    let sa = b.tcp(C, S, &Tcp::new(40001, 20, 0x12).seq(7000).ack(1), b"");
    assert_eq!(track(&mut ct, &sa, 7).info(), Some(CtInfo::Established));
    let a = b.tcp(S, C, &Tcp::new(20, 40001, 0x10).seq(1).ack(7001), b"");
    assert_eq!(track(&mut ct, &a, 8).info(), Some(CtInfo::Established));
    // a second connection to the same port is new: the expectation was used
    ct.remove(id);
    match track(&mut ct, &syn, 9) {
        Track::New(p) => assert!(p.master.is_none()),
        t => panic!("{t:?}"),
    }
    assert_eq!(ct.stats().expect_matched, 1);
}

#[test]
fn expectations_end_with_their_timeout_their_master_and_their_number() {
    let mut ct: Conntrack<()> = Conntrack::new(Config::default());
    let m = control(&mut ct);
    let follow = Follow {
        src: 1,
        dst: 2,
        dport: 3,
    };
    ct.expect(m, data_tuple(0), true, follow, SEC, 0).unwrap();
    let syn = tcp4(S, C, 20, 40001, 0x02, b"");
    match track(&mut ct, &syn, 2 * SEC) {
        Track::New(p) => assert!(p.master.is_none(), "expired"),
        t => panic!("{t:?}"),
    }
    // the master gone: not met (even if its slot is reused)
    ct.expect(m, data_tuple(0), true, follow, 300 * SEC, 3 * SEC)
        .unwrap();
    ct.remove(m);
    let _other = confirm(&mut ct, &udp4(C, S, 1, 2, b""), 3 * SEC);
    match track(&mut ct, &syn, 4 * SEC) {
        Track::New(p) => assert!(p.master.is_none(), "master gone"),
        t => panic!("{t:?}"),
    }
    // at most MAX_PER_MASTER per master: the oldest goes
    let mut ct: Conntrack<()> = Conntrack::new(Config::default());
    let m = control(&mut ct);
    for i in 0..expect::MAX_PER_MASTER as u64 + 3 {
        let mut t = data_tuple(0);
        t.dport = 50000 + i as u16;
        ct.expect(m, t, true, follow, (100 + i) * SEC, 3).unwrap();
    }
    assert_eq!(ct.expectations().len(), expect::MAX_PER_MASTER);
    assert!(ct.expectations().iter().all(|e| e.tuple.dport >= 50003));
    // the follow translation is handed to the expected connection
    let syn = tcp4(S, C, 20, 50005, 0x02, b"");
    match track(&mut ct, &syn, 4) {
        Track::New(p) => assert_eq!(p.follow, Some(follow)),
        t => panic!("{t:?}"),
    }
    // a master that is not in the table cannot expect
    assert!(ct
        .expect(EntryId(999), data_tuple(0), true, follow, SEC, 5)
        .is_err());
    // gc sweeps expectations whose master is gone
    ct.remove(m);
    for _ in 0..3 {
        ct.gc(5, 1024);
    }
    assert_eq!(ct.expectations().len(), 0);
}

#[test]
fn acknowledgements_are_read_through_a_helpers_shift() {
    for delta in [5i32, -3] {
        let mut ct: Conntrack<()> = Conntrack::new(Config::default());
        let m = control(&mut ct);
        let b = Builder::new();
        // C sends 20 bytes at 1001; a helper made them 20 + delta on the wire
        let d = b.tcp(
            C,
            S,
            &Tcp::new(40000, 21, 0x18).seq(1001).ack(5001),
            &[b'x'; 20],
        );
        assert!(matches!(track(&mut ct, &d, 3), Track::Existing { .. }));
        ct.seqadj_set(m, Dir::Original, 1001, delta);
        assert!(ct.get(m).unwrap().seq_adjusted());
        assert_eq!(
            ct.seq_offset(m, Dir::Original, 1001),
            0,
            "the segment itself"
        );
        assert_eq!(ct.seq_offset(m, Dir::Original, 1021), delta);
        // S acknowledges what it received: 1021 + delta
        let ack = 1021u32.wrapping_add(delta as u32);
        let a = b.tcp(S, C, &Tcp::new(21, 40000, 0x10).seq(5001).ack(ack), b"");
        assert!(
            matches!(track(&mut ct, &a, 4), Track::Existing { .. }),
            "delta {delta}"
        );
        // the next segment of C (its own numbering) is in window
        let d2 = b.tcp(C, S, &Tcp::new(40000, 21, 0x18).seq(1021).ack(5001), b"yy");
        assert!(matches!(track(&mut ct, &d2, 5), Track::Existing { .. }));
    }
    // without the shift, an ACK beyond what was sent is invalid
    let mut ct: Conntrack<()> = Conntrack::new(Config::default());
    let _m = control(&mut ct);
    let b = Builder::new();
    let d = b.tcp(
        C,
        S,
        &Tcp::new(40000, 21, 0x18).seq(1001).ack(5001),
        &[b'x'; 20],
    );
    track(&mut ct, &d, 3);
    let a = b.tcp(S, C, &Tcp::new(21, 40000, 0x10).seq(5001).ack(1026), b"");
    assert!(matches!(track(&mut ct, &a, 4), Track::Invalid(_)));
}

/// Several workers' tables sharing expectations: a master in one table, its expected
/// connection reaching another (steered by its own tuple) is related there, once; the
/// master's table drops its expectations when the master goes, the other's are left alone.
#[test]
fn shared_expectations_reach_another_workers_table() {
    let shared = std::sync::Arc::new(weir_conntrack::SharedExpectations::default());
    let mut a: Conntrack<()> = Conntrack::new(Config::default());
    let mut b: Conntrack<()> = Conntrack::new(Config::default());
    let m = control(&mut a);
    // an expectation made before sharing moves to the shared table
    a.expect(m, data_tuple(0), true, Follow::default(), 300 * SEC, 3)
        .unwrap();
    a.share_expectations(shared.clone(), 0);
    b.share_expectations(shared.clone(), 1);
    assert_eq!(a.expectations().len(), 1);
    assert_eq!(b.expectations().len(), 0, "not b's");
    let syn = tcp4(S, C, 20, 40001, 0x02, b"");
    let t = track(&mut b, &syn, 5);
    assert_eq!(t.info(), Some(CtInfo::Related), "met in b's table");
    let Track::New(p) = t else { panic!() };
    b.confirm(p, 5).unwrap();
    assert_eq!(a.expectations().len(), 0, "taken, for every table");
    // b's own control connection's expectation, a's again; a's master goes
    let mb = control(&mut b);
    b.expect(mb, data_tuple(0), true, Follow::default(), 300 * SEC, 6)
        .unwrap();
    let mut t2 = data_tuple(0);
    t2.dport = 40002;
    a.expect(m, t2, true, Follow::default(), 300 * SEC, 6)
        .unwrap();
    a.remove(m);
    a.expect_gc(7);
    assert_eq!(a.expectations().len(), 0, "a's master is gone");
    assert_eq!(b.expectations().len(), 1, "b's stays");
    // an expected connection whose master went is not related, in any table
    let syn2 = tcp4(S, C, 21, 40002, 0x02, b"");
    assert_eq!(track(&mut b, &syn2, 8).info(), Some(CtInfo::New));
    // expiry, seen from the other table
    b.expect_gc(400 * SEC);
    assert_eq!(b.expectations().len(), 0);
}
