//! Every ```` ```toml ```` block of `README.md` and `docs/**/*.md` goes through the real config
//! loader (`parse_str`), as `config.example.toml` does, so a documented example cannot drift
//! from what the gateway accepts. A block that does not parse fails the test with its file and
//! the line of its opening fence; the docs are then wrong, not the loader.
//!
//! The convention (also in docs/configuration.md, "The examples on these pages are tested"):
//!
//! - A block with both `[[upstreams]]` and `[[routes]]` is a whole config, parsed as it is.
//! - Any other block is a fragment: what it lacks of a minimal base config is added after it,
//!   so the block's own sections come first: an upstream `api` when it has no
//!   `[[upstreams]]`, a route `default` to `api` when it has no `[[routes]]`. The base has no
//!   other section, so a fragment may hold any of them (`[server]`, `[store]`, `[[limits]]`
//!   ...); a fragment that names a list, a tier or an upstream must define it too.
//! - Files a block names are made in a scratch directory the config is read from: each
//!   `{ cert, key }` pair a self-signed certificate and its key, each `ca_file` a certificate,
//!   each `file` (`[ip_lists]`, `[plans]`) an empty file. Absolute paths are left alone.
//! - `${NAME}` is replaced by an example value from `ENVIRONMENT` below, so that the test never
//!   changes the process environment (it may share a binary with other tests); a name missing
//!   from the table fails the test. `$${` is left as it is.
//! - A block whose fence is ```` ```toml,ignore ```` is skipped; its first line must be a `#`
//!   comment saying why. Use it sparingly.
//!
//! Self-contained on purpose (no `mod common;`): it is meant to move into a module of a single
//! test binary.

use std::path::{Path, PathBuf};

use ratelimit_proxy::testing::parse_str;

/// Fewer blocks than this means the extractor is broken (there are 9 when this was written).
const AT_LEAST_BLOCKS: usize = 8;

/// Example values for the `${NAME}` references of documented blocks.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("RLP_HASH_SECRET", "doc-test-hash-secret"),
    ("REDIS_PASSWORD", "doc-test-password"),
    ("RLP_UPSTREAM", "http://127.0.0.1:9001"),
];

const BASE_UPSTREAM: &str =
    "\n[[upstreams]]\nname = \"api\"\nservers = [\"http://127.0.0.1:9001\"]\n";
const BASE_ROUTE: &str = "\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n";

struct Block {
    file: PathBuf,
    /// 1-based line of the opening fence.
    line: usize,
    text: String,
    ignored: bool,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files
}

/// The fenced blocks of one markdown text whose info string is `toml` or `toml,...`. A fence
/// opens on a line that starts (after indentation) with three or more backticks and closes
/// on a line of at least as many backticks and nothing else.
fn toml_blocks(file: &Path, markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let trimmed = line.trim_start();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        if ticks < 3 {
            continue;
        }
        let info = trimmed[ticks..].trim();
        let mut body = Vec::new();
        for (_, inner) in lines.by_ref() {
            let inner_trimmed = inner.trim();
            let closing = inner_trimmed.chars().take_while(|&c| c == '`').count();
            if closing >= ticks && closing == inner_trimmed.len() {
                break;
            }
            body.push(inner);
        }
        let language = info.split([',', ' ']).next().unwrap_or_default();
        if language != "toml" {
            continue;
        }
        blocks.push(Block {
            file: file.to_path_buf(),
            line: index + 1,
            text: body.join("\n") + "\n",
            ignored: info.split([',', ' ']).skip(1).any(|word| word == "ignore"),
        });
    }
    blocks
}

fn has_header(text: &str, header: &str) -> bool {
    text.lines()
        .any(|line| line.trim_start().starts_with(header))
}

/// `${NAME}` replaced from `ENVIRONMENT`; `$${` kept.
fn expand(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let literal = at > 0 && rest.as_bytes()[at - 1] == b'$';
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if literal {
            out.push_str("${");
            rest = &rest[2..];
            continue;
        }
        let end = rest
            .find('}')
            .ok_or_else(|| format!("unclosed `${{` in {rest:?}"))?;
        let name = &rest[2..end];
        let value = ENVIRONMENT
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, value)| *value)
            .ok_or_else(|| {
                format!("`${{{name}}}` has no example value: add it to ENVIRONMENT in tests/it/config/docs.rs")
            })?;
        out.push_str(value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn self_signed() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, relative: &str, contents: &str) {
    if Path::new(relative).is_absolute() {
        return;
    }
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, contents).unwrap();
}

