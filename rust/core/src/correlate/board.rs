//! The evidence board of one incident: candidates (processes or hosts), the evidence records
//! the rules wrote about them, and the ranking that sums those records.

use super::view::Who;
use crate::job::HostId;
use std::collections::{BTreeMap, BTreeSet};

/// A line that can stand as a candidate's root cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRef {
    /// A signature (or unclassified) hit, by index into the job's hits.
    Hit(usize),
    /// A context observation: (source, field).
    Context(u32, &'static str),
    /// A value of the job's identity table (index of its sighting).
    Identity(u32),
    /// A traced collective call: (source, index into its `coll_calls`).
    Call(u32, usize),
    /// A line its source's ring still holds, by its seq: what a process was doing when the
    /// others stopped (it printed nothing a signature knows).
    Ring(u32, u64),
    /// A frame of the process's last stack dump: (source, index into its frames).
    Frame(u32, usize),
}

/// One piece of evidence: which rule, about whom, how much it weighs and why.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub rule: &'static str,
    pub weight: i32,
    pub why: String,
}

#[derive(Debug)]
pub struct Cand {
    pub who: Who,
    pub host: Option<HostId>,
    /// The best cause line of this candidate (highest weight, then earliest).
    pub cause: Option<usize>,
    /// The cause weight or, for a configuration outlier, the weight of the cause it explains.
    pub cause_weight: u8,
    pub symptom: Option<usize>,
    /// A line elsewhere that points at this candidate (a peer naming it, a desync report).
    pub pointer: Option<usize>,
    /// A context line of this candidate that is the fault (configuration), with the cause
    /// signature whose fix applies.
    pub config: Option<(LineRef, Option<u16>)>,
    /// Where this candidate's failure starts when that is earlier than its cause line (see
    /// the error_chain rule).
    pub first_line: Option<usize>,
    pub named_by: BTreeSet<Who>,
    pub evidence: Vec<Evidence>,
    pub ts: Option<i64>,
    /// A finding (a catalog signature drawn by a rule, not printed by anyone) whose cause,
    /// fix and verify texts apply to this candidate, with the facts they are rendered with.
    pub finding: Option<(u16, Vec<(String, String)>)>,
    /// A line of this candidate that states the finding (its own account of the collective),
    /// when it has no cause or configuration line.
    pub stated: Option<LineRef>,
}

impl Cand {
    fn new(who: Who, host: Option<HostId>) -> Cand {
        Cand {
            who,
            host,
            cause: None,
            cause_weight: 0,
            symptom: None,
            pointer: None,
            config: None,
            first_line: None,
            named_by: BTreeSet::new(),
            evidence: Vec::new(),
            ts: None,
            finding: None,
            stated: None,
        }
    }

    pub fn score(&self) -> i32 {
        self.evidence.iter().map(|e| e.weight).sum()
    }

    pub fn reasons(&self) -> Vec<String> {
        self.evidence
            .iter()
            .filter(|e| !e.why.is_empty())
            .map(|e| e.why.clone())
            .collect()
    }

    pub fn has_rule(&self, rule: &str) -> bool {
        self.evidence.iter().any(|e| e.rule == rule)
    }

    /// The line that stands for this candidate: its faulty configuration, else its cause,
    /// else what points at it, else its first symptom.
    pub fn root(&self) -> Option<LineRef> {
        if let Some((l, _)) = self.config {
            return Some(l);
        }
        let line = self.first_line.or(self.cause).map(LineRef::Hit);
        line.or(self.stated)
            .or(self.pointer.or(self.symptom).map(LineRef::Hit))
    }

    /// Where the line standing for this candidate arrived (hits are kept in arrival order);
    /// a context root or no line sorts last.
    fn arrival(&self) -> usize {
        match self.root() {
            Some(LineRef::Hit(i)) => i,
            _ => usize::MAX,
        }
    }

    pub fn rank(&self) -> Option<u32> {
        match self.who {
            Who::Rank(r) => Some(r),
            _ => None,
        }
    }
}

