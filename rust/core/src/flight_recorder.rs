//! Flight Recorder dumps, the fast path: a restricted pickle reader and the per-entry checks
//! of `rankwatch.flight_recorder.reader`, for dumps that pass them all.
//!
//! The reader builds plain values only (dicts, lists, tuples, text, numbers, booleans,
//! None) in one flat arena: a value the pickle refers to twice is one node referred to
//! twice, so references that multiply cost nothing here, and no container is copied. Every
//! opcode that names a class, a function, an extension code or a persistent id (GLOBAL,
//! STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID) is refused, as are the
//! plain-data opcodes torch never writes (sets, protocol-0 text forms, buffers): nothing is
//! looked up and nothing runs. Drops and walks are iterative or of fixed depth, so deep
//! nesting cannot overflow the stack.
//!
//! This path only ever accepts: any refusal, any entry that fails a check, any value outside
//! what it handles, and the caller falls back to the Python reader, which gives the reason.
//! So what this accepts must be exactly what the Python checks produce for it (the parity
//! tests compare both on every checked-in dump and on the hostile ones).

use crate::digits::is_whole_number;
use foldhash::HashMap;

const MAX_ENTRIES: usize = 1_000_000;
const MAX_FRAMES: usize = 256;
const MAX_TENSORS: usize = 4096;
const MAX_DIMS: usize = 64;
const MAX_TEXT: usize = 4096;
const MAX_NAME: usize = 256;
const MAX_DTYPE: usize = 64;

/// One value of a decoded pickle. Containers hold a span of `Doc::items` (node ids; a dict's
/// keys and values alternate), so building one allocates nothing of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit 64 bits (never accepted by the fast path).
    BigInt,
    Float(f64),
    /// UTF-8 text: a range of the input.
    Str(u32, u32),
    Bytes(u32, u32),
    List(Span),
    Tuple(Span),
    /// `len` pairs: `2 * len` ids, key then value.
    Dict(Span),
}

/// Where a container's items lie in `Doc::items`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: u32,
    pub len: u32,
}

/// The vectors a decoded pickle lives in, handed from one dump to the next
/// ([`parse_reusing`], [`Doc::into_arena`]) so that their memory is not allocated and
/// faulted in again per dump.
#[derive(Debug, Default)]
pub struct Arena {
    nodes: Vec<Node>,
    items: Vec<u32>,
    stack: Vec<u32>,
    marks: Vec<usize>,
    memo: Vec<u32>,
}

/// A decoded pickle: its nodes and the root's id.
pub struct Doc<'a> {
    data: &'a [u8],
    pub nodes: Vec<Node>,
    items: Vec<u32>,
    pub root: u32,
    rest: Arena,
}

impl<'a> Doc<'a> {
    /// The vectors, emptied, for [`parse_reusing`].
    pub fn into_arena(self) -> Arena {
        let mut a = self.rest;
        a.nodes = self.nodes;
        a.items = self.items;
        a.nodes.clear();
        a.items.clear();
        a
    }

    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[id as usize]
    }

    /// The ids of a list's or tuple's items (empty for any other node).
    pub fn seq(&self, id: u32) -> &[u32] {
        match self.nodes[id as usize] {
            Node::List(s) | Node::Tuple(s) => self.span(s, 1),
            _ => &[],
        }
    }

    /// A dict's (key, value) pairs (none for any other node).
    pub fn pairs(&self, id: u32) -> impl DoubleEndedIterator<Item = (u32, u32)> + '_ {
        let ids = match self.nodes[id as usize] {
            Node::Dict(s) => self.span(s, 2),
            _ => &[],
        };
        ids.chunks_exact(2).map(|kv| (kv[0], kv[1]))
    }

    fn span(&self, s: Span, width: usize) -> &[u32] {
        let start = s.start as usize;
        &self.items[start..start + s.len as usize * width]
    }

    /// The text of a `Str` node.
    pub fn text(&self, id: u32) -> Option<&'a str> {
        match self.nodes[id as usize] {
            // validated as UTF-8 when read
            Node::Str(s, n) => std::str::from_utf8(&self.data[s as usize..(s + n) as usize]).ok(),
            _ => None,
        }
    }

    pub fn bytes(&self, id: u32) -> Option<&'a [u8]> {
        match self.nodes[id as usize] {
            Node::Bytes(s, n) => Some(&self.data[s as usize..(s + n) as usize]),
            _ => None,
        }
    }

    /// The value under a text key of a dict node (the last one, as Python's dict keeps).
    pub fn get(&self, dict: u32, key: &str) -> Option<u32> {
        self.pairs(dict)
            .rev()
            .find(|(k, _)| self.text(*k) == Some(key))
            .map(|(_, v)| v)
    }
}

/// Why the fast reader did not take a pickle (the Python reader then says why, or reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotTaken(pub &'static str);

fn take<'a>(data: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], NotTaken> {
    let end = pos.checked_add(n).ok_or(NotTaken("length overflows"))?;
    let got = data.get(*pos..end).ok_or(NotTaken("truncated"))?;
    *pos = end;
    Ok(got)
}

fn le_u(b: &[u8]) -> u64 {
    b.iter()
        .rev()
        .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// Decodes a pickle with the restricted opcode set (see the module doc).
pub fn parse(data: &[u8]) -> Result<Doc<'_>, NotTaken> {
    parse_reusing(data, Arena::default())
}

/// Whether a node may be a dict key in Python (containers may not; tuples are left to the
/// Python reader).
fn hashable(n: &Node) -> bool {
    !matches!(n, Node::List(_) | Node::Dict(_) | Node::Tuple(_))
}

/// Adds `new` (ids, `width` per item) to the container `span` in `items`: in place where
/// the container's items are the last ones written (the common case: one APPENDS or
/// SETITEMS per container), else moved to the end first. Moved ids count against `moved`,
/// bounded by the input's length so that a pickle cannot make the copies quadratic.
fn add_items(
    items: &mut Vec<u32>,
    span: &mut Span,
    new: &[u32],
    width: usize,
    moved: &mut usize,
    limit: usize,
) -> Result<(), NotTaken> {
    let start = span.start as usize;
    let end = start + span.len as usize * width;
    if span.len == 0 {
        span.start = items.len() as u32;
    } else if end != items.len() {
        *moved += end - start;
        if *moved > limit {
            return Err(NotTaken(
                "containers filled piecemeal past what the input holds",
            ));
        }
        span.start = items.len() as u32;
        items.extend_from_within(start..end);
    }
    items.extend_from_slice(new);
    span.len += (new.len() / width) as u32;
    if items.len() >= u32::MAX as usize {
        return Err(NotTaken("too many items"));
    }
    Ok(())
}

