//! The layering check (issue 51): which module of `src` may use which.
//!
//! Every file of `src` is parsed with `syn`; its module comes from the file layout
//! (`src/a.rs` or `src/a/mod.rs` is `a`; `src/lib.rs`, `src/main.rs` and `src/bin/*`
//! are the root), corrected by `#[path]` declarations. A file imports the modules that
//! its `crate::`, `self::` and `super::` paths name, and its paths that start with a
//! name a `use` or a `mod` brought in, macro invocations' tokens included; each path
//! counts as the longest known module it starts with. Test code (`*_tests.rs`, and
//! anything under `#[cfg(test)]` or `#[cfg(all(test, ..))]`) is left out.
//!
//! The rules: no module imports one of a higher layer, the layers being the
//! ```` ```layers ```` block of `docs/architecture.md` (which must hold every module of
//! `src`); no files import each other in a circle (imports of a file's own ancestors
//! aside); no top-level modules either. `simulation/src` is held to the circle rules.
//!
//! `cargo test --test layers -- --nocapture` prints every offence.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use syn::buffer::{Cursor, TokenBuffer};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, ImplItem, Item, Meta, Token};

/// A module's path from its crate's root; empty for the root.
type Module = Vec<String>;

/// What one file declares and names, before modules are known. Scopes are the inline
/// modules (`mod x { .. }`) around a name, outermost first.
#[derive(Default)]
struct Collector {
    scope: Vec<String>,
    /// How many `#[cfg(test)]` items enclose the one being visited.
    test_depth: usize,
    /// `(scope, name, path)`: `use path as name` (or `use path`, named by its end).
    aliases: Vec<(Vec<String>, String, Vec<String>)>,
    /// `(scope, path)`: every path and `use` path of the file's non-test code.
    paths: Vec<(Vec<String>, Vec<String>)>,
    mods: Vec<ModDecl>,
}

struct ModDecl {
    scope: Vec<String>,
    name: String,
    /// `#[path = ".."]`.
    path: Option<String>,
    inline: bool,
    test: bool,
}

fn cfg_is_test(attrs: &[Attribute]) -> bool {
    fn requires_test(meta: &Meta) -> bool {
        match meta {
            Meta::Path(path) => path.is_ident("test"),
            Meta::List(list) if list.path.is_ident("all") => list
                .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                .is_ok_and(|args| args.iter().any(requires_test)),
            _ => false,
        }
    }
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg") && attr.parse_args::<Meta>().is_ok_and(|m| requires_test(&m))
    })
}

/// The attributes of an item or an impl item, whatever its kind.
macro_rules! attrs {
    ($value:expr, $kind:ident: $($variant:ident)*) => {
        match $value {
            $($kind::$variant(inner) => &inner.attrs[..],)*
            _ => &[],
        }
    };
}

/// Every path of a `use` tree, with the name it brings in (none for a glob).
fn expand_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Module, Option<String>)>,
) {
    let full = |prefix: &Vec<String>, ident: &syn::Ident| {
        let mut path = prefix.clone();
        if ident != "self" {
            path.push(ident.to_string());
        }
        path
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            expand_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let path = full(prefix, &n.ident);
            let name = path.last().cloned();
            out.push((path, name));
        }
        syn::UseTree::Rename(r) => out.push((full(prefix, &r.ident), Some(r.rename.to_string()))),
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| expand_use(t, prefix, out)),
    }
}

