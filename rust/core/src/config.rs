//! The engine's settings: caps, windows and budgets, each with its unit in its name.

#[derive(Debug, Clone)]
pub struct Config {
    pub ring_lines: usize,
    pub ring_bytes: usize,
    pub memory_budget_bytes: usize,
    pub settle_ms: i64,
    pub incident_horizon_ms: i64,
    pub max_wait_ms: i64,
    pub max_line_bytes: usize,
    pub preceding_lines: usize,
    pub max_hits_per_job: usize,
    pub hits_per_source_signature: u32,
    pub default_year: i32,
    pub clock_uncertainty_ms: i64,
    /// A job quiet for this long (wall time, as seen by `poll`) gets its final diagnoses and
    /// its state released. 0 keeps jobs until evicted or dropped.
    pub release_quiet_ms: i64,
    /// Processes (sources) tracked per job; lines of further ones share one overflow source
    /// and are counted in the diagnosis. The budget may lower it (a quarter of the budget).
    pub max_sources_per_job: usize,
    /// A time a line or record carries that is more than this ahead of the broker's time of
    /// its record is taken as the broker's time plus this (and counted): one rank's clock
    /// running ahead must not move the job's event time past its incidents' windows.
    pub max_ts_ahead_ms: i64,
    /// An NCCL RAS report (text or JSON) is read whole up to this size, whatever the ring
    /// keeps; a longer one is counted and not read (`ras_capture`).
    pub ras_report_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ring_lines: 256,
            ring_bytes: 64 * 1024,
            memory_budget_bytes: 1 << 30,
            settle_ms: 5_000,
            incident_horizon_ms: 20 * 60_000,
            max_wait_ms: 30_000,
            max_line_bytes: 16 * 1024,
            preceding_lines: 100,
            max_hits_per_job: 200_000,
            hits_per_source_signature: 4,
            default_year: 2026,
            clock_uncertainty_ms: 1_500,
            release_quiet_ms: 60 * 60_000,
            max_sources_per_job: 100_000,
            max_ts_ahead_ms: 60_000,
            ras_report_bytes: 16 << 20,
        }
    }
}
