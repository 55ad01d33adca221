//! The bulk loader of one B+tree: given a bucket's elements in key order, it packs them
//! into leaf pages and builds the branch levels above them, emitting every page in
//! post-order (a page right after its last child), so that page ids are handed out in the
//! order the pages are emitted and a tree's pages fill one contiguous range ending at its
//! root.
//!
//! The shape depends on the elements' sizes alone: a run that only counts (the writer's
//! layout pass) hands out exactly the ids a run that writes does. This module owns that
//! packing rule and never does I/O itself: pages go to a [`PageSink`].
//!
//! Memory: one pending page per level (the tree's height × a page, or one element when a
//! single element is larger than a page).

use crate::page::{element_bytes, Kind, NewElement, MAX_ELEMENTS, PAGE_HEADER_SIZE};

/// Where finished pages go.
pub(crate) trait PageSink {
    /// Page `id`, spanning `pages` pages, holds `elems` in order.
    fn page(
        &mut self,
        id: u64,
        pages: u64,
        kind: Kind,
        elems: &[NewElement],
    ) -> std::io::Result<()>;
}

/// Counts only: the layout pass.
pub(crate) struct Discard;

impl PageSink for Discard {
    fn page(&mut self, _: u64, _: u64, _: Kind, _: &[NewElement]) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug)]
struct Level {
    elems: Vec<NewElement>,
    /// Bytes of a page holding `elems`: header, element array, keys and values.
    bytes: usize,
    /// Pages this level has emitted so far.
    emitted: u64,
}

impl Level {
    fn new() -> Level {
        Level {
            elems: Vec::new(),
            bytes: PAGE_HEADER_SIZE,
            emitted: 0,
        }
    }
}

/// Builds one tree whose first page will be `first_id`.
pub(crate) struct TreeBuilder {
    page_size: usize,
    next_id: u64,
    /// levels[0] holds leaf elements, levels[i > 0] branch elements.
    levels: Vec<Level>,
}

/// A tree's root, and the id its range ends before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Built {
    pub root: u64,
    pub next_id: u64,
}

/// Why a tree could not be built: the sink failed, or page ids ran out (u64).
pub(crate) enum BuildError {
    Io(std::io::Error),
    TooManyPages,
}

impl From<std::io::Error> for BuildError {
    fn from(e: std::io::Error) -> Self {
        BuildError::Io(e)
    }
}

impl TreeBuilder {
    pub fn new(page_size: usize, first_id: u64) -> TreeBuilder {
        TreeBuilder {
            page_size,
            next_id: first_id,
            levels: vec![Level::new()],
        }
    }

    /// Appends a leaf element (the caller keeps keys in order).
    pub fn push(&mut self, elem: NewElement, sink: &mut dyn PageSink) -> Result<(), BuildError> {
        self.push_at(0, elem, sink)
    }

    fn kind(level: usize) -> Kind {
        if level == 0 {
            Kind::Leaf
        } else {
            Kind::Branch
        }
    }

    fn push_at(
        &mut self,
        level: usize,
        elem: NewElement,
        sink: &mut dyn PageSink,
    ) -> Result<(), BuildError> {
        let kind = Self::kind(level);
        let add = element_bytes(kind, elem.key.len(), elem.value_len);
        let l = &self.levels[level];
        // Fill up to the page size. A leaf takes its first element whatever its size (a
        // big value gets overflow pages); a branch takes two, so that each branch level
        // has at most half the pages of the one below and the build always ends.
        let min = if kind == Kind::Leaf { 1 } else { 2 };
        let fits = l.elems.len() < min
            || (l.bytes + add <= self.page_size && l.elems.len() < MAX_ELEMENTS);
        if !fits {
            self.emit(level, sink)?;
        }
        let l = &mut self.levels[level];
        l.bytes += add;
        l.elems.push(elem);
        Ok(())
    }

