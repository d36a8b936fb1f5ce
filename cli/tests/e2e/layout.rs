//! The crates' module graphs have no circles: within `shared`, `gateway`, `worker`, `tools` and `client`,
//! no two top-level modules reach each other through `crate::` paths (or the `super::` paths that
//! mean the same from a module's own files). A module that needs another's
//! item takes it from below; what two modules share goes into a third that both import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use conveyor_tests::process::workspace_root;

/// Each top-level module of the crate in `src`, and the top-level modules it names as `crate::x`
/// (in paths and in `use crate::{x, y::z}` groups), or as `super::x` from a file where `super` is
/// the crate (`super::super::x` one level down, and so on).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory").filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let first = relative.components().next().expect("a component").as_os_str().to_string_lossy();
            let module = first.trim_end_matches(".rs").to_owned();
            if module == "lib" || module == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            // How many `super`s lead from this file's module to the crate: `x.rs` and `x/mod.rs`
            // are one level down, `x/y.rs` two.
            let levels = relative.components().count() - usize::from(relative.ends_with("mod.rs"));
            let to_crate = "super::".repeat(levels);
            let targets = graph.entry(module.clone()).or_default();
            for name in
                crate_references(&text, "crate::").into_iter().chain(crate_references(&text, &to_crate))
            {
                if name != module {
                    targets.insert(name);
                }
            }
        }
    }
    graph
}

/// The first segments after `prefix` (`crate::`, or the `super::` chain that means the crate),
/// and the names in `use crate::{...}` groups. A prefix inside a longer `super::` chain is not one.
fn crate_references(text: &str, prefix: &str) -> Vec<String> {
    let ident =
        |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut names = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        if text[..at].ends_with("::") || text[at + prefix.len()..].starts_with("super::") {
            continue;
        }
        let rest = &text[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(|part| ident(part.trim())));
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|n| n.chars().next().is_some_and(|c| c.is_ascii_lowercase()));
    names
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        for next in w.graph.get(v).into_iter().flatten() {
            let next = next.as_str();
            if !w.graph.contains_key(next) {
                continue;
            }
            if !w.index.contains_key(next) {
                visit(w, next);
                let low = w.low[v].min(w.low[next]);
                w.low.insert(v, low);
            } else if w.stack.contains(&next) {
                let low = w.low[v].min(w.index[next]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(top) = w.stack.pop() {
                component.push(top.to_owned());
                if top == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                w.found.push(component);
            }
        }
    }
    let mut walk =
        Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            visit(&mut walk, v);
        }
    }
    walk.found
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let root = workspace_root();
    let mut found = Vec::new();
    for krate in ["shared", "gateway", "worker", "tools", "client"] {
        let graph = module_graph(&root.join(krate).join("src"));
        assert!(graph.len() > 1, "{krate}: no modules found");
        for circle in circles(&graph) {
            found.push(format!("{krate}: {}", circle.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "modules that import each other:\n{}", found.join("\n"));
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
            .collect();
    assert_eq!(circles(&graph), vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]);
    assert_eq!(
        crate_references("use crate::{keys::Shard, model};\nlet x = crate::store::Store::new();", "crate::"),
        vec!["keys", "model", "store"]
    );
    let nested = "use super::super::{roots, plan};\nuse super::parse;\nlet r = super::super::super::x::y();";
    assert_eq!(crate_references(nested, "super::super::"), vec!["roots", "plan"]);
    assert_eq!(crate_references("use super::readiness::Severity;", "super::"), vec!["readiness"]);
}