/// The `a::b::c` sequences of a macro's tokens (macros' bodies are not parsed).
fn token_paths(mut cursor: Cursor<'_>, out: &mut Vec<Module>) {
    fn path_sep(cursor: Cursor<'_>) -> Option<Cursor<'_>> {
        let (first, cursor) = cursor.punct()?;
        let (second, cursor) = cursor.punct()?;
        (first.as_char() == ':' && second.as_char() == ':').then_some(cursor)
    }
    while !cursor.eof() {
        if let Some((inner, _, _, next)) = cursor.any_group() {
            token_paths(inner, out);
            cursor = next;
        } else if let Some((ident, mut next)) = cursor.ident() {
            let mut path = vec![ident.to_string()];
            while let Some((segment, after)) = path_sep(next).and_then(|c| c.ident()) {
                path.push(segment.to_string());
                next = after;
            }
            if path.len() > 1 {
                out.push(path);
            }
            cursor = next;
        } else if let Some((_, next)) = cursor.token_tree() {
            cursor = next;
        } else {
            break;
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast Item) {
        let attrs = attrs!(item, Item: Const Enum ExternCrate Fn ForeignMod Impl Macro Mod
            Static Struct Trait TraitAlias Type Union Use);
        let test = usize::from(cfg_is_test(attrs));
        self.test_depth += test;
        visit::visit_item(self, item);
        self.test_depth -= test;
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        let attrs = attrs!(item, ImplItem: Const Fn Type Macro);
        let test = usize::from(cfg_is_test(attrs));
        self.test_depth += test;
        visit::visit_impl_item(self, item);
        self.test_depth -= test;
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let path_attr = item.attrs.iter().find(|a| a.path().is_ident("path"));
        let path = path_attr.and_then(|a| match &a.meta.require_name_value().ok()?.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(path),
                ..
            }) => Some(path.value()),
            _ => None,
        });
        let name = item.ident.to_string();
        let (inline, test) = (item.content.is_some(), self.test_depth > 0);
        let scope = self.scope.clone();
        self.mods.push(ModDecl {
            scope,
            name: name.clone(),
            path,
            inline,
            test,
        });
        self.scope.push(name);
        visit::visit_item_mod(self, item);
        self.scope.pop();
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if self.test_depth > 0 || item.leading_colon.is_some() {
            return;
        }
        let mut uses = Vec::new();
        expand_use(&item.tree, &mut Vec::new(), &mut uses);
        for (path, name) in uses {
            if let Some(name) = name.filter(|n| n != "_") {
                self.aliases.push((self.scope.clone(), name, path.clone()));
            }
            self.paths.push((self.scope.clone(), path));
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if self.test_depth == 0 && path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.paths.push((self.scope.clone(), segments));
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if self.test_depth == 0 {
            let mut found = Vec::new();
            token_paths(TokenBuffer::new2(mac.tokens.clone()).begin(), &mut found);
            self.paths
                .extend(found.into_iter().map(|p| (self.scope.clone(), p)));
        }
        visit::visit_macro(self, mac);
    }

    /// `pub(in crate::a)` and `pub(super)` say who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}

/// The module a file holds by the layout alone; `rel` is relative to the crate's `src`.
fn layout_module(rel: &str) -> Module {
    let mut parts: Vec<&str> = rel.strip_suffix(".rs").unwrap_or(rel).split('/').collect();
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    if parts.first() == Some(&"bin") {
        // src/bin/x.rs and src/bin/x/main.rs: the root of a binary of their own.
        parts.drain(..parts.len().min(2));
        parts.retain(|p| *p != "main");
    }
    if parts.last() == Some(&"mod") {
        parts.pop();
    }
    parts.into_iter().map(String::from).collect()
}

/// `a/b/../c` as `a/c`.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." && parts.last().is_some_and(|p| *p != "..") {
            parts.pop();
        } else {
            parts.push(part);
        }
    }
    parts.join("/")
}

/// The file a `mod` declaration in `file` names, as rustc finds it.
fn decl_target(file: &str, root: bool, decl: &ModDecl, exists: &dyn Fn(&str) -> bool) -> String {
    let (dir, name) = file.rsplit_once('/').unwrap_or(("", file));
    let stem = name.strip_suffix(".rs").unwrap_or(name);
    // A `#[path]` outside inline modules is relative to the file's directory; anything
    // else to the directory of the file's own module (its stem's, unless a `mod.rs`).
    let mut base = match (&decl.path, decl.scope.is_empty()) {
        (Some(_), true) => dir.to_string(),
        _ if root || stem == "mod" => dir.to_string(),
        _ => format!("{dir}/{stem}"),
    };
    for inline in &decl.scope {
        base = format!("{base}/{inline}");
    }
    if let Some(path) = &decl.path {
        return normalize(&format!("{base}/{path}"));
    }
    let flat = normalize(&format!("{base}/{}.rs", decl.name));
    if exists(&flat) {
        flat
    } else {
        normalize(&format!("{base}/{}/mod.rs", decl.name))
    }
}

struct SourceFile {
    path: String,
    module: Module,
    test: bool,
    found: Collector,
    /// The known modules this file's paths name: never itself, never the root.
    imports: BTreeSet<Module>,
}

