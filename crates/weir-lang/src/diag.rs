//! Diagnostics: an error with a span, rendered as `file:line:column: error: ...`, the offending
//! line, and a caret under the offending text.

use crate::source::{SourceMap, Span};
use std::fmt::Write;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One error or warning about a ruleset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub span: Span,
    pub message: String,
    /// Extra lines ("expected one of ...", "defined here ...").
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            span,
            message: message.into(),
            notes: Vec::new(),
        }
    }

    pub fn warning(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            span,
            message: message.into(),
            notes: Vec::new(),
        }
    }

    pub fn note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// Render against the files the span points into.
    pub fn render(&self, sources: &SourceMap) -> String {
        let mut out = String::new();
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        if (self.span.file as usize) >= sources.files.len() {
            let _ = writeln!(out, "{kind}: {}", self.message);
            for n in &self.notes {
                let _ = writeln!(out, "  = {n}");
            }
            return out;
        }
        let f = sources.file(self.span.file);
        let (line, col) = f.line_col(self.span.lo);
        let _ = writeln!(out, "{}:{}:{}: {kind}: {}", f.name, line, col, self.message);
        let text = f.line_text(line);
        let gutter = line.to_string().len();
        let _ = writeln!(out, "{:gutter$} |", "");
        let _ = writeln!(out, "{line} | {text}");
        // caret under the span, clipped to this line
        let (end_line, end_col) = f.line_col(self.span.hi.max(self.span.lo));
        let width = if end_line == line && end_col > col {
            end_col - col
        } else {
            1
        };
        let pad: String = text
            .chars()
            .take(col - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let _ = writeln!(out, "{:gutter$} | {pad}{}", "", "^".repeat(width.max(1)));
        for n in &self.notes {
            let _ = writeln!(out, "{:gutter$} = {n}", "");
        }
        out
    }
}

/// Render a list of diagnostics, one after another.
pub fn render_all(diags: &[Diagnostic], sources: &SourceMap) -> String {
    diags
        .iter()
        .map(|d| d.render(sources))
        .collect::<Vec<_>>()
        .join("\n")
}
