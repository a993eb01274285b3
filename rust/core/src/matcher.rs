//! A small FFI over the system Hyperscan (Vectorscan) library: one block-mode database of many
//! expressions, scanned line by line. Only the calls rankwatch needs are bound.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr, CString};
use std::hash::BuildHasher;
use std::ptr;

#[repr(C)]
struct HsDatabase {
    _private: [u8; 0],
}
#[repr(C)]
struct HsScratch {
    _private: [u8; 0],
}
#[repr(C)]
struct HsCompileError {
    message: *mut c_char,
    expression: c_int,
}
/// `hs_platform_info_t`: the CPU a database is compiled for.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PlatformInfo {
    pub tune: c_uint,
    pub cpu_features: c_ulonglong,
    reserved1: c_ulonglong,
    reserved2: c_ulonglong,
}

type MatchHandler = unsafe extern "C" fn(
    id: c_uint,
    from: c_ulonglong,
    to: c_ulonglong,
    flags: c_uint,
    ctx: *mut c_void,
) -> c_int;

// Debian's libhs.a is compiled as position-independent *executable* code (-fPIE), not -fPIC:
// it reads glibc's `__libc_single_threaded` (which GCC's inlined shared_ptr and atomic helpers
// check to skip atomics while a process has one thread) with a direct PC-relative load, which
// a shared object such as the Python extension cannot resolve against libc.so ("relocation
// R_X86_64_PC32 cannot be used against symbol '__libc_single_threaded'"). This definition,
// hidden so that it binds inside the extension, is what those loads read. It is always 0
// ("more than one thread"), so that code always takes its atomic path: correct in any process,
// for the cost of an uncontended atomic where a single-threaded process would have skipped it.
#[cfg(all(hs_static, target_os = "linux"))]
std::arch::global_asm!(
    ".pushsection .data.rankwatch_libc_single_threaded,\"aw\"",
    ".globl __libc_single_threaded",
    ".hidden __libc_single_threaded",
    ".type __libc_single_threaded, %object",
    ".size __libc_single_threaded, 1",
    "__libc_single_threaded:",
    ".byte 0",
    ".popsection",
);

// Linked by build.rs: libhs.a (with the C++ runtime) when available, else libhs.so.
extern "C" {
    fn hs_compile_multi(
        expressions: *const *const c_char,
        flags: *const c_uint,
        ids: *const c_uint,
        elements: c_uint,
        mode: c_uint,
        platform: *const PlatformInfo,
        db: *mut *mut HsDatabase,
        error: *mut *mut HsCompileError,
    ) -> c_int;
    fn hs_free_database(db: *mut HsDatabase) -> c_int;
    fn hs_free_compile_error(error: *mut HsCompileError) -> c_int;
    fn hs_alloc_scratch(db: *const HsDatabase, scratch: *mut *mut HsScratch) -> c_int;
    fn hs_free_scratch(scratch: *mut HsScratch) -> c_int;
    fn hs_scan(
        db: *const HsDatabase,
        data: *const c_char,
        length: c_uint,
        flags: c_uint,
        scratch: *mut HsScratch,
        on_event: Option<MatchHandler>,
        context: *mut c_void,
    ) -> c_int;
    fn hs_version() -> *const c_char;
    fn hs_populate_platform(platform: *mut PlatformInfo) -> c_int;
    fn hs_serialize_database(
        db: *const HsDatabase,
        bytes: *mut *mut c_char,
        length: *mut usize,
    ) -> c_int;
    fn hs_deserialize_database(
        bytes: *const c_char,
        length: usize,
        db: *mut *mut HsDatabase,
    ) -> c_int;
    fn hs_database_info(db: *const HsDatabase, info: *mut *mut c_char) -> c_int;
}

// Hyperscan hands out serialized bytes and info strings from its misc allocator, which is
// malloc unless an application replaces it (rankwatch never does).
extern "C" {
    fn free(ptr: *mut c_void);
}

const HS_SUCCESS: c_int = 0;
const HS_SCAN_TERMINATED: c_int = -3;
const HS_MODE_BLOCK: c_uint = 1;
pub const FLAG_CASELESS: u32 = 1;
pub const FLAG_SINGLEMATCH: u32 = 8;

/// One expression to compile, with the id reported when it matches.
pub struct Expression<'a> {
    pub pattern: &'a str,
    pub id: u32,
    pub flags: u32,
}