impl SourceFile {
    /// The module path `raw` names, written in `scope`, if it is one of this crate's.
    fn absolute(&self, scope: &[String], raw: &[String], depth: usize) -> Option<Module> {
        let here: Module = self.module.iter().chain(scope).cloned().collect();
        let (first, rest) = raw.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some([&here[..], rest].concat()),
            "super" => {
                let supers = raw.iter().take_while(|s| *s == "super").count();
                let parent = here.len().checked_sub(supers)?;
                Some([&here[..parent], &raw[supers..]].concat())
            }
            _ => {
                let found = &self.found;
                let alias = found
                    .aliases
                    .iter()
                    .find(|(s, name, _)| s == scope && name == first);
                if let (Some((_, _, target)), true) = (alias, depth < 8) {
                    return self.absolute(scope, &[&target[..], rest].concat(), depth + 1);
                }
                let child = |m: &ModDecl| m.scope == scope && &m.name == first && !m.test;
                found
                    .mods
                    .iter()
                    .any(child)
                    .then(|| [&here[..], raw].concat())
            }
        }
    }
}

/// The import graph of one crate: its non-test files, by path.
struct Graph {
    files: Vec<SourceFile>,
}

/// Builds the graph of `sources` (`(path, text)`, every path under `src_dir/`).
fn analyse(src_dir: &str, sources: &[(String, String)]) -> Result<Graph, String> {
    let mut files = Vec::new();
    for (path, text) in sources {
        let rel = path
            .strip_prefix(&format!("{src_dir}/"))
            .ok_or(format!("{path}: not in {src_dir}"))?;
        let ast = syn::parse_file(text).map_err(|e| format!("{path}: {e}"))?;
        let test = cfg_is_test(&ast.attrs) || rel.ends_with("_tests.rs");
        let test_depth = usize::from(test);
        let mut found = Collector {
            test_depth,
            ..Collector::default()
        };
        found.visit_file(&ast);
        let (path, module, imports) = (path.clone(), layout_module(rel), BTreeSet::new());
        files.push(SourceFile {
            path,
            module,
            test,
            found,
            imports,
        });
    }

    // Declarations decide what the layout cannot: a `#[path]` file's module, and test
    // code (a file declared under `#[cfg(test)]`, or by a test file). To a fixpoint.
    let index: HashMap<String, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.clone(), i))
        .collect();
    for _ in 0..=files.len() {
        let mut updates = Vec::new();
        for file in &files {
            for decl in file.found.mods.iter().filter(|d| !d.inline) {
                let exists = |p: &str| index.contains_key(p);
                let target = decl_target(&file.path, file.module.is_empty(), decl, &exists);
                let Some(&j) = index.get(&target) else {
                    continue;
                };
                let module = [
                    &file.module[..],
                    &decl.scope,
                    std::slice::from_ref(&decl.name),
                ]
                .concat();
                let test = files[j].test || file.test || decl.test;
                if module != files[j].module || test != files[j].test {
                    updates.push((j, module, test));
                }
            }
        }
        if updates.is_empty() {
            break;
        }
        for (j, module, test) in updates {
            (files[j].module, files[j].test) = (module, test);
        }
    }

    files.retain(|f| !f.test);
    let known: BTreeSet<Module> = files.iter().map(|f| f.module.clone()).collect();
    for file in &mut files {
        let mut imports = BTreeSet::new();
        for (scope, raw) in &file.found.paths {
            let Some(path) = file.absolute(scope, raw, 0) else {
                continue;
            };
            // The longest known module the path starts with (none: the root).
            let mut prefixes = (1..=path.len()).rev().map(|n| &path[..n]);
            if let Some(module) = prefixes.find(|m| known.contains(*m)) {
                if *module != file.module[..] {
                    imports.insert(module.to_vec());
                }
            }
        }
        file.imports = imports;
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Graph { files })
}

/// The layer table: layers bottom to top, and the layer of each listed module path.
#[derive(Default)]
struct Layers {
    names: Vec<String>,
    modules: BTreeMap<Module, usize>,
}

impl Layers {
    /// Reads the ```` ```layers ```` block of a markdown page: a `name: modules` line a
    /// layer, bottom first; `#` starts a comment.
    fn parse(markdown: &str) -> Result<Layers, String> {
        let mut lines = markdown.lines().skip_while(|l| l.trim() != "```layers");
        lines.next().ok_or("no ```layers block")?;
        let mut layers = Layers::default();
        for line in lines.take_while(|l| l.trim() != "```") {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let (name, modules) = line
                .split_once(':')
                .ok_or(format!("`{line}`: not `layer: modules`"))?;
            for module in modules.split_whitespace() {
                let path: Module = module.split("::").map(String::from).collect();
                let word = |s: &String| {
                    !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
                };
                if !path.iter().all(word) {
                    return Err(format!("`{module}` (layer {name}) is not a module path"));
                }
                if layers.modules.insert(path, layers.names.len()).is_some() {
                    return Err(format!("`{module}` is in two layers"));
                }
            }
            layers.names.push(name.trim().to_string());
        }
        Ok(layers)
    }

