# Every target does its own set-up: a fresh clone needs only python3 (>= 3.11) and make.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The real ACP adapters the tests run (pinned in tests/agents/package-lock.json; needs node+npm).
AGENTS := tests/agents
AGENTS_STAMP := $(AGENTS)/node_modules/.installed

.PHONY: test test-unit lint bench demo clean agents browser

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

$(AGENTS_STAMP): $(AGENTS)/package.json $(AGENTS)/package-lock.json
	cd $(AGENTS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(AGENTS_STAMP)

agents: $(AGENTS_STAMP)

# The browser the HTML report's test renders it in: Debian's chromium (apt-get, as root),
# installed once (nothing to do when chromium is already on PATH).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

# On every core (pytest-xdist); a test file's tests stay on one worker, with its module-wide
# relays and servers.
test: $(STAMP) $(AGENTS_STAMP) browser
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# The fast loop: tests/unit starts no process and opens no socket (about 30 s).
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check nostr_buzz tests bench tools examples
	$(BIN)/ruff format --check nostr_buzz tests bench tools examples
	$(BIN)/mypy nostr_buzz

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis $(AGENTS)/node_modules

bench: $(STAMP)
	$(BIN)/python bench/bench.py

demo: $(STAMP)
	$(BIN)/buzz demo
