//! The syntax tree, as written: names and values are still raw words with spans. The checker
//! ([`crate::check`]) gives them types and meaning and lowers the tree into [`crate::ir`].

use crate::source::Span;

/// A name or keyword as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// A raw value: a word, a string, or a shape built from them with spaced operators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Word(String, Span),
    Str(String, Span),
    /// `a - b` written with spaces (unspaced ranges stay in one word).
    Range(Box<Val>, Box<Val>),
    /// `a / n` written with spaces.
    Prefix(Box<Val>, Box<Val>),
    /// A comma-separated list of flags: `syn,ack` or `established,related`.
    List(Vec<Val>, Span),
    /// A concatenation of components: `1.2.3.4 . 22`.
    Concat(Vec<Val>, Span),
    /// An anonymous set or map given as a value: `{ 22, 80 }` (as a `define` may hold).
    Set(Vec<Elem>, Span),
}

impl Val {
    pub fn span(&self) -> Span {
        match self {
            Val::Word(_, s)
            | Val::Str(_, s)
            | Val::List(_, s)
            | Val::Concat(_, s)
            | Val::Set(_, s) => *s,
            Val::Range(a, b) | Val::Prefix(a, b) => a.span().to(b.span()),
        }
    }
}

/// One element of a set or map literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elem {
    /// The key (a concatenation has several components in a [`Val::Concat`]).
    pub key: Val,
    /// For maps: the data (a value or a verdict).
    pub data: Option<MapData>,
    /// `timeout 30s`, `expires 10s`, `comment "..."`, `counter`.
    pub options: Vec<(Ident, Option<Val>)>,
    pub span: Span,
}

/// The data side of a map element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapData {
    Value(Val),
    Verdict(VerdictAst),
}

/// A reference to a set: named (`@name`) or written inline (`{ ... }`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetRef {
    Named(Ident),
    Anon(Vec<Elem>, Span),
}

impl SetRef {
    pub fn span(&self) -> Span {
        match self {
            SetRef::Named(i) => i.span,
            SetRef::Anon(_, s) => *s,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

/// An expression that produces a value from the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// `ip saddr`, `meta mark`, `ct original packets`: the words as written.
    Selector(Vec<Ident>, Span),
    /// `a . b`
    Concat(Vec<Expr>, Span),
    /// `expr & value`, `expr | value`, `expr >> 3`...
    Binop(BinOp, Box<Expr>, Val, Span),
    /// An operation between two expressions: `ct mark & 0xffff0000 | meta mark & 0xffff`.
    BinopExpr(BinOp, Box<Expr>, Box<Expr>, Span),
    /// `jhash <expr> mod N [seed S] [offset O]`, `symhash mod N [offset O]`.
    Hash {
        kind: Ident,
        key: Option<Box<Expr>>,
        modulus: Val,
        seed: Option<Val>,
        offset: Option<Val>,
        span: Span,
    },
    /// `numgen inc|random mod N [offset O]`
    Numgen {
        mode: Ident,
        modulus: Val,
        offset: Option<Val>,
        span: Span,
    },
    /// `<expr> map <set>`: a data-map lookup.
    Map(Box<Expr>, SetRef, Span),
    /// A constant (only on the right of `set` or `to`).
    Const(Val),
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Expr::Selector(_, s)
            | Expr::Concat(_, s)
            | Expr::Binop(_, _, _, s)
            | Expr::BinopExpr(_, _, _, s)
            | Expr::Hash { span: s, .. }
            | Expr::Numgen { span: s, .. }
            | Expr::Map(_, _, s) => *s,
            Expr::Const(v) => v.span(),
        }
    }
}

/// The right-hand side of a match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rhs {
    Val(Val),
    Set(SetRef),
}

