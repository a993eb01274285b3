//! What a structure costs the process, for the memory budget: heap blocks by their capacity
//! (not their length) as the system allocator hands them out, hash tables by their buckets
//! and control bytes. The figures follow glibc malloc on 64-bit Linux and hashbrown (std's
//! `HashMap`); `tests/memory_accounting.rs` checks them against a counting allocator.

use std::collections::{HashMap, VecDeque};
use std::mem::size_of;

/// Requests at least this large are served by `mmap` (glibc's default threshold).
const MMAP_THRESHOLD: usize = 128 * 1024;
const PAGE: usize = 4096;
/// hashbrown's control-byte group (SSE2).
const GROUP_WIDTH: usize = 16;

/// Bytes a heap block of `n` requested bytes takes: glibc adds an 8-byte header, rounds to
/// 16 and never hands out less than 32; large blocks are whole pages of their own.
pub fn block(n: usize) -> usize {
    if n == 0 {
        0
    } else if n >= MMAP_THRESHOLD {
        (n + 16).div_ceil(PAGE) * PAGE
    } else {
        (n + 8).div_ceil(16).max(2) * 16
    }
}

/// Pushes onto a vector that can grow to megabytes (a job's hits and sources), by an eighth
/// at a time once it is large rather than by doubling: a doubling adds megabytes at once,
/// more than the budget's headroom, before relief gets a chance to run. The price: each growth
/// copies the vector (mimalloc, the core's allocator, does not remap large blocks), so an
/// element is copied about eight times over the vector's growth instead of about once.
pub fn push_gently<T>(v: &mut Vec<T>, item: T) {
    if v.len() == v.capacity() && v.len() >= 1024 {
        v.reserve_exact(v.len() / 8);
    }
    v.push(item);
}

pub fn vec<T>(v: &Vec<T>) -> usize {
    block(v.capacity() * size_of::<T>())
}

pub fn deque<T>(v: &VecDeque<T>) -> usize {
    block(v.capacity() * size_of::<T>())
}

pub fn string(s: &String) -> usize {
    block(s.capacity())
}

/// An `Arc<str>` of `len` bytes (two counters before the text).
pub fn arc_str(len: usize) -> usize {
    block(16 + len)
}

/// The table of a `HashMap` (entries live inline in its buckets; what they own is extra).
pub fn map<K, V, S>(m: &HashMap<K, V, S>) -> usize {
    table_bytes(m.capacity(), size_of::<(K, V)>())
}

/// hashbrown reports `capacity` = buckets - 1 under 8 buckets, else 7/8 of them.
fn table_bytes(capacity: usize, entry: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        capacity + 1
    } else {
        capacity / 7 * 8
    };
    let data = (buckets * entry).div_ceil(GROUP_WIDTH) * GROUP_WIDTH;
    block(data + buckets + GROUP_WIDTH)
}

/// Bytes of one more entry in a `HashMap` of `(K, V)`, averaged over table growth (the table
/// holds between 7/16 and 7/8 of its buckets; 1.6 buckets per entry on average).
pub fn map_entry<K, V>() -> usize {
    (size_of::<(K, V)>() + 1) * 8 / 5
}

/// Bytes a JSON value holds: strings by capacity, arrays by slots, objects by B-tree nodes
/// (a leaf holds up to 11 entries, and even a one-key object has a whole one).
pub fn json(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    const SLOT: usize = size_of::<Value>();
    const NODE: usize = 16 + 11 * (size_of::<String>() + SLOT);
    match v {
        Value::String(s) => string(s),
        Value::Array(a) => block(a.capacity() * SLOT) + a.iter().map(json).sum::<usize>(),
        Value::Object(m) if !m.is_empty() => {
            m.len().div_ceil(8) * block(NODE)
                + m.iter().map(|(k, v)| string(k) + json(v)).sum::<usize>()
        }
        _ => 0,
    }
}

/// Hands free heap pages back to the system. glibc keeps freed blocks inside its arenas, so
/// after jobs are released or evicted their pages stay resident (and scattered, so the top of
/// the heap rarely shrinks); `malloc_trim` returns every whole free page. A no-op elsewhere.
pub fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only releases pages of free chunks; it is thread-safe.
        unsafe {
            malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_follow_glibc() {
        assert_eq!(block(0), 0);
        assert_eq!(block(1), 32);
        assert_eq!(block(24), 32);
        assert_eq!(block(25), 48);
        assert_eq!(block(1000), 1008);
        assert_eq!(block(200_000), 200_704);
    }

    #[test]
    fn tables_count_buckets() {
        let mut m: HashMap<u64, u64> = HashMap::new();
        assert_eq!(map(&m), 0);
        m.insert(1, 1);
        // 4 buckets of 16 bytes, 4 + 16 control bytes
        assert_eq!(map(&m), block(64 + 4 + 16));
        for i in 0..1000 {
            m.insert(i, i);
        }
        let buckets = 2048;
        assert_eq!(m.capacity(), buckets / 8 * 7);
        assert_eq!(map(&m), block(buckets * 16 + buckets + 16));
    }

    #[test]
    fn a_large_vector_grows_by_an_eighth() {
        let mut v: Vec<u32> = Vec::new();
        for i in 0..1024 {
            push_gently(&mut v, i);
        }
        assert_eq!(v.capacity(), 1024, "small vectors double as usual");
        push_gently(&mut v, 0);
        assert_eq!(v.capacity(), 1024 + 128);
        for i in 0..10_000 {
            push_gently(&mut v, i);
        }
        let (len, cap) = (v.len(), v.capacity());
        assert!(cap - len <= len / 8, "{cap} for {len}: never a doubling");
    }
}
