"""The Kafka daemon (`rankwatch run`) and its companions (`rankwatch replay`, `rankwatch stats`).

Configuration: `config.py`; the consume-diagnose-publish loop: `service.py`; state rebuild on
assignment: `rebuild.py`; what was already published: `published.py`; the producer side:
`publisher.py`; `/metrics` and `/healthz`: `metrics.py`, `http.py`."""

from rankwatch.daemon.config import ConfigError, DaemonConfig, load_config, validate_config

__all__ = ["ConfigError", "DaemonConfig", "load_config", "validate_config"]