/// [`parse`] with the vectors of an [`Arena`] (emptied first).
pub fn parse_reusing(data: &[u8], arena: Arena) -> Result<Doc<'_>, NotTaken> {
    if data.len() >= u32::MAX as usize {
        return Err(NotTaken("too large for the fast reader"));
    }
    let Arena {
        mut nodes,
        mut items,
        mut stack,
        mut marks,
        mut memo,
    } = arena;
    nodes.clear();
    items.clear();
    stack.clear();
    marks.clear();
    memo.clear();
    // a node takes at least one byte of pickle and most take several
    nodes.reserve(data.len() / 8);
    items.reserve(data.len() / 8);
    // memo index -> node (u32::MAX: unset); a real pickle numbers its memo from 0, one
    // index per memoized value, so an index past the input's length is not taken
    let mut memo_len = 0u32;
    let mut moved = 0usize;
    let mut pos = 0usize;
    // (a macro, not a closure: each node is written where it is built)
    macro_rules! push_node {
        ($n:expr) => {{
            stack.push(nodes.len() as u32);
            nodes.push($n);
        }};
    }
    // the index of the last mark, popped, checked against the stack
    macro_rules! pop_mark {
        () => {{
            let m = marks.pop().ok_or(NotTaken("no mark"))?;
            if m > stack.len() {
                return Err(NotTaken("mark past the stack"));
            }
            m
        }};
    }
    // a new container of the stack's items from `from`
    macro_rules! collect {
        ($from:expr, $kind:ident) => {{
            let from = $from;
            let span = Span {
                start: items.len() as u32,
                len: (stack.len() - from) as u32,
            };
            items.extend_from_slice(&stack[from..]);
            stack.truncate(from);
            push_node!(Node::$kind(span));
        }};
    }
    loop {
        let op = *take(data, &mut pos, 1)?
            .first()
            .ok_or(NotTaken("truncated"))?;
        match op {
            0x80 => {
                take(data, &mut pos, 1)?; // PROTO
            }
            0x95 => {
                take(data, &mut pos, 8)?; // FRAME: a hint only
            }
            b'.' => {
                let root = stack.pop().ok_or(NotTaken("empty stack at STOP"))?;
                let rest = Arena {
                    stack,
                    marks,
                    memo,
                    ..Arena::default()
                };
                return Ok(Doc {
                    data,
                    nodes,
                    items,
                    root,
                    rest,
                });
            }
            b'(' => marks.push(stack.len()),
            b'0' => {
                stack.pop().ok_or(NotTaken("pop of an empty stack"))?;
            }
            b'1' => {
                let m = pop_mark!();
                stack.truncate(m);
            }
            b'2' => {
                let top = *stack.last().ok_or(NotTaken("dup of an empty stack"))?;
                stack.push(top);
            }
            b'N' => push_node!(Node::None),
            0x88 => push_node!(Node::Bool(true)),
            0x89 => push_node!(Node::Bool(false)),
            b'J' => {
                let b = take(data, &mut pos, 4)?;
                let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                push_node!(Node::Int(i64::from(v)));
            }
            b'K' => {
                let b = take(data, &mut pos, 1)?;
                push_node!(Node::Int(i64::from(b[0])));
            }
            b'M' => {
                let b = take(data, &mut pos, 2)?;
                push_node!(Node::Int(le_u(b) as i64));
            }
            0x8a => {
                let n = take(data, &mut pos, 1)?[0] as usize;
                let b = take(data, &mut pos, n)?;
                let node = if n == 0 {
                    Node::Int(0)
                } else if n <= 8 {
                    // two's complement, little-endian, sign-extended from its top byte
                    let raw = le_u(b);
                    let shift = 64 - 8 * n as u32;
                    Node::Int(((raw << shift) as i64) >> shift)
                } else {
                    Node::BigInt
                };
                push_node!(node);
            }
            b'G' => {
                let b = take(data, &mut pos, 8)?;
                let v = f64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                push_node!(Node::Float(v));
            }
            b'X' | 0x8c | 0x8d | b'B' | b'C' | 0x8e => {
                let width = match op {
                    0x8c | b'C' => 1,
                    b'X' | b'B' => 4,
                    _ => 8,
                };
                let n = le_u(take(data, &mut pos, width)?);
                let n = usize::try_from(n).map_err(|_| NotTaken("length overflows"))?;
                let start = pos;
                let b = take(data, &mut pos, n)?;
                let node = if matches!(op, b'B' | b'C' | 0x8e) {
                    Node::Bytes(start as u32, n as u32)
                } else {
                    // Python decodes with surrogatepass; such text is left to it
                    std::str::from_utf8(b).map_err(|_| NotTaken("text that is not UTF-8"))?;
                    Node::Str(start as u32, n as u32)
                };
                push_node!(node);
            }
            b']' => push_node!(Node::List(Span::default())),
            b')' => push_node!(Node::Tuple(Span::default())),
            b'}' => push_node!(Node::Dict(Span::default())),
            b'l' => collect!(pop_mark!(), List),
            b't' => collect!(pop_mark!(), Tuple),
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if stack.len() < n || marks.last().is_some_and(|&m| m > stack.len() - n) {
                    return Err(NotTaken("tuple of missing items"));
                }
                collect!(stack.len() - n, Tuple);
            }
            b'd' => {
                let from = pop_mark!();
                check_pairs(&nodes, &stack[from..])?;
                let span = Span {
                    start: items.len() as u32,
                    len: ((stack.len() - from) / 2) as u32,
                };
                items.extend_from_slice(&stack[from..]);
                stack.truncate(from);
                push_node!(Node::Dict(span));
            }
            b'a' | b'e' | b's' | b'u' => {
                // the items are the top of the stack: added to the container below them
                let from = match op {
                    b'a' => stack
                        .len()
                        .checked_sub(1)
                        .ok_or(NotTaken("append to nothing"))?,
                    b's' => stack
                        .len()
                        .checked_sub(2)
                        .ok_or(NotTaken("setitem without key and value"))?,
                    _ => pop_mark!(),
                };
                let target =
                    below(&stack, &marks, from).ok_or(NotTaken("add to nothing"))? as usize;
                let new = &stack[from..];
                let (span, width) = match (&mut nodes[target], op) {
                    (Node::List(s), b'a' | b'e') => (*s, 1),
                    (Node::Dict(s), b's' | b'u') => (*s, 2),
                    _ => return Err(NotTaken("add to something other than a list or dict")),
                };
                if width == 2 {
                    check_pairs(&nodes, new)?;
                }
                let mut span = span;
                add_items(&mut items, &mut span, new, width, &mut moved, data.len())?;
                match &mut nodes[target] {
                    Node::List(s) | Node::Dict(s) => *s = span,
                    _ => {}
                }
                stack.truncate(from);
            }
            b'q' | b'r' | 0x94 => {
                let idx = match op {
                    b'q' => take(data, &mut pos, 1)?[0] as u32,
                    b'r' => le_u(take(data, &mut pos, 4)?) as u32,
                    _ => memo_len,
                };
                let top = *stack.last().ok_or(NotTaken("memo of an empty stack"))?;
                let i = idx as usize;
                if i > data.len() {
                    return Err(NotTaken("memo index past what the pickle can hold"));
                }
                if i >= memo.len() {
                    memo.resize(i + 1, u32::MAX);
                }
                if memo[i] == u32::MAX {
                    memo_len += 1;
                }
                memo[i] = top;
            }
            b'h' | b'j' => {
                let idx = if op == b'h' {
                    take(data, &mut pos, 1)?[0] as u32
                } else {
                    le_u(take(data, &mut pos, 4)?) as u32
                };
                let got = *memo
                    .get(idx as usize)
                    .filter(|&&n| n != u32::MAX)
                    .ok_or(NotTaken("memo key not found"))?;
                stack.push(got);
            }
            // everything else: classes, functions, extension codes, persistent ids, and the
            // plain-data opcodes torch does not write
            _ => return Err(NotTaken("opcode outside the fast reader's set")),
        }
    }
}

