"""Configuration shared by the commands: the option scheme (`options.py`: kinds, parsing,
checks, names of variables and flags), the layers a value comes from (`layers.py`: the TOML
file, the environment, the flags), flags from options (`flags.py`), the Kafka connection
options every Kafka client takes (`connection.py`: `run`, `replay`, `stats`, `simulate` and
`alert`), and the settings of `rankwatch run` (`run.py`). Hand-written rather than on
pydantic-settings: the measurements are at the top of `options.py`."""