    /// The layer of a module: its longest listed prefix's.
    fn of(&self, module: &[String]) -> Option<usize> {
        (1..=module.len())
            .rev()
            .find_map(|n| self.modules.get(&module[..n]).copied())
    }

    fn describe(&self, layer: usize) -> String {
        format!("layer {} ({})", layer + 1, self.names[layer])
    }
}

/// The top-level modules with files in no layer, and every import of a higher layer:
/// one line each.
fn layer_offences(graph: &Graph, layers: &Layers) -> (Vec<String>, Vec<String>) {
    let mut unlisted: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut upward = Vec::new();
    for file in graph.files.iter().filter(|f| !f.module.is_empty()) {
        let Some(from) = layers.of(&file.module) else {
            unlisted
                .entry(&file.module[0])
                .or_default()
                .push(&file.path);
            continue;
        };
        for import in &file.imports {
            if let Some(to) = layers.of(import).filter(|&to| to > from) {
                let (module, import) = (file.module.join("::"), import.join("::"));
                let (from, to) = (layers.describe(from), layers.describe(to));
                upward.push(format!(
                    "{} ({module}, {from}) imports {import} of {to}",
                    file.path
                ));
            }
        }
    }
    let unlisted = unlisted.into_iter().map(|(module, files)| {
        format!(
            "module `{module}` ({}) is in no layer of the ```layers block",
            files.join(", ")
        )
    });
    (unlisted.collect(), upward)
}

