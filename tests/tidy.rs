//! Tidy: what the code map promises and nothing else checks (after rust-analyzer's `tidy.rs`).
//!
//! - **The layer order holds.** A module imports only from its own layer or those below it, in the order of
//!   `src/lib.rs` (ARCHITECTURE.md, "Layers"): `crate::X` in a file of a lower layer than `X` fails, outside
//!   comments and `#[cfg(test)]` modules (a test may build what a layer above offers).
//! - **No import circle** between sibling modules: if `a::b` reaches into `a::c`, `a::c` does not reach back.
//! - **Every path named exists.** A repository path (`src/…`, `docs/…`, `tests/…`, `scenarios/…`, a module path
//!   such as `sim/engine/clock.rs`, …) or a relative Markdown link in a comment, a doc or a scenario names a file
//!   or folder that is there; a rename that leaves a stale mention fails here, with the file and line.
//! - **The facade is the API.** Every module `src/lib.rs` declares is private but `testing`, which is
//!   `#[doc(hidden)]`; what `lib.rs` re-exports in view is the facade (`FACADE`), anything else it re-exports
//!   is hidden; `src/testing.rs` re-exports by name, never a whole module's contents (`*`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The layers, lowest first: `src/lib.rs`'s order (`embed` is the facade on top, `testing` the tests' view
/// below it, beside it).
const LAYERS: [&str; 20] = [
    "wire",
    "policy",
    "framework",
    "eras",
    "servers",
    "stores",
    "config",
    "assembly",
    "scenario",
    "oracle",
    "play",
    "sim",
    "import",
    "live",
    "target",
    "record",
    "transport",
    "cli",
    "embed",
    "testing",
];

/// Paths named as examples of what a reader writes, never meant to exist here, and why. Each must still be
/// named somewhere (`every_illustrative_path_is_still_named`), so the list cannot grow stale.
const ILLUSTRATIVE: &[(&str, &str)] = &[
    ("tests/retry-elsewhere.sim", "the embedding example's scenario in the reader's own crate"),
    ("tests/retry.sim", "the embedding example's scenario in the reader's own crate"),
    ("scenarios/x.sim", "a placeholder in the scenario language's examples"),
    ("targets/t.toml", "a placeholder for the reader's target file"),
    ("benches/compare-BASE_REV.patch", "the name pattern of a base's floor patch"),
];

/// Arrows that still run the wrong way, each with the work that removes it. A new one fails the layer or
/// circle test; one that is gone fails it too until its line here is removed, so this list only shrinks.
const KNOWN: &[(&str, &str)] = &[];

/// `found` less the [`KNOWN`] exceptions of its kind (entries containing `marker`), plus each such exception
/// that is no longer found (it must then leave the list).
fn unexpected(mut found: Vec<String>, marker: &str) -> Vec<String> {
    let mut gone = Vec::new();
    for (known, _) in KNOWN.iter().filter(|(known, _)| known.contains(marker)) {
        let before = found.len();
        found.retain(|f| f != known);
        if found.len() == before {
            gone.push(format!("no longer found, remove it from KNOWN: {known}"));
        }
    }
    found.extend(gone);
    found
}

/// Top-level folders of the repository a path may start with.
const TOP_FOLDERS: [&str; 9] = ["src", "tests", "docs", "scenarios", "snapshots", "targets", "benches", "examples", ".ci"];

/// Extensions a path must end with to be checked as a file (anything else may be prose).
const EXTENSIONS: [&str; 13] = ["rs", "md", "sim", "toml", "sh", "py", "json", "html", "txt", "patch", "yml", "yaml", "png"];

fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "target" | "node_modules" | ".git") {
                files_under(&path, keep, out);
            }
        } else if keep(&path) {
            out.push(path);
        }
    }
}

fn rust_sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    files_under(&Path::new(ROOT).join("src"), &|p| p.extension().is_some_and(|e| e == "rs"), &mut out);
    out
}

