//! Source files and spans: where every piece of a ruleset came from, so that an error can point
//! at `file:line:column` and show the offending line.

use std::path::{Path, PathBuf};

/// Index of a file in a [`SourceMap`].
pub type FileId = u32;

/// A byte range in one source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub file: FileId,
    pub lo: u32,
    pub hi: u32,
}

impl Span {
    pub fn new(file: FileId, lo: usize, hi: usize) -> Span {
        Span {
            file,
            lo: lo as u32,
            hi: hi as u32,
        }
    }

    /// The smallest span covering both (same file assumed; otherwise `self`).
    pub fn to(self, other: Span) -> Span {
        if self.file != other.file {
            return self;
        }
        Span {
            file: self.file,
            lo: self.lo.min(other.lo),
            hi: self.hi.max(other.hi),
        }
    }
}

/// One loaded file.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub path: Option<PathBuf>,
    pub text: String,
    line_starts: Vec<u32>,
}

impl SourceFile {
    fn new(name: String, path: Option<PathBuf>, text: String) -> SourceFile {
        let mut line_starts = vec![0u32];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i as u32 + 1);
            }
        }
        SourceFile {
            name,
            path,
            text,
            line_starts,
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, off: u32) -> (usize, usize) {
        let line = match self.line_starts.binary_search(&off) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line] as usize;
        let off = (off as usize).min(self.text.len());
        let col = self
            .text
            .get(start..off)
            .map(|s| s.chars().count())
            .unwrap_or(0);
        (line + 1, col + 1)
    }

    /// The text of a 1-based line, without its newline.
    pub fn line_text(&self, line: usize) -> &str {
        let start = self.line_starts[line - 1] as usize;
        let end = self
            .line_starts
            .get(line)
            .map(|&e| e as usize - 1)
            .unwrap_or(self.text.len());
        self.text[start..end.max(start)].trim_end_matches('\r')
    }
}

/// All files of one ruleset load (the main file and its includes).
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    pub files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// Add a file's text; returns its id.
    pub fn add(&mut self, name: impl Into<String>, path: Option<&Path>, text: String) -> FileId {
        self.files.push(SourceFile::new(
            name.into(),
            path.map(|p| p.to_path_buf()),
            text,
        ));
        (self.files.len() - 1) as FileId
    }

    pub fn file(&self, id: FileId) -> &SourceFile {
        &self.files[id as usize]
    }

    /// The source text a span covers.
    pub fn text(&self, span: Span) -> &str {
        let f = self.file(span.file);
        f.text.get(span.lo as usize..span.hi as usize).unwrap_or("")
    }

    /// `file:line:column` of a span's start.
    pub fn location(&self, span: Span) -> String {
        let f = self.file(span.file);
        let (l, c) = f.line_col(span.lo);
        format!("{}:{}:{}", f.name, l, c)
    }
}