/// Tarjan's strongly connected components of more than one node, each sorted.
fn circles(adjacency: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    #[derive(Default)]
    struct Tarjan {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn strong_connect(t: &mut Tarjan, adjacency: &[BTreeSet<usize>], v: usize) {
        (t.index[v], t.low[v], t.on_stack[v]) = (Some(t.next), t.next, true);
        t.next += 1;
        t.stack.push(v);
        for &w in &adjacency[v] {
            match t.index[w] {
                None => {
                    strong_connect(t, adjacency, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(index) if t.on_stack[w] => t.low[v] = t.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            // The stack holds nodes in the order they were found: v and all above it.
            let at = t.stack.partition_point(|&w| t.index[w] < t.index[v]);
            let mut component = t.stack.split_off(at);
            component.iter().for_each(|&w| t.on_stack[w] = false);
            if component.len() > 1 {
                component.sort_unstable();
                t.found.push(component);
            }
        }
    }
    let n = adjacency.len();
    let mut t = Tarjan {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        ..Tarjan::default()
    };
    for v in 0..n {
        if t.index[v].is_none() {
            strong_connect(&mut t, adjacency, v);
        }
    }
    t.found.sort();
    t.found
}

/// Circles of files, imports of a file's ancestors aside: one line a circle.
fn file_circles(graph: &Graph) -> Vec<String> {
    let files = &graph.files;
    let by_module: HashMap<&Module, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (&f.module, i))
        .collect();
    let adjacency: Vec<BTreeSet<usize>> = files
        .iter()
        .map(|f| {
            let below = f.imports.iter().filter(|m| !f.module.starts_with(m));
            below.filter_map(|m| by_module.get(m).copied()).collect()
        })
        .collect();
    let circles = circles(&adjacency).into_iter().map(|circle| {
        let paths: Vec<&str> = circle.iter().map(|&i| files[i].path.as_str()).collect();
        format!("circle of {} files: {}", paths.len(), paths.join(", "))
    });
    circles.collect()
}

/// Circles of top-level modules: one entry a circle, with each link and its files.
fn module_circles(graph: &Graph) -> Vec<String> {
    let mut links: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for file in graph.files.iter().filter(|f| !f.module.is_empty()) {
        for import in file.imports.iter().filter(|m| m[0] != file.module[0]) {
            let files = links.entry((&file.module[0], &import[0])).or_default();
            if files.last() != Some(&file.path.as_str()) {
                files.push(&file.path);
            }
        }
    }
    let names: BTreeSet<&str> = links.keys().flat_map(|&(a, b)| [a, b]).collect();
    let names: Vec<&str> = names.into_iter().collect();
    let id = |name: &str| names.binary_search(&name).unwrap_or_default();
    let mut adjacency = vec![BTreeSet::new(); names.len()];
    for (a, b) in links.keys() {
        adjacency[id(a)].insert(id(b));
    }
    let mut found = Vec::new();
    for circle in circles(&adjacency) {
        let members: Vec<&str> = circle.iter().map(|&i| names[i]).collect();
        let mut text = format!(
            "circle of {} modules: {}",
            members.len(),
            members.join(", ")
        );
        for ((a, b), files) in &links {
            if members.contains(a) && members.contains(b) {
                text += &format!("\n    {a} -> {b}: {}", files.join(", "));
            }
        }
        found.push(text);
    }
    found
}

/// Every `.rs` file under `root/dir`, as `(path relative to root, text)`.
fn read_sources(root: &Path, dir: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("reading {dir}: {e}"));
    for entry in entries {
        let name = entry
            .expect("a directory entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let path = format!("{dir}/{name}");
        if root.join(&path).is_dir() {
            out.extend(read_sources(root, &path));
        } else if name.ends_with(".rs") {
            let text = std::fs::read_to_string(root.join(&path))
                .unwrap_or_else(|e| panic!("reading {path}: {e}"));
            out.push((path, text));
        }
    }
    out
}

/// Prints what each check found and a summary; fails if any found anything.
fn report(what: &str, graph: &Graph, checks: &[(&str, Vec<String>)]) {
    for (title, found) in checks.iter().filter(|(_, found)| !found.is_empty()) {
        println!("{what}: {title}:");
        found.iter().for_each(|problem| println!("  {problem}"));
    }
    let edges: usize = graph.files.iter().map(|f| f.imports.len()).sum();
    let counts: Vec<String> = checks
        .iter()
        .map(|(title, found)| format!("{} {title}", found.len()))
        .collect();
    println!(
        "{what}: {} files, {edges} edges, {}",
        graph.files.len(),
        counts.join(", ")
    );
    let problems: usize = checks.iter().map(|(_, found)| found.len()).sum();
    assert_eq!(problems, 0, "{what}: {problems} problems, listed above");
}

#[test]
fn quantykube_follows_its_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = analyse("src", &read_sources(root, "src")).unwrap_or_else(|e| panic!("{e}"));
    let docs =
        std::fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let layers = Layers::parse(&docs).unwrap_or_else(|e| panic!("docs/architecture.md: {e}"));
    let (unlisted, upward) = layer_offences(&graph, &layers);
    let checks = [
        ("unlisted modules", unlisted),
        ("offences", upward),
        ("file circles", file_circles(&graph)),
        ("module circles", module_circles(&graph)),
    ];
    report("src", &graph, &checks);
}

#[test]
fn simulation_has_no_circles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = read_sources(root, "simulation/src");
    let graph = analyse("simulation/src", &sources).unwrap_or_else(|e| panic!("{e}"));
    let checks = [
        ("file circles", file_circles(&graph)),
        ("module circles", module_circles(&graph)),
    ];
    report("simulation/src", &graph, &checks);
}

/// The helpers on small crates written here, each file after a `== path` line.
mod helpers {
    use super::*;

    fn graph(files: &str) -> Graph {
        let sources = files.split("\n== ").skip(1).map(|file| {
            let (path, text) = file.split_once('\n').unwrap_or((file, ""));
            (path.trim().to_string(), text.to_string())
        });
        analyse("src", &sources.collect::<Vec<_>>()).expect("the example parses")
    }

    fn imports(graph: &Graph, path: &str) -> Vec<String> {
        let file = graph
            .files
            .iter()
            .find(|f| f.path == path)
            .expect("the file is in the graph");
        file.imports.iter().map(|m| m.join("::")).collect()
    }

    #[test]
    fn layout_gives_modules() {
        for (rel, module) in [
            ("lib.rs", ""),
            ("bin/x.rs", ""),
            ("api/mod.rs", "api"),
            ("api/kv.rs", "api::kv"),
        ] {
            assert_eq!(layout_module(rel).join("::"), module);
        }
        assert_eq!(normalize("src/metrics/../../tests/./a.rs"), "tests/a.rs");
    }

    #[test]
    fn declarations_move_path_files_and_mark_test_code() {
        let g = graph(
            r#"
== src/lib.rs
pub mod auth;
== src/auth/mod.rs
pub mod jwt; #[cfg(test)] mod tests;
== src/auth/jwt.rs
#[path = "jwt_keys.rs"] mod keys; use keys::Key;
#[cfg(test)] #[path = "jwt_tests.rs"] mod t;
== src/auth/jwt_keys.rs
pub struct Key;
== src/auth/jwt_tests.rs
use crate::auth::tests::X;
== src/auth/tests.rs
pub struct X;
"#,
        );
        let files: Vec<String> = g
            .files
            .iter()
            .map(|f| format!("{} {}", f.path, f.module.join("::")))
            .collect();
        let expected = [
            "src/auth/jwt.rs auth::jwt",
            "src/auth/jwt_keys.rs auth::jwt::keys",
            "src/auth/mod.rs auth",
            "src/lib.rs ",
        ];
        assert_eq!(files, expected);
        assert_eq!(imports(&g, "src/auth/jwt.rs"), ["auth::jwt::keys"]);
    }

    #[test]
    fn paths_uses_aliases_and_macros_are_imports_but_not_test_code() {
        let g = graph(
            r#"
== src/lib.rs
pub mod api; pub mod node; pub mod store; pub mod logging; pub mod watch;
== src/api/mod.rs
pub mod status;
== src/api/status.rs
== src/store/mod.rs
== src/logging.rs
== src/watch.rs
== src/node.rs
use crate::{api, store::{self as s, Rev}};
use std::fmt;
pub(in crate::watch) fn f() -> fmt::Result {
    api::status::no_leader();
    tracing::info!(x = %crate::logging::X);
}
#[cfg(test)]
mod tests { use crate::watch::W; }
impl S { #[cfg(all(test, feature = "x"))] fn g() { crate::watch::x(); } }
"#,
        );
        assert_eq!(
            imports(&g, "src/node.rs"),
            ["api", "api::status", "logging", "store"]
        );
        assert!(imports(&g, "src/api/status.rs").is_empty());
    }

    #[test]
    fn an_upward_import_is_an_offence_and_an_unlisted_module_a_failure() {
        let g = graph(
            r#"
== src/lib.rs
pub mod store; pub mod node; pub mod admin; pub mod extra;
== src/store.rs
use crate::node::Node; fn f() { super::proto::X; }
== src/node.rs
use crate::store::Store; use crate::admin::cli;
== src/admin/mod.rs
pub mod cli;
== src/admin/cli.rs
use crate::node;
== src/extra.rs
"#,
        );
        let table = "x\n```layers\n# comment\nlow: store proto\nhigh: node admin::cli # c\n```\n";
        let layers = Layers::parse(table).expect("the table parses");
        assert_eq!(
            layers.of(&["admin".into(), "cli".into(), "x".into()]),
            Some(1)
        );
        assert_eq!(layers.of(&["admin".into()]), None);
        let (unlisted, upward) = layer_offences(&g, &layers);
        let unlisted_line =
            |m: &str, f: &str| format!("module `{m}` ({f}) is in no layer of the ```layers block");
        assert_eq!(
            unlisted,
            [
                unlisted_line("admin", "src/admin/mod.rs"),
                unlisted_line("extra", "src/extra.rs")
            ]
        );
        assert_eq!(
            upward,
            ["src/store.rs (store, layer 1 (low)) imports node of layer 2 (high)"]
        );
    }

    #[test]
    fn a_bad_table_is_refused() {
        for table in [
            "no block",
            "```layers\na: x\nb: x\n```",
            "```layers\na x\n```",
            "```layers\na: x-y\n```",
        ] {
            assert!(Layers::parse(table).is_err(), "{table}");
        }
    }

    #[test]
    fn circles_are_found_but_a_child_using_its_parent_is_none() {
        let g = graph(
            r#"
== src/lib.rs
pub mod a; pub mod b; pub mod c; pub mod d;
== src/a.rs
use crate::b::B;
== src/b.rs
fn f() { crate::c::g(); }
== src/c.rs
fn g() { format!("{}", crate::a::A); }
== src/d/mod.rs
pub mod e; use e::E;
== src/d/e.rs
use super::D;
"#,
        );
        assert_eq!(
            file_circles(&g),
            ["circle of 3 files: src/a.rs, src/b.rs, src/c.rs"]
        );
        let links = "\n    a -> b: src/a.rs\n    b -> c: src/b.rs\n    c -> a: src/c.rs";
        assert_eq!(
            module_circles(&g),
            [format!("circle of 3 modules: a, b, c{links}")]
        );
    }
}
