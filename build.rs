//! Sets `RLP_GIT_COMMIT`, the commit the binary was built from, for `rlp_build_info` and the
//! startup log line: `RLP_GIT_COMMIT` from the environment when set (a build without `.git`,
//! such as the container's, can pass it), else `git rev-parse` of this checkout, else
//! "unknown" (a tarball, or no git installed). Only this checkout's own `.git` is asked: a
//! source tree unpacked inside another repository must not take that repository's commit.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RLP_GIT_COMMIT");
    let commit = match std::env::var("RLP_GIT_COMMIT") {
        Ok(given) if !given.trim().is_empty() => given.trim().to_string(),
        _ => commit_of_checkout().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=RLP_GIT_COMMIT={commit}");
}

/// The short hash of HEAD, when this directory is a git checkout (`.git` a directory, or a
/// file in a worktree) and git answers; rebuilds when HEAD moves.
fn commit_of_checkout() -> Option<String> {
    let root = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    if !Path::new(&root).join(".git").exists() {
        return None;
    }
    let commit = git(&root, &["rev-parse", "--short=12", "HEAD"])?;
    // HEAD itself, the branch it points at and packed refs: any of them moves with a commit.
    let branch = git(&root, &["symbolic-ref", "-q", "HEAD"]);
    for name in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        let Some(path) = git(&root, &["rev-parse", "--git-path", name]) else {
            continue;
        };
        // A path that does not exist would make cargo rerun this script on every build.
        let path = Path::new(&root).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(commit)
}

/// What `git ARGS` prints in `dir`, trimmed, when it succeeds.
fn git(dir: &str, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}