impl Rhs {
    pub fn span(&self) -> Span {
        match self {
            Rhs::Val(v) => v.span(),
            Rhs::Set(s) => s.span(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerdictAst {
    Accept(Span),
    Drop(Span),
    Continue(Span),
    Return(Span),
    Jump(Ident, Span),
    Goto(Ident, Span),
}

impl VerdictAst {
    pub fn span(&self) -> Span {
        match self {
            VerdictAst::Accept(s)
            | VerdictAst::Drop(s)
            | VerdictAst::Continue(s)
            | VerdictAst::Return(s)
            | VerdictAst::Jump(_, s)
            | VerdictAst::Goto(_, s) => *s,
        }
    }
}

/// One item of a rule: a match or a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// `lhs [op] rhs`
    Match {
        lhs: Expr,
        op: Option<(CmpOp, Span)>,
        rhs: Rhs,
        span: Span,
    },
    /// `lhs vmap <set>`
    Vmap {
        key: Expr,
        map: SetRef,
        span: Span,
    },
    Verdict(VerdictAst),
    /// `counter [packets N bytes M]` or `counter name NAME`
    Counter {
        name: Option<Val>,
        packets: Option<Val>,
        bytes: Option<Val>,
        span: Span,
    },
    /// `log [prefix S] [level L] [group N] [snaplen N] [queue-threshold N] [flags ...]`
    Log {
        options: Vec<(Ident, Option<Val>)>,
        span: Span,
    },
    /// `limit rate [over] N/unit [burst N packets|bytes]` or `limit rate [over] N bytes/unit`
    Limit {
        over: bool,
        rate: Vec<Val>,
        burst: Option<Vec<Val>>,
        span: Span,
    },
    /// `quota [over|until] N unit [used N unit]` or `quota name NAME`
    Quota {
        over: bool,
        amount: Vec<Val>,
        used: Option<Vec<Val>>,
        name: Option<Val>,
        span: Span,
    },
    /// `reject [with icmp|icmpv6|icmpx [type] T | with tcp reset]`
    Reject {
        with: Option<(Ident, Option<Val>)>,
        span: Span,
    },
    /// `<selector> set <expr>`
    Assign {
        target: Expr,
        value: Expr,
        span: Span,
    },
    /// `snat|dnat [ip|ip6] [to] <addr expr>[:port] [flags]`, `masquerade [to :ports] [flags]`,
    /// `redirect [to :port] [flags]`
    Nat {
        kind: Ident,
        family: Option<Ident>,
        addr: Option<Expr>,
        port: Option<Expr>,
        flags: Vec<Ident>,
        span: Span,
    },
    Notrack(Span),
    /// `fwd to DEVICE` (`family` None) or `fwd ip|ip6 to ADDRESS device DEVICE` (netdev only):
    /// `addr` is the next hop's address in the second form.
    Fwd {
        family: Option<Ident>,
        addr: Option<Expr>,
        dev: Expr,
        span: Span,
    },
    /// `flow add @ft` / `flow offload @ft`
    FlowAdd(Ident, Span),
    /// `add|update|delete @set { key [timeout T] [stmt] }`
    SetOp {
        op: Ident,
        set: Ident,
        key: Expr,
        timeout: Option<Val>,
        stmts: Vec<Item>,
        /// `update @map { key : value }`: the value stored for the key (a map).
        value: Option<Expr>,
        span: Span,
    },
    /// `comment "..."`
    Comment(String, Span),
    /// A statement weir parses and checks but does not evaluate yet (`queue`, `tproxy`,
    /// `dup`, `synproxy`): its operands, each with what it must be.
    Pending {
        what: &'static str,
        family: Option<Ident>,
        operands: Vec<(Operand, Expr)>,
        span: Span,
    },
}

/// What an operand of a [`Item::Pending`] statement must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// An address of the statement's family (or the table's).
    Addr,
    /// A transport port.
    Port,
    /// A queue number (16 bits) or range of them.
    Queue,
    /// A flag word (`queue flags bypass`, `queue num 1 fanout`).
    Flag,
    /// A device name.
    Device,
    /// An object's name, or a map giving one (not checked further yet).
    Name,
    /// A duration (`1h30m`).
    Duration,
    /// A TCP option by name or kind.
    TcpOption,
    /// An integer of this many bits.
    Int(u8),
}

impl Item {
    pub fn span(&self) -> Span {
        match self {
            Item::Match { span, .. }
            | Item::Vmap { span, .. }
            | Item::Counter { span, .. }
            | Item::Log { span, .. }
            | Item::Limit { span, .. }
            | Item::Quota { span, .. }
            | Item::Reject { span, .. }
            | Item::Assign { span, .. }
            | Item::Nat { span, .. }
            | Item::Fwd { span, .. }
            | Item::SetOp { span, .. }
            | Item::Pending { span, .. } => *span,
            Item::Verdict(v) => v.span(),
            Item::Notrack(s) | Item::FlowAdd(_, s) | Item::Comment(_, s) => *s,
        }
    }
}

/// A rule: its items in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub items: Vec<Item>,
    pub span: Span,
    /// The rule's tokens joined by single spaces (what counters and traces print).
    pub text: String,
}

/// `type T hook H [device D] priority P;`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSpec {
    pub ty: Ident,
    pub hook: Ident,
    pub device: Option<Val>,
    /// The priority words: a number, a name, or `name + N` / `name - N`.
    pub priority: Vec<Val>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainDecl {
    pub name: Ident,
    pub hook: Option<HookSpec>,
    pub policy: Option<Ident>,
    pub rules: Vec<Rule>,
    /// `comment "..."`
    pub comment: Option<String>,
    pub span: Span,
}

/// `set NAME { ... }` or `map NAME { ... }`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetDecl {
    pub name: Ident,
    pub is_map: bool,
    /// `type a . b` (names of types), or empty when `typeof` is used.
    pub key_types: Vec<Ident>,
    /// `typeof ip saddr . tcp dport`
    pub key_typeof: Vec<Expr>,
    /// For maps: `: type` (a type name, `verdict`, or a concatenation).
    pub data_types: Vec<Ident>,
    pub data_typeof: Vec<Expr>,
    pub flags: Vec<Ident>,
    pub elements: Vec<Elem>,
    pub timeout: Option<Val>,
    pub size: Option<Val>,
    pub policy: Option<Ident>,
    pub counter: bool,
    /// `auto-merge`
    pub auto_merge: bool,
    /// The statements of each element, in order (`limit rate 1/second counter`, `quota 500
    /// bytes`, `ct count over 20`; `counter` also sets [`SetDecl::counter`]).
    pub stmts: Vec<(Ident, Option<Val>)>,
    /// `: interval T`: the data are ranges.
    pub data_interval: bool,
    /// `gc-interval 10s`
    pub gc_interval: Option<Val>,
    /// `comment "..."`
    pub comment: Option<String>,
    /// Made by a `meter` statement (`meter m { ip saddr limit rate 10/second }`): a dynamic
    /// set keyed by the meter's key, listed with the key's types.
    pub meter: bool,
    pub span: Span,
}

