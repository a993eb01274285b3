//! The catalog's patterns as Hyperscan databases, and how a message is scanned against them.
//!
//! Where every pattern has a digit-blind form ([`crate::digits`]), the main database holds
//! those forms, so the scan memo can answer for any message of a shape it has seen (digits
//! masked). A hit of a pattern that had to be widened is confirmed by its original form,
//! compiled as a Rust regex (the same syntax read the same way: bytes, ASCII classes), on
//! that message alone: a few hundred instructions, where a Hyperscan call costs thousands
//! even for a small database. A catalog with a pattern that cannot be made blind gets the
//! original patterns and an exact memo. Either way a scan reports exactly the expressions
//! whose original pattern matches the message.
//!
//! Where moreover no blind form can tell the letters of a hex token apart
//! ([`crate::hextoken`]), the memo's key also masks those: the plan records it, and a cached
//! entry keeps it after the widened ids (as one more id, the number of expressions).

use crate::dbcache::{CacheKey, CacheReport, DbCache, DbOrigin};
use crate::digits::{blind, Blind};
use crate::hextoken::is_token_blind;
use crate::matcher::{
    CompileError, Expression, Matcher, MemoKey, ScanMemo, Scratch, FLAG_CASELESS,
};
use regex_automata::meta::{Cache, Regex};
use regex_automata::util::syntax;
use regex_automata::Input;
use std::sync::OnceLock;

/// The databases of one catalog.
pub struct ScanDb {
    main: Matcher,
    /// By expression id: the original form of a widened pattern, which confirms its hits.
    confirm: Vec<Option<Confirm>>,
    key: MemoKey,
}

/// The original form of a widened pattern, compiled on its first hit: most catalogs' widened
/// patterns never hit a given log, and compiling all of them would cost a one-line
/// `analyze` about 30 ms.
struct Confirm {
    pattern: String,
    flags: u32,
    regex: OnceLock<Option<Regex>>,
}

impl Confirm {
    fn regex(&self) -> Option<&Regex> {
        self.regex
            .get_or_init(|| confirm_regex(&self.pattern, self.flags))
            .as_ref()
    }
}

/// One thread's scratch space, memo and regex caches for a [`ScanDb`].
pub struct Scanner {
    scratch: Scratch,
    memo: ScanMemo,
    /// By expression id, made on first use.
    caches: Vec<Option<Cache>>,
}

/// A compile error of the original patterns: which expression and why.
pub type BuildError = CompileError;