/// Why an expression set did not compile: which expression (index into the input) and the
/// library's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    pub expression: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A compiled block-mode database. Immutable after compilation; shareable across threads.
pub struct Matcher {
    db: *mut HsDatabase,
    len: usize,
}

// The database is read-only after compilation; Hyperscan documents it as safe to share.
unsafe impl Send for Matcher {}
unsafe impl Sync for Matcher {}

impl Matcher {
    pub fn compile(exprs: &[Expression<'_>]) -> Result<Matcher, CompileError> {
        if exprs.is_empty() {
            return Err(CompileError {
                expression: None,
                message: "no expressions to compile".into(),
            });
        }
        let mut cstrings = Vec::with_capacity(exprs.len());
        for (i, e) in exprs.iter().enumerate() {
            cstrings.push(CString::new(e.pattern).map_err(|_| CompileError {
                expression: Some(i),
                message: "pattern contains a NUL byte".into(),
            })?);
        }
        let ptrs: Vec<*const c_char> = cstrings.iter().map(|c| c.as_ptr()).collect();
        let flags: Vec<c_uint> = exprs.iter().map(|e| e.flags).collect();
        let ids: Vec<c_uint> = exprs.iter().map(|e| e.id).collect();
        let mut db: *mut HsDatabase = ptr::null_mut();
        let mut err: *mut HsCompileError = ptr::null_mut();
        let rc = unsafe {
            hs_compile_multi(
                ptrs.as_ptr(),
                flags.as_ptr(),
                ids.as_ptr(),
                exprs.len() as c_uint,
                HS_MODE_BLOCK,
                ptr::null(),
                &mut db,
                &mut err,
            )
        };
        if rc != HS_SUCCESS {
            let mut out = CompileError {
                expression: None,
                message: format!("hyperscan compile failed with code {rc}"),
            };
            if !err.is_null() {
                unsafe {
                    let e = &*err;
                    if !e.message.is_null() {
                        out.message = CStr::from_ptr(e.message).to_string_lossy().into_owned();
                    }
                    if e.expression >= 0 {
                        out.expression = Some(e.expression as usize);
                    }
                    hs_free_compile_error(err);
                }
            }
            return Err(out);
        }
        Ok(Matcher {
            db,
            len: exprs.len(),
        })
    }

    /// The database as bytes that [`Matcher::deserialize`] accepts on a machine with the same
    /// library version and CPU features; `None` if the library could not allocate them.
    pub fn serialize(&self) -> Option<Vec<u8>> {
        let mut bytes: *mut c_char = ptr::null_mut();
        let mut length: usize = 0;
        let rc = unsafe { hs_serialize_database(self.db, &mut bytes, &mut length) };
        if rc != HS_SUCCESS || bytes.is_null() {
            return None;
        }
        let out = unsafe { std::slice::from_raw_parts(bytes as *const u8, length) }.to_vec();
        unsafe { free(bytes as *mut c_void) };
        Some(out)
    }

    /// Rebuilds a database from [`Matcher::serialize`] output holding `len` expressions. The
    /// library checks its own header (magic, version, platform); the caller must make sure the
    /// bytes are the ones serialized (a checksum), as the bytecode itself is trusted.
    pub fn deserialize(bytes: &[u8], len: usize) -> Result<Matcher, String> {
        if len == 0 {
            return Err("no expressions".into());
        }
        let mut db: *mut HsDatabase = ptr::null_mut();
        let rc = unsafe {
            hs_deserialize_database(bytes.as_ptr() as *const c_char, bytes.len(), &mut db)
        };
        if rc != HS_SUCCESS || db.is_null() {
            return Err(format!("hs_deserialize_database failed with code {rc}"));
        }
        let matcher = Matcher { db, len };
        let info = matcher.info()?;
        if !info.contains("BLOCK") {
            return Err(format!("not a block-mode database ({info})"));
        }
        Ok(matcher)
    }

    /// The library's description of the database: version, CPU features, mode.
    pub fn info(&self) -> Result<String, String> {
        let mut info: *mut c_char = ptr::null_mut();
        let rc = unsafe { hs_database_info(self.db, &mut info) };
        if rc != HS_SUCCESS || info.is_null() {
            return Err(format!("hs_database_info failed with code {rc}"));
        }
        let text = unsafe { CStr::from_ptr(info) }
            .to_string_lossy()
            .into_owned();
        unsafe { free(info as *mut c_void) };
        Ok(text)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn scratch(&self) -> Scratch {
        let mut s: *mut HsScratch = ptr::null_mut();
        let rc = unsafe { hs_alloc_scratch(self.db, &mut s) };
        assert!(rc == HS_SUCCESS, "hs_alloc_scratch failed: {rc}");
        Scratch { ptr: s }
    }

    /// One `hs_scan` of `data`; `on_match` receives `ctx` with every match.
    fn scan_raw(
        &self,
        data: &[u8],
        scratch: &mut Scratch,
        on_match: MatchHandler,
        ctx: *mut c_void,
    ) {
        let len = data.len().min(u32::MAX as usize) as c_uint;
        let rc = unsafe {
            hs_scan(
                self.db,
                data.as_ptr() as *const c_char,
                len,
                0,
                scratch.ptr,
                Some(on_match),
                ctx,
            )
        };
        debug_assert!(
            rc == HS_SUCCESS || rc == HS_SCAN_TERMINATED,
            "hs_scan: {rc}"
        );
    }

    /// Scans `data` and appends the id of every expression that matched (once each with
    /// SINGLEMATCH) to `out`.
    pub fn scan_into(&self, data: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        unsafe extern "C" fn on_match(
            id: c_uint,
            _from: c_ulonglong,
            _to: c_ulonglong,
            _flags: c_uint,
            ctx: *mut c_void,
        ) -> c_int {
            let out = &mut *(ctx as *mut Vec<u32>);
            out.push(id);
            0
        }
        self.scan_raw(data, scratch, on_match, out as *mut Vec<u32> as *mut c_void);
    }

    /// Counts matches without collecting them (used by the ceiling benchmark).
    pub fn count_matches(&self, data: &[u8], scratch: &mut Scratch) -> u64 {
        unsafe extern "C" fn on_match(
            _id: c_uint,
            _from: c_ulonglong,
            _to: c_ulonglong,
            _flags: c_uint,
            ctx: *mut c_void,
        ) -> c_int {
            *(ctx as *mut u64) += 1;
            0
        }
        let mut n: u64 = 0;
        self.scan_raw(data, scratch, on_match, &mut n as *mut u64 as *mut c_void);
        n
    }
}

/// How many distinct messages a [`ScanMemo`] remembers (a power of two: two ways per set).
const SCAN_MEMO_SLOTS: usize = 1024;
/// Messages longer than this are scanned without the memo, which holds at most
/// `SCAN_MEMO_SLOTS` times this many bytes.
pub const SCAN_MEMO_MAX_BYTES: usize = 1024;

/// Remembers the expression ids Hyperscan found in recently scanned messages, so that an
/// identical message is answered without scanning it again. Logs repeat messages all the
/// time (every rank of a node prints the same NCCL banner, topology and per-step lines), and
/// a scan of a short message costs thousands of instructions in a database of a thousand
/// patterns, against tens for hashing and comparing it. A scan's result depends on the
/// message's bytes alone, so the ids (in the order the scan reported them) are the same.
/// For a digit-blind database (no pattern tells one digit from another, see
/// [`crate::digits`]) the key is the message with its digits masked, so a message that
/// differs from a remembered one only in its numbers is answered too.
///
/// Two ways per set, with a second chance: a message that missed takes a way that was not
/// asked for since it was filled, and when both were, it only clears their marks. Logs mix
/// shapes that recur all the time with shapes seen once (a line carrying a pointer or a
/// hash); a direct-mapped memo let each one-off message evict a recurring one, and a
/// 16k-rank job's one-off NCCL init lines cost a quarter more scans. For one database only.
pub struct ScanMemo {
    slots: Vec<MemoSlot>,
    hasher: foldhash::fast::FixedState,
    mask: MemoKey,
    key: Vec<u8>,
}

/// What a [`ScanMemo`]'s key leaves out of a message: what no pattern of its database tells
/// apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoKey {
    /// Nothing: the key is the message.
    Exact,
    /// Digits ([`crate::digits::mask_digits`]).
    Digits,
    /// Digits, and the letters of hex tokens ([`crate::hextoken::mask_hex_tokens`]).
    DigitsAndHexTokens,
}

#[derive(Default)]
struct MemoSlot {
    filled: bool,
    /// Asked for since it was filled (or since its mark was last cleared).
    used: bool,
    hash: u64,
    msg: Vec<u8>,
    ids: Vec<u32>,
}

impl MemoSlot {
    fn holds(&self, hash: u64, key: &[u8]) -> bool {
        self.filled && self.hash == hash && self.msg == key
    }

