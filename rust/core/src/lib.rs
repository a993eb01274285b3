//! rankwatch-core: the engine behind rankwatch, in plain Rust.
//!
//! - [`prefix`] peels launcher/torchrun/NCCL/c10 prefixes off a line (the decoder),
//! - [`catalog`] loads the TOML signature catalog into one Hyperscan database ([`matcher`]),
//!   kept compiled on disk by [`dbcache`],
//! - [`engine`] routes lines to per-process [`ring`]s and records signature hits per [`job`],
//! - [`correlate`] turns a job's hits into one diagnosis per incident,
//! - [`files`] reads log files (plain or gzip) in bounded chunks for local analysis,
//! - [`filetext`] reads lines of local files back by offset (rings keep them by reference),
//! - [`records`] decodes Kafka record values (canonical, Fluent Bit, Vector, docker, CRI, text).

pub mod announce;
pub mod baseline;
pub mod catalog;
pub mod config;
pub mod correlate;
pub mod dbcache;
pub mod differential;
pub mod digits;
pub mod engine;
pub mod fieldre;
pub mod files;
pub mod filetext;
pub mod flight_recorder;
pub mod flight_recorder_analysis;
pub mod flight_recorder_files;
pub mod hextoken;
pub mod ib_ports;
pub mod identity;
pub mod job;
pub mod jsonfields;
pub mod matcher;
pub mod memsize;
pub mod native_stacks;
pub mod p2p_links;
pub mod prefix;
pub mod ras_capture;
pub mod ras_monitor;
pub mod records;
pub mod report;
pub mod ring;
pub mod scandb;
pub mod timefmt;

pub use catalog::{Catalog, CatalogError};
pub use config::Config;
pub use correlate::Diagnosis;
pub use engine::{Engine, FileInput, FilesReport, Stats, StreamHints};
