"""The Kafka daemon (`rankwatch run`) and its companions (`rankwatch replay`, `rankwatch stats`).

Settings: `rankwatch.settings.run`; the consume-diagnose-publish loop: `service.py`; state
rebuild on assignment: `rebuild.py`; what was already published: `published.py`; the producer
side: `publisher.py`; `/metrics` and `/healthz`: `metrics.py`, `http.py`."""
