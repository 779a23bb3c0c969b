//! A bytecode oracle for nftables' own rule tests: the netlink expressions nft compiles each
//! rule of `tests/py/*.t` into (the `.t.payload*` files) read ([`bytecode`]), evaluated on a
//! packet as the kernel evaluates them ([`interp`]; `exthdr` loads in [`exthdr`], tunnels'
//! `inner` loads in [`inner`]), and packets
//! generated from them ([`gen`]); named objects (`objref`) as [`objects`] declares them; [`compare`] runs weir's engine on the same rule and packets,
//! at the same wall clock.

pub mod bytecode;
pub mod compare;
pub mod ctkeys;
pub mod exthdr;
pub mod fibenv;
pub mod gen;
pub mod inner;
pub mod interp;
pub mod objects;
pub mod sets;