/// Makes every file the config names, found by key wherever it is.
fn make_files(dir: &Path, value: &toml::Value) {
    match value {
        toml::Value::Table(table) => {
            if let (Some(toml::Value::String(cert)), Some(toml::Value::String(key))) =
                (table.get("cert"), table.get("key"))
            {
                let (cert_pem, key_pem) = self_signed();
                write(dir, cert, &cert_pem);
                write(dir, key, &key_pem);
            }
            if let Some(toml::Value::String(ca)) = table.get("ca_file") {
                write(dir, ca, &self_signed().0);
            }
            if let Some(toml::Value::String(file)) = table.get("file") {
                write(dir, file, "# made by tests/it/config/docs.rs\n");
            }
            table.values().for_each(|inner| make_files(dir, inner));
        }
        toml::Value::Array(items) => items.iter().for_each(|inner| make_files(dir, inner)),
        _ => {}
    }
}

/// The config text a block stands for, parsed in a scratch directory of its own.
fn check_block(block: &Block, scratch: &Path) -> Result<(), String> {
    let mut text = expand(&block.text)?;
    if !has_header(&text, "[[upstreams]]") {
        text.push_str(BASE_UPSTREAM);
    }
    if !has_header(&text, "[[routes]]") {
        text.push_str(BASE_ROUTE);
    }
    std::fs::create_dir_all(scratch).unwrap();
    // A block that is not TOML is reported by the loader itself, below.
    if let Ok(value) = text.parse::<toml::Table>() {
        make_files(scratch, &toml::Value::Table(value));
    }
    let source = scratch.join("gw.toml");
    std::fs::write(&source, &text).unwrap();
    parse_str(&text, source.to_str().unwrap())
        .map(drop)
        .map_err(|error| format!("{error}\n--- the config parsed ---\n{text}"))
}

#[test]
fn every_toml_block_in_the_docs_parses_through_the_config_loader() {
    let scratch_root = std::env::temp_dir().join(format!("rlp-doc-configs-{}", std::process::id()));
    let mut blocks = Vec::new();
    for file in markdown_files() {
        let markdown = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        blocks.extend(toml_blocks(&file, &markdown));
    }

    let mut checked = 0;
    let mut failures = Vec::new();
    for (n, block) in blocks.iter().enumerate() {
        let at = format!(
            "{}:{}",
            block
                .file
                .strip_prefix(root())
                .unwrap_or(&block.file)
                .display(),
            block.line
        );
        if block.ignored {
            if !block.text.trim_start().starts_with('#') {
                failures.push(format!(
                    "{at}: a ```toml,ignore block must start with a # comment saying why"
                ));
            }
            continue;
        }
        checked += 1;
        if let Err(error) = check_block(block, &scratch_root.join(n.to_string())) {
            failures.push(format!("{at}: this ```toml block does not load: {error}"));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch_root);

    assert!(
        failures.is_empty(),
        "{} of {checked} documented config blocks fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        checked >= AT_LEAST_BLOCKS,
        "only {checked} ```toml blocks found in README.md and docs/ (expected at least \
         {AT_LEAST_BLOCKS}): is the extractor broken?"
    );
    assert!(
        blocks
            .iter()
            .any(|block| block.file.ends_with("README.md") && !block.ignored),
        "README.md's example config was not found"
    );
}

#[test]
fn the_extractor_finds_fences_and_skips_other_languages() {
    let markdown = "text\n```sh\n[[routes]]\n```\n\n```toml\na = 1\n```\n  ```toml,ignore\n# why\n  ```\ninline ```toml``` here\n";
    let blocks = toml_blocks(Path::new("x.md"), markdown);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (blocks[0].line, blocks[0].text.as_str(), blocks[0].ignored),
        (6, "a = 1\n", false)
    );
    assert_eq!((blocks[1].line, blocks[1].ignored), (9, true));
    assert_eq!(
        expand("a${RLP_UPSTREAM}b$${X}").unwrap(),
        "ahttp://127.0.0.1:9001b$${X}"
    );
    assert!(expand("${NOT_IN_THE_TABLE}").is_err());
}