/// A source file's code as the layer checks read it: `#[cfg(test)]` modules and comment lines left out.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut skipping_depth: Option<i32> = None;
    let mut depth = 0i32;
    let mut test_attribute = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if skipping_depth.is_none() && trimmed.starts_with("#[cfg(test)]") {
            test_attribute = true;
            continue;
        }
        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        if test_attribute && trimmed.starts_with("mod ") && line.contains('{') {
            skipping_depth = Some(depth);
            test_attribute = false;
            depth += opens - closes;
            continue;
        }
        test_attribute = false;
        depth += opens - closes;
        if let Some(start) = skipping_depth {
            if depth <= start {
                skipping_depth = None;
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The module path of a source file: `src/sim/render/mod.rs` → `["sim", "render"]`.
fn module_of(path: &Path) -> Vec<String> {
    let relative = path.strip_prefix(Path::new(ROOT).join("src")).unwrap();
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    parts
}

/// Every `crate::a::b::…` path in `code`, as its segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let segments = path_segments(rest);
        if !segments.is_empty() {
            found.push(segments);
        }
    }
    found
}

/// The `a::b::c` segments at the start of `text` (lower-case identifiers, as module names are).
fn path_segments(text: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        let end = rest.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segments.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    segments
}

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| *layer == module)
}

/// The layer violations of one file's code: each `crate::X` that names a layer above the file's own.
fn upward_imports(module: &[String], code: &str) -> BTreeSet<String> {
    let Some(own) = module.first().and_then(|m| rank(m)) else { return BTreeSet::new() };
    crate_paths(code).into_iter().filter_map(|path| path.first().cloned()).filter(|target| rank(target).is_some_and(|r| r > own)).collect()
}

#[test]
fn every_import_points_down_the_layers() {
    let mut violations = Vec::new();
    for path in rust_sources() {
        let module = module_of(&path);
        let code = code_of(&std::fs::read_to_string(&path).unwrap());
        for target in upward_imports(&module, &code) {
            violations.push(format!("{} (layer `{}`) imports `crate::{target}`, a layer above it", display(&path), module[0]));
        }
    }
    let violations = unexpected(violations, "imports `crate::");
    assert!(violations.is_empty(), "imports running back up the layers (ARCHITECTURE.md, \"Layers\"):\n{}", violations.join("\n"));
}

#[test]
fn an_upward_import_is_found() {
    let code = code_of("use crate::wire::errors::Reason;\n// crate::cli in a comment\nfn f() { crate::sim::runner::run(); }\n#[cfg(test)]\nmod tests {\n    use crate::cli::x;\n}\n");
    let found = upward_imports(&["play".to_string(), "client".to_string()], &code);
    assert_eq!(found, BTreeSet::from(["sim".to_string()]));
}

/// The module each file reaches into (the longest prefix of each `crate::` or `super::` path that is a module).
fn module_graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let sources = rust_sources();
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|p| module_of(p)).collect();
    let mut graph = BTreeMap::new();
    for path in &sources {
        let module = module_of(path);
        let code = code_of(&std::fs::read_to_string(path).unwrap());
        // `super` of `a/b.rs` and of `a/b/mod.rs` (both module `a::b`) is `a`.
        let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
        let mut paths = crate_paths(&code);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("super::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "super::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut full = parent.clone();
            full.extend(path_segments(rest));
            paths.push(full);
        }
        let mut reached = BTreeSet::new();
        for path in paths {
            if let Some(k) = (1..=path.len()).rev().find(|k| modules.contains(&path[..*k])) {
                reached.insert(path[..k].to_vec());
            }
        }
        reached.remove(&module);
        graph.insert(module, reached);
    }
    graph
}

fn import_circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let nested = |a: &Vec<String>, b: &Vec<String>| b.starts_with(a) || a.starts_with(b);
    let mut circles = BTreeSet::new();
    for (a, reached) in graph {
        for b in reached {
            if !nested(a, b) && graph.get(b).is_some_and(|back| back.contains(a)) {
                let (x, y) = if a < b { (a, b) } else { (b, a) };
                circles.insert(format!("{} <-> {}", x.join("::"), y.join("::")));
            }
        }
    }
    circles.into_iter().collect()
}