/// The container that APPEND(S)/SETITEM(S) add `stack[from..]` to: the value just below,
/// which must lie above every open mark (Python's unpickler refuses to reach below one).
fn below(stack: &[u32], marks: &[usize], from: usize) -> Option<u32> {
    let i = from.checked_sub(1)?;
    if marks.last().is_some_and(|&m| m > i) {
        return None;
    }
    stack.get(i).copied()
}

/// Key-value ids of a dict being built: an even number, and keys hashable in Python (text,
/// numbers, booleans, None, bytes here; tuples and the rest are left to the Python reader).
fn check_pairs(nodes: &[Node], items: &[u32]) -> Result<(), NotTaken> {
    if !items.len().is_multiple_of(2) {
        return Err(NotTaken("odd number of dict items"));
    }
    if items
        .chunks_exact(2)
        .all(|kv| hashable(&nodes[kv[0] as usize]))
    {
        Ok(())
    } else {
        Err(NotTaken("unhashable key"))
    }
}

// --- the checks ---------------------------------------------------------------------------

/// `profiling_name` split as the Python reader splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    pub backend: String,
    pub op: u32, // index into `Checked::ops`
    pub peers: Option<(Option<i64>, Option<i64>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: String,
    pub line: i64,
    pub name: String,
}

pub const STATES: [&str; 3] = ["scheduled", "started", "completed"];

/// One checked entry's values; the numbers index the tables of `Checked`. Kept packed as an
/// [`Entry`] (a job holds millions of them: 104 bytes instead of 160).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryValues {
    pub pos: usize,
    pub record_id: i64,
    pub group: u32,
    pub pg_id: Option<i64>,
    pub seq: i64,
    pub p2p_seq: Option<i64>,
    pub is_p2p: bool,
    pub name: u32,
    pub input_sizes: u32,
    pub output_sizes: u32,
    pub input_dtypes: u32,
    pub output_dtypes: u32,
    pub state: u8, // index into STATES
    pub retired: Option<bool>,
    pub time_created_ns: Option<i64>,
    pub time_started_ns: Option<i64>,
    pub time_completed_ns: Option<i64>,
    pub timeout_ms: Option<i64>,
    pub frames: u32,
    pub fp: u32,
}

/// One checked entry, packed: the optional numbers as values and one bit each saying
/// whether they are there. Read through the methods named after [`EntryValues`]' fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub record_id: i64,
    pub seq: i64,
    /// pg_id, p2p_seq, time_created_ns, time_started_ns, time_completed_ns, timeout_ms
    opt: [i64; 6],
    pos: u32,
    pub group: u32,
    pub name: u32,
    pub input_sizes: u32,
    pub output_sizes: u32,
    pub input_dtypes: u32,
    pub output_dtypes: u32,
    pub frames: u32,
    pub fp: u32,
    /// bit i: opt[i] is there; bit 6: retired is there, bit 7: its value
    present: u8,
    pub state: u8, // index into STATES
    pub is_p2p: bool,
}

impl Entry {
    pub fn pack(v: &EntryValues) -> Entry {
        let mut present = 0u8;
        let mut opt = [0i64; 6];
        for (i, o) in [
            v.pg_id,
            v.p2p_seq,
            v.time_created_ns,
            v.time_started_ns,
            v.time_completed_ns,
            v.timeout_ms,
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(x) = o {
                opt[i] = x;
                present |= 1 << i;
            }
        }
        if let Some(r) = v.retired {
            present |= 1 << 6 | u8::from(r) << 7;
        }
        Entry {
            record_id: v.record_id,
            seq: v.seq,
            opt,
            // at most MAX_ENTRIES (a million) entries are read
            pos: u32::try_from(v.pos).unwrap_or(u32::MAX),
            group: v.group,
            name: v.name,
            input_sizes: v.input_sizes,
            output_sizes: v.output_sizes,
            input_dtypes: v.input_dtypes,
            output_dtypes: v.output_dtypes,
            frames: v.frames,
            fp: v.fp,
            present,
            state: v.state,
            is_p2p: v.is_p2p,
        }
    }

    fn opt(&self, i: usize) -> Option<i64> {
        (self.present & (1 << i) != 0).then_some(self.opt[i])
    }

    pub fn pos(&self) -> usize {
        self.pos as usize
    }
    pub fn pg_id(&self) -> Option<i64> {
        self.opt(0)
    }
    pub fn p2p_seq(&self) -> Option<i64> {
        self.opt(1)
    }
    pub fn time_created_ns(&self) -> Option<i64> {
        self.opt(2)
    }
    pub fn time_started_ns(&self) -> Option<i64> {
        self.opt(3)
    }
    pub fn time_completed_ns(&self) -> Option<i64> {
        self.opt(4)
    }
    pub fn timeout_ms(&self) -> Option<i64> {
        self.opt(5)
    }
    pub fn retired(&self) -> Option<bool> {
        (self.present & (1 << 6) != 0).then_some(self.present & (1 << 7) != 0)
    }
}

/// A dump whose kept entries all passed: the entries, and the values they share, each once.
#[derive(Debug, Default)]
pub struct Checked {
    /// Index of the first entry kept (the older ones are dropped by the memory budget).
    pub start: usize,
    pub entries: Vec<Entry>,
    pub ops: Vec<String>,
    pub names: Vec<Name>,
    pub groups: Vec<(String, String)>,
    pub shapes: Vec<Vec<Vec<i64>>>,
    pub dtypes: Vec<Vec<String>>,
    pub frames: Vec<Frame>,
    pub frame_lists: Vec<Vec<u32>>,
    /// (op, input sizes, output sizes, input dtypes, output dtypes)
    pub fps: Vec<[u32; 5]>,
}

