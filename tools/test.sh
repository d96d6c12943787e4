#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing (tools/test-deps.sh),
# then runs the whole suite. Extra arguments go to `cargo test` (a filter, `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/test-deps.sh
exec cargo test --locked "$@"