impl SetDecl {
    /// A declaration with nothing in it yet: the set or map `name`.
    pub fn new(name: Ident, is_map: bool, span: Span) -> SetDecl {
        SetDecl {
            name,
            is_map,
            key_types: vec![],
            key_typeof: vec![],
            data_types: vec![],
            data_typeof: vec![],
            flags: vec![],
            elements: vec![],
            timeout: None,
            size: None,
            policy: None,
            counter: false,
            auto_merge: false,
            stmts: vec![],
            data_interval: false,
            gc_interval: None,
            comment: None,
            meter: false,
            span,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowtableDecl {
    pub name: Ident,
    pub hook: Option<Ident>,
    pub priority: Vec<Val>,
    pub devices: Vec<Val>,
    /// `counter`
    pub counter: bool,
    pub span: Span,
}

/// A named stateful object: `counter NAME { packets 0 bytes 0 }`, `quota NAME { over 1 gbytes }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjDecl {
    pub kind: Ident,
    pub name: Ident,
    pub body: Vec<Val>,
    /// `comment "..."`
    pub comment: Option<String>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableItem {
    Chain(ChainDecl),
    Set(SetDecl),
    Flowtable(FlowtableDecl),
    Obj(ObjDecl),
    /// The table's `flags dormant` (its chains do not run).
    Flags(Vec<Ident>, Span),
    /// The table's `comment "..."`.
    Comment(String, Span),
}

/// Where an `add rule` / `insert rule` goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    End,
    /// `insert rule` without a position: at the start.
    Start,
    /// `position H` / `handle H`: after (add) or before (insert) the rule with that handle.
    Handle(Val, bool),
    /// `index N`: after (add) or before (insert) the N-th rule.
    Index(Val, bool),
}

/// A top-level command of a ruleset file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `table [family] NAME { ... }` (also `add table`, `create table`)
    Table {
        family: Option<Ident>,
        name: Ident,
        items: Vec<TableItem>,
        span: Span,
    },
    /// `add chain [family] TABLE NAME [{ ... }]`
    AddChain {
        family: Option<Ident>,
        table: Ident,
        chain: ChainDecl,
    },
    /// `add|create set|map [family] TABLE NAME { ... }`
    AddSet {
        family: Option<Ident>,
        table: Ident,
        set: SetDecl,
    },
    /// `add|insert rule [family] TABLE CHAIN [position|handle|index N] rule`
    AddRule {
        family: Option<Ident>,
        table: Ident,
        chain: Ident,
        position: Position,
        rule: Rule,
    },
    /// `add element [family] TABLE SET { ... }`
    AddElement {
        family: Option<Ident>,
        table: Ident,
        set: Ident,
        elements: Vec<Elem>,
        span: Span,
    },
    /// `flush ruleset`
    FlushRuleset(Span),
    /// `flush chain|table|set [family] TABLE [NAME]`
    Flush {
        what: Ident,
        family: Option<Ident>,
        table: Ident,
        name: Option<Ident>,
        span: Span,
    },
    /// `delete|destroy table|chain|set|map|rule|element|flowtable|counter|quota|limit|ct
    /// helper|... [family] TABLE [NAME] [handle N] [{ elements }]` (`destroy`: what is not
    /// there is no error). A table named by handle has an empty `table` name.
    Delete {
        what: Ident,
        family: Option<Ident>,
        table: Ident,
        name: Option<Ident>,
        handle: Option<Val>,
        elements: Vec<Elem>,
        destroy: bool,
        span: Span,
    },
    /// `add|create flowtable|counter|quota|limit|ct helper|... [family] TABLE NAME { ... }`:
    /// one item of a table that must exist.
    AddItem {
        family: Option<Ident>,
        table: Ident,
        item: TableItem,
        span: Span,
    },
    /// `create ...`: the `add` it holds, refused when what it names is there already.
    Create(Box<Command>, Span),
    /// `replace rule [family] TABLE CHAIN handle N RULE`: the rule keeps its handle.
    ReplaceRule {
        family: Option<Ident>,
        table: Ident,
        chain: Ident,
        handle: Val,
        rule: Rule,
    },
    /// `rename chain [family] TABLE NAME NEWNAME`
    Rename {
        family: Option<Ident>,
        table: Ident,
        chain: Ident,
        to: Ident,
        span: Span,
    },
    /// The client that sent a batch is gone (each `nft` run is one): the tables it owns
    /// (`flags owner`) go with it, unless `persist` (they stay, no longer owned).
    ClientGone(Span),
    /// `list ...`, `get element ...`, `reset ...`, `describe ...`: changes no declaration;
    /// the words as written, answered once the batch is in (by whoever runs the session).
    Query { words: Vec<String>, span: Span },
}

/// A parsed ruleset (after `include` and `define` are expanded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct File {
    pub commands: Vec<Command>,
}

/// The data type of an object map (`type ipv4_addr : quota`), or of a map of queue numbers
/// (`: queue`).
pub fn is_object_type(name: &str) -> bool {
    matches!(
        name,
        "counter"
            | "quota"
            | "limit"
            | "synproxy"
            | "secmark"
            | "tunnel"
            | "ct helper"
            | "ct timeout"
            | "ct expectation"
            | "queue"
    )
}
