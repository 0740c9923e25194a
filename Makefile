# The two commands a user needs are `make dev` and `make test`; both install what is missing.
# While changing code: `make check` (fmt, clippy, the fast checks, native tests: minutes) and
# `make e2e T=turn` (one file of tests/e2e/, the wasm rebuilt first only if a source is newer).
# The logic is in scripts/; these targets only name it.
.PHONY: dev test check e2e build setup bench

dev:
	@scripts/dev.sh

test:
	@scripts/test.sh

check:
	@scripts/check.sh

e2e:
	@scripts/e2e.sh $(T)

build:
	@scripts/build.sh

setup:
	@scripts/setup.sh --local-model

bench:
	@scripts/bench.sh
