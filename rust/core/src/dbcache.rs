//! An on-disk cache of compiled Hyperscan databases, so that start-up skips the compile.
//!
//! A database is a pure function of its expressions (pattern, flags, id), the library version
//! and the CPU it was compiled for, and of the variant of the catalog's patterns it holds (the
//! original ones, or the digit-blind forms `crate::scandb` derives from them); the cache key
//! is a SHA-256 over exactly those and a format version of ours. An entry also keeps the ids of
//! the expressions whose pattern the variant widened, so a hit skips deriving them again. One file per catalog (named after the catalog's source files), so editing a
//! catalog overwrites its entry instead of adding one. A missing, stale, truncated or corrupt
//! file is a miss, and so is one that another user owns or may write (Hyperscan trusts the
//! bytecode it loads); a cache directory that cannot be written is skipped. Nothing here is
//! ever an error to the caller: the worst case is compiling, as without a cache.
//!
//! Entries of catalogs no longer used do not pile up: writing an entry removes this user's
//! entries not used for `UNUSED_FOR` (a hit refreshes its entry's time, at most daily) and
//! temporary files a writer left behind.

use crate::matcher::{host_platform, library_version, Expression, Matcher};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Makes temporary file names unique between threads of one process.
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Bumped whenever the file layout or what the key covers changes.
const MAGIC: &[u8; 8] = b"RWHSDB02";
const HEADER_LEN: usize = 8 + 32 + 4 + 4 + 8 + 32;

/// An entry not used for this long is removed when another one is written.
const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// A hit refreshes its entry's time when it is older than this (not on every start).
const REFRESH_AFTER: Duration = Duration::from_secs(24 * 3600);
/// A temporary file this old was left by a writer that died.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);
/// No entry is this large (the shipped catalog's is about 1 MB): a bigger file is not read.
const MAX_ENTRY_BYTES: u64 = 64 << 20;

/// Where compiled databases are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbCache {
    dir: PathBuf,
}

/// What a cache file must match: the file it lives in and the digest of everything the
/// database depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    file_name: String,
    digest: [u8; 32],
}

/// Where the database in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbOrigin {
    /// Compiled now (no cache, or a miss).
    Compiled,
    /// Loaded from the cache.
    Cached,
}

/// What happened with the cache while loading a catalog, for diagnostics and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheReport {
    pub origin: DbOrigin,
    /// The cache file consulted, if a cache was in use.
    pub path: Option<PathBuf>,
    /// Why the cache was not used or not written (a miss on a missing file says nothing).
    pub note: Option<String>,
}

impl CacheReport {
    pub fn uncached() -> CacheReport {
        CacheReport {
            origin: DbOrigin::Compiled,
            path: None,
            note: None,
        }
    }
}

impl DbCache {
    pub fn at(dir: impl Into<PathBuf>) -> DbCache {
        DbCache { dir: dir.into() }
    }