#[test]
fn no_two_modules_import_each_other() {
    let circles = unexpected(import_circles(&module_graph()), " <-> ");
    assert!(circles.is_empty(), "modules that import each other (move what both need below both):\n{}", circles.join("\n"));
}

#[test]
fn an_import_circle_is_found() {
    let module = |m: &str| m.split("::").map(str::to_string).collect::<Vec<_>>();
    let mut graph = BTreeMap::new();
    graph.insert(module("sim::render::compact"), BTreeSet::from([module("sim::render::transcript")]));
    graph.insert(module("sim::render::transcript"), BTreeSet::from([module("sim::render::compact")]));
    graph.insert(module("sim::render"), BTreeSet::from([module("sim::render::compact")]));
    assert_eq!(import_circles(&graph), ["sim::render::compact <-> sim::render::transcript"]);
}

/// The repository paths and relative Markdown links `text` names that do not exist, as `line: path`.
/// `file` is where the text lives (a relative link is resolved from its folder).
fn stale_paths(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/');
    let mut stale = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut start = None;
        let chars: Vec<(usize, char)> = line.char_indices().chain(std::iter::once((line.len(), ' '))).collect();
        for (position, &(at, c)) in chars.iter().enumerate() {
            match (start, is_path_char(c)) {
                (None, true) => start = Some((position, at)),
                (Some((first, from)), false) => {
                    start = None;
                    let before = first.checked_sub(1).map(|p| chars[p].1);
                    // Part of a URL, a template, a glob or an absolute path: not a repository path.
                    if before.is_some_and(|b| matches!(b, ':' | '$' | '{' | '@' | '~' | '%' | '\\')) || c == '*' || c == '{' {
                        continue;
                    }
                    if let Some(path) = repository_path(&line[from..at]) {
                        if !exists(root, file, &path) {
                            stale.push(format!("{}: {path}", index + 1));
                        }
                    }
                }
                _ => {}
            }
        }
        if file.extension().is_some_and(|e| e == "md") {
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                rest = &rest[at + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = rest[..end].split('#').next().unwrap_or("");
                let external = target.is_empty() || target.contains("://") || target.starts_with("mailto:");
                if !external && !file.parent().unwrap().join(target).exists() {
                    stale.push(format!("{}: {target}", index + 1));
                }
            }
        }
    }
    // A Markdown link's target is also a token of its line: name it once.
    let mut seen = BTreeSet::new();
    stale.retain(|mention| seen.insert(mention.clone()));
    stale
}

/// The repository path a token names, if it names one: it starts with a top-level folder or a layer's folder and
/// ends in a known extension or a slash.
fn repository_path(token: &str) -> Option<String> {
    let token = token.trim_end_matches('.').trim_start_matches("./");
    let first = token.split('/').next()?;
    if !token.contains('/') || token.starts_with('/') {
        return None;
    }
    let folder = TOP_FOLDERS.contains(&first) || rank(first).is_some();
    let extension = token.rsplit_once('.').is_some_and(|(stem, ext)| !stem.ends_with('/') && EXTENSIONS.contains(&ext));
    // `target/` is also cargo's build folder (`target/debug/…`): only a Rust file there is the layer's.
    if first == "target" && !token.ends_with(".rs") {
        return None;
    }
    (folder && (extension || token.ends_with('/'))).then(|| token.to_string())
}

/// Whether `path` exists from the repository's root, from `src/` (a module path) or from the naming file's folder.
fn exists(root: &Path, file: &Path, path: &str) -> bool {
    ILLUSTRATIVE.iter().any(|(example, _)| *example == path)
        || root.join(path).exists()
        || root.join("src").join(path).exists()
        || file.parent().is_some_and(|folder| folder.join(path).exists())
}

fn display(path: &Path) -> String {
    path.strip_prefix(ROOT).unwrap_or(path).display().to_string()
}

