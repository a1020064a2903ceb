//! The redaction corpora, read by the corpus test and by the redaction bench: `secrets.txt`
//! (secret-bearing cases, each with the exact secret values it contains) and `ordinary.txt`
//! (lines without a secret, which redaction must leave as they are).

/// `secrets.txt`: a case starts at a `> ` line, `| ` lines continue it (joined with a newline),
/// `= ` lines give its secret values; `#` lines and blank lines separate cases.
pub const SECRETS: &str = include_str!("secrets.txt");
/// `ordinary.txt`: one line per case; `#` lines are comments.
pub const ORDINARY: &str = include_str!("ordinary.txt");

/// One secret-bearing case.
#[derive(Debug, Clone)]
pub struct SecretCase {
    /// The comment line above the case: where such text comes from.
    pub source: String,
    pub text: String,
    pub secrets: Vec<String>,
}

/// The cases of a `secrets.txt` document; an error names the line that breaks the format.
pub fn secret_cases(document: &str) -> Result<Vec<SecretCase>, String> {
    let mut cases: Vec<SecretCase> = Vec::new();
    let mut source = String::new();
    for (i, line) in document.lines().enumerate() {
        let at = i + 1;
        if let Some(comment) = line.strip_prefix("# ") {
            source = comment.to_owned();
        } else if let Some(text) = line.strip_prefix("> ") {
            cases.push(SecretCase {
                source: source.clone(),
                text: text.to_owned(),
                secrets: Vec::new(),
            });
        } else if let Some(more) = line
            .strip_prefix("| ")
            .or(line.strip_prefix("|").filter(|r| r.is_empty()))
        {
            let case = cases
                .last_mut()
                .filter(|c| c.secrets.is_empty())
                .ok_or(format!("line {at}: `|` continues no case"))?;
            case.text.push('\n');
            case.text.push_str(more);
        } else if let Some(secret) = line.strip_prefix("= ") {
            let case = cases
                .last_mut()
                .ok_or(format!("line {at}: `=` belongs to no case"))?;
            if !case.text.contains(secret) {
                return Err(format!("line {at}: the secret is not in its case"));
            }
            case.secrets.push(secret.to_owned());
        } else if !line.trim().is_empty() && !line.starts_with('#') {
            return Err(format!("line {at}: expected `> `, `| `, `= ` or a comment"));
        }
    }
    if let Some(case) = cases.iter().find(|c| c.secrets.is_empty()) {
        return Err(format!("case {:?} lists no secret", case.source));
    }
    Ok(cases)
}

/// The lines of an `ordinary.txt` document.
pub fn ordinary_lines(document: &str) -> Vec<&str> {
    document
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect()
}
