#!/usr/bin/env bash
# lint-tests.sh checks the tests for what `go vet` does not (make test runs
# it): testing.T.FailNow, which require.* calls, must only be called from the
# goroutine running the test (its documentation), so
#   - testifylint's go-require check (a `go tool` pinned in go.mod) flags
#     require in goroutines and HTTP handlers;
#   - require.Eventually / assert.Eventually run their condition on a
#     goroutine of their own, so a condition that calls require (a helper
#     such as metricValue) breaks that rule unseen: tests poll with
#     testenv.Eventually, which runs the condition on the test's goroutine.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(bash scripts/go.sh)}
"$GO" tool testifylint -disable-all -enable go-require ./...
if grep -rn --include='*_test.go' -E '\b(require|assert)\.Eventually(f|WithT)?\(' .; then
  echo "lint-tests: use testenv.Eventually (the condition runs on the test goroutine) instead of the lines above" >&2
  exit 1
fi