impl ScanDb {
    /// Compiles `exprs` (ids are their indexes), or loads them from `cache`; the report
    /// describes the main database. Errors name an original expression.
    pub fn build(
        exprs: &[Expression<'_>],
        source_names: &[&str],
        cache: Option<&DbCache>,
    ) -> Result<(ScanDb, CacheReport), BuildError> {
        let blind = Variant {
            tag: BLIND_VARIANT,
            exprs,
            source_names,
            cache,
        };
        if let Some(built) = blind.load_or_build(|| BlindPlan::of(exprs)?.build().ok()) {
            let (main, stored, report) = built;
            let (widened, key) = read_plan_ids(&stored, exprs.len());
            let db = ScanDb {
                confirm: confirmations(exprs, widened),
                main,
                key,
            };
            return Ok((db, report));
        }
        let exact = Variant {
            tag: EXACT_VARIANT,
            ..blind
        };
        let mut error = None;
        let built = exact.load_or_build(|| match Matcher::compile(exprs) {
            Ok(m) => Some((m, Vec::new())),
            Err(e) => {
                error = Some(e);
                None
            }
        });
        match (built, error) {
            (Some((main, _, report)), _) => {
                let db = ScanDb {
                    main,
                    confirm: Vec::new(),
                    key: MemoKey::Exact,
                };
                Ok((db, report))
            }
            (None, Some(e)) => Err(e),
            (None, None) => Err(CompileError {
                expression: None,
                message: "the catalog's patterns did not compile".into(),
            }),
        }
    }

    /// The main database (the Hyperscan-alone ceiling of the benchmarks scans with it).
    pub fn matcher(&self) -> &Matcher {
        &self.main
    }

    /// Whether scan results are shared between messages that differ only in digits.
    pub fn is_digit_blind(&self) -> bool {
        self.key != MemoKey::Exact
    }

    /// Whether they are also shared between messages that differ only in hex tokens.
    pub fn is_token_blind(&self) -> bool {
        self.key == MemoKey::DigitsAndHexTokens
    }

    pub fn scanner(&self) -> Scanner {
        Scanner {
            scratch: self.main.scratch(),
            memo: ScanMemo::new(self.key),
            caches: Vec::new(),
        }
    }

    /// Appends the ids of the expressions that match `msg` to `out` (unordered, once each).
    pub fn scan(&self, msg: &[u8], scanner: &mut Scanner, out: &mut Vec<u32>) {
        let first = out.len();
        scanner
            .memo
            .scan_into(&self.main, msg, &mut scanner.scratch, out);
        if self.confirm.is_empty() {
            return;
        }
        let mut kept = first;
        for i in first..out.len() {
            let e = out[i];
            if self.confirms(e, msg, &mut scanner.caches) {
                out[kept] = e;
                kept += 1;
            }
        }
        out.truncate(kept);
    }

    /// Whether a hit of expression `e` in the main database stands for `msg`.
    fn confirms(&self, e: u32, msg: &[u8], caches: &mut Vec<Option<Cache>>) -> bool {
        let Some(confirm) = &self.confirm[e as usize] else {
            return true;
        };
        // Checked at load (`check_parses`); without size limits the build cannot fail, but
        // if it ever did, the widened hit (a superset) is the safe answer.
        let Some(re) = confirm.regex() else {
            return true;
        };
        let i = e as usize;
        if caches.len() <= i {
            caches.resize_with(i + 1, || None);
        }
        let cache = caches[i].get_or_insert_with(|| re.create_cache());
        re.search_half_with(cache, &Input::new(msg).earliest(true))
            .is_some()
    }
}

/// The cache variants: the digit-blind forms and the original patterns. The blind tag covers
/// the code that derives the forms, so a change to it cannot load a database made by another.
const BLIND_VARIANT: &[u8] = concat!(
    "digit-blind ",
    env!("CARGO_PKG_VERSION"),
    include_str!("digits.rs"),
    include_str!("hextoken.rs"),
    include_str!("scandb.rs")
)
.as_bytes();
const EXACT_VARIANT: &[u8] = b"exact";

/// The confirmations of the widened expressions `widened` (valid ids into `exprs`, as a plan
/// made them or a checked cache entry kept them).
fn confirmations(exprs: &[Expression<'_>], widened: &[u32]) -> Vec<Option<Confirm>> {
    let mut confirm: Vec<Option<Confirm>> = (0..exprs.len()).map(|_| None).collect();
    for &id in widened {
        let e = &exprs[id as usize];
        confirm[id as usize] = Some(Confirm {
            pattern: e.pattern.to_string(),
            flags: e.flags,
            regex: OnceLock::new(),
        });
    }
    confirm
}

/// The digit-blind forms of a catalog's expressions.
struct BlindPlan {
    main: Vec<(String, u32, u32)>,
    /// The ids of the widened expressions.
    widened: Vec<u32>,
    /// No form tells the letters of a hex token apart.
    token_blind: bool,
}

/// The ids a cache entry keeps for a plan: the widened ids, then the number of expressions
/// when the plan is token-blind.
fn plan_ids(plan: &BlindPlan) -> Vec<u32> {
    let mut ids = plan.widened.clone();
    if plan.token_blind {
        ids.push(plan.main.len() as u32);
    }
    ids
}

/// The widened ids and the memo key of a plan's stored ids (see [`plan_ids`]).
fn read_plan_ids(ids: &[u32], expressions: usize) -> (&[u32], MemoKey) {
    match ids.split_last() {
        Some((&last, widened)) if last as usize == expressions => {
            (widened, MemoKey::DigitsAndHexTokens)
        }
        _ => (ids, MemoKey::Digits),
    }
}

impl BlindPlan {
    /// `None` when some pattern has no digit-blind form, or the original of a widened one
    /// would not parse as a confirming regex.
    fn of(exprs: &[Expression<'_>]) -> Option<BlindPlan> {
        let mut plan = BlindPlan {
            main: Vec::with_capacity(exprs.len()),
            widened: Vec::new(),
            token_blind: false,
        };
        for (i, e) in exprs.iter().enumerate() {
            if e.id as usize != i {
                return None;
            }
            let caseless = e.flags & FLAG_CASELESS != 0;
            match blind(e.pattern, caseless).ok()? {
                Blind::AsIs => plan.main.push((e.pattern.to_string(), e.id, e.flags)),
                Blind::Widened(wide) => {
                    check_parses(e.pattern, e.flags).ok()?;
                    plan.main.push((wide, e.id, e.flags));
                    plan.widened.push(e.id);
                }
            }
        }
        plan.token_blind = plan.main.iter().all(|(pattern, _, flags)| {
            is_token_blind(pattern, flags & FLAG_CASELESS != 0).unwrap_or(false)
        });
        Some(plan)
    }

    /// The main database and the widened ids, or `Err` when a widened form does not compile
    /// (the caller falls back to the original patterns, whose errors it reports).
    fn build(self) -> Result<(Matcher, Vec<u32>), CompileError> {
        Ok((Matcher::compile(&expressions(&self.main))?, plan_ids(&self)))
    }
}

/// One variant of a catalog's database and where it may be cached.
#[derive(Clone, Copy)]
struct Variant<'a> {
    tag: &'a [u8],
    exprs: &'a [Expression<'a>],
    source_names: &'a [&'a str],
    cache: Option<&'a DbCache>,
}

