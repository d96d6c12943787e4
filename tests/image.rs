//! The container image's own config, laid out as the Dockerfile's runtime stage copies it:
//! with only the files the image has, it passes `check`. No Docker engine runs in CI, so the
//! layout is rebuilt from the Dockerfile's lines; `.ci/rehearse-docker-build` runs the build.

mod common;

use std::path::{Path, PathBuf};

use common::check_config;

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

#[test]
fn the_images_config_passes_check_with_only_the_files_the_image_copies() {
    let context = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(context.join("Dockerfile")).unwrap();
    let stage = runtime_stage(&dockerfile);
    let image = std::env::temp_dir().join(format!("rlp-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&image);
    copy_context_files(&stage, context, &image);
    let config = image.join(config_in_cmd(&stage).strip_prefix("/").unwrap());
    let (ok, text) = check_config(&config);
    std::fs::remove_dir_all(&image).unwrap();
    assert!(ok, "{text}");
}
