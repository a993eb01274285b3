"""The Kafka connection options, declared once: every Kafka client of rankwatch takes them
(`run`, `replay`, `stats`, `simulate`, `alert`). The configurations of `run` and `alert`
inherit them (`GroupMember`); `replay`, `stats` and `simulate` take only `CONNECTION_KEYS`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rankwatch.settings.options import CHOICE, INT, OPT_STR, option

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass
class KafkaConnection:
    """Where the brokers are and how to reach them: what every client needs."""

    bootstrap_servers: str = option("127.0.0.1:9092", "Kafka bootstrap servers, host:port[,...]")
    client_id: str = option("rankwatch", "Kafka client id")
    request_timeout_ms: int = option(40_000, "Kafka request timeout", kind=INT, minimum=1)
    security_protocol: str = option(
        "PLAINTEXT", "Kafka security protocol", kind=CHOICE, choices=SECURITY_PROTOCOLS
    )
    sasl_mechanism: str | None = option(
        None, "SASL mechanism", kind=CHOICE, choices=SASL_MECHANISMS
    )
    sasl_username: str | None = option(None, "SASL user name", kind=OPT_STR)
    sasl_password: str | None = option(
        None, "SASL password (never logged)", kind=OPT_STR, secret=True
    )
    ssl_cafile: str | None = option(None, "CA bundle for SSL", kind=OPT_STR, metavar="FILE")
    ssl_certfile: str | None = option(
        None, "client certificate for SSL", kind=OPT_STR, metavar="FILE"
    )
    ssl_keyfile: str | None = option(None, "client key for SSL", kind=OPT_STR, metavar="FILE")
    ssl_password: str | None = option(
        None, "password of the SSL key (never logged)", kind=OPT_STR, secret=True
    )


@dataclass
class GroupMember(KafkaConnection):
    """The connection of a consumer-group member (`run`, `alert`): its liveness timeouts too."""

    session_timeout_ms: int = option(10_000, "group session timeout", kind=INT, minimum=1)
    heartbeat_interval_ms: int = option(3_000, "group heartbeat interval", kind=INT, minimum=1)


CONNECTION_KEYS = tuple(f.name for f in dataclasses.fields(KafkaConnection))
GROUP_MEMBER_KEYS = tuple(f.name for f in dataclasses.fields(GroupMember))
