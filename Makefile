# The two jobs of the README: `make demo` and `make test`. Both do their own set-up.
CARGO ?= cargo
SIZE ?= 256MiB
# `make install PREFIX=...`: the csx binary with its man pages and bash, zsh and fish
# completions; libcsx (the SNIA CS API, crates/capi), cs_api.h, cs_api_v05.h and csx.pc.
PREFIX ?= /usr/local
CSX_LIB_DIR ?= $(or $(CARGO_TARGET_DIR),target)/release
VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

.PHONY: setup build test lint demo bench clean install install-files install-cli fuzz soak probes

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release --bin csx

lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace
	scripts/python-test.sh

demo: build
	scripts/demo.sh $(SIZE)

# Coverage-guided fuzzing on stable Rust (libFuzzer): FUZZ_MINUTES per target (default 1),
# FUZZ_TARGETS to pick some. Not part of `make test`, which replays the kept corpus.
FUZZ_MINUTES ?= 1
fuzz: setup
	FUZZ_MINUTES=$(FUZZ_MINUTES) $(if $(FUZZ_TARGETS),FUZZ_TARGETS="$(FUZZ_TARGETS)") scripts/fuzz.sh

# The long fault campaigns: 1,000 kill -9 points of writers and daemon and 1,000 of a
# mount, with power-loss simulation, 64 hostile clients for 10 minutes, the 32-client
# soak for 10 minutes (scripts/soak.sh).
soak: setup
	CARGO="$(CARGO)" scripts/soak.sh

# Re-runs the automatable probes of the reliability round against a release csx
# (scripts/probes.sh): prints each probe's verdict and the count that held.
probes: build
	scripts/probes.sh $(or $(CARGO_TARGET_DIR),target)/release/csx

clean:
	$(CARGO) clean

install: setup
	$(CARGO) build --release -p csx-capi -p csx
	$(MAKE) install-files install-cli

# The csx binary, its man pages and completions, generated from its own definitions.
install-cli:
	install -d $(PREFIX)/bin $(PREFIX)/share/man/man1 $(PREFIX)/share/bash-completion/completions \
		$(PREFIX)/share/zsh/site-functions $(PREFIX)/share/fish/vendor_completions.d
	install -m 755 $(CSX_LIB_DIR)/csx $(PREFIX)/bin/csx
	$(PREFIX)/bin/csx man $(PREFIX)/share/man/man1
	$(PREFIX)/bin/csx completions bash > $(PREFIX)/share/bash-completion/completions/csx
	$(PREFIX)/bin/csx completions zsh > $(PREFIX)/share/zsh/site-functions/_csx
	$(PREFIX)/bin/csx completions fish > $(PREFIX)/share/fish/vendor_completions.d/csx.fish

# Installs what is already built in CSX_LIB_DIR (the tests point it at their build).
install-files:
	install -d $(PREFIX)/lib/pkgconfig $(PREFIX)/include
	install -m 755 $(CSX_LIB_DIR)/libcsx_capi.so $(PREFIX)/lib/libcsx.so
	install -m 644 $(CSX_LIB_DIR)/libcsx_capi.a $(PREFIX)/lib/libcsx.a
	install -m 644 sdk/include/cs_api.h $(PREFIX)/include/cs_api.h
	install -m 644 sdk/include/cs_api_v05.h $(PREFIX)/include/cs_api_v05.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' sdk/csx.pc.in > $(PREFIX)/lib/pkgconfig/csx.pc
