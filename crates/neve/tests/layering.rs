//! The layering ARCHITECTURE.md draws, checked by reading the sources:
//!
//! 1. crates depend on each other only along the data flow (upstream →
//!    ingest → store → serve, state and execution beside), as
//!    `ALLOWED_ARROWS` below lists;
//! 2. inside a library crate, modules form no circle: neither between two
//!    top-level modules (`crate::rpc` → `crate::config` → `crate::rpc`) nor
//!    between the files of one folder (a folder's `mod.rs` counts as one of
//!    them);
//! 3. no file of a library crate imports its crate's top (`crate::X` where
//!    `X` is not a module): it imports from the module that defines `X`,
//!    since a name re-exported by `lib.rs` hides where the arrow goes.
//!
//! `cfg(test)` code is exempt from 2 and 3: files named `tests.rs` or
//! `testing.rs`, folders named `tests`, modules declared under
//! `#[cfg(test)]` and items carrying it.
//!
//! Plain text scanning (comments and literals stripped, `use` trees
//! expanded, `crate::`/`super::`/`self::` paths resolved through
//! re-exports): no node is started and nothing beyond std is needed, so
//! `cargo test -p neve --test layering` answers in a moment.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// The neve crates each crate's `[dependencies]` may name. A crate not
/// listed here fails the test until it is placed in the flow.
const ALLOWED_ARROWS: &[(&str, &[&str])] = &[
    ("neve-upstream", &[]),
    ("neve-state", &[]),
    ("neve-pool", &[]),
    ("neve-store", &["neve-pool"]),
    ("neve-execution", &["neve-state"]),
    (
        "neve-ingest",
        &[
            "neve-upstream",
            "neve-store",
            "neve-state",
            "neve-execution",
            "neve-pool",
        ],
    ),
    // Not ingest: serve sees the upstream's progress only through the
    // `ChainView` the binary implements.
    (
        "neve-serve",
        &[
            "neve-upstream",
            "neve-store",
            "neve-state",
            "neve-execution",
            "neve-pool",
        ],
    ),
    ("neve-load", &["neve-upstream"]),
    ("neve-devnet", &["neve-upstream"]),
    // bench measures serving from outside, like any client.
    ("neve-bench", &["neve-upstream", "neve-devnet", "neve-load"]),
    (
        "neve",
        &[
            "neve-upstream",
            "neve-ingest",
            "neve-store",
            "neve-state",
            "neve-execution",
            "neve-serve",
            "neve-pool",
            "neve-load",
            "neve-devnet",
            "neve-bench",
        ],
    ),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The crate directories under `crates/`, sorted.
fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .expect("crates/")
        .map(|entry| entry.expect("crates/ entry").path())
        .filter(|dir| dir.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn fail_on(rule: &str, violations: &[String]) {
    assert!(
        violations.is_empty(),
        "{rule}: {} violation(s)\n  {}\n",
        violations.len(),
        violations.join("\n  ")
    );
}

// ---- 1. crate arrows ------------------------------------------------------

/// A crate's package name and the neve crates its `[dependencies]` name.
struct Manifest {
    dir: String,
    package: String,
    neve_dependencies: BTreeSet<String>,
}

fn is_normal_dependency_section(section: &str) -> bool {
    section == "dependencies"
        || (section.starts_with("target.") && section.ends_with(".dependencies"))
}

fn read_manifest(dir: &Path) -> Manifest {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
    let mut section = String::new();
    let mut package = String::new();
    let mut neve_dependencies = BTreeSet::new();
    for raw in text.lines() {
        let line = raw.split(" #").next().unwrap_or("").trim();
        if line.starts_with('[') {
            section = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            // `[dependencies.neve-x]` and `[target.'…'.dependencies.neve-x]`
            if let Some((table, name)) = section.rsplit_once('.')
                && is_normal_dependency_section(table)
                && name.starts_with("neve")
            {
                neve_dependencies.insert(name.trim_matches('"').to_string());
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if section == "package" && key == "name" {
            package = value.trim().trim_matches('"').to_string();
        }
        if is_normal_dependency_section(&section) {
            let name = key.split('.').next().unwrap_or(key).trim_matches('"');
            // A renamed dependency: `alias = { package = "neve-x", … }`.
            let renamed = value
                .split_once("package")
                .and_then(|(_, rest)| rest.split('"').nth(1));
            let name = renamed.unwrap_or(name);
            if name.starts_with("neve") {
                neve_dependencies.insert(name.to_string());
            }
        }
    }
    let dir = format!("crates/{}", dir.file_name().unwrap().to_string_lossy());
    Manifest {
        dir,
        package,
        neve_dependencies,
    }
}

#[test]
fn crates_depend_only_along_the_data_flow() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED_ARROWS
        .iter()
        .map(|(name, deps)| (*name, deps.iter().copied().collect()))
        .collect();
    let manifests: Vec<Manifest> = crate_dirs().iter().map(|dir| read_manifest(dir)).collect();
    assert!(
        manifests
            .iter()
            .any(|manifest| !manifest.neve_dependencies.is_empty()),
        "no crate depends on another: the manifests were not read"
    );
    let mut violations = Vec::new();
    for manifest in manifests {
        let Some(may) = allowed.get(manifest.package.as_str()) else {
            violations.push(format!(
                "{}: crate `{}` is not in ALLOWED_ARROWS (tests/layering.rs): place it in the \
                 data flow there and in ARCHITECTURE.md",
                manifest.dir, manifest.package
            ));
            continue;
        };
        for dependency in &manifest.neve_dependencies {
            if !may.contains(dependency.as_str()) {
                let may: Vec<&str> = may.iter().copied().collect();
                violations.push(format!(
                    "{}: `{}` → `{dependency}` is not an arrow of the data flow (it may depend \
                     on: {})",
                    manifest.dir,
                    manifest.package,
                    if may.is_empty() {
                        "no neve crate".to_string()
                    } else {
                        may.join(", ")
                    }
                ));
            }
        }
    }
    fail_on("crate arrows", &violations);
}

// ---- reading Rust sources --------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Skips a string literal opening at `i` (a `"` or a raw string's `r#…"`),
/// returning the index past it and the newlines it held.
fn skip_string(chars: &[char], mut i: usize) -> (usize, usize) {
    let mut newlines = 0;
    if chars[i] == 'r' {
        i += 1;
        let mut hashes = 0;
        while chars.get(i) == Some(&'#') {
            hashes += 1;
            i += 1;
        }
        i += 1; // the opening quote
        while i < chars.len() {
            if chars[i] == '\n' {
                newlines += 1;
            }
            if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                return (i + 1 + hashes, newlines);
            }
            i += 1;
        }
        return (i, newlines);
    }
    i += 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '\n' => newlines += 1,
            '"' => return (i + 1, newlines),
            _ => {}
        }
        i += 1;
    }
    (i, newlines)
}