#[derive(Default)]
struct Tables<'a> {
    ops: HashMap<&'a str, u32>,
    names: HashMap<&'a str, u32>,
    groups: HashMap<(String, String), u32>,
    shapes: HashMap<Vec<Vec<i64>>, u32>,
    dtypes: HashMap<Vec<&'a str>, u32>,
    frames: HashMap<u32, u32>,
    frame_lists: HashMap<u32, u32>,
    fps: HashMap<[u32; 5], u32>,
    // what one node of the pickle stands for, worked out once (torch's pickler shares the
    // keys, the state texts, and often the names and group tuples, between entries)
    key_slot: Vec<u8>,
    state_of: Vec<u8>,
    names_by_node: HashMap<u32, u32>,
    groups_by_node: HashMap<u32, u32>,
    groups_by_pg_id: HashMap<Option<i64>, u32>,
    // scratch for looking up shapes and dtypes without building them
    flat: Vec<i64>,
    shapes_flat: HashMap<Vec<i64>, u32>,
    dtype_names: Vec<&'a str>,
}

const UNSEEN: u8 = 0xFE;
const NO_SLOT: u8 = 0xFF;

impl<'a> Tables<'a> {
    fn new(doc: &Doc<'a>) -> Self {
        Tables {
            key_slot: vec![UNSEEN; doc.nodes.len()],
            state_of: vec![UNSEEN; doc.nodes.len()],
            ..Tables::default()
        }
    }

    /// The entry field a key node names, if any.
    fn slot(&mut self, doc: &Doc<'a>, key: u32) -> Option<usize> {
        let cached = &mut self.key_slot[key as usize];
        if *cached == UNSEEN {
            *cached = doc.text(key).and_then(slot).map_or(NO_SLOT, |i| i as u8);
        }
        (*cached != NO_SLOT).then_some(*cached as usize)
    }

    /// The index in STATES of a state text node.
    fn state(&mut self, doc: &Doc<'a>, id: u32) -> Option<u8> {
        let cached = &mut self.state_of[id as usize];
        if *cached == UNSEEN {
            *cached = STATES
                .iter()
                .position(|&st| Some(st) == doc.text(id))
                .map_or(NO_SLOT, |i| i as u8);
        }
        (*cached != NO_SLOT).then_some(*cached)
    }
}

fn chars(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// The first `MAX_TEXT` characters (Python's `s[:MAX_TEXT]`).
fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_TEXT) {
        Some((i, _)) => s[..i].to_owned(),
        None => s.to_owned(),
    }
}

const FIELDS: usize = 19;

/// The slot of an entry field the checks read.
fn slot(key: &str) -> Option<usize> {
    Some(match key {
        "profiling_name" => F_NAME,
        "collective_seq_id" => F_SEQ,
        "seq_id" => F_SEQ_ID,
        "pg_id" => F_PG_ID,
        "process_group" => F_PG,
        "state" => F_STATE,
        "retired" => F_RETIRED,
        "is_p2p" => F_IS_P2P,
        "record_id" => F_RECORD,
        "input_sizes" => F_IN_SIZES,
        "output_sizes" => F_OUT_SIZES,
        "input_dtypes" => F_IN_DTYPES,
        "output_dtypes" => F_OUT_DTYPES,
        "frames" => F_FRAMES,
        "p2p_seq_id" => F_P2P_SEQ,
        "time_created_ns" => F_CREATED,
        "time_discovered_started_ns" => F_STARTED,
        "time_discovered_completed_ns" => F_COMPLETED,
        "timeout_ms" => F_TIMEOUT,
        _ => return None,
    })
}

const F_NAME: usize = 0;
const F_SEQ: usize = 1;
const F_SEQ_ID: usize = 2;
const F_PG_ID: usize = 3;
const F_PG: usize = 4;
const F_STATE: usize = 5;
const F_RETIRED: usize = 6;
const F_IS_P2P: usize = 7;
const F_RECORD: usize = 8;
const F_IN_SIZES: usize = 9;
const F_OUT_SIZES: usize = 10;
const F_IN_DTYPES: usize = 11;
const F_OUT_DTYPES: usize = 12;
const F_FRAMES: usize = 13;
const F_P2P_SEQ: usize = 14;
const F_CREATED: usize = 15;
const F_STARTED: usize = 16;
const F_COMPLETED: usize = 17;
const F_TIMEOUT: usize = 18;

/// Checks a decoded dump as `reader.check_dump` does, for the entries it keeps. `None`
/// when anything is outside what the fast path accepts (the caller then runs the Python
/// checks, which give the reason or skip the entry).
pub fn check(
    doc: &Doc<'_>,
    keep_last: Option<usize>,
    work_limit: Option<usize>,
) -> Option<Checked> {
    let root = doc.root;
    if !matches!(doc.node(root), Node::Dict(_)) {
        return None;
    }
    let entries_id = doc.get(root, "entries")?;
    if !matches!(doc.node(entries_id), Node::List(_)) {
        return None;
    }
    let entries = doc.seq(entries_id);
    if entries.len() > MAX_ENTRIES {
        return None;
    }
    let start = match keep_last {
        Some(k) if entries.len() > k => entries.len() - k,
        _ => 0,
    };
    let mut out = Checked {
        start,
        ..Checked::default()
    };
    out.entries.reserve(entries.len() - start);
    let mut t = Tables::new(doc);
    let mut work = 0usize;
    let mut shape_work: Vec<usize> = Vec::new();
    for (i, &raw) in entries.iter().enumerate().skip(start) {
        let e = entry(doc, i, raw, &mut out, &mut t, &mut shape_work)?;
        if let Some(limit) = work_limit {
            work += 1
                + out.frame_lists[e.frames as usize].len()
                + shape_work[e.input_sizes as usize]
                + shape_work[e.output_sizes as usize];
            if work > limit {
                return None;
            }
        }
        out.entries.push(e);
    }
    Some(out)
}

fn int(doc: &Doc<'_>, id: Option<u32>) -> Option<Option<i64>> {
    match id.map(|id| doc.node(id)) {
        None | Some(Node::None) => Some(None),
        Some(Node::Int(v)) => Some(Some(*v)),
        _ => None,
    }
}

fn boolean(doc: &Doc<'_>, id: Option<u32>) -> Option<Option<bool>> {
    match id.map(|id| doc.node(id)) {
        None | Some(Node::None) => Some(None),
        Some(Node::Bool(v)) => Some(Some(*v)),
        _ => None,
    }
}

