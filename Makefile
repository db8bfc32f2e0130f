# The two jobs of the README: `make demo` and `make test`. Both do their own set-up.
CARGO ?= cargo
SIZE ?= 256MiB

.PHONY: setup build test lint demo bench clean

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release --bin csx

lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace

demo: build
	scripts/demo.sh $(SIZE)

clean:
	$(CARGO) clean
