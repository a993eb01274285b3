.PHONY: demo test setup bench
setup:
	scripts/setup.sh
demo:
	scripts/demo.sh
test:
	scripts/test.sh
bench: setup
	.venv/bin/python bench/engine_bench.py