impl Variant<'_> {
    /// The database and its widened ids from the cache when it holds them, else from `build`
    /// (and stored there); `None` when `build` gives none.
    fn load_or_build(
        &self,
        build: impl FnOnce() -> Option<(Matcher, Vec<u32>)>,
    ) -> Option<(Matcher, Vec<u32>, CacheReport)> {
        let Some(cache) = self.cache else {
            let (m, ids) = build()?;
            return Some((m, ids, CacheReport::uncached()));
        };
        let Some(key) = CacheKey::new(self.source_names, self.exprs, self.tag) else {
            let (m, ids) = build()?;
            let mut report = CacheReport::uncached();
            report.note = Some("cache skipped: Hyperscan cannot describe this CPU".into());
            return Some((m, ids, report));
        };
        let path = cache.path_of(&key);
        let loaded = cache.load(&key, self.exprs.len()).and_then(|(m, ids)| {
            // Ascending ids of expressions; the last may be the token-blind mark.
            let valid = ids.windows(2).all(|w| w[0] < w[1])
                && ids
                    .last()
                    .is_none_or(|&id| (id as usize) <= self.exprs.len());
            valid
                .then_some((m, ids))
                .ok_or_else(|| "ids out of range".to_string())
        });
        let (matcher, ids, origin, mut note) = match loaded {
            Ok((m, ids)) => (m, ids, DbOrigin::Cached, None),
            // A missing file is the normal first run; anything else is worth a debug note.
            Err(why) => {
                let note = path.exists().then(|| format!("cache entry ignored: {why}"));
                let (m, ids) = build()?;
                (m, ids, DbOrigin::Compiled, note)
            }
        };
        if origin == DbOrigin::Compiled {
            if let Err(why) = cache.store(&key, &matcher, &ids) {
                note = Some(format!("cache not written: {why}"));
            }
        }
        let report = CacheReport {
            origin,
            path: Some(path),
            note,
        };
        Some((matcher, ids, report))
    }
}

/// How a confirming regex reads its pattern: as Hyperscan does with `flags` (bytes, ASCII
/// classes, `.` short of `\n`).
fn confirm_syntax(flags: u32) -> syntax::Config {
    syntax::Config::new()
        .unicode(false)
        .utf8(false)
        .case_insensitive(flags & FLAG_CASELESS != 0)
}

/// Whether the confirming regex of `pattern` would compile (a parse, without compiling).
fn check_parses(pattern: &str, flags: u32) -> Result<(), ()> {
    syntax::parse_with(pattern, &confirm_syntax(flags))
        .map(|_| ())
        .map_err(|_| ())
}

fn confirm_regex(pattern: &str, flags: u32) -> Option<Regex> {
    Regex::builder()
        .syntax(confirm_syntax(flags))
        .configure(Regex::config().nfa_size_limit(None))
        .build(pattern)
        .ok()
}

