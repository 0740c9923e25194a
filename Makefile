# The two commands a user needs are `make dev` and `make test`; both install what is missing.
.PHONY: dev test build setup bench

dev:
	@scripts/dev.sh

test:
	@scripts/test.sh

build:
	@scripts/build.sh

setup:
	@scripts/setup.sh --local-model

bench:
	@scripts/bench.sh
