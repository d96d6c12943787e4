#![no_main]
//! See `ratelimit_proxy::testing::fuzz::key_values` for the invariants checked.

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| ratelimit_proxy::testing::fuzz::key_values(bytes));
