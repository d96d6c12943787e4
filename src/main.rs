//! The `ratelimit-proxy` binary: everything it does is in the library's `cli`.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ratelimit_proxy::cli::main()
}
