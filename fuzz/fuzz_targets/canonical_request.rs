#![no_main]
//! See `ratelimit_proxy::testing::fuzz::request` for the invariants checked.

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| ratelimit_proxy::testing::fuzz::request(bytes));
