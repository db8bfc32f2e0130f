//! ARCHITECTURE.md stays true: every path, module and type its codemap names exists,
//! every crate has a section, and every `csx` command has a row in its command table.
//!
//! Method: parse the file with the rules its section "How the codemap is checked" states,
//! then look each name up in the tree (files, folders, and the crate's Rust source read as
//! text: `struct NAME`, `mod NAME`, ...). A second test feeds the checker a codemap with
//! one wrong name of each kind and asserts each is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The workspace's crates: Rust name (`csx_host`) to directory.
fn crates(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut map = BTreeMap::new();
    for entry in fs::read_dir(root.join("crates")).expect("crates/ is readable") {
        let dir = entry.expect("a directory entry").path();
        let Ok(manifest) = fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{} has no package name", dir.display()));
        map.insert(name.replace('-', "_"), dir);
    }
    map
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// One crate's source, for lookups.
struct CrateSource {
    /// Paths relative to `src`, with and without `.rs`, and every folder.
    modules: BTreeSet<String>,
    text: String,
}

impl CrateSource {
    fn read(dir: &Path) -> CrateSource {
        let src = dir.join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut modules = BTreeSet::new();
        let mut text = String::new();
        for file in &files {
            let rel = file.strip_prefix(&src).expect("under src");
            for ancestor in rel.ancestors() {
                if let Some(stem) = ancestor.file_stem() {
                    modules.insert(stem.to_string_lossy().into_owned());
                }
            }
            text.push_str(&fs::read_to_string(file).expect("source is readable"));
            text.push('\n');
        }
        CrateSource { modules, text }
    }

    fn defines(&self, keywords: &[&str], name: &str) -> bool {
        keywords.iter().any(|k| {
            let needle = format!("{k} {name}");
            self.text.match_indices(&needle).any(|(at, _)| {
                let after = self.text[at + needle.len()..].chars().next();
                !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
    }

    fn has_type(&self, name: &str) -> bool {
        self.defines(&["struct", "enum", "trait", "type", "union"], name)
    }

    fn has_module(&self, name: &str) -> bool {
        self.modules.contains(name) || self.defines(&["mod"], name)
    }

    /// A name in a `::` path: a module, a function, a constant, a type or a variant.
    fn has_item(&self, name: &str) -> bool {
        self.has_module(name)
            || self.has_type(name)
            || self.defines(&["fn", "const", "static", "macro_rules!"], name)
            || self
                .text
                .lines()
                .any(|l| l.trim_start().starts_with(name) && !name.is_empty())
    }
}

fn is_camel(t: &str) -> bool {
    let mut chars = t.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && t.chars().all(|c| c.is_ascii_alphanumeric())
        && t.chars().any(|c| c.is_ascii_lowercase())
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && t.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

const PATH_PREFIXES: [&str; 6] = ["crates/", "sdk/", "docs/", "scripts/", "tests/", "python/"];

/// The `## NAME` section of `doc`, up to the next `## ` heading.
fn section<'a>(doc: &'a str, name: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {name}\n"))
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no `## {name}` section"));
    let body = &doc[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |e| e + 3);
    &body[..end]
}

/// Backquoted spans of `text` with the text right after each.
fn spans(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('`') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else { break };
        let token = &after[..close];
        rest = &after[close + 1..];
        if !token.contains('\n') {
            out.push((token, rest));
        }
    }
    out
}

/// Everything wrong with the codemap of `doc`, checked against the tree at `root`.
fn check_codemap(doc: &str, root: &Path) -> Vec<String> {
    let crates = crates(root);
    let by_dir: BTreeMap<PathBuf, &String> = crates.iter().map(|(n, d)| (d.clone(), n)).collect();
    let sources: BTreeMap<&String, CrateSource> = crates
        .iter()
        .map(|(name, dir)| (name, CrateSource::read(dir)))
        .collect();
    let mut problems = Vec::new();
    let mut titled = BTreeSet::new();
    let codemap = section(doc, "Codemap");
    for part in codemap.split("\n### ").skip(1) {
        let (title, body) = part.split_once('\n').unwrap_or((part, ""));
        let Some((path, _)) = spans(title).first().copied() else {
            continue;
        };
        titled.insert(path.trim_end_matches('/').to_string());
        let dir = root.join(path);
        if !dir.exists() {
            if !title.contains("(reserved)") {
                problems.push(format!("section `{path}`: no such path"));
            }
            continue;
        }
        let crate_name = dir
            .canonicalize()
            .ok()
            .and_then(|d| by_dir.get(&d).copied());
        let source = crate_name.map(|name| &sources[name]);
        for (token, after) in spans(body) {
            let mut fail =
                |what: &str| problems.push(format!("section `{path}`: `{token}`: {what}"));
            if PATH_PREFIXES.iter().any(|p| token.starts_with(p)) {
                if !root.join(token).exists() {
                    fail("no such path");
                }
            } else if token.contains("::") {
                let segments: Vec<&str> = token.split("::").collect();
                let named = sources.iter().find(|(n, _)| n.as_str() == segments[0]);
                let (src, rest) = match named {
                    Some((_, s)) => (Some(s), &segments[1..]),
                    None => (source, &segments[..]),
                };
                let Some(src) = src else {
                    fail("a path outside any crate");
                    continue;
                };
                let mut seen_type = false;
                for seg in rest {
                    let ok = if is_camel(seg) && !seen_type {
                        seen_type = true;
                        src.has_type(seg)
                    } else {
                        src.has_item(seg)
                    };
                    if !ok {
                        fail(&format!("`{seg}` is not in the crate"));
                        break;
                    }
                }
            } else if is_camel(token) {
                match source {
                    Some(src) if src.has_type(token) => {}
                    Some(_) => fail("no struct, enum, trait or type of that name in the crate"),
                    None => fail("a type outside any crate"),
                }
            } else if let Some(module) = token
                .strip_suffix('/')
                .or_else(|| after.trim_start().starts_with('(').then_some(token))
                .filter(|m| is_ident(m))
            {
                match source {
                    Some(src) if src.has_module(module) => {}
                    Some(_) => fail("no module of that name in the crate"),
                    None => fail("a module outside any crate"),
                }
            }
        }
    }
    for dir in crates.values() {
        let rel = dir
            .strip_prefix(root)
            .expect("crates are in the repository")
            .to_string_lossy()
            .into_owned();
        if !titled.contains(&rel) {
            problems.push(format!("`{rel}` has no codemap section"));
        }
    }
    problems
}

/// The variants of `enum NAME` in `file`, as command words (`Vm` -> `vm`); a variant
/// under `#[command(flatten)]` adds its enum's commands, not one of its own (the hidden
/// old spellings).
fn subcommands(file: &Path, name: &str) -> Vec<String> {
    let text = fs::read_to_string(file).expect("source is readable");
    let start = text
        .find(&format!("enum {name} {{"))
        .unwrap_or_else(|| panic!("{} has no enum {name}", file.display()));
    let body = &text[start..];
    let body = &body[..body.find("\n}").expect("the enum ends")];
    let mut flattened = false;
    body.lines()
        .filter_map(|l| {
            let after_flatten =
                std::mem::replace(&mut flattened, l.trim() == "#[command(flatten)]");
            let l = l.strip_prefix("    ").filter(|_| !after_flatten)?;
            let variant: String = l
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            (is_camel(&variant) && l[variant.len()..].starts_with(['(', ',', ' ', '{'])).then(
                || {
                    let mut word = String::new();
                    for (i, c) in variant.chars().enumerate() {
                        if c.is_ascii_uppercase() && i > 0 {
                            word.push('-');
                        }
                        word.push(c.to_ascii_lowercase());
                    }
                    word
                },
            )
        })
        .collect()
}

/// Everything wrong with the command table of `doc`.
fn check_commands(doc: &str, root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let table = section(doc, "Commands");
    let mut listed = BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `csx")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for (command, _) in spans(cells[1]) {
            listed.insert(command.to_string());
        }
        // A planned command's row is marked (reserved): its module may not exist yet.
        let reserved = row.contains("(reserved)");
        for (path, _) in spans(cells.get(3).copied().unwrap_or("")) {
            if !root.join(path).exists() && !reserved {
                problems.push(format!("command row {:?}: no such path `{path}`", cells[1]));
            }
        }
    }
    let groups = [
        (root.join("crates/cli/src/main.rs"), "Command", "csx"),
        (
            root.join("crates/bench/src/lib.rs"),
            "BenchCommand",
            "csx bench",
        ),
    ];
    for (file, enum_name, prefix) in groups {
        for word in subcommands(&file, enum_name) {
            let command = format!("{prefix} {word}");
            let covered = listed
                .iter()
                .any(|l| *l == command || l.starts_with(&format!("{command} ")));
            if !covered {
                problems.push(format!(
                    "`{command}` ({} enum {enum_name}) has no row in the command table",
                    file.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn architecture_md_names_only_what_exists() {
    let root = repo_root();
    let doc = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut problems = check_codemap(&doc, &root);
    problems.extend(check_commands(&doc, &root));
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md is out of date (fix the file or the names):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_checker_reports_each_kind_of_wrong_name() {
    let root = repo_root();
    let doc = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let codemap = section(&doc, "Codemap");
    let broken = format!(
        "{}\n## Codemap\n### `crates/host` (csx-host)\n\
         `no_such_module` (x), `NoSuchType`, `crates/host/src/no_such_file.rs`, \
         `csx_host::NoSuchThing`, `csx_proto::limits::NO_SUCH_LIMIT`, `device` (fine), \
         `Device`, `csx_host::transport::Transport`.\n\
         ### `crates/nothing` (csx-nothing)\nx\n\
         ### `crates/planned` (csx-planned) (reserved)\nx\n{}",
        &doc[..doc.find("\n## Codemap").expect("a codemap")],
        &codemap[codemap.find("\n### ").expect("sections")..]
    );
    let problems = check_codemap(&broken, &root).join("\n");
    for wrong in [
        "`no_such_module`",
        "`NoSuchType`",
        "`crates/host/src/no_such_file.rs`",
        "`csx_host::NoSuchThing`",
        "`NO_SUCH_LIMIT`",
        "section `crates/nothing`: no such path",
    ] {
        assert!(
            problems.contains(wrong),
            "{wrong} not reported in:\n{problems}"
        );
    }
    for fine in ["`device`", "`Device`", "Transport", "crates/planned"] {
        assert!(
            !problems.contains(fine),
            "{fine} wrongly reported in:\n{problems}"
        );
    }
    let no_rows = doc.replace("| `csx exec` |", "| `csx execute-nothing` |");
    let problems = check_commands(&no_rows, &root).join("\n");
    assert!(problems.contains("`csx exec`"), "{problems}");
}

/// The lines of `text` that hold `unsafe` code: blocks, functions, impls, extern blocks
/// and unsafe attributes, outside comments and string literals.
fn unsafe_lines(text: &str) -> usize {
    const MARKS: [&str; 5] = [
        "unsafe {",
        "unsafe fn",
        "unsafe impl",
        "unsafe extern",
        "#[unsafe(",
    ];
    text.lines()
        .filter(|l| {
            let code = l.split("//").next().unwrap_or("");
            MARKS
                .iter()
                .any(|m| code.find(m).is_some_and(|at| !code[..at].contains('"')))
        })
        .count()
}

/// Every Rust source file with `unsafe` code, outside tests, relative to `root`.
fn files_with_unsafe(root: &Path) -> BTreeSet<String> {
    let mut dirs: Vec<PathBuf> = crates(root).values().map(|d| d.join("src")).collect();
    dirs.push(root.join("python/src"));
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&dir, &mut files);
    }
    files
        .into_iter()
        .filter(|f| unsafe_lines(&fs::read_to_string(f).expect("source is readable")) > 0)
        .map(|f| {
            f.strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The files the `unsafe` invariant lists, and what is wrong with the list.
fn check_unsafe_list(doc: &str, root: &Path) -> Vec<String> {
    let invariants = section(doc, "Invariants");
    let Some(start) = invariants.find("`unsafe` lives only in these files") else {
        return vec!["the Invariants section does not list where `unsafe` lives".into()];
    };
    let item = &invariants[start..];
    let item = &item[..item.find("\n- ").unwrap_or(item.len())];
    let listed: BTreeSet<String> = spans(item)
        .into_iter()
        .map(|(t, _)| t.to_string())
        .filter(|t| t.ends_with(".rs"))
        .collect();
    let found = files_with_unsafe(root);
    let mut problems = Vec::new();
    for f in found.difference(&listed) {
        problems.push(format!("`{f}` has unsafe code but is not in the list"));
    }
    for f in listed.difference(&found) {
        problems.push(format!(
            "`{f}` is in the unsafe list but has no unsafe code"
        ));
    }
    problems
}

/// Test binaries that do not follow the one-binary layout the Testing section states.
fn check_test_layout(doc: &str, root: &Path) -> Vec<String> {
    let testing = section(doc, "Testing");
    let allowed: BTreeSet<String> = spans(testing)
        .into_iter()
        .map(|(t, _)| t.to_string())
        .filter(|t| t.ends_with(".rs"))
        .collect();
    let mut problems = Vec::new();
    for dir in crates(root).values() {
        let tests = dir.join("tests");
        let Ok(entries) = fs::read_dir(&tests) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .into_owned();
            if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
                if !allowed.contains(&rel) {
                    problems.push(format!(
                        "`{rel}` is a test binary the Testing section does not name"
                    ));
                }
            } else if path.file_name().is_some_and(|n| n == "it") && !path.join("main.rs").exists()
            {
                problems.push(format!("`{rel}` has no main.rs"));
            }
        }
    }
    problems
}

#[test]
fn architecture_md_lists_every_file_with_unsafe_and_every_test_binary() {
    let root = repo_root();
    let doc = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut problems = check_unsafe_list(&doc, &root);
    problems.extend(check_test_layout(&doc, &root));
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md is out of date (fix the list or the tree):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_unsafe_and_layout_checks_report_what_they_should() {
    let root = repo_root();
    let doc = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    assert_eq!(unsafe_lines("let x = unsafe { f() };"), 1);
    assert_eq!(
        unsafe_lines("// unsafe { f() }\ns.push_str(\"unsafe extern\");"),
        0
    );
    let dropped = doc.replace("`crates/lambda/src/sys.rs`, ", "");
    let problems = check_unsafe_list(&dropped, &root).join("\n");
    assert!(problems.contains("crates/lambda/src/sys.rs"), "{problems}");
    let extra = doc.replace(
        "`crates/lambda/src/sys.rs`, ",
        "`crates/lambda/src/sys.rs`, `crates/proto/src/lib.rs`, ",
    );
    let problems = check_unsafe_list(&extra, &root).join("\n");
    assert!(problems.contains("crates/proto/src/lib.rs"), "{problems}");
    let no_soak = doc.replace("`crates/server/tests/soak.rs`, ", "");
    let problems = check_test_layout(&no_soak, &root).join("\n");
    assert!(
        problems.contains("crates/server/tests/soak.rs"),
        "{problems}"
    );
}