    fn fill(&mut self, hash: u64, key: &[u8], ids: &[u32]) {
        self.filled = true;
        self.used = false;
        self.hash = hash;
        self.msg.clear();
        self.msg.extend_from_slice(key);
        self.ids.clear();
        self.ids.extend_from_slice(ids);
    }
}

impl Default for ScanMemo {
    fn default() -> Self {
        ScanMemo::new(MemoKey::Exact)
    }
}

impl ScanMemo {
    /// A memo keyed by the message with what `mask` says masked.
    pub fn new(mask: MemoKey) -> ScanMemo {
        ScanMemo {
            slots: (0..SCAN_MEMO_SLOTS).map(|_| MemoSlot::default()).collect(),
            hasher: foldhash::fast::FixedState::with_seed(0x5ca7_3e30),
            mask,
            key: Vec::new(),
        }
    }

    /// [`Matcher::scan_into`] of `data`, from the memo when `data` (or, digit-blind, a
    /// message of the same shape) is remembered; `matcher` must be the database every
    /// earlier call used.
    pub fn scan_into(
        &mut self,
        matcher: &Matcher,
        data: &[u8],
        scratch: &mut Scratch,
        out: &mut Vec<u32>,
    ) {
        if data.len() > SCAN_MEMO_MAX_BYTES {
            matcher.scan_into(data, scratch, out);
            return;
        }
        let key: &[u8] = match self.mask {
            MemoKey::Exact => data,
            MemoKey::Digits => {
                crate::digits::mask_digits(data, &mut self.key);
                &self.key
            }
            MemoKey::DigitsAndHexTokens => {
                crate::digits::mask_digits(data, &mut self.key);
                crate::hextoken::mask_hex_tokens(&mut self.key);
                &self.key
            }
        };
        let h = self.hasher.hash_one(key);
        let set = (h as usize & (SCAN_MEMO_SLOTS / 2 - 1)) * 2;
        let ways = &mut self.slots[set..set + 2];
        if let Some(way) = ways.iter_mut().find(|w| w.holds(h, key)) {
            way.used = true;
            out.extend_from_slice(&way.ids);
            return;
        }
        let first = out.len();
        matcher.scan_into(data, scratch, out);
        match ways.iter_mut().find(|w| !w.filled || !w.used) {
            Some(way) => way.fill(h, key, &out[first..]),
            None => ways.iter_mut().for_each(|w| w.used = false),
        }
    }
}

impl Drop for Matcher {
    fn drop(&mut self) {
        unsafe {
            hs_free_database(self.db);
        }
    }
}

/// `pats` as SINGLEMATCH expressions whose ids are their indexes (for tests).
#[cfg(test)]
pub(crate) fn numbered<'a>(pats: &[&'a str]) -> Vec<Expression<'a>> {
    pats.iter()
        .enumerate()
        .map(|(i, p)| Expression {
            pattern: p,
            id: i as u32,
            flags: FLAG_SINGLEMATCH,
        })
        .collect()
}

