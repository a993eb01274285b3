"""Kafka for every command: clients built from the settings (`clients.py`), waiting for the
broker (`broker_wait.py`), reading a topic's tail (`tail.py`), batched sends with per-record
acknowledgements (`batch_sender.py`), and log files replayed into a topic (`replay.py`)."""
