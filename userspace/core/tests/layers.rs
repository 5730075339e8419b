//! The core crate is a stack: every module imports only modules below it. The order is the one
//! `src/lib.rs` documents in its three layer lines (`//! - **bottom**: ...`, `**middle**`,
//! `**top**`, module names in backticks, bottom first); this test reads those lines and every
//! production source file's `crate::` paths (items under `#[cfg(test)]`, wherever they stand,
//! and files named `tests.rs`, are not production), and fails on an import of a module at or
//! above the importer's place, or on a module missing from the order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The module order from `lib.rs`'s layer lines, bottom first.
fn order(lib_rs: &str) -> Vec<String> {
    let mut out = Vec::new();
    for layer in ["bottom", "middle", "top"] {
        let tag = format!("//! - **{layer}**:");
        let line = lib_rs
            .lines()
            .find(|l| l.starts_with(&tag))
            .unwrap_or_else(|| panic!("lib.rs has no line starting {tag:?}"));
        out.extend(
            line[tag.len()..]
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .filter(|m| !m.is_empty()),
        );
    }
    out
}

/// The production part of a source file, with `//` comments (and so doc comments) removed:
/// every item under `#[cfg(test)]` (a `mod tests { .. }`, a test-only `use` or function) is
/// left out, wherever it stands in the file.
fn production(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            out.push(lines[i]);
            i += 1;
            continue;
        }
        // Skip the attribute, any further attributes, then the item: up to its `;` or to the
        // `}` that closes its first `{`.
        i += 1;
        while i < lines.len() && lines[i].trim_start().starts_with("#[") {
            i += 1;
        }
        let mut depth = 0i32;
        let mut opened = false;
        while i < lines.len() {
            let l = lines[i];
            i += 1;
            depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
            opened |= l.contains('{');
            if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                break;
            }
        }
    }
    out.join("\n")
}

/// The top-level modules `code` names through `crate::a` or `crate::{a, b::{c, d}}`.
fn imports(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.push(ident(rest));
            continue;
        };
        // The group's top-level items: split at commas outside nested braces.
        let mut depth = 0;
        let mut start = 0;
        for (k, ch) in group.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push(ident(&group[start..k]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(ident(&group[start..k]));
                    start = k + 1;
                }
                _ => {}
            }
        }
    }
    out
}

/// Every import that does not point down: `importer -> imported (file)`, for `files` given as
/// `(path relative to src, text)`.
fn violations(order: &[String], files: &[(PathBuf, String)]) -> Vec<String> {
    let rank: BTreeMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let mut bad = Vec::new();
    for (rel, text) in files {
        let first = rel.components().next().expect("a relative path");
        let module = first.as_os_str().to_string_lossy();
        let module = module.strip_suffix(".rs").unwrap_or(&module);
        if module == "lib" || rel.file_name().is_some_and(|f| f == "tests.rs") {
            continue;
        }
        let Some(&own) = rank.get(module) else {
            bad.push(format!(
                "{}: module `{module}` is in no layer line of lib.rs",
                rel.display()
            ));
            continue;
        };
        for imported in imports(&production(text)) {
            if let Some(&theirs) = rank.get(imported.as_str())
                && imported != module
                && theirs >= own
            {
                bad.push(format!("{module} -> {imported} ({})", rel.display()));
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).expect("readable src directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a UTF-8 source file");
            out.push((path.strip_prefix(root).expect("under src").into(), text));
        }
    }
}

#[test]
fn every_import_points_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let order = order(&lib);
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    // Every module declared in lib.rs has its place, and every place names a module.
    let declared: Vec<String> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect();
    let mut sorted_order = order.clone();
    sorted_order.sort();
    let mut sorted_declared = declared.clone();
    sorted_declared.sort();
    assert_eq!(
        sorted_order, sorted_declared,
        "lib.rs layer lines vs its `mod` items"
    );
    assert_eq!(violations(&order, &files), Vec::<String>::new());
}

#[test]
fn an_upward_or_sideways_import_is_reported() {
    let order: Vec<String> = ["point", "scan", "sensor", "ros2"]
        .map(String::from)
        .to_vec();
    let files = vec![
        (
            PathBuf::from("point.rs"),
            "use crate::scan::Fov;\n".to_string(),
        ),
        (
            PathBuf::from("scan/mod.rs"),
            "//! see [`crate::ros2`]\nuse crate::{point::P, sensor::X};\n".to_string(),
        ),
        (
            PathBuf::from("sensor/hesai/mod.rs"),
            "use crate::point::P;\n#[cfg(test)]\nuse crate::ros2::T;\n".to_string(),
        ),
        (
            PathBuf::from("sensor/hesai/tests.rs"),
            "use crate::ros2::T;\n".to_string(),
        ),
        (
            PathBuf::from("ros2.rs"),
            "fn f() { crate::sensor::g(); crate::ros2::h(); }\n".to_string(),
        ),
        (
            PathBuf::from("scan/window.rs"),
            "#[cfg(test)]\nuse crate::ros2::T;\nuse crate::{point::{P, Q}, ros2::R};\n".to_string(),
        ),
        (
            PathBuf::from("sensor/mod.rs"),
            "#[cfg(test)]\nmod tests {\n    use crate::ros2::T;\n}\nfn g() { crate::ros2::h() }\n"
                .to_string(),
        ),
        (PathBuf::from("stray.rs"), String::new()),
    ];
    assert_eq!(
        violations(&order, &files),
        vec![
            "point -> scan (point.rs)".to_string(),
            "scan -> ros2 (scan/window.rs)".to_string(),
            "scan -> sensor (scan/mod.rs)".to_string(),
            "sensor -> ros2 (sensor/mod.rs)".to_string(),
            "stray.rs: module `stray` is in no layer line of lib.rs".to_string(),
        ]
    );
}