/// Per-thread scan scratch space for one database.
pub struct Scratch {
    ptr: *mut HsScratch,
}

// A scratch is used by one thread at a time (enforced by &mut); moving it between threads is fine.
unsafe impl Send for Scratch {}
unsafe impl Sync for Scratch {}

impl Drop for Scratch {
    fn drop(&mut self) {
        unsafe {
            hs_free_scratch(self.ptr);
        }
    }
}

/// The library's version string, e.g. "5.4.9 2023-01-01".
pub fn library_version() -> String {
    unsafe { CStr::from_ptr(hs_version()).to_string_lossy().into_owned() }
}

/// The CPU this process runs on, as the library sees it (what it compiles for by default).
pub fn host_platform() -> Option<PlatformInfo> {
    let mut p = PlatformInfo::default();
    let rc = unsafe { hs_populate_platform(&mut p) };
    (rc == HS_SUCCESS).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(pats: &[&str]) -> Result<Matcher, CompileError> {
        Matcher::compile(&numbered(pats))
    }

    #[test]
    fn matches_report_ids_once() {
        let m = compile(&["Connect to \\S+ failed", "NCCL WARN", "^never"]).unwrap();
        let mut s = m.scratch();
        let mut out = Vec::new();
        m.scan_into(
            b"x NCCL WARN Connect to 1.2.3.4<5> failed : no; NCCL WARN again",
            &mut s,
            &mut out,
        );
        out.sort();
        assert_eq!(out, vec![0, 1]);
    }

    #[test]
    fn bad_pattern_names_the_expression() {
        let err = compile(&["fine", "(?<=look)behind"]).err().unwrap();
        assert_eq!(err.expression, Some(1));
        assert!(!err.message.is_empty());
    }

    #[test]
    fn version_is_reported() {
        assert!(!library_version().is_empty());
    }

    #[test]
    fn serialized_database_scans_like_the_original() {
        let m = compile(&["Connect to \\S+ failed", "NCCL WARN", "^never"]).unwrap();
        let bytes = m.serialize().unwrap();
        let back = Matcher::deserialize(&bytes, m.len()).unwrap();
        assert_eq!(back.len(), 3);
        let line = b"x NCCL WARN Connect to 1.2.3.4<5> failed : no";
        let (mut a, mut b) = (Vec::new(), Vec::new());
        m.scan_into(line, &mut m.scratch(), &mut a);
        back.scan_into(line, &mut back.scratch(), &mut b);
        a.sort();
        b.sort();
        assert_eq!(a, vec![0, 1]);
        assert_eq!(a, b);
        assert!(back.info().unwrap().contains("BLOCK"));
    }

    #[test]
    fn damaged_header_is_refused() {
        let m = compile(&["NCCL WARN"]).unwrap();
        let bytes = m.serialize().unwrap();
        assert!(Matcher::deserialize(&bytes[..bytes.len() / 2], 1).is_err());
        assert!(Matcher::deserialize(&[], 1).is_err());
        let mut bad_magic = bytes.clone();
        bad_magic[0] ^= 0xff;
        assert!(Matcher::deserialize(&bad_magic, 1).is_err());
    }

    #[test]
    fn memo_answers_like_a_scan_in_any_order() {
        let m = compile(&[
            "Connect to \\S+ failed",
            "NCCL WARN",
            "^Using network \\S",
            "WARN$",
        ])
        .unwrap();
        let mut s = m.scratch();
        let long = format!("NCCL WARN {}", "x".repeat(SCAN_MEMO_MAX_BYTES));
        let messages: Vec<&[u8]> = vec![
            b"x NCCL WARN Connect to 1.2.3.4<5> failed : no",
            b"Using network Socket",
            b"nothing here",
            b"",
            b"NCCL WARN",
            long.as_bytes(),
        ];
        let mut memo = ScanMemo::default();
        // Every message many times, in an order that revisits and evicts slots.
        for round in 0..(3 * SCAN_MEMO_SLOTS) {
            let msg = messages[(round * 7 + round / 5) % messages.len()];
            let filler = format!("filler {round} NCCL WARN");
            for data in [msg, filler.as_bytes()] {
                let (mut direct, mut memoed) = (vec![99], vec![99]);
                m.scan_into(data, &mut s, &mut direct);
                memo.scan_into(&m, data, &mut s, &mut memoed);
                assert_eq!(direct, memoed, "{:?}", String::from_utf8_lossy(data));
            }
        }
    }

    #[test]
    fn one_off_messages_do_not_evict_a_recurring_one() {
        let m = compile(&["recurring", "filler"]).unwrap();
        let mut s = m.scratch();
        let mut memo = ScanMemo::default();
        let mut scans = 0;
        let mut scan = |memo: &mut ScanMemo, data: &[u8]| {
            // An exact memo's key is the message: a miss is a message no way holds.
            scans += usize::from(!memo.slots.iter().any(|w| w.filled && w.msg == data));
            let mut out = Vec::new();
            memo.scan_into(&m, data, &mut s, &mut out);
            out
        };
        for i in 0..20 * SCAN_MEMO_SLOTS {
            assert_eq!(scan(&mut memo, b"a recurring message"), vec![0]);
            let filler = format!("filler {i:x}");
            assert_eq!(scan(&mut memo, filler.as_bytes()), vec![1]);
        }
        // Every filler is scanned, the recurring message only the first time.
        assert_eq!(scans, 20 * SCAN_MEMO_SLOTS + 1);
    }

    #[test]
    fn host_platform_is_known() {
        assert!(host_platform().is_some());
    }
}
