"""The configuration of `rankwatch run` (and the connection settings `replay`, `stats` and
`simulate` read from the same file), in the scheme of `rankwatch.settings.options`: one TOML
file, `RANKWATCH_<KEY>` environment overrides, and a command-line flag for every top-level key
(flags win over the environment, which wins over the file). Units are in the names. Secrets
are never shown: `describe()` masks them.

Per-topic decoder settings live only in the file, as tables::

    topic = ["logs.torchrun"]

    [topics."logs.k8s"]
    format = "fluent-bit"
    job_path = ["kubernetes", "labels", "training.kubeflow.org/job-name"]

A topic named in `[topics.NAME]` is consumed even if `topic` does not list it; topics without a
table use the top-level decoder keys (`format`, `job_path`, ..., `max_record_bytes`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankwatch.catalog_loader import Catalog, CatalogError
from rankwatch.daemon import budget
from rankwatch.daemon.budget import BudgetSplit
from rankwatch.engine import KEY_FORMATS, RECORD_FORMATS, Decoder, EngineConfig
from rankwatch.safe_text import printable
from rankwatch.settings.connection import GroupMember
from rankwatch.settings.flags import flag_values
from rankwatch.settings.layers import layered_values
from rankwatch.settings.options import (
    ADDR,
    AUTO,
    AUTO_BOOL,
    BOOL,
    CHOICE,
    INT,
    LIST,
    LOG_LEVELS,
    OPT_STR,
    PATH,
    ConfigError,
    Options,
    check_value,
    env_name,
    option,
    suggest,
)

PATH_KEYS = ("job_path", "rank_path", "host_path", "ts_path", "line_path", "source_path")
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
ISOLATION = ("read_uncommitted", "read_committed")
INITIAL_OFFSET = ("window", "earliest", "latest")
# A fetch smaller than this cannot hold a record of usual size.
MIN_PARTITION_FETCH_BYTES = 1024


_ENGINE = EngineConfig()


@dataclass
class TopicConfig:
    """How to decode the records of one input topic (see `rankwatch.engine.Decoder`): the keys
    of a `[topics.NAME]` table, and the top-level keys of `rankwatch run` that topics without
    a table use (`DaemonConfig` inherits them)."""

    format: str = option("canonical", "record format", kind=CHOICE, choices=RECORD_FORMATS)
    job_path: list[str] | None = option(None, "field path of the job (JSON list)", kind=PATH)  # noqa: RUF009
    rank_path: list[str] | None = option(None, "field path of the rank", kind=PATH)  # noqa: RUF009
    host_path: list[str] | None = option(None, "field path of the host", kind=PATH)  # noqa: RUF009
    ts_path: list[str] | None = option(None, "field path of the event time", kind=PATH)  # noqa: RUF009
    line_path: list[str] | None = option(None, "field path of the log line", kind=PATH)  # noqa: RUF009
    source_path: list[str] | None = option(None, "field path of the source id", kind=PATH)  # noqa: RUF009
    job_header: str = option("job", "record header that carries the job")
    max_record_bytes: int = option(1 << 20, "reject larger records", kind=INT, minimum=1)
    key_format: str = option(
        "job",
        "what a record key names: the job (whole key), or job/rank (a number after the last / "
        "is the rank)",
        kind=CHOICE,
        choices=KEY_FORMATS,
    )
    # not a decoder setting: where the records go first (True, False, or AUTO until decided)
    repartition: bool | str = option(
        AUTO,
        "true: records are not partitioned by job (unkeyed, as Fluent Bit and Vector produce, "
        "or keyed by something else): re-key them by their job through the internal topic "
        "<group_id>-repartition-<topic> before analysis, so one daemon sees all of a job; "
        "false: they are keyed by job; auto: decide at start from the topic's last records",
        kind=AUTO_BOOL,
    )

    def decoder(self, in_order: bool = True) -> Decoder:
        settings = {key: getattr(self, key) for key in DECODER_KEYS}
        return Decoder(**settings, in_order=in_order)


TOPIC_KEYS = tuple(f.name for f in dataclasses.fields(TopicConfig))
DECODER_KEYS = tuple(k for k in TOPIC_KEYS if k != "repartition")


@dataclass
class DaemonConfig(TopicConfig, GroupMember):
    """Every option of `rankwatch run`: the Kafka connection and the default decoder are
    inherited, declared once. Field metadata drives the TOML keys, the environment variables
    and the flags."""

    # --- Kafka: what to read and write --------------------------------------------------------
    topic: list[str] = option(  # noqa: RUF009
        [], "input topic of log records (repeatable)", kind=LIST, metavar="TOPIC"
    )
    output_topic: str = option("rankwatch.diagnoses", "topic the diagnoses are published to")
    group_id: str = option("rankwatch", "Kafka consumer group of the daemons")
    group_instance_id: str | None = option(
        None, "static group membership id (KIP-345): a restart keeps its partitions", kind=OPT_STR
    )
    dead_letter_topic: str | None = option(
        None, "copy rejected records here, with a rankwatch-reject-reason header", kind=OPT_STR
    )
    dead_letter_max_bytes: int = option(
        900_000, "truncate dead-letter copies to this many value bytes", kind=INT, minimum=1
    )
    transactional_id: str | None = option(
        None,
        "publish diagnoses and commit offsets in Kafka transactions under this id",
        kind=OPT_STR,
    )
    # --- Kafka: consumer and producer tuning --------------------------------------------------
    max_poll_interval_ms: int = option(300_000, "max time between fetches", kind=INT, minimum=1)
    max_partition_fetch_bytes: int = option(
        0,
        "bytes fetched per partition per request (0: derived from memory_budget_bytes)",
        kind=INT,
        minimum=0,
    )
    fetch_max_wait_ms: int = option(100, "broker wait for fetch_min_bytes", kind=INT, minimum=0)
    fetch_min_bytes: int = option(1, "broker waits for this many bytes", kind=INT, minimum=1)
    max_batch_records: int = option(
        0,
        "records handed to the engine per fetch (0: derived from memory_budget_bytes)",
        kind=INT,
        minimum=0,
    )
    check_crcs: bool = option(True, "verify record CRCs (about 20%% of decode CPU)", kind=BOOL)
    isolation_level: str = option(
        "read_uncommitted", "isolation level for the input topics", kind=CHOICE, choices=ISOLATION
    )
    initial_offset: str = option(
        "window",
        "where a partition without a committed offset starts: the replay window, "
        "earliest or latest",
        kind=CHOICE,
        choices=INITIAL_OFFSET,
    )
    linger_ms: int = option(5, "producer linger", kind=INT, minimum=0)
    compression_type: str = option(
        "none", "compression of published records", kind=CHOICE, choices=COMPRESSION
    )
    # --- daemon behaviour ---------------------------------------------------------------------
    replay_window_ms: int = option(
        30 * 60_000,
        "on assignment, re-read this much input before the committed offset to rebuild state",
        kind=INT,
        minimum=0,
    )
    commit_interval_ms: int = option(
        1_000, "commit offsets (after publishes are acknowledged) this often", kind=INT, minimum=0
    )
    poll_interval_ms: int = option(
        250, "poll the engine at least this often, even without input", kind=INT, minimum=10
    )
    metrics_addr: str = option(
        "127.0.0.1:9464", "host:port of /metrics, /healthz and /readyz ('off' disables)", kind=ADDR
    )
    suspect_window_ms: int = option(
        24 * 3_600_000,
        "a host that initiated incidents in two or more jobs this recently is a suspect",
        kind=INT,
        minimum=1,
    )
    catalog: list[str] = option(  # noqa: RUF009
        [], "extra catalog file or folder (repeatable)", kind=LIST, metavar="PATH"
    )
    log_level: str = option("info", "log level", kind=CHOICE, choices=LOG_LEVELS)
    repartition_retention_ms: int = option(
        7 * 24 * 3_600_000,
        "retention of the internal repartition topics when rankwatch creates them "
        "(keep it well above replay_window_ms)",
        kind=INT,
        minimum=60_000,
    )
    # --- engine -------------------------------------------------------------------------------
    settle_ms: int = option(
        _ENGINE.settle_ms, "event time to wait after an incident opens", kind=INT, minimum=0
    )
    max_wait_ms: int = option(
        _ENGINE.max_wait_ms,
        "wall time after which an open incident is diagnosed even if its job went silent",
        kind=INT,
        minimum=0,
    )
    incident_horizon_ms: int = option(
        _ENGINE.incident_horizon_ms, "hits this close belong to one incident", kind=INT, minimum=1
    )
    ring_lines: int = option(_ENGINE.ring_lines, "lines kept per rank", kind=INT, minimum=1)
    ring_bytes: int = option(_ENGINE.ring_bytes, "bytes kept per rank", kind=INT, minimum=1)
    memory_budget_bytes: int = option(
        _ENGINE.memory_budget_bytes,
        "the daemon's memory budget above its baseline: the engine gets 45%%, fetches, "
        "batches and bookkeeping the rest",
        kind=INT,
        minimum=1 << 16,
    )
    max_line_bytes: int = option(
        _ENGINE.max_line_bytes, "longer lines are truncated", kind=INT, minimum=64
    )
    preceding_lines: int = option(
        _ENGINE.preceding_lines, "lines before the root cause in a diagnosis", kind=INT, minimum=0
    )
    max_hits_per_job: int = option(
        _ENGINE.max_hits_per_job, "signature hits kept per job", kind=INT, minimum=1
    )
    clock_uncertainty_ms: int = option(
        _ENGINE.clock_uncertainty_ms, "events closer than this are ties", kind=INT, minimum=0
    )
    max_sources_per_job: int = option(
        _ENGINE.max_sources_per_job,
        "processes tracked per job; lines of further ones share one source and are counted in"
        " the diagnosis (the budget may lower it)",
        kind=INT,
        minimum=1,
    )
    max_ts_ahead_ms: int = option(
        _ENGINE.max_ts_ahead_ms,
        "a time a record or line carries more than this ahead of the broker's time of its "
        "record is taken as the broker's time plus this, and counted (a rank whose clock runs "
        "ahead cannot close its job's incidents early)",
        kind=INT,
        minimum=0,
    )
    release_quiet_ms: int = option(
        _ENGINE.release_quiet_ms,
        "a job quiet this long gets its final diagnoses and its state released (0: never)",
        kind=INT,
        minimum=0,
    )
    ras_report_bytes: int = option(
        _ENGINE.ras_report_bytes,
        "an NCCL RAS report (ncclras text or JSON) is read whole up to this size; a longer one "
        "is counted and skipped",
        kind=INT,
        minimum=1024,
    )
    # --- Flight Recorder ----------------------------------------------------------------------
    flight_recorder_dir: str | None = option(
        None,
        "folder that jobs write PyTorch Flight Recorder dumps into, watched for new dumps (a "
        "dump's job: its first folder under DIR, or its name without the rank)",
        kind=OPT_STR,
        metavar="DIR",
    )
    flight_recorder_poll_ms: int = option(
        2_000, "how often the Flight Recorder folder is scanned", kind=INT, minimum=100
    )
    flight_recorder_quiet_ms: int = option(
        5_000,
        "a job's dumps are read once none of them changed for this long",
        kind=INT,
        minimum=0,
    )
    max_dump_bytes: int = option(
        256 << 20, "larger Flight Recorder dumps are reported and skipped", kind=INT, minimum=1024
    )
    # --- TOML only ----------------------------------------------------------------------------
    topics: dict[str, TopicConfig] = field(default_factory=dict)

    def input_topics(self) -> list[str]:
        """`topic` plus the topics that have a `[topics.NAME]` table, without duplicates."""
        return list(dict.fromkeys([*self.topic, *self.topics]))

    def topic_config(self, name: str) -> TopicConfig:
        return self.topics.get(name) or self.default_topic_config()

    def default_topic_config(self) -> TopicConfig:
        return TopicConfig(**{key: getattr(self, key) for key in TOPIC_KEYS})

    def repartitioned_topics(self) -> list[str]:
        """Input topics whose records go through the repartition stage first (`auto` ones
        once decided: undecided, they are read as they are)."""
        return [t for t in self.input_topics() if self.topic_config(t).repartition is True]

    def repartition_topic(self, topic: str) -> str:
        """The internal topic the records of `topic` are re-keyed into (Kafka Streams'
        `<application>-<name>-repartition` idea, named so the group's topics sort together)."""
        return f"{self.group_id}-repartition-{topic}"

    def repartition_group(self) -> str:
        """The consumer group of the repartition stage (every daemon is a member)."""
        return f"{self.group_id}-repartition"

    def analysis_topics(self) -> list[str]:
        """What the analysis stage consumes: keyed input topics as they are, the internal
        topic in place of each repartitioned one."""
        return [
            self.repartition_topic(t) if self.topic_config(t).repartition is True else t
            for t in self.input_topics()
        ]

    def source_topic(self, analysis_topic: str) -> str:
        """The input topic whose decoder reads `analysis_topic`."""
        for t in self.repartitioned_topics():
            if self.repartition_topic(t) == analysis_topic:
                return t
        return analysis_topic

    def budget(self) -> BudgetSplit:
        """What the engine, the fetches, the batches and the bookkeeping may each hold."""
        return budget.split(
            self.memory_budget_bytes, self.max_partition_fetch_bytes, self.max_batch_records
        )

    def engine_config(self) -> EngineConfig:
        names = {f.name for f in dataclasses.fields(EngineConfig)}
        values = {k: getattr(self, k) for k in names if hasattr(self, k)}
        values["memory_budget_bytes"] = self.budget().engine_bytes
        return EngineConfig(**values)

    def metrics_listen(self) -> tuple[str, int] | None:
        if self.metrics_addr == "off":
            return None
        host, _, port = self.metrics_addr.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)

    def describe(self) -> dict[str, Any]:
        """The configuration as a dict for logs, secrets masked."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value is not None:
                value = "***"
            elif f.name == "topics":
                value = {k: dataclasses.asdict(v) for k, v in value.items()}
            out[f.name] = value
        return out

    def __repr__(self) -> str:
        return f"DaemonConfig({self.describe()!r})"


OPTIONS: Options = {f.name: f for f in dataclasses.fields(DaemonConfig) if "kind" in f.metadata}


def _topic_tables(raw: Any, where: str, base: TopicConfig) -> dict[str, TopicConfig]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [topics] must be a table of [topics.NAME] tables")
    out: dict[str, TopicConfig] = {}
    for name, table in raw.items():
        w = f"{where}: [topics.{name!r}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{w}: must be a table")
        values: dict[str, Any] = {}
        for key, value in table.items():
            if key not in TOPIC_KEYS:
                raise ConfigError(f"{w}: unknown key {key!r}{suggest(key, list(TOPIC_KEYS))}")
            values[key] = check_value(key, value, f"{w}.{key}", OPTIONS)
        out[name] = dataclasses.replace(base, **values)
    return out


def load_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    check: bool = True,
) -> DaemonConfig:
    """Defaults, then the TOML file, then `RANKWATCH_<KEY>` variables, then `overrides`
    (already-typed values from flags). Raises ConfigError naming the source of a bad value.
    `check=False` skips the rules between keys (for commands that only need a connection)."""
    env = os.environ if environ is None else environ
    env_names = [(key, env_name(key)) for key in OPTIONS]
    values, tables = layered_values(OPTIONS, path, env, env_names, overrides, tables=("topics",))
    cfg = DaemonConfig(**values)
    if "topics" in tables:
        cfg.topics = _topic_tables(tables["topics"], str(path), cfg.default_topic_config())
    if check:
        check_config(cfg)
    return cfg


# What Kafka accepts as a topic name; anything else makes the client wait for a topic that can
# never exist.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_topic_name(name: str, where: str) -> None:
    """Raises ConfigError unless Kafka would accept `name` as a topic name."""
    if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"{where}: {printable(repr(name), limit=120)} is not a valid Kafka topic name "
            "(1 to 249 of the characters a-z A-Z 0-9 . _ -, not . or ..)"
        )


def check_config(cfg: DaemonConfig) -> None:
    """Rules that involve more than one key."""
    inputs = cfg.input_topics()
    for name in inputs:
        check_topic_name(name, "topic")
    check_topic_name(cfg.output_topic, "output_topic")
    if cfg.dead_letter_topic is not None:
        check_topic_name(cfg.dead_letter_topic, "dead_letter_topic")
    if not inputs:
        raise ConfigError(
            "no input topic: set `topic` in the config file, RANKWATCH_TOPIC or --topic"
        )
    for server in cfg.bootstrap_servers.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"bootstrap_servers: expected host:port[,...], got {server!r}")
    if cfg.output_topic in inputs:
        raise ConfigError(f"output_topic {cfg.output_topic!r} is also an input topic")
    if cfg.dead_letter_topic is not None:
        if cfg.dead_letter_topic in inputs:
            raise ConfigError(f"dead_letter_topic {cfg.dead_letter_topic!r} is also an input topic")
        if cfg.dead_letter_topic == cfg.output_topic:
            raise ConfigError("dead_letter_topic must differ from output_topic")
    check_budget(cfg)
    if cfg.heartbeat_interval_ms >= cfg.session_timeout_ms:
        raise ConfigError(
            f"heartbeat_interval_ms ({cfg.heartbeat_interval_ms}) must be below "
            f"session_timeout_ms ({cfg.session_timeout_ms})"
        )
    if cfg.security_protocol.startswith("SASL_"):
        if cfg.sasl_mechanism is None:
            raise ConfigError(f"security_protocol {cfg.security_protocol} needs sasl_mechanism")
        if not cfg.sasl_username or cfg.sasl_password is None:
            raise ConfigError(
                f"sasl_mechanism {cfg.sasl_mechanism} needs sasl_username and sasl_password "
                f"(or {env_name('sasl_password')})"
            )
    for name in cfg.repartitioned_topics():
        internal = cfg.repartition_topic(name)
        check_topic_name(
            internal, f"repartition topic of {name!r} (<group_id>-repartition-<topic>)"
        )
        if internal in (*inputs, cfg.output_topic, cfg.dead_letter_topic):
            raise ConfigError(f"repartition topic {internal!r} is also an input or output topic")
    if cfg.repartitioned_topics() and cfg.repartition_retention_ms <= cfg.replay_window_ms:
        raise ConfigError(
            f"repartition_retention_ms ({cfg.repartition_retention_ms}) must be above "
            f"replay_window_ms ({cfg.replay_window_ms}): the rebuild re-reads the internal topic"
        )
    for name in inputs:
        try:
            cfg.topic_config(name).decoder()
        except ValueError as e:
            raise ConfigError(f"topic {name!r}: {e}") from None


def check_budget(cfg: DaemonConfig) -> None:
    """Fetch and batch sizes that are set must fit their shares of the memory budget."""
    if 0 < cfg.max_partition_fetch_bytes < MIN_PARTITION_FETCH_BYTES:
        raise ConfigError(
            f"max_partition_fetch_bytes: must be 0 (derived from memory_budget_bytes) or at "
            f"least {MIN_PARTITION_FETCH_BYTES:,}, got {cfg.max_partition_fetch_bytes:,}"
        )
    wrong = budget.problems(
        cfg.memory_budget_bytes, cfg.max_partition_fetch_bytes, cfg.max_batch_records
    )
    if wrong:
        raise ConfigError("; ".join(wrong))


def connection_config(args: argparse.Namespace) -> DaemonConfig:
    """The settings of a command that only connects to Kafka (`replay`, `stats`, `simulate`):
    the config file `args.config`, the environment and the flags, without the rules between
    keys that only `rankwatch run` needs."""
    return load_config(args.config, overrides=flag_values(args, OPTIONS), check=False)


def load_catalog(cfg: DaemonConfig) -> Catalog:
    try:
        return Catalog(cfg.catalog)
    except CatalogError as e:
        raise ConfigError(f"catalog: {e}") from None


def validate_config(path: str | Path, *, use_env: bool = True) -> DaemonConfig:
    """Loads and checks a daemon config file (with the environment unless `use_env` is false),
    including its extra catalogs. Raises ConfigError with a one-line reason."""
    cfg = load_config(path, environ=None if use_env else {})
    load_catalog(cfg)
    return cfg
