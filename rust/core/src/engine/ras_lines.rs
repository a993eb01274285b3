//! The apply stage's step for NCCL RAS output: a source's report lines are kept whole in its
//! `ras_report` capture (see `crate::ras_capture`), apart from its ring, and the events of
//! `ncclras -m` in its `ras_monitor` (see `crate::ras_monitor`).

use super::lines::{Decoded, SigHit};
use super::Engine;
use crate::catalog::Catalog;
use crate::job::Job;
use crate::ras_capture::{self, Capture, State};
use crate::ras_monitor::Monitor;

/// What a line is to the RAS step, by the signatures it hits.
#[derive(Clone, Copy, PartialEq)]
enum MonitorLine {
    None,
    /// A text event line (`[date time] PEER_DEAD: ...`).
    Text,
    /// The `"event"` line of a JSON event object.
    JsonEvent,
}

fn monitor_line(catalog: &Catalog, hits: &[SigHit]) -> MonitorLine {
    for h in hits {
        let id = catalog.signatures[h.sig as usize].id.as_str();
        if let Some(kind) = id.strip_prefix("ras_monitor_") {
            return if kind.starts_with("json_") {
                MonitorLine::JsonEvent
            } else {
                MonitorLine::Text
            };
        }
    }
    MonitorLine::None
}

/// Whether a signature is one of the report's lines (`ras_report_*` in `ras.toml`).
fn is_report_line(catalog: &Catalog, hits: &[SigHit]) -> bool {
    hits.iter().any(|h| {
        catalog.signatures[h.sig as usize]
            .id
            .starts_with("ras_report_")
    })
}

impl Engine {
    /// Adds the line to its source's report capture, or starts one at a report's line.
    pub(super) fn capture_ras(
        &mut self,
        job: &mut Job,
        src: u32,
        line: &str,
        d: &Decoded,
        (catalog, hits): (&Catalog, &[SigHit]),
    ) {
        let s = &mut job.sources[src as usize];
        if s.ras_report.is_none() && s.ras_monitor.is_none() && hits.is_empty() {
            return; // (every line of every process passes here)
        }
        self.monitor_ras(job, src, line, d, (catalog, hits));
        let s = &mut job.sources[src as usize];
        let report_line = is_report_line(catalog, hits);
        let msg = d.meta.message(line);
        let starts = match &s.ras_report {
            None => report_line,
            Some(c) => c.next_report_starts(msg) && (report_line || c.state == State::Open),
        };
        if !starts
            && s.ras_report
                .as_ref()
                .is_none_or(|c| c.state == State::Closed)
        {
            return;
        }
        let cap = self.cfg.ras_report_bytes;
        let before = s.ras_report.as_ref().map_or(0, |c| c.heap_bytes());
        let was_over = s.ras_report.as_ref().is_some_and(|c| c.over_cap());
        let over = if starts {
            let recent = ras_capture::peeled(&s.ring.lines(), self.cfg.default_year);
            let c = Capture::start(&recent, cap);
            let over = c.over_cap();
            s.ras_report = Some(Box::new(c));
            over
        } else {
            let c = s.ras_report.as_mut().expect("an open capture");
            c.add(job.seq, msg, report_line, cap);
            c.over_cap() && !was_over
        };
        if over {
            self.stats.ras_reports_over_cap += 1;
        }
        let after = s.ras_report.as_ref().map_or(0, |c| c.heap_bytes());
        job.content_bytes = (job.content_bytes + after).saturating_sub(before);
    }

    /// Adds a monitor event line (or the next line of a JSON event object) to its source's
    /// monitor.
    fn monitor_ras(
        &mut self,
        job: &mut Job,
        src: u32,
        line: &str,
        d: &Decoded,
        (catalog, hits): (&Catalog, &[SigHit]),
    ) {
        let kind = monitor_line(catalog, hits);
        let s = &mut job.sources[src as usize];
        let reading = s.ras_monitor.as_ref().is_some_and(|m| m.reading_json());
        if kind == MonitorLine::None && !reading {
            return;
        }
        let before = s.ras_monitor.as_ref().map_or(0, |m| m.heap_bytes());
        let msg = d.meta.message(line);
        let recent = if kind == MonitorLine::JsonEvent {
            let r = s.ring.before(job.seq, 31);
            let mut r = ras_capture::peeled(&r, self.cfg.default_year);
            r.push((job.seq, msg.to_string()));
            r
        } else {
            Vec::new()
        };
        let m = s.ras_monitor.get_or_insert_with(Box::<Monitor>::default);
        match kind {
            MonitorLine::Text => m.text_line(msg, job.seq),
            MonitorLine::JsonEvent => m.json_event_line(&recent, job.seq),
            MonitorLine::None => m.json_line(msg),
        }
        let after = m.heap_bytes();
        job.content_bytes = (job.content_bytes + after).saturating_sub(before);
    }
}