fn expressions(owned: &[(String, u32, u32)]) -> Vec<Expression<'_>> {
    owned
        .iter()
        .map(|(pattern, id, flags)| Expression {
            pattern,
            id: *id,
            flags: *flags,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::FLAG_SINGLEMATCH;

    const PATTERNS: &[&str] = &[
        r"error 802\b",
        r"exitcode: -(?:9|15)\)",
        r"comm 0x[0-9a-f]+ rank \d+",
        r"Connect to \S+ failed",
        r"^Channel \d+/\d+",
        r"code [1-9]\d*$",
    ];

    fn exprs() -> Vec<Expression<'static>> {
        crate::matcher::numbered(PATTERNS)
    }

    /// `PATTERNS` and one more pattern, as expressions.
    fn exprs_with(extra: &'static str) -> Vec<Expression<'static>> {
        let mut all = PATTERNS.to_vec();
        all.push(extra);
        crate::matcher::numbered(&all)
    }

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    #[test]
    fn blind_scan_reports_what_the_original_patterns_match() {
        let exprs = exprs();
        let (db, _) = ScanDb::build(&exprs, &["t"], None).unwrap();
        assert!(db.is_digit_blind());
        let plain = Matcher::compile(&exprs).unwrap();
        let mut plain_scratch = plain.scratch();
        let mut scanner = db.scanner();
        // Messages of one shape with different digits, in an order that answers later ones
        // from the memo: only the original patterns decide.
        let messages = [
            "CUDA error 802 here",
            "CUDA error 803 here",
            "CUDA error 802 here",
            "failed (exitcode: -9) x",
            "failed (exitcode: -8) x",
            "failed (exitcode: -15) x",
            "failed (exitcode: -16) x",
            "comm 0x7f3a rank 3 Connect to 10.0.0.1<2> failed",
            "comm 1x7f3a rank 3 Connect to 10.0.0.1<2> failed",
            "Channel 00/02 code 0",
            "Channel 01/02 code 7",
            "Channel 01/02 code 07",
            "Channel 01/02 code 17",
        ];
        for round in 0..2 {
            for m in messages {
                let (mut want, mut got) = (Vec::new(), Vec::new());
                plain.scan_into(m.as_bytes(), &mut plain_scratch, &mut want);
                db.scan(m.as_bytes(), &mut scanner, &mut got);
                assert_eq!(sorted(got), sorted(want), "round {round}: {m}");
            }
        }
    }

    /// A catalog whose patterns cannot tell a hex token's letters apart shares scans between
    /// messages that differ in them; one pattern that can (`x[0-9]` tells `0x5` from `0xa`)
    /// keeps the letters in the key. Either way the scan reports what the originals match.
    #[test]
    fn hex_tokens_are_masked_only_when_no_pattern_tells_their_letters_apart() {
        let messages = [
            "comm 0x7f3a rank 3 x",
            "comm 0xabcd rank 3 x",
            "comm 0x5 y rank 3",
            "comm 0xa y rank 3",
            "comm 0x5 y rank 3",
        ];
        for (exprs, token_blind) in [(exprs(), true), (exprs_with(r"x[0-9] y"), false)] {
            let (db, _) = ScanDb::build(&exprs, &["t"], None).unwrap();
            assert!(db.is_digit_blind());
            assert_eq!(db.is_token_blind(), token_blind);
            let plain = Matcher::compile(&exprs).unwrap();
            let mut plain_scratch = plain.scratch();
            let mut scanner = db.scanner();
            for m in messages {
                let (mut want, mut got) = (Vec::new(), Vec::new());
                plain.scan_into(m.as_bytes(), &mut plain_scratch, &mut want);
                db.scan(m.as_bytes(), &mut scanner, &mut got);
                assert_eq!(sorted(got), sorted(want), "{m}");
            }
        }
    }

    /// Every message template NCCL and PyTorch can print (`shared/reference/messages`), each
    /// filled in with several sets of numbers and words, through one scanner (so the memo
    /// answers shapes it has seen): the shipped catalog's digit-blind scan must report what
    /// its original patterns report, message by message.
    #[test]
    fn shipped_catalog_scans_reference_messages_like_its_original_patterns() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/reference/messages");
        let Ok(nccl) = std::fs::read_to_string(dir.join("nccl.tsv")) else {
            eprintln!("reference messages not found in {}: skipped", dir.display());
            return;
        };
        let torch = std::fs::read_to_string(dir.join("torch.tsv")).unwrap();
        let catalog = crate::Catalog::from_sources(&crate::catalog::shipped_sources()).unwrap();
        assert!(catalog.is_digit_blind() && catalog.is_token_blind());
        let mut exprs = Vec::new();
        for sig in &catalog.signatures {
            for p in &sig.patterns {
                exprs.push(Expression {
                    pattern: p,
                    id: exprs.len() as u32,
                    flags: FLAG_SINGLEMATCH | if sig.caseless { FLAG_CASELESS } else { 0 },
                });
            }
        }
        let plain = Matcher::compile(&exprs).unwrap();
        let mut plain_scratch = plain.scratch();
        let mut scanner = catalog.scanner();
        let placeholder =
            Regex::new(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?[diouxXspcfgeE]|\{[^{}]*\}")
                .unwrap();
        let (mut compared, mut matched) = (0, 0);
        for template in nccl.lines().chain(torch.lines()).skip(1) {
            let format = template.rsplit('\t').next().unwrap();
            for variant in 0..VALUES.len() {
                let msg = fill(format, variant, &placeholder);
                let (mut want, mut got) = (Vec::new(), Vec::new());
                plain.scan_into(msg.as_bytes(), &mut plain_scratch, &mut want);
                catalog.scan(msg.as_bytes(), &mut scanner, &mut got);
                assert_eq!(sorted(got), sorted(want.clone()), "{msg}");
                compared += 1;
                matched += usize::from(!want.is_empty());
            }
        }
        assert!(compared > 10_000 && matched > 1_000, "{compared} {matched}");
    }

    /// Values for printf conversions and `{name}` fields: numbers of one length with other
    /// digits (so that the memo answers one from another), and words.
    const VALUES: &[&[&str]] = &[
        &["0", "12", "802", "0x7f3a", "eth0", "-9"],
        &["1", "15", "803", "0x1f3a", "mlx5_0", "-15"],
        &["9", "99", "113", "0x7f0a", "10.0.0.1<5>", "-6"],
        &["5", "11", "100", "0xdead", "docker0", "13"],
        // Hex tokens of one length, letters against digits (one key when token-blind).
        &["7", "40", "555", "0x55d0c8a3b2f0", "ib0", "0x1"],
        &["3", "41", "556", "0x5500c803b200", "ens1f0", "0xa"],
    ];

    fn fill(format: &str, variant: usize, placeholder: &Regex) -> String {
        let mut out = String::new();
        let mut last = 0;
        for (n, m) in placeholder.find_iter(format).enumerate() {
            out.push_str(&format[last..m.start()]);
            let values = VALUES[variant];
            out.push_str(values[(n + variant) % values.len()]);
            last = m.end();
        }
        out.push_str(&format[last..]);
        out
    }

    #[test]
    fn a_cached_database_keeps_its_confirmations_and_variant() {
        let dir = std::env::temp_dir().join(format!("rankwatch-scandb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = DbCache::at(&dir);
        let exprs = exprs();
        let (fresh, first) = ScanDb::build(&exprs, &["t"], Some(&cache)).unwrap();
        let (cached, second) = ScanDb::build(&exprs, &["t"], Some(&cache)).unwrap();
        assert_eq!(
            (first.origin, second.origin),
            (DbOrigin::Compiled, DbOrigin::Cached)
        );
        assert!(cached.is_digit_blind());
        let widened = |db: &ScanDb| db.confirm.iter().filter(|c| c.is_some()).count();
        assert_eq!(widened(&cached), widened(&fresh));
        assert!(widened(&cached) > 0);
        let mut scanner = cached.scanner();
        let mut got = Vec::new();
        cached.scan(b"failed (exitcode: -9) x", &mut scanner, &mut got);
        assert_eq!(got, vec![1]);
        got.clear();
        cached.scan(b"failed (exitcode: -8) x", &mut scanner, &mut got);
        assert!(
            got.is_empty(),
            "a widened hit is confirmed after a cache load"
        );
        // The same file, another variant: a catalog without a blind form is a miss, then its
        // exact database is cached in its place.
        let exact = exprs_with(r"\Q1\E");
        let (_, miss) = ScanDb::build(&exact, &["t"], Some(&cache)).unwrap();
        let (db, hit) = ScanDb::build(&exact, &["t"], Some(&cache)).unwrap();
        assert_eq!(
            (miss.origin, hit.origin),
            (DbOrigin::Compiled, DbOrigin::Cached)
        );
        assert!(!db.is_digit_blind());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pattern_without_a_blind_form_leaves_the_database_exact() {
        let exprs = exprs_with(r"\Q1\E");
        let (db, _) = ScanDb::build(&exprs, &["t"], None).unwrap();
        assert!(!db.is_digit_blind());
        let mut scanner = db.scanner();
        let mut got = Vec::new();
        db.scan(b"CUDA error 802 1", &mut scanner, &mut got);
        assert_eq!(sorted(std::mem::take(&mut got)), vec![0, 6]);
        db.scan(b"CUDA error 803 2", &mut scanner, &mut got);
        assert!(got.is_empty());
    }

    #[test]
    fn compile_errors_name_the_original_expression() {
        let exprs = exprs_with(r"(?<=look)behind 1");
        let err = ScanDb::build(&exprs, &["t"], None).err().unwrap();
        assert_eq!(err.expression, Some(6));
    }
}
