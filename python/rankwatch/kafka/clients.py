"""Building aiokafka clients from the daemon configuration (connection and security settings
shared by every client, then the consumer's and producer's own)."""

from __future__ import annotations

import ssl
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from rankwatch.settings.connection import KafkaConnection
from rankwatch.settings.run import DaemonConfig

# How often a consumer refreshes topic metadata. aiokafka's default is five minutes, and a
# subscription to a topic that does not exist yet (an input topic a pipeline creates on first
# write; the diagnoses topic `rankwatch run` creates with its first diagnosis) is only assigned
# at the refresh after the topic appears: this keeps that within seconds.
METADATA_REFRESH_MS = 5_000


def connection_kwargs(cfg: KafkaConnection) -> dict[str, Any]:
    """bootstrap, client id, timeouts and security: what every client needs."""
    kw: dict[str, Any] = {
        "bootstrap_servers": cfg.bootstrap_servers,
        "client_id": cfg.client_id,
        "request_timeout_ms": cfg.request_timeout_ms,
        "security_protocol": cfg.security_protocol,
    }
    if cfg.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=cfg.ssl_cafile)
        if cfg.ssl_certfile:
            context.load_cert_chain(cfg.ssl_certfile, cfg.ssl_keyfile, cfg.ssl_password)
        kw["ssl_context"] = context
    if cfg.security_protocol.startswith("SASL_"):
        kw["sasl_mechanism"] = cfg.sasl_mechanism
        kw["sasl_plain_username"] = cfg.sasl_username
        kw["sasl_plain_password"] = cfg.sasl_password
    return kw


def input_consumer(cfg: DaemonConfig) -> Any:
    """The group member that reads the input topics (manual commits only); its fetches are
    bounded by their share of the memory budget."""
    split = cfg.budget()
    return AIOKafkaConsumer(
        **connection_kwargs(cfg),
        group_id=cfg.group_id,
        group_instance_id=cfg.group_instance_id,
        enable_auto_commit=False,
        auto_offset_reset="latest" if cfg.initial_offset == "latest" else "earliest",
        isolation_level=cfg.isolation_level,
        session_timeout_ms=cfg.session_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        max_poll_interval_ms=cfg.max_poll_interval_ms,
        max_partition_fetch_bytes=split.max_partition_fetch_bytes,
        fetch_max_bytes=split.fetch_max_bytes,
        fetch_max_wait_ms=cfg.fetch_max_wait_ms,
        fetch_min_bytes=cfg.fetch_min_bytes,
        check_crcs=cfg.check_crcs,
        metadata_max_age_ms=METADATA_REFRESH_MS,
    )


def reader_consumer(cfg: DaemonConfig, *, isolation_level: str = "read_committed") -> Any:
    """A consumer outside any group, for reading positions and topic tails by assignment."""
    split = cfg.budget()
    return AIOKafkaConsumer(
        **connection_kwargs(cfg),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation_level,
        max_partition_fetch_bytes=split.max_partition_fetch_bytes,
        fetch_max_bytes=split.fetch_max_bytes,
        fetch_max_wait_ms=cfg.fetch_max_wait_ms,
    )


def max_request_size(cfg: DaemonConfig) -> int:
    """The producer's limit on one record: the broker's default (1 MiB), or more when
    dead-letter copies may be larger."""
    return max(1 << 20, cfg.dead_letter_max_bytes + (64 << 10))


def producer(cfg: DaemonConfig) -> Any:
    """The producer of diagnoses and dead-letter copies (idempotent; transactional if set)."""
    kw: dict[str, Any] = {
        **connection_kwargs(cfg),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": cfg.linger_ms,
        "max_request_size": max_request_size(cfg),
    }
    if cfg.compression_type != "none":
        kw["compression_type"] = cfg.compression_type
    if cfg.transactional_id:
        kw["transactional_id"] = cfg.transactional_id
    return AIOKafkaProducer(**kw)