/// Where a literal prefixed like `b"…"`, `br#"…"#`, `c"…"` or `r"…"` opens
/// its string (at the `r` of a raw one or the quote), if `i` starts one.
fn string_prefix_end(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if matches!(chars[j], 'b' | 'c') {
        j += 1;
    }
    if chars.get(j) == Some(&'"') {
        return Some(j);
    }
    if chars.get(j) == Some(&'r') {
        let mut k = j + 1;
        while chars.get(k) == Some(&'#') {
            k += 1;
        }
        if chars.get(k) == Some(&'"') {
            return Some(j);
        }
    }
    None
}

/// The tokens that matter for paths, with comments and literals dropped.
fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            let (end, newlines) = skip_string(&chars, i);
            (i, line) = (end, line + newlines);
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            let quote = if c == 'b' { i + 1 } else { i };
            if chars.get(quote + 1) == Some(&'\\') {
                // an escaped character: find the closing quote past the escape
                let mut j = quote + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if chars.get(quote + 2) == Some(&'\'') {
                i = quote + 3;
            } else {
                i = quote + 1; // a lifetime: its name reads as an identifier
            }
        } else if is_ident_start(c) {
            if let Some(open) = string_prefix_end(&chars, i) {
                let (end, newlines) = skip_string(&chars, open);
                (i, line) = (end, line + newlines);
                continue;
            }
            if c == 'r' && next == Some('#') {
                i += 2; // a raw identifier
            }
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            let ident: String = chars[start..i].iter().collect();
            tokens.push(Token {
                tok: Tok::Ident(ident),
                line,
            });
        } else if c.is_ascii_digit() {
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            tokens.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    tokens
}

fn ident(tokens: &[Token], i: usize) -> Option<&str> {
    match tokens.get(i).map(|t| &t.tok) {
        Some(Tok::Ident(name)) => Some(name),
        _ => None,
    }
}

fn is(tokens: &[Token], i: usize, tok: Tok) -> bool {
    tokens.get(i).map(|t| &t.tok) == Some(&tok)
}

/// Whether the token before `i` is `tok`.
fn after(tokens: &[Token], i: usize, tok: Tok) -> bool {
    i > 0 && is(tokens, i - 1, tok)
}