fn entry<'a>(
    doc: &Doc<'a>,
    pos: usize,
    raw: u32,
    out: &mut Checked,
    t: &mut Tables<'a>,
    shape_work: &mut Vec<usize>,
) -> Option<Entry> {
    if !matches!(doc.node(raw), Node::Dict(_)) {
        return None;
    }
    let mut slots: [Option<u32>; FIELDS] = [None; FIELDS];
    for (k, v) in doc.pairs(raw) {
        if let Some(i) = t.slot(doc, k) {
            slots[i] = Some(v); // the last one wins, as in a Python dict
        }
    }
    let s = &slots;
    let name = name(doc, s[F_NAME]?, out, t)?;
    let seq = match s[F_SEQ].map(|id| doc.node(id)) {
        None | Some(Node::None) => s[F_SEQ_ID],
        _ => s[F_SEQ],
    };
    let seq = int(doc, seq)??;
    let pg_id = int(doc, s[F_PG_ID])?;
    let group = group(doc, s[F_PG], pg_id, out, t)?;
    let state = match s[F_STATE] {
        None => 0,
        Some(id) => t.state(doc, id)?,
    };
    let retired = boolean(doc, s[F_RETIRED])?;
    let op = out.names[name as usize].op;
    let is_p2p = boolean(doc, s[F_IS_P2P])?
        .unwrap_or_else(|| matches!(out.ops[op as usize].as_str(), "send" | "recv"));
    let record_id = int(doc, s[F_RECORD])?;
    let input_sizes = sizes(doc, s[F_IN_SIZES], out, t, shape_work)?;
    let output_sizes = sizes(doc, s[F_OUT_SIZES], out, t, shape_work)?;
    let input_dtypes = dtypes(doc, s[F_IN_DTYPES], out, t)?;
    let output_dtypes = dtypes(doc, s[F_OUT_DTYPES], out, t)?;
    let frames = frames(doc, s[F_FRAMES], out, t)?;
    let p2p_seq = int(doc, s[F_P2P_SEQ])?;
    let time = |slot: usize| int(doc, s[slot]).map(|v| v.filter(|&x| x != 0));
    let time_created_ns = time(F_CREATED)?;
    let time_started_ns = time(F_STARTED)?;
    let time_completed_ns = time(F_COMPLETED)?;
    let timeout_ms = int(doc, s[F_TIMEOUT])?;
    let key = [op, input_sizes, output_sizes, input_dtypes, output_dtypes];
    let fp = *t.fps.entry(key).or_insert_with(|| {
        out.fps.push(key);
        out.fps.len() as u32 - 1
    });
    Some(Entry::pack(&EntryValues {
        pos,
        record_id: record_id.unwrap_or(pos as i64),
        group,
        pg_id,
        seq,
        p2p_seq,
        is_p2p,
        name,
        input_sizes,
        output_sizes,
        input_dtypes,
        output_dtypes,
        state,
        retired,
        time_created_ns,
        time_started_ns,
        time_completed_ns,
        timeout_ms,
        frames,
        fp,
    }))
}

fn name<'a>(doc: &Doc<'a>, id: u32, out: &mut Checked, t: &mut Tables<'a>) -> Option<u32> {
    if let Some(&got) = t.names_by_node.get(&id) {
        return Some(got);
    }
    let got = name_of_text(doc, id, out, t)?;
    t.names_by_node.insert(id, got);
    Some(got)
}

fn name_of_text<'a>(doc: &Doc<'a>, id: u32, out: &mut Checked, t: &mut Tables<'a>) -> Option<u32> {
    let text = doc.text(id)?;
    if let Some(&got) = t.names.get(text) {
        return Some(got);
    }
    if chars(text) > MAX_NAME {
        return None;
    }
    let (backend, rest) = match text.rfind(':') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => ("", text),
    };
    let (op, meta) = rest.split_once(' ').unwrap_or((rest, ""));
    if op.is_empty() {
        return None;
    }
    let peers = peers(op, meta)?;
    let op_id = *t.ops.entry(op).or_insert_with(|| {
        out.ops.push(op.to_owned());
        out.ops.len() as u32 - 1
    });
    out.names.push(Name {
        backend: backend.to_owned(),
        op: op_id,
        peers,
    });
    let got = out.names.len() as u32 - 1;
    t.names.insert(text, got);
    Some(got)
}

/// `Some(peers)` when Python's `_peers` gives them; `None` where it would fail or where
/// this path does not follow it (non-ASCII text).
#[allow(clippy::type_complexity)]
fn peers(op: &str, meta: &str) -> Option<Option<(Option<i64>, Option<i64>)>> {
    fn num(text: &str) -> Option<Option<i64>> {
        if !text.is_ascii() {
            return None;
        }
        // Python's strip(): ASCII whitespace and the four separators \x1c-\x1f
        let text = text.trim_matches(|c: char| {
            c.is_ascii_whitespace() || ('\x1c'..='\x1f').contains(&c) || c == '\x0b'
        });
        if text == "?" {
            return Some(None);
        }
        if text.len() > 10 || !is_whole_number(text) {
            return None;
        }
        text.parse().ok().map(Some)
    }
    if op == "send" {
        if let Some((src, dst)) = meta.split_once("->") {
            return Some(Some((num(src)?, num(dst)?)));
        }
    }
    if op == "recv" {
        if let Some((dst, src)) = meta.split_once("<-") {
            return Some(Some((num(src)?, num(dst)?)));
        }
    }
    Some(None)
}

fn group<'a>(
    doc: &Doc<'a>,
    id: Option<u32>,
    pg_id: Option<i64>,
    out: &mut Checked,
    t: &mut Tables<'a>,
) -> Option<u32> {
    let node = match id.map(|id| (id, doc.node(id))) {
        None | Some((_, Node::None)) => None,
        Some((id, _)) => Some(id),
    };
    let cached = match node {
        None => t.groups_by_pg_id.get(&pg_id),
        Some(id) => t.groups_by_node.get(&id),
    };
    if let Some(&got) = cached {
        return Some(got);
    }
    let pair = match node.map(|id| doc.node(id)) {
        None => (
            pg_id.map(|v| v.to_string()).unwrap_or_default(),
            String::new(),
        ),
        Some(Node::List(v) | Node::Tuple(v)) if v.len == 2 => {
            let v = doc.seq(node?);
            (clip(doc.text(v[0])?), clip(doc.text(v[1])?))
        }
        _ => return None,
    };
    let got = match t.groups.get(&pair) {
        Some(&got) => got,
        None => {
            out.groups.push(pair.clone());
            let got = out.groups.len() as u32 - 1;
            t.groups.insert(pair, got);
            got
        }
    };
    match node {
        None => t.groups_by_pg_id.insert(pg_id, got),
        Some(id) => t.groups_by_node.insert(id, got),
    };
    Some(got)
}