/// The files whose mentions of paths are checked.
fn documented_files() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut files: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "GUARANTEES.md", "Cargo.toml", "clippy.toml", ".ci/run"].iter().map(|f| root.join(f)).collect();
    let text_files = |p: &Path| p.extension().is_some_and(|e| ["rs", "md", "sim", "toml", "sh", "py"].contains(&e.to_str().unwrap_or("")));
    for folder in ["src", "tests", "docs", "scenarios", "targets", "benches", "examples", ".ci"] {
        files_under(&root.join(folder), &text_files, &mut files);
    }
    // This file names stale paths on purpose, to show they are found.
    files.retain(|f| !f.ends_with("tests/tidy.rs"));
    files
}

#[test]
fn every_illustrative_path_is_still_named() {
    let texts: Vec<String> = documented_files().iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
    for (example, _) in ILLUSTRATIVE {
        assert!(texts.iter().any(|text| text.contains(example)), "`{example}` is listed as illustrative but nothing names it any more");
    }
}

#[test]
fn every_path_named_in_code_and_docs_exists() {
    let root = Path::new(ROOT);
    let mut stale = Vec::new();
    for file in documented_files() {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for mention in stale_paths(root, &file, &text) {
            stale.push(format!("{}:{mention}", display(&file)));
        }
    }
    assert!(stale.is_empty(), "paths named that do not exist (renamed or removed? update the mention):\n{}", stale.join("\n"));
}

#[test]
fn a_planted_stale_path_is_found() {
    let root = Path::new(ROOT);
    let planted = "//! The loop lives in `sim/engine/cluster_of_old.rs` (see docs/nowhere.md#x and src/play/world.rs).\n\
                   //! Not paths: https://example.org/src/x.rs, {data_dir}/x.toml, src/scenarios/*.ts, target/debug/x.\n";
    let found = stale_paths(root, &root.join("src/lib.rs"), planted);
    assert_eq!(found, ["1: sim/engine/cluster_of_old.rs", "1: docs/nowhere.md"]);
    let markdown = "See [the guide](docs/simulator.md#x), [gone](docs/gone.md) and [a site](https://example.org/a.md).\n";
    assert_eq!(stale_paths(root, &root.join("README.md"), markdown), ["1: docs/gone.md"]);
}

/// The library's interface: every name `src/lib.rs` re-exports without `#[doc(hidden)]`.
const FACADE: [&str; 17] = [
    "explore",
    "library",
    "load",
    "parse",
    "run",
    "Explored",
    "LoadError",
    "Options",
    "Report",
    "Scheduler",
    "Property",
    "Failure",
    "FailureKind",
    "ParseError",
    "Scenario",
    "FaultKind",
    "Format",
];

/// What `lib` (the text of `src/lib.rs`) makes public beyond the facade, as `line N: why`; and each facade name
/// it no longer re-exports in view.
fn public_surface_problems(lib: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut exported = BTreeSet::new();
    let mut hidden = false;
    for (index, line) in lib.lines().enumerate() {
        let line = line.trim();
        if line.starts_with("#[") {
            hidden |= line == "#[doc(hidden)]";
            continue;
        }
        if line.starts_with("//") {
            continue;
        }
        let item_hidden = std::mem::take(&mut hidden);
        let Some(rest) = line.strip_prefix("pub ") else { continue };
        let at = index + 1;
        if let Some(module) = rest.strip_prefix("mod ") {
            if module != "testing;" {
                problems.push(format!("line {at}: `{line}`: a layer module is `mod` (only the facade and `testing` are public)"));
            } else if !item_hidden {
                problems.push(format!("line {at}: `{line}` without `#[doc(hidden)]`: `testing` is not the library's interface"));
            }
        } else if let Some(used) = rest.strip_prefix("use ") {
            if item_hidden {
                continue;
            }
            let names = used.trim_end_matches(';').rsplit("::").next().unwrap_or("").trim_matches(|c| c == '{' || c == '}');
            for name in names.split(',').map(|n| n.trim().rsplit(" as ").next().unwrap_or("")).filter(|n| !n.is_empty()) {
                if !FACADE.contains(&name) {
                    problems
                        .push(format!("line {at}: `{name}` is re-exported in view but is not in the facade (hide it or add it to FACADE)"));
                }
                exported.insert(name.to_string());
            }
        } else {
            problems.push(format!("line {at}: `{line}`: lib.rs declares no public item of its own; the facade lives in `embed.rs`"));
        }
    }
    for name in FACADE.iter().filter(|name| !exported.contains(**name)) {
        problems.push(format!("`{name}` of the facade is no longer re-exported"));
    }
    problems
}