    /// Emits level `level`'s pending page and pushes a pointer to it one level up.
    fn emit(&mut self, level: usize, sink: &mut dyn PageSink) -> Result<(), BuildError> {
        let kind = Self::kind(level);
        let l = &mut self.levels[level];
        let pages = (l.bytes as u64).div_ceil(self.page_size as u64);
        let id = self.next_id;
        self.next_id = id.checked_add(pages).ok_or(BuildError::TooManyPages)?;
        sink.page(id, pages, kind, &l.elems)?;
        l.emitted += 1;
        l.bytes = PAGE_HEADER_SIZE;
        let first_key = l.elems.drain(..).next().map(|e| e.key).unwrap_or_default();
        if self.levels.len() == level + 1 {
            self.levels.push(Level::new());
        }
        self.push_at(
            level + 1,
            NewElement {
                flags: 0,
                key: first_key,
                value: Vec::new(),
                value_len: 0,
                child: id,
            },
            sink,
        )
    }

    /// Emits what is pending, bottom up, and returns the root. An empty tree is one empty
    /// leaf page.
    pub fn finish(mut self, sink: &mut dyn PageSink) -> Result<Built, BuildError> {
        let mut level = 0;
        loop {
            let top = level + 1 == self.levels.len();
            let l = &self.levels[level];
            if level > 0 && top && l.emitted == 0 && l.elems.len() == 1 {
                // The whole level is one pointer: its child is the root.
                return Ok(Built {
                    root: l.elems[0].child,
                    next_id: self.next_id,
                });
            }
            self.emit(level, sink)?;
            level += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each page emitted: id, pages spanned, kind, children.
    type Emitted = Vec<(u64, u64, Kind, Vec<u64>)>;

    struct Record(Emitted);

    impl PageSink for Record {
        fn page(
            &mut self,
            id: u64,
            pages: u64,
            kind: Kind,
            elems: &[NewElement],
        ) -> std::io::Result<()> {
            self.0.push((
                id,
                pages,
                kind,
                elems
                    .iter()
                    .filter(|_| kind == Kind::Branch)
                    .map(|e| e.child)
                    .collect(),
            ));
            Ok(())
        }
    }

    fn leaf(key: &[u8], value_len: usize) -> NewElement {
        NewElement {
            flags: 0,
            key: key.to_vec(),
            value: Vec::new(),
            value_len,
            child: 0,
        }
    }

    fn build(n: usize, value_len: usize) -> (Built, Emitted) {
        let mut rec = Record(Vec::new());
        let mut t = TreeBuilder::new(4096, 10);
        for i in 0..n {
            let k = format!("{i:08}");
            if t.push(leaf(k.as_bytes(), value_len), &mut rec).is_err() {
                panic!("push failed");
            }
        }
        match t.finish(&mut rec) {
            Ok(b) => (b, rec.0),
            Err(_) => panic!("finish failed"),
        }
    }

    #[test]
    fn empty_tree_is_one_empty_leaf() {
        let (b, pages) = build(0, 0);
        assert_eq!(
            b,
            Built {
                root: 10,
                next_id: 11
            }
        );
        assert_eq!(pages, vec![(10, 1, Kind::Leaf, vec![])]);
    }

    #[test]
    fn ids_are_post_order_and_contiguous() {
        let (b, pages) = build(100_000, 10);
        let mut next = 10;
        for (id, n, kind, children) in &pages {
            assert_eq!(*id, next);
            next += n;
            for c in children {
                assert!(*c < *id, "child after parent");
            }
            assert!(*kind == Kind::Leaf || !children.is_empty());
        }
        assert_eq!(next, b.next_id);
        assert_eq!(pages.last().map(|p| p.0), Some(b.root));
        // 34-byte leaf elements: 120 a page; 24-byte branch elements: 170 a page.
        assert!(pages
            .iter()
            .any(|p| p.2 == Kind::Branch && p.3.contains(&pages[pages.len() - 2].0)));
    }

    #[test]
    fn big_values_get_overflow_pages() {
        let (b, pages) = build(3, 10_000);
        assert_eq!(pages[0], (10, 3, Kind::Leaf, vec![]));
        assert_eq!(pages.len(), 4);
        assert_eq!(b.root, 19);
    }
}
