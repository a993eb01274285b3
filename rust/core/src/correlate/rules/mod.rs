//! Evidence rules. Each rule reads one incident's hits and the job's context through a
//! [`View`] and writes evidence records (who, weight, why) and candidate lines to the
//! [`Board`]. The ranking sums the records; the report's reasons are exactly those records.
//! Rules run in the order of [`RULES`]; a later rule may read what earlier ones wrote.

mod advertised_address;
mod bad_interface;
mod bar_at_timeout;
mod bars_disagree;
mod busy_at_entry;
mod busy_in_console;
mod cause_signature;
mod collective_mismatch;
mod crash_after_error;
mod crash_teardown;
mod desync_report;
mod error_chain;
mod identity_outlier;
mod identity_pair;
mod ifname_unmatched;
mod last_words;
mod loopback_peer;
mod peer_naming;
mod progress;
mod ras_report;
mod scalar_side;
mod seq_lag;
mod setting_blame;
mod silence;
mod stack_dumps;
mod step_teardown;
mod summary_root;
mod symptoms;
mod transport_mismatch;
mod unexplained_error;

use std::sync::Arc;

use super::board::Board;
use super::view::View;

/// What the rules see of one incident.
pub struct Scope<'a> {
    /// Indexes into the job's hits.
    pub hits: &'a [usize],
    /// Whether any hit matched a catalog signature (else the incident is unclassified).
    pub classified: bool,
    /// Configuration facts found by the rules, shown in the diagnosis as `odd_context`.
    pub notes: std::cell::RefCell<Vec<crate::report::OddContext>>,
    /// The incident's collective table, built once for the rules that read it.
    pub collectives: std::cell::OnceCell<Vec<super::collectives::Entry>>,
    /// The incident's hits per source, built once for the rules that read one process's
    /// lines (a crash and what its process printed before it): with thousands of crashing
    /// ranks, a scan of every hit per rank was quadratic.
    pub by_source: std::cell::OnceCell<std::collections::HashMap<u32, Vec<usize>>>,
    /// The incident's hits per file, built once for the rules that read what one file shows
    /// around a line (error_chain): a scan of every hit per failing rank was quadratic.
    pub by_origin: std::cell::OnceCell<std::collections::HashMap<Arc<str>, Vec<usize>>>,
}

impl Scope<'_> {
    /// The time of the incident's earliest hit that has one.
    pub fn first_hit_time(&self, v: &View) -> Option<i64> {
        self.hits.iter().filter_map(|&i| v.hit_time(v.hit(i))).min()
    }

    pub fn collectives(&self, v: &View) -> &[super::collectives::Entry] {
        self.collectives
            .get_or_init(|| super::collectives::table(v, self.hits))
    }

    /// The incident's hits printed on source `src`, in the order of `hits`.
    pub fn hits_of(&self, v: &View, src: u32) -> &[usize] {
        let index = self
            .by_source
            .get_or_init(|| grouped(v, self.hits, |h| h.source));
        index.get(&src).map_or(&[], Vec::as_slice)
    }

    /// The incident's hits read from file `origin`, in the order of `hits`.
    pub fn hits_in(&self, v: &View, origin: &str) -> &[usize] {
        let index = self
            .by_origin
            .get_or_init(|| grouped(v, self.hits, |h| h.origin.clone()));
        index.get(origin).map_or(&[], Vec::as_slice)
    }
}

/// `hits` grouped by `key`, each group in the order of `hits`.
fn grouped<K: std::hash::Hash + Eq>(
    v: &View,
    hits: &[usize],
    key: impl Fn(&crate::job::Hit) -> K,
) -> std::collections::HashMap<K, Vec<usize>> {
    let mut index = std::collections::HashMap::<K, Vec<usize>>::new();
    for &i in hits {
        index.entry(key(v.hit(i))).or_default().push(i);
    }
    index
}

pub type Rule = fn(&View, &Scope, &mut Board);

/// Every rule, in the order they run.
pub const RULES: &[(&str, Rule)] = &[
    ("cause_signature", cause_signature::apply),
    ("summary_root", summary_root::apply),
    ("error_chain", error_chain::apply),
    ("crash_teardown", crash_teardown::apply),
    ("crash_after_error", crash_after_error::apply),
    ("last_words", last_words::apply),
    ("step_teardown", step_teardown::apply),
    ("peer_naming", peer_naming::apply),
    ("loopback_peer", loopback_peer::apply),
    ("desync_report", desync_report::apply),
    ("seq_lag", seq_lag::apply),
    ("collective_mismatch", collective_mismatch::apply),
    ("scalar_side", scalar_side::apply),
    ("progress", progress::apply),
    ("busy_at_entry", busy_at_entry::apply),
    ("busy_in_console", busy_in_console::apply),
    ("bar_at_timeout", bar_at_timeout::apply),
    ("bars_disagree", bars_disagree::apply),
    ("stack_dumps", stack_dumps::apply),
    ("ras_report", ras_report::apply),
    ("silence", silence::apply),
    ("bad_interface", bad_interface::apply),
    ("advertised_address", advertised_address::apply),
    ("ifname_unmatched", ifname_unmatched::apply),
    ("setting_blame", setting_blame::apply),
    ("transport_mismatch", transport_mismatch::apply),
    ("identity_outlier", identity_outlier::apply),
    ("identity_pair", identity_pair::apply),
    ("unexplained_error", unexplained_error::apply),
    ("symptoms", symptoms::apply),
];

pub fn run_all(view: &View, scope: &Scope, board: &mut Board) {
    for (_, rule) in RULES {
        rule(view, scope, board);
    }
}

pub(crate) use crash_teardown::is_crash_report;
pub use identity_outlier::blaming_causes;