fn sizes<'a>(
    doc: &Doc<'a>,
    id: Option<u32>,
    out: &mut Checked,
    t: &mut Tables<'a>,
    shape_work: &mut Vec<usize>,
) -> Option<u32> {
    // the shapes flattened (count, then each shape's length and dimensions), to look them
    // up without building them
    let mut flat = std::mem::take(&mut t.flat);
    flat.clear();
    match id.map(|id| doc.node(id)) {
        None | Some(Node::None) => flat.push(0),
        Some(Node::List(_)) => {
            let v = doc.seq(id?);
            if v.len() > MAX_TENSORS {
                return None;
            }
            flat.push(v.len() as i64);
            for &s in v {
                if !matches!(doc.node(s), Node::List(_)) {
                    return None;
                }
                let dims = doc.seq(s);
                if dims.len() > MAX_DIMS {
                    return None;
                }
                flat.push(dims.len() as i64);
                for &d in dims {
                    let Node::Int(x) = doc.node(d) else {
                        return None;
                    };
                    flat.push(*x);
                }
            }
        }
        _ => return None,
    }
    let got = match t.shapes_flat.get(flat.as_slice()) {
        Some(&got) => got,
        None => {
            let mut shapes = Vec::with_capacity(flat[0] as usize);
            let mut i = 1;
            while i < flat.len() {
                let n = flat[i] as usize;
                shapes.push(flat[i + 1..i + 1 + n].to_vec());
                i += 1 + n;
            }
            let got = intern_shapes(shapes, out, t, shape_work);
            t.shapes_flat.insert(flat.clone(), got);
            got
        }
    };
    t.flat = flat;
    Some(got)
}

fn intern_shapes(
    shapes: Vec<Vec<i64>>,
    out: &mut Checked,
    t: &mut Tables<'_>,
    shape_work: &mut Vec<usize>,
) -> u32 {
    if let Some(&got) = t.shapes.get(&shapes) {
        return got;
    }
    shape_work.push(shapes.len() + shapes.iter().map(Vec::len).sum::<usize>());
    out.shapes.push(shapes.clone());
    let got = out.shapes.len() as u32 - 1;
    t.shapes.insert(shapes, got);
    got
}

fn dtypes<'a>(
    doc: &Doc<'a>,
    id: Option<u32>,
    out: &mut Checked,
    t: &mut Tables<'a>,
) -> Option<u32> {
    let mut names = std::mem::take(&mut t.dtype_names);
    names.clear();
    match id.map(|id| doc.node(id)) {
        None | Some(Node::None) => {}
        Some(Node::List(_)) => {
            let v = doc.seq(id?);
            if v.len() > MAX_TENSORS {
                return None;
            }
            for &d in v {
                names.push(doc.text(d).filter(|s| chars(s) <= MAX_DTYPE)?);
            }
        }
        _ => return None,
    }
    let got = match t.dtypes.get(names.as_slice()) {
        Some(&got) => got,
        None => {
            out.dtypes
                .push(names.iter().map(|s| (*s).to_owned()).collect());
            let got = out.dtypes.len() as u32 - 1;
            t.dtypes.insert(names.clone(), got);
            got
        }
    };
    t.dtype_names = names;
    Some(got)
}

fn frames<'a>(
    doc: &Doc<'a>,
    id: Option<u32>,
    out: &mut Checked,
    t: &mut Tables<'a>,
) -> Option<u32> {
    let key = match id.map(|id| (id, doc.node(id))) {
        None | Some((_, Node::None)) => u32::MAX,
        Some((id, Node::List(_))) => id,
        _ => return None,
    };
    if let Some(&got) = t.frame_lists.get(&key) {
        return Some(got);
    }
    let mut list = Vec::new();
    if let Some(id) = id.filter(|&id| matches!(doc.node(id), Node::List(_))) {
        let v = doc.seq(id);
        list.reserve(v.len().min(MAX_FRAMES));
        for &f in v.iter().take(MAX_FRAMES) {
            let got = match t.frames.get(&f) {
                Some(&got) => got,
                None => {
                    if !matches!(doc.node(f), Node::Dict(_)) {
                        return None;
                    }
                    let filename = doc.text(doc.get(f, "filename")?)?;
                    let name = doc.text(doc.get(f, "name")?)?;
                    let Node::Int(line) = doc.node(doc.get(f, "line")?) else {
                        return None;
                    };
                    out.frames.push(Frame {
                        filename: clip(filename),
                        line: *line,
                        name: clip(name),
                    });
                    let got = out.frames.len() as u32 - 1;
                    t.frames.insert(f, got);
                    got
                }
            };
            list.push(got);
        }
    }
    out.frame_lists.push(list);
    let got = out.frame_lists.len() as u32 - 1;
    t.frame_lists.insert(key, got);
    Some(got)
}

// --- entries the Python reader checked ---------------------------------------------------

/// One entry as `rankwatch.flight_recorder.reader` checked it (a JSON dump, or a pickle the
/// fast path left to Python), for `Builder`: the same values `Entry` holds, owned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnedEntry {
    pub pos: usize,
    pub record_id: i64,
    pub pg: String,
    pub pg_desc: String,
    pub pg_id: Option<i64>,
    pub seq: i64,
    pub p2p_seq: Option<i64>,
    pub is_p2p: bool,
    pub op: String,
    pub backend: String,
    pub peers: Option<(Option<i64>, Option<i64>)>,
    pub input_sizes: Vec<Vec<i64>>,
    pub output_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_dtypes: Vec<String>,
    pub state: u8,
    pub retired: Option<bool>,
    pub time_created_ns: Option<i64>,
    pub time_started_ns: Option<i64>,
    pub time_completed_ns: Option<i64>,
    pub timeout_ms: Option<i64>,
    pub frames: Vec<Frame>,
}

/// (src, dst) of a send or recv, in group ranks; None where `?`.
type Peers = Option<(Option<i64>, Option<i64>)>;

/// Builds a `Checked` from entries checked elsewhere, sharing equal values as `check` does.
#[derive(Default)]
pub struct Builder {
    out: Checked,
    ops: HashMap<String, u32>,
    names: HashMap<(String, u32, Peers), u32>,
    groups: HashMap<(String, String), u32>,
    shapes: HashMap<Vec<Vec<i64>>, u32>,
    dtypes: HashMap<Vec<String>, u32>,
    frames: HashMap<Frame, u32>,
    frame_lists: HashMap<Vec<u32>, u32>,
    fps: HashMap<[u32; 5], u32>,
}

fn intern<K: std::hash::Hash + Eq + Clone, V>(
    map: &mut HashMap<K, u32>,
    table: &mut Vec<V>,
    key: K,
    value: impl FnOnce(&K) -> V,
) -> u32 {
    if let Some(&got) = map.get(&key) {
        return got;
    }
    table.push(value(&key));
    let got = table.len() as u32 - 1;
    map.insert(key, got);
    got
}

