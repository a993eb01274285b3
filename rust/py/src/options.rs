//! The engine options as they cross the binding: the JSON of Python's `EngineConfig`, every
//! field optional (left out, the engine's default), unknown keys and negative values refused.

use rankwatch_core::Config;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineOptions {
    ring_lines: Option<u64>,
    ring_bytes: Option<u64>,
    memory_budget_bytes: Option<u64>,
    settle_ms: Option<u64>,
    incident_horizon_ms: Option<u64>,
    max_wait_ms: Option<u64>,
    max_line_bytes: Option<u64>,
    preceding_lines: Option<u64>,
    max_hits_per_job: Option<u64>,
    default_year: Option<u64>,
    clock_uncertainty_ms: Option<u64>,
    release_quiet_ms: Option<u64>,
    max_sources_per_job: Option<u64>,
    max_ts_ahead_ms: Option<u64>,
    ras_report_bytes: Option<u64>,
}

/// Sets `field` to `value` when given; an error names the option when it does not fit.
fn set<T: TryFrom<u64>>(name: &str, value: Option<u64>, field: &mut T) -> Result<(), String> {
    if let Some(v) = value {
        *field = T::try_from(v).map_err(|_| format!("engine option {name} is too large: {v}"))?;
    }
    Ok(())
}

impl EngineOptions {
    pub fn from_json(text: &str) -> Result<EngineOptions, String> {
        // serde would also read a struct from a JSON array, by position
        if !text.trim_start().starts_with('{') {
            return Err("config must be a JSON object".into());
        }
        serde_json::from_str(text).map_err(|e| format!("engine options: {e}"))
    }

    /// The engine's configuration: its defaults, with these options over them. Rings and lines
    /// have floors (a ring of no line, a line shorter than a log prefix, are no use).
    pub fn config(&self) -> Result<Config, String> {
        let mut c = Config::default();
        set("ring_lines", self.ring_lines, &mut c.ring_lines)?;
        set("ring_bytes", self.ring_bytes, &mut c.ring_bytes)?;
        set(
            "memory_budget_bytes",
            self.memory_budget_bytes,
            &mut c.memory_budget_bytes,
        )?;
        set("settle_ms", self.settle_ms, &mut c.settle_ms)?;
        set(
            "incident_horizon_ms",
            self.incident_horizon_ms,
            &mut c.incident_horizon_ms,
        )?;
        set("max_wait_ms", self.max_wait_ms, &mut c.max_wait_ms)?;
        set("max_line_bytes", self.max_line_bytes, &mut c.max_line_bytes)?;
        set(
            "preceding_lines",
            self.preceding_lines,
            &mut c.preceding_lines,
        )?;
        set(
            "max_hits_per_job",
            self.max_hits_per_job,
            &mut c.max_hits_per_job,
        )?;
        set("default_year", self.default_year, &mut c.default_year)?;
        set(
            "clock_uncertainty_ms",
            self.clock_uncertainty_ms,
            &mut c.clock_uncertainty_ms,
        )?;
        set(
            "release_quiet_ms",
            self.release_quiet_ms,
            &mut c.release_quiet_ms,
        )?;
        set(
            "max_sources_per_job",
            self.max_sources_per_job,
            &mut c.max_sources_per_job,
        )?;
        set(
            "max_ts_ahead_ms",
            self.max_ts_ahead_ms,
            &mut c.max_ts_ahead_ms,
        )?;
        set(
            "ras_report_bytes",
            self.ras_report_bytes,
            &mut c.ras_report_bytes,
        )?;
        c.ring_lines = c.ring_lines.max(1);
        c.ring_bytes = c.ring_bytes.max(256);
        c.max_line_bytes = c.max_line_bytes.max(64);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Result<Config, String> {
        EngineOptions::from_json(text)?.config()
    }

    #[test]
    fn options_override_the_defaults_with_floors() {
        let c = config(r#"{"settle_ms": 0, "ring_lines": 0, "max_line_bytes": 10}"#).unwrap();
        assert_eq!((c.settle_ms, c.ring_lines, c.max_line_bytes), (0, 1, 64));
        assert_eq!(c.max_wait_ms, Config::default().max_wait_ms);
    }

    #[test]
    fn unknown_keys_negative_and_non_integer_values_are_refused() {
        for (text, message) in [
            (r#"{"settle_msec": 1}"#, "unknown field `settle_msec`"),
            (r#"{"settle_ms": -1}"#, "invalid value: integer `-1`"),
            (r#"{"settle_ms": 1.5}"#, "invalid type: floating point"),
            (
                r#"{"default_year": 5000000000}"#,
                "engine option default_year is too large",
            ),
            ("[1]", "config must be a JSON object"),
        ] {
            let err = config(text).unwrap_err();
            assert!(err.contains(message), "{text}: {err}");
        }
    }
}