#[derive(Default)]
pub struct Board {
    pub cands: BTreeMap<Who, Cand>,
    /// Side-by-side tables of what ranks ran (the collective rules' findings), as shown in
    /// the diagnosis's `collectives`.
    pub collectives: Vec<crate::report::CollectiveTable>,
}

impl Board {
    pub fn cand(&mut self, who: Who, host: Option<HostId>) -> &mut Cand {
        self.cands
            .entry(who)
            .or_insert_with(|| Cand::new(who, host))
    }

    pub fn add(
        &mut self,
        who: Who,
        host: Option<HostId>,
        rule: &'static str,
        weight: i32,
        why: String,
    ) {
        self.cand(who, host)
            .evidence
            .push(Evidence { rule, weight, why });
    }

    /// States a finding about `who` on `line`, with the facts its texts are rendered with; a
    /// line or finding an earlier rule stated for the candidate stays. Returns the candidate.
    pub fn state_finding(
        &mut self,
        who: Who,
        host: Option<HostId>,
        line: LineRef,
        finding: u16,
        facts: Vec<(String, String)>,
    ) -> &mut Cand {
        let c = self.cand(who, host);
        c.stated = c.stated.or(Some(line));
        c.finding = c.finding.take().or(Some((finding, facts)));
        c
    }

    /// Takes back a candidate's cause (its `cause_signature` weight, as evidence of `rule` with
    /// `why`): the rules that find a cause line to be another failure's aftermath. Returns the
    /// candidate, for the symptom and time it is left with.
    pub fn take_back_cause(&mut self, who: Who, rule: &'static str, why: String) -> &mut Cand {
        let c = &self.cands[&who];
        let (weight, host) = (c.cause_weight as i32, c.host);
        self.add(who, host, rule, -weight, why);
        let c = self.cand(who, host);
        c.cause = None;
        c.cause_weight = 0;
        c
    }

    /// Candidates best first: evidence score, cause weight, earlier corrected time, earlier
    /// arrival (lines without a time keep the order they were printed or pasted in), identity.
    /// Host-only candidates whose host also has a process candidate are folded into it, unless
    /// a cause or configuration blames the host itself.
    pub fn ranked(&self) -> Vec<&Cand> {
        let hosts_with_procs: BTreeSet<HostId> = self
            .cands
            .values()
            .filter(|c| !matches!(c.who, Who::Host(_)))
            .filter_map(|c| c.host)
            .collect();
        let mut ranked: Vec<&Cand> = self
            .cands
            .values()
            .filter(|c| match c.who {
                Who::Host(h) => {
                    !hosts_with_procs.contains(&h) || c.cause.is_some() || c.config.is_some()
                }
                _ => true,
            })
            .filter(|c| c.root().is_some() || c.score() > 0)
            .collect();
        ranked.sort_by(|a, b| {
            b.score()
                .cmp(&a.score())
                .then(b.cause_weight.cmp(&a.cause_weight))
                .then(a.ts.unwrap_or(i64::MAX).cmp(&b.ts.unwrap_or(i64::MAX)))
                .then(a.arrival().cmp(&b.arrival()))
                .then(a.who.cmp(&b.who))
        });
        ranked
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const HB: &str = "Heartbeat monitor timed out! Process will be terminated after dumping \
        debug info. workMetaList_.size()=";

    #[test]
    fn lines_without_time_keep_the_order_they_were_printed_in() {
        let log = format!(
            "[rank5]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 5] {HB}40\n\
             [rank2]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 2] {HB}40\n"
        );
        let d = diagnose(&log);
        assert!(root_line(&d).starts_with("[rank5]:"), "{}", root_line(&d));
    }

    #[test]
    fn an_earlier_time_still_beats_the_printing_order() {
        let log = format!(
            "[rank5]:[E1002 10:00:09.000000000 ProcessGroupNCCL.cpp:1316] [PG 0 Rank 5] {HB}4\n\
             [rank2]:[E1002 10:00:01.000000000 ProcessGroupNCCL.cpp:1316] [PG 0 Rank 2] {HB}4\n"
        );
        let d = diagnose(&log);
        assert!(root_line(&d).starts_with("[rank2]:"), "{}", root_line(&d));
    }
}