#[test]
fn only_the_facade_is_public() {
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    let problems = public_surface_problems(&lib);
    assert!(problems.is_empty(), "src/lib.rs makes public more than the facade (ARCHITECTURE.md):\n{}", problems.join("\n"));
    let testing = std::fs::read_to_string(Path::new(ROOT).join("src/testing.rs")).unwrap();
    let globs: Vec<&str> = testing.lines().filter(|l| !l.trim_start().starts_with("//") && l.contains("::*")).collect();
    assert!(globs.is_empty(), "src/testing.rs re-exports by name, not whole modules:\n{}", globs.join("\n"));
}

#[test]
fn a_public_layer_is_found() {
    let facade = format!("pub use embed::{{{}}};\n", FACADE.join(", "));
    assert_eq!(public_surface_problems(&format!("{facade}#[doc(hidden)]\npub mod testing;\nmod wire;\n")), Vec::<String>::new());
    let planted = format!(
        "{facade}/// Tests.\npub mod testing;\npub mod wire;\npub use wire::Reason;\n#[doc(hidden)]\npub use cli::main;\npub fn f() {{}}\n"
    );
    assert_eq!(
        public_surface_problems(&planted),
        [
            "line 3: `pub mod testing;` without `#[doc(hidden)]`: `testing` is not the library's interface",
            "line 4: `pub mod wire;`: a layer module is `mod` (only the facade and `testing` are public)",
            "line 5: `Reason` is re-exported in view but is not in the facade (hide it or add it to FACADE)",
            "line 8: `pub fn f() {}`: lib.rs declares no public item of its own; the facade lives in `embed.rs`",
        ]
    );
    assert_eq!(public_surface_problems("pub use embed::{run};\n").len(), FACADE.len() - 1);
}

/// The files (relative to `src/`) whose code defines `Service::exchange` (`fn exchange(&self, principal`, the
/// trait's signature; another type's `exchange` method is not it): overriding it would let a
/// server skip the shared pipeline, which only the zoo's header-routing gateway mutant may (ARCHITECTURE.md,
/// "One pipeline, one order").
fn pipeline_overrides(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(path, text)| {
            path != "framework/pipeline.rs"
                && path != "sim/actors/gateway_mutants.rs"
                && code_of(text).replace(char::is_whitespace, "").contains("fnexchange(&self,principal")
        })
        .map(|(path, _)| path.clone())
        .collect()
}

#[test]
fn only_the_zoo_skips_the_pipeline() {
    let files: Vec<(String, String)> = rust_sources()
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(Path::new(ROOT).join("src")).unwrap().display().to_string();
            (relative, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    assert!(files.iter().any(|(path, text)| path == "sim/actors/gateway_mutants.rs" && text.contains("fn exchange(&self, principal")));
    let found = pipeline_overrides(&files);
    assert!(found.is_empty(), "only the zoo's gateway mutant overrides Service::exchange: {found:?}");
}

#[test]
fn a_planted_pipeline_override_is_found() {
    let planted = vec![
        (
            "servers/notes/mod.rs".to_string(),
            "impl Service for X {\n    async fn exchange(\n        &self,\n        principal: &str) {}\n}\n".to_string(),
        ),
        ("servers/gateway/mod.rs".to_string(), "// fn exchange(&self, principal in a comment\nfn f() {}\n".to_string()),
        ("cli/demo.rs".to_string(), "async fn exchange(&mut self, instance: usize) {}\n".to_string()),
    ];
    assert_eq!(pipeline_overrides(&planted), ["servers/notes/mod.rs"]);
}
