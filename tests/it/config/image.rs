//! The container image's own config, laid out as the Dockerfile's runtime stage copies it:
//! with only the files the image has and RLP_UPSTREAM set, it passes `check`; without the
//! variable it is refused, naming it. And the runtime stage's instructions an image needs:
//! its ports, HEALTHCHECK, OCI labels. No Docker engine runs in CI, so the layout is rebuilt
//! from the Dockerfile's lines; `.ci/rehearse-docker-build` runs the build. The build stage
//! copies every file the manifest names (it once left out `examples/`, and the build failed).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The runtime stage's instructions: the lines after the Dockerfile's last `FROM`.
fn runtime_stage(dockerfile: &str) -> Vec<&str> {
    let lines: Vec<&str> = dockerfile.lines().collect();
    let last_from = lines
        .iter()
        .rposition(|line| line.starts_with("FROM "))
        .expect("the Dockerfile has a FROM line");
    lines[last_from + 1..].to_vec()
}

/// Copies the build context's files as the stage's `COPY SOURCE DEST` lines do (not those
/// `--from` the build stage: the binary is this test's own), under `image`.
fn copy_context_files(stage: &[&str], context: &Path, image: &Path) {
    for line in stage.iter().filter_map(|line| line.strip_prefix("COPY ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words[0].starts_with("--from=") {
            continue;
        }
        let [source, dest] = words[..] else {
            panic!("COPY with one source and one destination expected: {line}");
        };
        let target = image.join(dest.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(context.join(source), &target)
            .unwrap_or_else(|error| panic!("copy {source} to {}: {error}", target.display()));
    }
}

/// The config the image runs with: the value after `--config` in its `CMD`.
fn config_in_cmd(stage: &[&str]) -> PathBuf {
    let cmd = stage
        .iter()
        .find_map(|line| line.strip_prefix("CMD "))
        .expect("the runtime stage has a CMD");
    let args: Vec<String> = serde_json::from_str(cmd).expect("CMD in JSON form");
    let at = args
        .iter()
        .position(|arg| arg == "--config")
        .expect("CMD names --config");
    PathBuf::from(&args[at + 1])
}

/// `ratelimit-proxy check --config CONFIG` with only `env` in its environment (never this
/// process's, which parallel tests share): whether it passed, and what it printed.
fn check_with_env(config: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ratelimit-proxy"))
        .args(["check", "--config"])
        .arg(config)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
fn the_images_config_passes_check_with_only_the_files_the_image_copies() {
    let context = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(context.join("Dockerfile")).unwrap();
    let stage = runtime_stage(&dockerfile);
    let image = std::env::temp_dir().join(format!("rlp-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&image);
    copy_context_files(&stage, context, &image);
    let config = image.join(config_in_cmd(&stage).strip_prefix("/").unwrap());
    let with_upstream = check_with_env(&config, &[("RLP_UPSTREAM", "http://app:8080")]);
    let without = check_with_env(&config, &[]);
    std::fs::remove_dir_all(&image).unwrap();
    let (ok, text) = with_upstream;
    assert!(ok, "{text}");
    assert!(text.contains("OK (1 routes, 1 upstreams)"), "{text}");
    let (ok, text) = without;
    assert!(!ok, "{text}");
    assert!(
        text.contains("upstreams[0].servers[0]: environment variable RLP_UPSTREAM is not set"),
        "{text}"
    );
}

/// The runtime stage's instructions, each on one line: `\` continuations joined, comments and
/// blank lines left out.
fn instructions(stage: &[&str]) -> Vec<String> {
    let mut joined = Vec::new();
    let mut pending = String::new();
    for line in stage {
        if pending.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(start) => pending.push_str(start),
            None => joined.push(std::mem::take(&mut pending) + line),
        }
    }
    joined
}

fn runtime_instructions() -> Vec<String> {
    let context = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(context.join("Dockerfile")).unwrap();
    instructions(&runtime_stage(&dockerfile))
}

#[test]
fn the_image_exposes_its_admin_listener_and_checks_its_health_with_the_binary() {
    let stage = runtime_instructions();
    let expose = stage.iter().find_map(|i| i.strip_prefix("EXPOSE "));
    let ports: Vec<&str> = expose.expect("an EXPOSE line").split_whitespace().collect();
    assert_eq!(ports, ["8080", "9090"]);
    let healthcheck = stage
        .iter()
        .find_map(|i| i.strip_prefix("HEALTHCHECK "))
        .expect("a HEALTHCHECK line");
    let (options, cmd) = healthcheck.split_once("CMD ").expect("HEALTHCHECK ... CMD");
    assert!(options.contains("--timeout="), "{healthcheck}");
    let args: Vec<String> = serde_json::from_str(cmd).expect("CMD in JSON form");
    assert_eq!(args, ["ratelimit-proxy", "health"]);
    // `health` asks 127.0.0.1:9090 by default: the image's admin listener must be there.
    let context = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = std::fs::read_to_string(context.join("contrib/container/gw.toml")).unwrap();
    let config: toml::Table = toml::from_str(&config).unwrap();
    assert_eq!(config["admin"]["listen"].as_str(), Some("0.0.0.0:9090"));
}

#[test]
fn the_image_has_oci_labels_matching_cargo_toml() {
    let stage = runtime_instructions();
    let labels: Vec<&String> = stage.iter().filter(|i| i.starts_with("LABEL ")).collect();
    let labels = labels
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    for (key, value) in [
        ("title", "\"ratelimit-proxy\""),
        ("licenses", &format!("\"{}\"", env!("CARGO_PKG_LICENSE"))),
        ("version", "\"${RLP_VERSION}\""),
        ("revision", "\"${RLP_GIT_COMMIT}\""),
        ("source", "\"${RLP_SOURCE}\""),
        (
            "description",
            &format!("\"{}\"", env!("CARGO_PKG_DESCRIPTION")),
        ),
    ] {
        let label = format!("org.opencontainers.image.{key}={value}");
        assert!(labels.contains(&label), "{label} not in {labels}");
    }
    let version = format!("ARG RLP_VERSION={}", env!("CARGO_PKG_VERSION"));
    assert!(stage.contains(&version), "{version} not in {stage:?}");
}

#[test]
fn the_build_can_skip_pgo_and_the_context_leaves_out_build_output() {
    let context = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(context.join("Dockerfile")).unwrap();
    assert!(dockerfile.lines().any(|l| l == "ARG PGO=1"), "{dockerfile}");
    assert!(
        dockerfile.contains("0) ;;"),
        "PGO=0 skips the profile's tools"
    );
    assert!(
        dockerfile.lines().any(|l| l == "ARG RLP_GIT_COMMIT"),
        "{dockerfile}"
    );
    let ignored = std::fs::read_to_string(context.join(".dockerignore")).unwrap();
    let ignored: Vec<&str> = ignored.lines().filter(|l| !l.starts_with('#')).collect();
    for path in ["target/", "fuzz/target/", ".git/"] {
        assert!(
            ignored.contains(&path),
            "{path} not in .dockerignore: {ignored:?}"
        );
    }
    for needed in [
        "src",
        "benches",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "contrib",
    ] {
        assert!(
            !ignored.iter().any(|l| l.trim_end_matches('/') == needed),
            "{needed} is copied by the build"
        );
    }
}

/// The build stage's instructions: from its `FROM … AS build` to the next `FROM`.
fn build_stage(dockerfile: &str) -> Vec<&str> {
    let lines: Vec<&str> = dockerfile.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.starts_with("FROM ") && line.ends_with(" AS build"))
        .expect("a build stage");
    let end = lines[start + 1..]
        .iter()
        .position(|line| line.starts_with("FROM "))
        .map_or(lines.len(), |at| start + 1 + at);
    lines[start + 1..end].to_vec()
}

fn copy_tree(source: &Path, target: &Path) {
    if source.is_dir() {
        std::fs::create_dir_all(target).unwrap();
        for entry in std::fs::read_dir(source).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &target.join(entry.file_name()));
        }
    } else {
        std::fs::copy(source, target)
            .unwrap_or_else(|error| panic!("copy {}: {error}", source.display()));
    }
}

#[test]
fn the_build_stage_copies_every_file_the_manifest_names() {
    let context = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(context.join("Dockerfile")).unwrap();
    let workdir = std::env::temp_dir().join(format!("rlp-build-stage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&workdir);
    std::fs::create_dir_all(&workdir).unwrap();
    // `COPY a b ./` and `COPY dir ./dir`, relative to the stage's WORKDIR.
    for line in build_stage(&dockerfile)
        .iter()
        .filter_map(|l| l.strip_prefix("COPY "))
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (dest, sources) = words.split_last().expect("COPY with a destination");
        for source in sources {
            let target = match dest.ends_with('/') {
                true => workdir.join(dest).join(source),
                false => workdir.join(dest),
            };
            copy_tree(&context.join(source), &target);
        }
    }
    // A build of a binary that does not exist reads the whole manifest, every target's file
    // included (`cargo metadata` does not), and stops there without compiling anything.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--offline",
            "--bin",
            "no-such-target",
            "--manifest-path",
        ])
        .arg(workdir.join("Cargo.toml"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&workdir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no bin target named `no-such-target`"),
        "the manifest does not parse in the build stage: {stderr}"
    );
}