impl Builder {
    pub fn push(&mut self, e: OwnedEntry) {
        let out = &mut self.out;
        let op = intern(&mut self.ops, &mut out.ops, e.op, |k| k.clone());
        let name = intern(
            &mut self.names,
            &mut out.names,
            (e.backend, op, e.peers),
            |k| Name {
                backend: k.0.clone(),
                op: k.1,
                peers: k.2,
            },
        );
        let group = intern(&mut self.groups, &mut out.groups, (e.pg, e.pg_desc), |k| {
            k.clone()
        });
        let mut shape =
            |v: Vec<Vec<i64>>| intern(&mut self.shapes, &mut out.shapes, v, |k| k.clone());
        let input_sizes = shape(e.input_sizes);
        let output_sizes = shape(e.output_sizes);
        let mut dtype =
            |v: Vec<String>| intern(&mut self.dtypes, &mut out.dtypes, v, |k| k.clone());
        let input_dtypes = dtype(e.input_dtypes);
        let output_dtypes = dtype(e.output_dtypes);
        let list: Vec<u32> = e
            .frames
            .into_iter()
            .map(|f| intern(&mut self.frames, &mut out.frames, f, |k| k.clone()))
            .collect();
        let frames = intern(&mut self.frame_lists, &mut out.frame_lists, list, |k| {
            k.clone()
        });
        let key = [op, input_sizes, output_sizes, input_dtypes, output_dtypes];
        let fp = intern(&mut self.fps, &mut out.fps, key, |k| *k);
        out.entries.push(Entry::pack(&EntryValues {
            pos: e.pos,
            record_id: e.record_id,
            group,
            pg_id: e.pg_id,
            seq: e.seq,
            p2p_seq: e.p2p_seq,
            is_p2p: e.is_p2p,
            name,
            input_sizes,
            output_sizes,
            input_dtypes,
            output_dtypes,
            state: e.state,
            retired: e.retired,
            time_created_ns: e.time_created_ns,
            time_started_ns: e.time_started_ns,
            time_completed_ns: e.time_completed_ns,
            timeout_ms: e.timeout_ms,
            frames,
            fp,
        }));
    }

    pub fn finish(self) -> Checked {
        self.out
    }
}

impl Checked {
    /// An entry's values, owned (the inverse of `Builder::push`).
    pub fn owned(&self, i: usize) -> OwnedEntry {
        let e = &self.entries[i];
        let name = &self.names[e.name as usize];
        let (pg, pg_desc) = self.groups[e.group as usize].clone();
        OwnedEntry {
            pos: e.pos(),
            record_id: e.record_id,
            pg,
            pg_desc,
            pg_id: e.pg_id(),
            seq: e.seq,
            p2p_seq: e.p2p_seq(),
            is_p2p: e.is_p2p,
            op: self.ops[name.op as usize].clone(),
            backend: name.backend.clone(),
            peers: name.peers,
            input_sizes: self.shapes[e.input_sizes as usize].clone(),
            output_sizes: self.shapes[e.output_sizes as usize].clone(),
            input_dtypes: self.dtypes[e.input_dtypes as usize].clone(),
            output_dtypes: self.dtypes[e.output_dtypes as usize].clone(),
            state: e.state,
            retired: e.retired(),
            time_created_ns: e.time_created_ns(),
            time_started_ns: e.time_started_ns(),
            time_completed_ns: e.time_completed_ns(),
            timeout_ms: e.timeout_ms(),
            frames: self.frame_lists[e.frames as usize]
                .iter()
                .map(|&f| self.frames[f as usize].clone())
                .collect(),
        }
    }

