"""`rankwatch alert`: delivers the diagnoses topic to people (Alertmanager, PagerDuty,
webhooks) as its own consumer group, and serves the incident pages the alerts link to."""
