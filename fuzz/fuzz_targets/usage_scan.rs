#![no_main]
//! See `ratelimit_proxy::testing::fuzz::usage_scan` for the invariants checked.

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| ratelimit_proxy::testing::fuzz::usage_scan(bytes));
