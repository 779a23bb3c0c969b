//! The rule line lexer: an `-A` line split into words the way a shell would.

/// Split a rule line like a shell would (double quotes group; `\` escapes inside them).
pub(super) fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        None => return Err("unterminated '\"'".into()),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e) => cur.push(e),
                            None => return Err("unterminated '\"'".into()),
                        },
                        Some(x) => cur.push(x),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}
