# `make demo` runs the main job; `make test` runs exactly what CI runs.
.PHONY: setup demo test check lint typecheck unit bench

VENV := .venv/bin

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/codegym demo --out runs/demo

lint: setup
	$(VENV)/ruff check src tests benchmarks
	$(VENV)/ruff format --check src tests benchmarks

typecheck: setup
	$(VENV)/mypy

unit: setup
	$(VENV)/pytest -q -rs

check: lint typecheck unit

test: check

bench: setup
	$(VENV)/python benchmarks/sandbox_bench.py
