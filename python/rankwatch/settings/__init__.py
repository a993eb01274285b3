"""Configuration shared by the commands: the option scheme (`options.py`: kinds, parsing,
checks, names of variables and flags), the layers a value comes from (`layers.py`: the TOML
file, the environment, the flags), flags from options (`flags.py`), and the settings of
`rankwatch run` (`run.py`), whose connection settings `replay`, `stats`, `simulate` and
`alert` also use."""