    /// The user's cache directory: `$RANKWATCH_CACHE_DIR` (set but empty disables the cache),
    /// else `$XDG_CACHE_HOME/rankwatch`, else `~/.cache/rankwatch`.
    pub fn from_env() -> Option<DbCache> {
        let var = |name: &str| std::env::var_os(name);
        resolve_dir(
            var("RANKWATCH_CACHE_DIR"),
            var("XDG_CACHE_HOME"),
            var("HOME"),
        )
        .map(DbCache::at)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_of(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(&key.file_name)
    }

    /// The cached database for `key` holding `expressions` expressions and the ids stored with
    /// it, or why there is none.
    pub fn load(&self, key: &CacheKey, expressions: usize) -> Result<(Matcher, Vec<u32>), String> {
        let path = self.path_of(key);
        check_dir(&self.dir)?;
        let mut file = open_entry(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        check_owner(&file)?;
        let meta = file.metadata().map_err(|e| e.to_string())?;
        if !meta.is_file() {
            return Err("not a regular file".into());
        }
        if meta.len() > MAX_ENTRY_BYTES {
            return Err(format!("larger than {MAX_ENTRY_BYTES} bytes"));
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_ENTRY_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let (ids, database) = check_entry(&bytes, key, expressions)?;
        let matcher = Matcher::deserialize(database, expressions)?;
        refresh(&file);
        Ok((matcher, ids))
    }

    /// Writes `matcher` and `ids` under `key` atomically: a temporary file in the same
    /// directory, then a rename over the entry, so readers see the old file or the new one,
    /// never half of one.
    pub fn store(&self, key: &CacheKey, matcher: &Matcher, ids: &[u32]) -> Result<PathBuf, String> {
        let payload = matcher
            .serialize()
            .ok_or("Hyperscan could not serialize the database")?;
        let path = self.path_of(key);
        let tmp = self.dir.join(format!(
            ".{}.{}-{}.tmp",
            key.file_name,
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> std::io::Result<()> {
            create_private_dir(&self.dir)?;
            check_dir(&self.dir).map_err(std::io::Error::other)?;
            let mut f = create_private(&tmp)?;
            f.write_all(&encode_entry(key, matcher.len(), ids, &payload))?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })?;
        self.prune(&key.file_name);
        Ok(path)
    }

    /// Removes this user's entries (other than `keep`) not used for `UNUSED_FOR`, and
    /// abandoned temporary files. Best effort: what cannot be read or removed stays.
    fn prune(&self, keep: &str) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let limit = if name.starts_with("catalog-") && name.ends_with(".hsdb") {
                UNUSED_FOR
            } else if name.starts_with(".catalog-") && name.ends_with(".tmp") {
                ABANDONED_AFTER
            } else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            let age = meta.modified().ok().and_then(|t| t.elapsed().ok());
            if name != keep && owned_by_me(&meta) && age.is_some_and(|a| a > limit) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// Marks a cache entry as used now, if it was last marked more than `REFRESH_AFTER` ago.
fn refresh(file: &fs::File) {
    let stale = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > REFRESH_AFTER);
    if stale {
        let _ = file.set_modified(SystemTime::now());
    }
}

#[cfg(unix)]
fn owned_by_me(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.uid() == unsafe { geteuid() }
}

#[cfg(not(unix))]
fn owned_by_me(_meta: &fs::Metadata) -> bool {
    true
}

#[cfg(unix)]
extern "C" {
    fn geteuid() -> u32;
}

/// Hyperscan trusts the bytecode it deserializes, and a checksum is no defence against someone
/// who can write the file: only files of this user that nobody else may write are loaded.
#[cfg(unix)]
fn check_owner(file: &fs::File) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if meta.uid() != unsafe { geteuid() } {
        return Err("not owned by this user".into());
    }
    if meta.mode() & 0o022 != 0 {
        return Err("writable by other users".into());
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_owner(_file: &fs::File) -> Result<(), String> {
    Ok(())
}

/// A new file only this user may read and write. It must not exist yet and is never reached
/// through a link: in a directory others could write, a link planted at the temporary name
/// would otherwise make us overwrite whatever it points to.
fn create_private(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    options.open(path)
}

/// An entry opened for reading: never through a link, and never blocking (a FIFO planted at
/// the entry's path would otherwise hang every command that loads the catalog).
fn open_entry(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path)
}

/// The cache directory and its parents as needed; one it creates is private to this user.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Entries are used only from a directory this user owns that not everyone may change: its
/// owner (and anyone, without the sticky bit) can rename and replace what is in it. The checks
/// on the opened entry (owner, mode, regular file) hold whatever the directory; this refuses
/// the directories where they are all that stands between a stranger and our database.
/// A group-writable directory is allowed: umask 002 makes them for users' private groups.
#[cfg(unix)]
fn check_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if meta.uid() != unsafe { geteuid() } {
        return Err(format!("{} is owned by another user", dir.display()));
    }
    let sticky = meta.mode() & 0o1000 != 0;
    if meta.mode() & 0o002 != 0 && !sticky {
        return Err(format!("{} is writable by every user", dir.display()));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_dir(_dir: &Path) -> Result<(), String> {
    Ok(())
}

fn resolve_dir(
    explicit: Option<std::ffi::OsString>,
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    if let Some(dir) = explicit {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    if let Some(xdg) = xdg.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Some(xdg.join("rankwatch"));
    }
    home.filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache").join("rankwatch"))
}

impl CacheKey {
    /// The key of the database compiled from `exprs` in the form `variant` names, for a
    /// catalog loaded from `source_names` (in load order) on this machine. `None` when the
    /// library cannot describe the host CPU.
    pub fn new(
        source_names: &[&str],
        exprs: &[Expression<'_>],
        variant: &[u8],
    ) -> Option<CacheKey> {
        let platform = host_platform()?;
        let mut names = Sha256::new();
        names.update(MAGIC);
        for n in source_names {
            field(&mut names, n.as_bytes());
        }
        let mut all = names.clone();
        field(&mut all, variant);
        field(&mut all, library_version().as_bytes());
        all.update(platform.tune.to_le_bytes());
        all.update(platform.cpu_features.to_le_bytes());
        all.update((exprs.len() as u64).to_le_bytes());
        for e in exprs {
            field(&mut all, e.pattern.as_bytes());
            all.update(e.id.to_le_bytes());
            all.update(e.flags.to_le_bytes());
        }
        Some(CacheKey {
            file_name: format!("catalog-{}.hsdb", hex(&names.finalize()[..12])),
            digest: all.finalize().into(),
        })
    }
}

/// Length-prefixed, so that ("ab", "c") and ("a", "bc") hash differently.
fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// File layout: magic, key digest, expression count (u32 LE), id count (u32 LE), payload
/// length (u64 LE), SHA-256 of the payload; the payload is the ids (u32 LE each), then the
/// serialized database.
fn encode_entry(key: &CacheKey, expressions: usize, ids: &[u32], database: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(4 * ids.len() + database.len());
    ids.iter()
        .for_each(|id| payload.extend_from_slice(&id.to_le_bytes()));
    payload.extend_from_slice(database);
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&key.digest);
    out.extend_from_slice(&(expressions as u32).to_le_bytes());
    out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(&payload));
    out.extend_from_slice(&payload);
    out
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().unwrap_or_default())
}

/// The ids and the database of a cache file if it is complete, intact and made for `key`.
fn check_entry<'a>(
    bytes: &'a [u8],
    key: &CacheKey,
    expressions: usize,
) -> Result<(Vec<u32>, &'a [u8]), String> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err("not a rankwatch database cache file (or another format version)".into());
    }
    let (digest, rest) = bytes[8..].split_at(32);
    if digest != key.digest {
        return Err("stale: made for another catalog, library version or CPU".into());
    }
    let (count, rest) = rest.split_at(4);
    let (id_count, rest) = rest.split_at(4);
    let (length, rest) = rest.split_at(8);
    let (checksum, payload) = rest.split_at(32);
    let (count, id_count) = (le_u32(count) as usize, le_u32(id_count) as usize);
    let length = u64::from_le_bytes(length.try_into().unwrap_or_default());
    if count != expressions {
        return Err(format!("holds {count} expressions, expected {expressions}"));
    }
    if length != payload.len() as u64 {
        return Err(format!(
            "truncated: {} of {length} payload bytes",
            payload.len()
        ));
    }
    if Sha256::digest(payload).as_slice() != checksum {
        return Err("corrupt: payload checksum does not match".into());
    }
    if payload.len() < 4 * id_count {
        return Err(format!("holds {id_count} ids in {} bytes", payload.len()));
    }
    let (ids, database) = payload.split_at(4 * id_count);
    Ok((ids.chunks_exact(4).map(le_u32).collect(), database))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATTERNS: &[&str] = &["Connect to \\S+ failed", "NCCL WARN"];

    fn exprs(pats: &[&'static str]) -> Vec<Expression<'static>> {
        crate::matcher::numbered(pats)
    }

    /// Why loading `key` missed (the entry loaded is not expected here).
    fn miss(cache: &DbCache, key: &CacheKey, expressions: usize) -> String {
        match cache.load(key, expressions) {
            Ok(_) => panic!("expected a miss"),
            Err(why) => why,
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("rankwatch-dbcache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn stored(name: &str) -> (DbCache, CacheKey, PathBuf) {
        let cache = DbCache::at(temp_dir(name));
        let ex = exprs(PATTERNS);
        let key = CacheKey::new(&["a.toml"], &ex, b"t").unwrap();
        let path = cache
            .store(&key, &Matcher::compile(&ex).unwrap(), &[1])
            .unwrap();
        (cache, key, path)
    }

    fn matches(m: &Matcher, line: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        m.scan_into(line, &mut m.scratch(), &mut out);
        out.sort();
        out
    }

    fn age(path: &Path, days: u64) {
        let when = SystemTime::now() - Duration::from_secs(days * 24 * 3600);
        fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    fn days_old(path: &Path) -> u64 {
        let modified = fs::metadata(path).unwrap().modified().unwrap();
        modified.elapsed().unwrap().as_secs() / (24 * 3600)
    }

    #[test]
    fn writing_an_entry_removes_unused_ones_and_a_hit_keeps_its_own() {
        let (cache, key, path) = stored("prune");
        let dir = cache.dir().to_path_buf();
        let old = dir.join("catalog-0000000000000000.hsdb");
        let recent = dir.join("catalog-1111111111111111.hsdb");
        let abandoned = dir.join(".catalog-2222.hsdb.1-0.tmp");
        let other = dir.join("notes.txt");
        for p in [&old, &recent, &abandoned, &other] {
            fs::write(p, b"x").unwrap();
        }
        age(&old, 40);
        age(&recent, 10);
        age(&abandoned, 1);
        age(&other, 400);
        // A hit on an entry last used 40 days ago marks it used now.
        age(&path, 40);
        assert!(cache.load(&key, PATTERNS.len()).is_ok());
        assert_eq!(days_old(&path), 0);
        let ex = exprs(PATTERNS);
        let another = CacheKey::new(&["b.toml"], &ex, b"t").unwrap();
        cache
            .store(&another, &Matcher::compile(&ex).unwrap(), &[])
            .unwrap();
        assert!(!old.exists() && !abandoned.exists());
        assert!(recent.exists() && other.exists() && path.exists());
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn round_trip_scans_the_same() {
        let (cache, key, path) = stored("roundtrip");
        assert!(path.exists());
        let (back, ids) = cache.load(&key, PATTERNS.len()).unwrap();
        assert_eq!(ids, vec![1]);
        assert_eq!(matches(&back, b"NCCL WARN Connect to x failed"), vec![0, 1]);
        assert!(matches(&back, b"nothing here").is_empty());
        let leftovers: Vec<_> = fs::read_dir(cache.dir()).unwrap().flatten().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
        fs::remove_dir_all(cache.dir()).unwrap();
    }

    #[test]
    fn truncated_or_corrupt_files_are_misses() {
        let (cache, key, path) = stored("damaged");
        let good = fs::read(&path).unwrap();
        for cut in [0, 5, HEADER_LEN - 1, HEADER_LEN, good.len() - 1] {
            fs::write(&path, &good[..cut]).unwrap();
            assert!(cache.load(&key, PATTERNS.len()).is_err(), "cut at {cut}");
        }
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x55;
        fs::write(&path, &flipped).unwrap();
        let why = cache.load(&key, PATTERNS.len()).err().unwrap();
        assert!(why.contains("checksum"), "{why}");
        // The id count is outside the checksum: one that overruns the payload is a miss.
        let mut overrun = good.clone();
        overrun[8 + 32 + 4..8 + 32 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        fs::write(&path, &overrun).unwrap();
        let why = cache.load(&key, PATTERNS.len()).err().unwrap();
        assert!(why.contains("ids in"), "{why}");
        fs::write(&path, b"garbage").unwrap();
        assert!(cache.load(&key, PATTERNS.len()).is_err());
        fs::write(&path, &good).unwrap();
        assert!(cache.load(&key, PATTERNS.len()).is_ok());
        fs::remove_dir_all(cache.dir()).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn entries_others_may_write_are_not_loaded() {
        use std::os::unix::fs::PermissionsExt;
        let (cache, key, path) = stored("perms");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        let why = cache.load(&key, PATTERNS.len()).err().unwrap();
        assert!(why.contains("other users"), "{why}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(cache.load(&key, PATTERNS.len()).is_ok());
        fs::remove_dir_all(cache.dir()).unwrap();
    }

    #[test]
    fn stale_entry_is_a_miss_and_gets_overwritten() {
        let (cache, old_key, _) = stored("stale");
        let ex = exprs(&["Connect to \\S+ failed", "NCCL WARN", "NCCL INFO"]);
        let new_key = CacheKey::new(&["a.toml"], &ex, b"t").unwrap();
        assert_eq!(cache.path_of(&old_key), cache.path_of(&new_key));
        let why = cache.load(&new_key, ex.len()).err().unwrap();
        assert!(why.contains("stale"), "{why}");
        cache
            .store(&new_key, &Matcher::compile(&ex).unwrap(), &[])
            .unwrap();
        assert!(cache.load(&new_key, ex.len()).is_ok());
        assert!(cache.load(&old_key, PATTERNS.len()).is_err());
        fs::remove_dir_all(cache.dir()).unwrap();
    }

    #[test]
    fn key_covers_patterns_flags_ids_variant_and_source_names() {
        let base = exprs(PATTERNS);
        let key = |names: &[&str], ex: &[Expression]| CacheKey::new(names, ex, b"t").unwrap();
        let k = key(&["a.toml"], &base);
        assert_eq!(k, key(&["a.toml"], &exprs(PATTERNS)));
        let mut flags = exprs(PATTERNS);
        flags[0].flags |= crate::matcher::FLAG_CASELESS;
        assert_ne!(k.digest, key(&["a.toml"], &flags).digest);
        let mut ids = exprs(PATTERNS);
        ids.swap(0, 1);
        assert_ne!(k.digest, key(&["a.toml"], &ids).digest);
        let other_variant = CacheKey::new(&["a.toml"], &base, b"u").unwrap();
        assert_eq!(k.file_name, other_variant.file_name);
        assert_ne!(k.digest, other_variant.digest);
        assert_ne!(k.file_name, key(&["b.toml"], &base).file_name);
        assert_ne!(k.file_name, key(&["a.toml", "b.toml"], &base).file_name);
    }

    #[test]
    fn unwritable_directory_is_reported_not_fatal() {
        let blocker = temp_dir("blocked");
        fs::write(&blocker, b"a file where the directory should be").unwrap();
        let cache = DbCache::at(blocker.join("sub"));
        let ex = exprs(PATTERNS);
        let key = CacheKey::new(&["a.toml"], &ex, b"t").unwrap();
        assert!(cache
            .store(&key, &Matcher::compile(&ex).unwrap(), &[])
            .is_err());
        assert!(cache.load(&key, ex.len()).is_err());
        fs::remove_file(&blocker).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_link_at_the_temporary_name_is_never_followed() {
        let dir = temp_dir("tmplink");
        fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").unwrap();
        let planted = dir.join("planted.tmp");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(create_private(&planted).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_link_or_huge_file_at_the_entry_is_a_miss_not_a_hang() {
        let (cache, key, path) = stored("hostile");
        let ex = exprs(PATTERNS);
        fs::remove_file(&path).unwrap();
        let fifo = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(miss(&cache, &key, ex.len()).contains("regular file"));
        fs::remove_file(&path).unwrap();
        let big = cache.dir().join("big");
        fs::File::create(&big)
            .unwrap()
            .set_len(MAX_ENTRY_BYTES + 1)
            .unwrap();
        std::os::unix::fs::symlink(&big, &path).unwrap();
        assert!(cache.load(&key, ex.len()).is_err());
        fs::remove_file(&path).unwrap();
        fs::rename(&big, &path).unwrap();
        assert!(miss(&cache, &key, ex.len()).contains("larger than"));
        fs::remove_dir_all(cache.dir()).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_everyone_may_write_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let (cache, key, _) = stored("open-dir");
        let ex = exprs(PATTERNS);
        fs::set_permissions(cache.dir(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(miss(&cache, &key, ex.len()).contains("writable by every user"));
        let m = Matcher::compile(&ex).unwrap();
        assert!(cache.store(&key, &m, &[]).is_err());
        fs::set_permissions(cache.dir(), fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(cache.load(&key, ex.len()).is_ok());
        fs::remove_dir_all(cache.dir()).unwrap();
    }

    #[test]
    fn directory_resolution_follows_the_documented_order() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(resolve_dir(os("/c"), os("/x"), os("/h")), Some("/c".into()));
        assert_eq!(resolve_dir(os(""), os("/x"), os("/h")), None);
        assert_eq!(
            resolve_dir(None, os("/x"), os("/h")),
            Some("/x/rankwatch".into())
        );
        assert_eq!(
            resolve_dir(None, os("rel"), os("/h")),
            Some("/h/.cache/rankwatch".into())
        );
        assert_eq!(resolve_dir(None, None, None), None);
    }
}