/// The index of the token closing the bracket opened at `open`.
fn matching_close(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token.tok {
            Tok::Punct('{' | '(' | '[') => depth += 1,
            Tok::Punct('}' | ')' | ']') => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// The last token of the item starting at `i` (its attributes skipped).
fn item_end(tokens: &[Token], mut i: usize) -> usize {
    while is(tokens, i, Tok::Punct('#')) {
        i = matching_close(tokens, i + 1) + 1;
    }
    let mut depth = 0usize;
    while i < tokens.len() {
        match tokens[i].tok {
            Tok::Punct('(' | '[') => depth += 1,
            Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Tok::Punct(';') if depth == 0 => return i,
            Tok::Punct('{') if depth == 0 => return matching_close(tokens, i),
            _ => {}
        }
        i += 1;
    }
    i
}

/// One path of a `use` tree, expanded: `use a::{b, c::d as e}` gives
/// `a::b` and `a::c::d` (named `e`).
struct UsePath {
    path: Vec<String>,
    name: Option<String>,
    glob: bool,
}

fn parse_use_tree(tokens: &[Token], i: &mut usize, prefix: Vec<String>, out: &mut Vec<UsePath>) {
    let mut path = prefix;
    if is(tokens, *i, Tok::PathSep) {
        path.push("::".into()); // a leading `::`: an external crate
        *i += 1;
    }
    while *i < tokens.len() {
        match &tokens[*i].tok {
            Tok::Ident(segment) => {
                path.push(segment.clone());
                *i += 1;
                if is(tokens, *i, Tok::PathSep) {
                    *i += 1;
                    continue;
                }
                if path.last().map(String::as_str) == Some("self") {
                    path.pop();
                }
                let mut name = path.last().cloned();
                if ident(tokens, *i) == Some("as") {
                    name = ident(tokens, *i + 1).map(String::from);
                    *i += 2;
                }
                out.push(UsePath {
                    path,
                    name,
                    glob: false,
                });
                return;
            }
            Tok::Punct('*') => {
                *i += 1;
                out.push(UsePath {
                    path,
                    name: None,
                    glob: true,
                });
                return;
            }
            Tok::Punct('{') => {
                *i += 1;
                while *i < tokens.len() && !is(tokens, *i, Tok::Punct('}')) {
                    let before = *i;
                    parse_use_tree(tokens, i, path.clone(), out);
                    if is(tokens, *i, Tok::Punct(',')) || *i == before {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => return,
        }
    }
}

// ---- a library crate's modules --------------------------------------------

/// A path a file names, in a `use` (expanded) or inline (`crate::a::B`).
struct Reference {
    file: usize,
    /// The module the path is written in: the file's, or an inline one's.
    scope: Vec<String>,
    line: usize,
    path: Vec<String>,
    glob: bool,
    in_test: bool,
    /// A name of the file that a `use …::*` brings in.
    via_glob: bool,
}

/// An identifier as it appears in a file, to see what a glob brings in.
struct Word {
    file: usize,
    scope: Vec<String>,
    line: usize,
    name: String,
    in_test: bool,
}

impl Reference {
    fn written(&self) -> String {
        let path = self.path.join("::");
        match self.path.split_last() {
            Some((name, globbed)) if self.via_glob => {
                format!("`{name}` (by `use {}::*`)", globbed.join("::"))
            }
            _ if self.glob => format!("`{path}::*`"),
            _ => format!("`{path}`"),
        }
    }
}

struct SourceFile {
    /// The path from the crate's directory: `src/rpc/call_memo.rs`.
    rel: String,
    module: Vec<String>,
    /// Test code by its name or folder.
    in_test: bool,
}

/// What a module's own items and imports make visible in it.
#[derive(Default)]
struct Scope {
    /// A name a `use` brings in → the path as written.
    imports: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
    items: BTreeSet<String>,
}

const ITEM_KEYWORDS: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "const",
    "static",
    "type",
    "trait",
    "union",
    "macro_rules",
];
/// How many imports deep a path is followed (imports may loop); at this
/// depth only `crate`, `self`, `super` and child paths still resolve.
const MAX_HOPS: usize = 8;
const ITEM_MODIFIERS: &[&str] = &["fn", "unsafe", "async", "extern", "mut", "const"];

struct Library {
    name: String,
    files: Vec<SourceFile>,
    /// Every module, of a file or inline (`mod x { }`), → its file.
    modules: BTreeMap<Vec<String>, usize>,
    scopes: BTreeMap<Vec<String>, Scope>,
    references: Vec<Reference>,
    words: Vec<Word>,
    /// Modules declared under `#[cfg(test)]`.
    test_modules: BTreeSet<Vec<String>>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("source folder")
        .map(|entry| entry.expect("source entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `rpc/call_memo.rs` → `[rpc, call_memo]`; `rpc/mod.rs` → `[rpc]`.
fn module_of(rel_in_src: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel_in_src
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && stem == "lib")) {
        parts.push(stem.to_string());
    }
    parts
}

fn libraries() -> Vec<Library> {
    crate_dirs()
        .iter()
        .filter_map(|dir| Library::load(dir))
        .collect()
}

impl Library {
    fn load(crate_dir: &Path) -> Option<Library> {
        let src = crate_dir.join("src");
        if !src.join("lib.rs").is_file() {
            return None;
        }
        let mut library = Library {
            name: read_manifest(crate_dir).package,
            files: Vec::new(),
            modules: BTreeMap::new(),
            scopes: BTreeMap::new(),
            references: Vec::new(),
            words: Vec::new(),
            test_modules: BTreeSet::new(),
        };
        let mut paths = Vec::new();
        rust_files(&src, &mut paths);
        for path in &paths {
            let rel_in_src = path.strip_prefix(&src).expect("under src");
            if rel_in_src.starts_with("bin") || rel_in_src == Path::new("main.rs") {
                continue; // binaries are not the library's modules
            }
            let file_name = rel_in_src.file_name().unwrap().to_string_lossy();
            let in_test = file_name == "tests.rs"
                || file_name == "testing.rs"
                || rel_in_src
                    .parent()
                    .is_some_and(|dir| dir.components().any(|part| part.as_os_str() == "tests"));
            let module = module_of(rel_in_src);
            library.modules.insert(module.clone(), library.files.len());
            library.files.push(SourceFile {
                rel: format!("src/{}", rel_in_src.to_string_lossy()),
                module,
                in_test,
            });
        }
        for file in 0..library.files.len() {
            let path = src.join(&library.files[file].rel["src/".len()..]);
            let text = std::fs::read_to_string(&path).expect("a source file");
            library.scan(file, &tokenize(&text));
        }
        library.expand_globs();
        Some(library)
    }

    /// Records the file's inline modules, imports and items, and every path
    /// it names.
    fn scan(&mut self, file: usize, tokens: &[Token]) {
        // (module, index of the brace closing it, brace depth of its items)
        let mut scopes = vec![(self.files[file].module.clone(), usize::MAX, 0usize)];
        let mut test_until: Option<usize> = None;
        let mut depth = 0usize;
        let mut i = 0;
        while i < tokens.len() {
            let (scope, scope_close, items_depth) = scopes.last().cloned().expect("a scope");
            let in_test = test_until.is_some_and(|end| i <= end);
            let word = ident(tokens, i).unwrap_or("");
            match &tokens[i].tok {
                Tok::Punct('#') => {
                    i = self.attribute(tokens, i, &scope, scope_close, &mut test_until);
                    continue;
                }
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth = depth.saturating_sub(1);
                    if scope_close == i {
                        scopes.pop();
                    }
                }
                Tok::Ident(_) if word == "pub" && is(tokens, i + 1, Tok::Punct('(')) => {
                    // `pub(in crate::x)` names no dependency
                    i = matching_close(tokens, i + 1) + 1;
                    continue;
                }
                Tok::Ident(_) if word == "mod" && is(tokens, i + 2, Tok::Punct('{')) => {
                    if let Some(name) = ident(tokens, i + 1) {
                        let module = [scope.clone(), vec![name.to_string()]].concat();
                        self.modules.insert(module.clone(), file);
                        scopes.push((module, matching_close(tokens, i + 2), depth + 1));
                    }
                    i += 2;
                    continue;
                }
                Tok::Ident(_) if word == "use" => {
                    i = self.use_statement(file, tokens, i, &scope, depth == items_depth, in_test);
                    continue;
                }
                Tok::Ident(_) if ITEM_KEYWORDS.contains(&word) && depth == items_depth => {
                    let mut j = i + 1;
                    while ident(tokens, j).is_some_and(|w| ITEM_MODIFIERS.contains(&w))
                        || is(tokens, j, Tok::Punct('!'))
                    {
                        j += 1;
                    }
                    if let Some(name) = ident(tokens, j) {
                        let scope = self.scopes.entry(scope.clone()).or_default();
                        scope.items.insert(name.to_string());
                    }
                }
                Tok::Ident(first)
                    if is(tokens, i + 1, Tok::PathSep) && !after(tokens, i, Tok::PathSep) =>
                {
                    let mut path = vec![first.clone()];
                    let mut j = i + 1;
                    while is(tokens, j, Tok::PathSep) {
                        let Some(segment) = ident(tokens, j + 1) else {
                            break;
                        };
                        path.push(segment.to_string());
                        j += 2;
                    }
                    let line = tokens[i].line;
                    self.references.push(Reference {
                        file,
                        scope,
                        line,
                        path,
                        glob: false,
                        in_test,
                        via_glob: false,
                    });
                    i = j;
                    continue;
                }
                // a name used on its own: not a field, a method or a binding
                Tok::Ident(name)
                    if !after(tokens, i, Tok::Punct('.'))
                        && !is(tokens, i + 1, Tok::Punct(':')) =>
                {
                    let (scope, line) = (scope, tokens[i].line);
                    let name = name.clone();
                    self.words.push(Word {
                        file,
                        scope,
                        line,
                        name,
                        in_test,
                    });
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// Turns each `use …::*` of a module of this crate into a reference to
    /// each name of the file the glob brings in, so the arrows go to the
    /// files defining them and not to the module globbed.
    fn expand_globs(&mut self) {
        let mut expanded = Vec::new();
        for glob in self.references.iter().filter(|reference| reference.glob) {
            let Some(source) = self.absolute(&glob.scope, &glob.path, 0) else {
                continue;
            };
            if !self.is_module(&source) {
                continue;
            }
            for word in &self.words {
                if word.file != glob.file
                    || word.scope != glob.scope
                    || self.names_itself(&glob.scope, &word.name)
                    || self.is_module(&[source.clone(), vec![word.name.clone()]].concat())
                    || !self.provides(&source, &word.name)
                {
                    continue;
                }
                expanded.push(Reference {
                    file: glob.file,
                    scope: glob.scope.clone(),
                    line: word.line,
                    path: [glob.path.clone(), vec![word.name.clone()]].concat(),
                    glob: false,
                    in_test: glob.in_test || word.in_test,
                    via_glob: true,
                });
            }
        }
        self.references.extend(expanded);
    }

    /// Reads the attribute at `i`; a `#[cfg(test)]` marks the item it
    /// carries (`#![cfg(test)]`: the whole module) as test code. Returns
    /// the index past the attribute.
    fn attribute(
        &mut self,
        tokens: &[Token],
        i: usize,
        scope: &[String],
        scope_close: usize,
        test_until: &mut Option<usize>,
    ) -> usize {
        let inner = is(tokens, i + 1, Tok::Punct('!'));
        let open = if inner { i + 2 } else { i + 1 };
        if !is(tokens, open, Tok::Punct('[')) {
            return i + 1;
        }
        let close = matching_close(tokens, open);
        let words: Vec<&Tok> = tokens[open + 1..close.min(tokens.len())]
            .iter()
            .map(|t| &t.tok)
            .collect();
        let cfg_test = [
            Tok::Ident("cfg".into()),
            Tok::Punct('('),
            Tok::Ident("test".into()),
            Tok::Punct(')'),
        ];
        if words.iter().copied().eq(cfg_test.iter()) {
            let end = if inner {
                scope_close.min(tokens.len())
            } else {
                item_end(tokens, close + 1)
            };
            *test_until = Some(test_until.map_or(end, |until| until.max(end)));
            let mut item = close + 1;
            while is(tokens, item, Tok::Punct('#')) {
                item = matching_close(tokens, item + 1) + 1;
            }
            if ident(tokens, item) == Some("pub") {
                item += 1;
                if is(tokens, item, Tok::Punct('(')) {
                    item = matching_close(tokens, item) + 1;
                }
            }
            if ident(tokens, item) == Some("mod")
                && let Some(name) = ident(tokens, item + 1)
            {
                self.test_modules
                    .insert([scope.to_vec(), vec![name.to_string()]].concat());
            }
            if inner {
                self.test_modules.insert(scope.to_vec());
            }
        }
        close + 1
    }

    /// Records a `use` statement starting at `i`; returns the index past it.
    fn use_statement(
        &mut self,
        file: usize,
        tokens: &[Token],
        i: usize,
        scope: &[String],
        at_module_level: bool,
        in_test: bool,
    ) -> usize {
        let mut end = i + 1;
        let mut paths = Vec::new();
        parse_use_tree(tokens, &mut end, Vec::new(), &mut paths);
        for used in paths {
            if at_module_level {
                let names = self.scopes.entry(scope.to_vec()).or_default();
                match (&used.name, used.glob) {
                    (_, true) => names.globs.push(used.path.clone()),
                    (Some(name), false) if name != "_" => {
                        names.imports.insert(name.clone(), used.path.clone());
                    }
                    _ => {}
                }
            }
            self.references.push(Reference {
                file,
                scope: scope.to_vec(),
                line: tokens[i].line,
                path: used.path,
                glob: used.glob,
                in_test,
                via_glob: false,
            });
        }
        end.max(i + 1)
    }

    fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains_key(path)
    }

    /// The path from the crate's top that `path`, written in `scope`, names;
    /// `None` for another crate's (or a local variable's) path.
    fn absolute(&self, scope: &[String], path: &[String], hops: usize) -> Option<Vec<String>> {
        let first = path.first()?;
        let (base, rest) = if first == "crate" {
            (Vec::new(), &path[1..])
        } else if first == "self" || first == "super" {
            let mut base = scope.to_vec();
            let mut k = 0;
            while k < path.len() && (path[k] == "self" || path[k] == "super") {
                if path[k] == "super" {
                    base.pop()?;
                }
                k += 1;
            }
            (base, &path[k..])
        } else if self.is_module(&[scope.to_vec(), vec![first.clone()]].concat())
            || self
                .scopes
                .get(scope)
                .is_some_and(|names| names.items.contains(first))
        {
            (scope.to_vec(), path)
        } else if hops >= MAX_HOPS {
            return None;
        } else if let Some(imported) = self.scopes.get(scope)?.imports.get(first) {
            if imported.len() == 1 && imported[0] == *first {
                return None; // `use name;`: another crate
            }
            (self.absolute(scope, imported, hops + 1)?, &path[1..])
        } else {
            // brought in by a glob of this crate's
            (self.glob_source(scope, first)?, path)
        };
        Some([base, rest.to_vec()].concat())
    }

    /// Whether `module` names `name` itself: a child, an import or an item.
    fn names_itself(&self, module: &[String], name: &str) -> bool {
        self.is_module(&[module.to_vec(), vec![name.to_string()]].concat())
            || self
                .scopes
                .get(module)
                .is_some_and(|scope| scope.imports.contains_key(name) || scope.items.contains(name))
    }

    /// The module whose globs bring `name` into `module` and that names it
    /// itself, the nearest first (globs may reach each other back).
    fn glob_source(&self, module: &[String], name: &str) -> Option<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([module.to_vec()]);
        while let Some(current) = queue.pop_front() {
            if !seen.insert(current.clone()) {
                continue;
            }
            let Some(scope) = self.scopes.get(&current) else {
                continue;
            };
            for glob in &scope.globs {
                // a glob's own path: never through another glob
                let Some(source) = self.absolute(&current, glob, MAX_HOPS) else {
                    continue;
                };
                if self.names_itself(&source, name) {
                    return Some(source);
                }
                queue.push_back(source);
            }
        }
        None
    }

    /// Whether `name` is visible in `module`: named by it, or brought in by
    /// one of its globs.
    fn provides(&self, module: &[String], name: &str) -> bool {
        self.names_itself(module, name) || self.glob_source(module, name).is_some()
    }

    /// The module defining what `absolute` names, seen through re-exports;
    /// `None` when it is another crate's.
    fn defining_module(&self, absolute: &[String], hops: usize) -> Option<Vec<String>> {
        let mut module = Vec::new();
        for (k, segment) in absolute.iter().enumerate() {
            let child = [module.clone(), vec![segment.clone()]].concat();
            if self.is_module(&child) {
                module = child;
                continue;
            }
            let Some(scope) = self.scopes.get(&module) else {
                return Some(module);
            };
            if hops > 16 || scope.items.contains(segment) {
                return Some(module);
            }
            let rest = &absolute[k + 1..];
            if let Some(imported) = scope.imports.get(segment) {
                let target = self.absolute(&module, imported, 0)?;
                return self.defining_module(&[target, rest.to_vec()].concat(), hops + 1);
            }
            if let Some(source) = self.glob_source(&module, segment) {
                let target = [source, vec![segment.clone()], rest.to_vec()].concat();
                return self.defining_module(&target, hops + 1);
            }
            return Some(module);
        }
        Some(module)
    }

    fn file_in_test(&self, file: usize) -> bool {
        let file = &self.files[file];
        file.in_test
            || self
                .test_modules
                .iter()
                .any(|module| file.module.starts_with(module))
    }

    /// The references of production code, outside the crate's top.
    fn production_references(&self) -> impl Iterator<Item = &Reference> {
        self.references.iter().filter(|reference| {
            !reference.in_test
                && !self.file_in_test(reference.file)
                && !self.files[reference.file].module.is_empty()
        })
    }

    /// The file holding `module` (an inline module lives in its parent's).
    fn file_of(&self, module: &[String]) -> usize {
        (0..=module.len())
            .rev()
            .find_map(|len| self.modules.get(&module[..len]).copied())
            .expect("lib.rs holds the crate's top")
    }
}

// ---- 2. no circle between modules ------------------------------------------

/// One side of an arrow on a floor: a child module of the floor's folder
/// (`Some`), or the folder's own file (`None`: its `mod.rs`).
type Node = Option<String>;

/// The arrows of one floor, each with the places that draw it.
type Arrows = BTreeMap<(Node, Node), Vec<String>>;

/// The floor an arrow between two modules is drawn on, and its two ends:
/// `crate::rpc::x` → `crate::config` is `rpc` → `config` on the crate's
/// floor; `crate::methods::a` → `crate::methods::b` is `a` → `b` in the
/// `methods` folder. `None` for an arrow into or out of `lib.rs`, which
/// rule 3 judges.
fn floor_of(from: &[String], to: &[String]) -> Option<(Vec<String>, Node, Node)> {
    if from.is_empty() || to.is_empty() || from == to {
        return None;
    }
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    Some((
        from[..common].to_vec(),
        from.get(common).cloned(),
        to.get(common).cloned(),
    ))
}

/// The nodes `start` reaches, itself included.
fn reached_from(start: &Node, arrows: &Arrows) -> BTreeSet<Node> {
    let mut reached = BTreeSet::from([start.clone()]);
    let mut frontier = vec![start.clone()];
    while let Some(node) = frontier.pop() {
        for (from, to) in arrows.keys() {
            if *from == node && reached.insert(to.clone()) {
                frontier.push(to.clone());
            }
        }
    }
    reached
}

impl Library {
    fn node_name(&self, floor: &[String], node: &Node) -> String {
        let Some(child) = node else {
            return self.files[self.file_of(floor)].rel.clone();
        };
        let module = [floor.to_vec(), vec![child.clone()]].concat();
        let file = &self.files[self.file_of(&module)];
        let is_folder = self
            .files
            .iter()
            .any(|f| f.module.len() > module.len() && f.module.starts_with(&module));
        if is_folder {
            let folder = file.rel.trim_end_matches("/mod.rs").trim_end_matches(".rs");
            format!("crate::{} ({folder}/)", module.join("::"))
        } else {
            format!("crate::{} ({})", module.join("::"), file.rel)
        }
    }

    /// Every arrow of production code between two files, by floor.
    fn floors(&self) -> BTreeMap<Vec<String>, Arrows> {
        let mut floors: BTreeMap<Vec<String>, Arrows> = BTreeMap::new();
        for reference in self.production_references() {
            let from_file = &self.files[reference.file];
            let Some(absolute) = self.absolute(&reference.scope, &reference.path, 0) else {
                continue;
            };
            if reference.glob && from_file.module.starts_with(&absolute) {
                // `use super::*`: judged by the names it brings in (expanded)
                continue;
            }
            let Some(defining) = self.defining_module(&absolute, 0) else {
                continue;
            };
            let to_file = &self.files[self.file_of(&defining)];
            let Some((floor, from, to)) = floor_of(&from_file.module, &to_file.module) else {
                continue;
            };
            let evidence = format!(
                "{}:{} {} → {}",
                from_file.rel,
                reference.line,
                reference.written(),
                to_file.rel
            );
            let sites = floors
                .entry(floor)
                .or_default()
                .entry((from, to))
                .or_default();
            if !sites.contains(&evidence) {
                sites.push(evidence);
            }
        }
        floors
    }

    fn circles(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (floor, arrows) in self.floors() {
            let nodes: BTreeSet<Node> = arrows
                .keys()
                .flat_map(|(a, b)| [a.clone(), b.clone()])
                .collect();
            let reach: BTreeMap<Node, BTreeSet<Node>> = nodes
                .iter()
                .map(|node| (node.clone(), reached_from(node, &arrows)))
                .collect();
            let mut seen = BTreeSet::new();
            for node in &nodes {
                let circle: BTreeSet<Node> = reach[node]
                    .iter()
                    .filter(|other| reach[*other].contains(node))
                    .cloned()
                    .collect();
                if circle.len() < 2 || !seen.insert(circle.clone()) {
                    continue;
                }
                let names: Vec<String> = circle.iter().map(|n| self.node_name(&floor, n)).collect();
                let mut text = format!("{}: circle between {}:", self.name, names.join(", "));
                for ((from, to), sites) in &arrows {
                    if circle.contains(from) && circle.contains(to) {
                        text += &format!(
                            "\n      {} → {}:",
                            self.node_name(&floor, from),
                            self.node_name(&floor, to)
                        );
                        for site in sites.iter().take(4) {
                            text += &format!("\n        {site}");
                        }
                        if sites.len() > 4 {
                            text += &format!("\n        … and {} more", sites.len() - 4);
                        }
                    }
                }
                found.push(text);
            }
        }
        found
    }

    // ---- 3. no file importing the crate's top ------------------------------

    fn top_imports(&self) -> Vec<String> {
        let mut found = BTreeSet::new();
        for reference in self.production_references() {
            // Paths through a `use`d name were judged at the `use`.
            let explicit = ["crate", "super", "self"].contains(&reference.path[0].as_str());
            if !explicit || reference.via_glob {
                continue;
            }
            let Some(absolute) = self.absolute(&reference.scope, &reference.path, 0) else {
                continue;
            };
            let names_the_top = match absolute.first() {
                Some(first) => !self.is_module(std::slice::from_ref(first)),
                None => reference.glob,
            };
            if !names_the_top {
                continue;
            }
            let hint = match self.defining_module(&absolute, 0) {
                None => "another crate's item lib.rs re-exports: name that crate".to_string(),
                Some(module) if module.is_empty() => "defined in lib.rs".to_string(),
                Some(module) => format!("import it from crate::{}", module.join("::")),
            };
            let text = format!(
                "{}: {}:{} {} names the crate's top ({hint})",
                self.name,
                self.files[reference.file].rel,
                reference.line,
                reference.written()
            );
            // by file, then line: the order a reader fixes them in
            found.insert((reference.file, reference.line, text));
        }
        found.into_iter().map(|(_, _, text)| text).collect()
    }
}

#[test]
fn no_circle_between_a_crates_modules() {
    let libraries = libraries();
    assert!(
        libraries.iter().any(|library| !library.floors().is_empty()),
        "no arrow between any two files: the sources were not read"
    );
    let circles: Vec<String> = libraries.iter().flat_map(Library::circles).collect();
    fail_on("module circles", &circles);
}

#[test]
fn no_file_imports_its_crates_top() {
    let imports: Vec<String> = libraries().iter().flat_map(Library::top_imports).collect();
    fail_on("imports of a crate's top", &imports);
}

/// Prints every arrow between the files of each library crate, floor by
/// floor: `cargo test -p neve --test layering -- --ignored --nocapture`.
#[test]
#[ignore = "prints the arrows for a reader; checks nothing"]
fn print_the_floors() {
    for library in libraries() {
        for (floor, arrows) in library.floors() {
            let floor_name = if floor.is_empty() {
                "the crate".to_string()
            } else {
                floor.join("::")
            };
            println!("{} ({floor_name}):", library.name);
            for ((from, to), sites) in arrows {
                let from = library.node_name(&floor, &from);
                let to = library.node_name(&floor, &to);
                println!("  {from} → {to}   e.g. {}", sites[0]);
            }
        }
    }
}

#[test]
fn the_scanner_expands_use_trees_and_skips_comments_and_literals() {
    let source = "use crate::{a::{b, c as d}, e::*, self as top};\n\
                  // crate::x\n\
                  let s = \"crate::y\"; let c = '\"'; /* crate::z */ let w = r#\"crate::w\"#;";
    let tokens = tokenize(source);
    let mut end = 1;
    let mut paths = Vec::new();
    parse_use_tree(&tokens, &mut end, Vec::new(), &mut paths);
    let read: Vec<(String, Option<String>, bool)> = paths
        .iter()
        .map(|used| (used.path.join("::"), used.name.clone(), used.glob))
        .collect();
    let name = |name: &str| Some(name.to_string());
    assert_eq!(
        read,
        [
            ("crate::a::b".to_string(), name("b"), false),
            ("crate::a::c".to_string(), name("d"), false),
            ("crate::e".to_string(), None, true),
            ("crate".to_string(), name("top"), false),
        ]
    );
    let words: Vec<&str> = tokens
        .iter()
        .filter_map(|token| match &token.tok {
            Tok::Ident(word) => Some(word.as_str()),
            _ => None,
        })
        .collect();
    for hidden in ["x", "y", "z"] {
        assert!(
            !words.contains(&hidden),
            "{hidden} is in a comment or a literal"
        );
    }
    assert_eq!(tokens.last().map(|token| token.line), Some(3));
}