    /// Bytes held, roughly: the entries and the shared values (what the memory budget
    /// charges a dump with).
    pub fn heap_bytes(&self) -> usize {
        let text = |s: &String| s.capacity() + std::mem::size_of::<String>();
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.ops.iter().map(text).sum::<usize>()
            + self
                .names
                .iter()
                .map(|n| text(&n.backend) + 32)
                .sum::<usize>()
            + self
                .groups
                .iter()
                .map(|(a, b)| text(a) + text(b))
                .sum::<usize>()
            + self
                .shapes
                .iter()
                .map(|s| 24 + s.iter().map(|d| 24 + 8 * d.capacity()).sum::<usize>())
                .sum::<usize>()
            + self
                .dtypes
                .iter()
                .map(|d| 24 + d.iter().map(text).sum::<usize>())
                .sum::<usize>()
            + self
                .frames
                .iter()
                .map(|f| text(&f.filename) + text(&f.name) + 8)
                .sum::<usize>()
            + self
                .frame_lists
                .iter()
                .map(|l| 24 + 4 * l.capacity())
                .sum::<usize>()
            + self.fps.capacity() * 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pickle.dumps({"version": "2.10", "entries": [e, e]}, protocol=2) with e a small entry
    fn dump(entries: &[u8]) -> Vec<u8> {
        let mut v = b"\x80\x02}q\x00(X\x07\x00\x00\x00versionq\x01X\x04\x00\x00\x002.10q\x02X\x07\x00\x00\x00entriesq\x03]q\x04(".to_vec();
        v.extend_from_slice(entries);
        v.extend_from_slice(b"eu.");
        v
    }

    // {"profiling_name": "nccl:all_reduce", "collective_seq_id": 7, "state": "completed",
    //  "input_sizes": [[2, 3]], "frames": [{"filename": "t.py", "name": "f", "line": 5}]}
    const ENTRY: &[u8] = b"}(X\x0e\x00\x00\x00profiling_nameX\x0f\x00\x00\x00nccl:all_reduceX\x11\x00\x00\x00collective_seq_idK\x07X\x05\x00\x00\x00stateX\x09\x00\x00\x00completedX\x0b\x00\x00\x00input_sizes](](K\x02K\x03eeX\x06\x00\x00\x00frames](}(X\x08\x00\x00\x00filenameX\x04\x00\x00\x00t.pyX\x04\x00\x00\x00nameX\x01\x00\x00\x00fX\x04\x00\x00\x00lineK\x05ueu";

    #[test]
    fn reads_and_checks_a_small_dump() {
        let mut entries = ENTRY.to_vec();
        entries.extend_from_slice(ENTRY);
        let data = dump(&entries);
        let doc = parse(&data).unwrap();
        let c = check(&doc, None, Some(data.len())).unwrap();
        assert_eq!(c.entries.len(), 2);
        let e = &c.entries[1];
        assert_eq!(
            (e.pos(), e.record_id, e.seq, e.state, e.is_p2p),
            (1, 1, 7, 2, false)
        );
        assert_eq!(c.ops[c.names[e.name as usize].op as usize], "all_reduce");
        assert_eq!(c.names[e.name as usize].backend, "nccl");
        assert_eq!(c.shapes[e.input_sizes as usize], vec![vec![2, 3]]);
        assert_eq!(c.frames.len(), 2); // two frame dicts (not shared in this pickle)
        assert_eq!(c.groups[e.group as usize], (String::new(), String::new()));
        assert_eq!(c.entries[0].fp, e.fp);
        let kept = check(&doc, Some(1), None).unwrap();
        assert_eq!(
            (kept.start, kept.entries.len(), kept.entries[0].pos()),
            (1, 1, 1)
        );
    }

    #[test]
    fn refuses_globals_and_code() {
        for data in [
            &b"\x80\x02cos\nsystem\nX\x01\x00\x00\x00x\x85R."[..],
            b"\x80\x04\x8c\x02os\x8c\x06system\x93.",
            b"\x80\x02\x82\x01.",
            b"\x80\x02X\x01\x00\x00\x00xQ.",
            b"(S'x'\nios\nsystem\n.",
        ] {
            assert!(parse(data).is_err());
        }
    }

    #[test]
    fn truncated_and_malformed_are_not_taken() {
        let mut entries = ENTRY.to_vec();
        entries.extend_from_slice(ENTRY);
        let data = dump(&entries);
        for n in 0..data.len() {
            assert!(parse(&data[..n]).is_err(), "prefix of {n} bytes");
        }
        assert!(parse(b"\x80\x02a.").is_err()); // append to nothing
        assert!(parse(b"\x80\x02K\x01K\x02s.").is_err()); // setitem on an int
        assert!(parse(b"\x80\x02}]K\x01s.").is_err()); // unhashable key
    }

    #[test]
    fn shared_references_cost_one_node() {
        // a list that holds one list a million times: two bytes a reference
        let mut data = b"\x80\x02](K\x01K\x02K\x03lq\x00(".to_vec();
        for _ in 0..1_000_000 {
            data.extend_from_slice(b"h\x00");
        }
        data.extend_from_slice(b"e.");
        let doc = parse(&data).unwrap();
        assert!(doc.nodes.len() < 10);
    }

    #[test]
    fn containers_filled_piecemeal_keep_their_items_within_a_bound() {
        // two lists appended to in turns: each append moves the other's items
        let turns = |n: usize| {
            let mut p = b"\x80\x02(]q\x00]q\x01".to_vec();
            for i in 0..n {
                p.extend_from_slice(&[b'h', (i % 2) as u8, b'K', (i % 2) as u8 + 1, b'a', b'0']);
            }
            p.extend_from_slice(b"t.");
            p
        };
        let data = turns(6);
        let doc = parse(&data).unwrap();
        let lists = doc.seq(doc.root);
        for (l, want) in lists.iter().zip([1, 2]) {
            let got: Vec<_> = doc.seq(*l).iter().map(|&i| *doc.node(i)).collect();
            assert_eq!(got, vec![Node::Int(want); 3]);
        }
        // moving more ids than the input has bytes is refused (quadratic otherwise)
        assert!(parse(&turns(20_000)).is_err());
    }

    #[test]
    fn the_work_limit_and_bad_entries_fall_back() {
        let mut entries = Vec::new();
        for _ in 0..10 {
            entries.extend_from_slice(ENTRY);
        }
        let data = dump(&entries);
        let doc = parse(&data).unwrap();
        assert!(check(&doc, None, Some(20)).is_none());
        assert!(check(&doc, None, Some(100)).is_some());
        // the second entry's seq as text: not accepted here
        let i = ENTRY.windows(2).position(|w| w == b"K\x07").unwrap();
        let mut odd = ENTRY.to_vec();
        odd.splice(i..i + 2, b"X\x01\x00\x00\x007".iter().copied());
        let mut entries = ENTRY.to_vec();
        entries.extend_from_slice(&odd);
        let data = dump(&entries);
        let doc = parse(&data).unwrap();
        assert!(check(&doc, None, None).is_none());
    }

    #[test]
    fn peers_follow_python() {
        assert_eq!(peers("send", "1->2"), Some(Some((Some(1), Some(2)))));
        assert_eq!(peers("recv", "3<-0"), Some(Some((Some(0), Some(3)))));
        assert_eq!(peers("send", " ? -> 4 "), Some(Some((None, Some(4)))));
        assert_eq!(peers("send", "x->2"), None);
        assert_eq!(peers("all_reduce", "1->2"), Some(None));
        assert_eq!(peers("send", ""), Some(None));
    }

    #[test]
    fn long1_is_sign_extended() {
        let doc = parse(b"\x80\x02\x8a\x02\xff\xff.").unwrap();
        assert_eq!(doc.node(doc.root), &Node::Int(-1));
        let doc = parse(b"\x80\x02\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80.").unwrap();
        assert_eq!(doc.node(doc.root), &Node::Int(i64::MIN));
        let doc = parse(b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.").unwrap();
        assert_eq!(doc.node(doc.root), &Node::BigInt);
    }

    #[test]
    fn builder_round_trips_what_check_gives() {
        let mut entries = ENTRY.to_vec();
        entries.extend_from_slice(ENTRY);
        let data = dump(&entries);
        let doc = parse(&data).unwrap();
        let c = check(&doc, None, None).unwrap();
        let mut b = Builder::default();
        for i in 0..c.entries.len() {
            b.push(c.owned(i));
        }
        let again = b.finish();
        for i in 0..c.entries.len() {
            assert_eq!(again.owned(i), c.owned(i));
        }
        assert_eq!(again.frames.len(), 1); // equal frames share one value here
        assert!(again.heap_bytes() > 2 * std::mem::size_of::<Entry>());
    }

    #[test]
    fn entries_pack_their_optional_values() {
        assert!(std::mem::size_of::<Entry>() <= 104);
        let mut v = EntryValues {
            pos: 3,
            record_id: -1,
            group: 0,
            pg_id: None,
            seq: 9,
            p2p_seq: Some(0),
            is_p2p: true,
            name: 1,
            input_sizes: 2,
            output_sizes: 3,
            input_dtypes: 4,
            output_dtypes: 5,
            state: 2,
            retired: Some(false),
            time_created_ns: Some(i64::MIN),
            time_started_ns: None,
            time_completed_ns: Some(i64::MAX),
            timeout_ms: None,
            frames: 6,
            fp: 7,
        };
        let e = Entry::pack(&v);
        assert_eq!(
            (
                e.pos(),
                e.pg_id(),
                e.p2p_seq(),
                e.retired(),
                e.time_created_ns()
            ),
            (3, None, Some(0), Some(false), Some(i64::MIN))
        );
        assert_eq!(
            (e.time_started_ns(), e.time_completed_ns(), e.timeout_ms()),
            (None, Some(i64::MAX), None)
        );
        v.retired = None;
        v.pg_id = Some(0);
        let e = Entry::pack(&v);
        assert_eq!((e.retired(), e.pg_id()), (None, Some(0)));
        v.retired = Some(true);
        assert_eq!(Entry::pack(&v).retired(), Some(true));
    }
}
