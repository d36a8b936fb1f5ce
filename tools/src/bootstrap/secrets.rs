//! Masking secrets in what a bootstrap run prints, before anything is stored in Redis or returned:
//! tokens of known shapes, private keys, credentials in URLs, and the values of variables,
//! options and keys named like secrets ([`mask`]); and, for a loop, the values of its profile's
//! environment wherever they appear ([`Masker`]).
//!
//! Text is masked whole, before it is cut to what a result shows, so that a secret across the
//! cut is still whole when it is found. Every pattern runs in time linear in the text (the regex
//! crate never backtracks), the profile's values as one alternation of literals.

use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde_json::Value;

use crate::operator_config::BootstrapProfile;
use crate::process::{Captured, tail_of};

/// What a masked value is replaced with.
pub const MASK: &str = "***";
/// Shortest value of the profile's environment masked by value: a shorter one (`1`, `true`,
/// `en`) is no secret, and masking it would blank half of every output.
pub const MIN_SECRET_VALUE_CHARS: usize = 6;

/// Masks what one loop shows and keeps: [`mask`]'s shapes, and every value of at least
/// [`MIN_SECRET_VALUE_CHARS`] of the variables its profile passes to commands (`env`), as they
/// are in the worker's environment.
#[derive(Debug, Clone, Default)]
pub struct Masker {
    values: Option<Regex>,
}

impl Masker {
    /// The masker of `profile`, its values read from the worker's environment now.
    pub fn for_profile(profile: &BootstrapProfile) -> Self {
        Self::with_values(profile.env.iter().filter_map(|name| std::env::var(name).ok()))
    }

    pub fn with_values(values: impl IntoIterator<Item = String>) -> Self {
        let mut values: Vec<String> =
            values.into_iter().filter(|v| v.chars().count() >= MIN_SECRET_VALUE_CHARS).collect();
        // The longest first, so that a value that holds another is masked whole.
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        let pattern = values.iter().map(|v| regex::escape(v)).collect::<Vec<_>>().join("|");
        let values = (!values.is_empty())
            .then(|| regex::RegexBuilder::new(&pattern).size_limit(64 << 20).build().ok())
            .flatten();
        Masker { values }
    }

    /// `text` with the profile's values and every secret [`mask`] finds replaced by [`MASK`].
    pub fn mask(&self, text: &str) -> String {
        match &self.values {
            Some(values) => mask(&values.replace_all(text, MASK)),
            None => mask(text),
        }
    }

    /// Every string inside `value` masked.
    pub fn mask_json(&self, value: &mut Value) {
        match value {
            Value::String(text) => {
                let masked = self.mask(text);
                if masked != *text {
                    *text = masked;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.mask_json(item)),
            Value::Object(fields) => fields.values_mut().for_each(|field| self.mask_json(field)),
            _ => {}
        }
    }

    /// The end of a command's output as a result shows it: masked whole, then its last `bytes`.
    pub fn tail(&self, output: &Captured, bytes: usize) -> String {
        tail_of(&self.mask(&output.text), bytes).to_owned()
    }
}

/// Words that make a name a secret's: `DB_PASSWORD`, `api-key`, `client_secret`, `authToken`.
const SECRET_WORDS: &str = r"(?:passw(?:or)?d|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?|session[_-]?key|signing[_-]?key|encryption[_-]?key|client[_-]?secret|dsn)";

static NAMED_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    // NAME=value, NAME: value, "name": "value", --name=value, --name value; the name holds a
    // secret word somewhere inside it.
    Regex::new(&format!(
        r#"(?i)(?P<name>["']?(?:--)?[A-Za-z0-9_.-]*{SECRET_WORDS}[A-Za-z0-9_.-]*["']?)(?P<sep>\s*[:=]\s*|\s+)(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,;"'&]+)"#
    ))
    .expect("a valid pattern")
});

static URL_CREDENTIALS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s:/@]+):(?P<password>[^\s@/]+)@")
        .expect("a valid pattern")
});

static KNOWN_TOKENS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"\b(?:",
        r"gh[pousr]_[A-Za-z0-9]{20,}", // GitHub
        r"|github_pat_[A-Za-z0-9_]{20,}",
        r"|sk-[A-Za-z0-9_-]{16,}",         // OpenAI-style and others
        r"|xox[abposr]-[A-Za-z0-9-]{10,}", // Slack
        r"|AKIA[0-9A-Z]{16}",              // AWS access key id
        r"|AIza[0-9A-Za-z_-]{35}",         // Google API key
        r"|glpat-[A-Za-z0-9_-]{20,}",      // GitLab
        r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", // a JWT
        r")\b"
    ))
    .expect("a valid pattern")
});

static BEARER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}").expect("a valid pattern"));

static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)")
        .expect("a valid pattern")
});

static SECRET_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("(?i){SECRET_WORDS}")).expect("a valid pattern"));

/// `text` with every secret it shows replaced by [`MASK`].
pub fn mask(text: &str) -> String {
    let text = PRIVATE_KEY.replace_all(text, "-----PRIVATE KEY ***-----");
    let text =
        URL_CREDENTIALS.replace_all(&text, |c: &Captures| format!("{}{}:{MASK}@", &c["scheme"], &c["user"]));
    let text = BEARER.replace_all(&text, |c: &Captures| format!("{} {MASK}", &c[1]));
    let text = KNOWN_TOKENS.replace_all(&text, MASK);
    NAMED_VALUE
        .replace_all(&text, |c: &Captures| {
            let value = &c["value"];
            if value == MASK || value.trim_matches(['"', '\'']).is_empty() {
                return c[0].to_owned();
            }
            format!("{}{}{MASK}", &c["name"], &c["sep"])
        })
        .into_owned()
}

/// Whether a variable or file name says that it holds a secret (`DB_PASSWORD`, `secrets.yaml`,
/// `tls.key`).
pub fn names_a_secret(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_NAME.is_match(&lower)
        || [".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", "id_rsa", "id_ed25519", ".netrc", ".pgpass"]
            .iter()
            .any(|ending| lower.ends_with(ending))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_of_every_kind_are_masked_and_the_rest_is_kept() {
        for (input, expected) in [
            ("API_TOKEN=abc123def", "API_TOKEN=***"),
            ("export DB_PASSWORD='hunter2 two'", "export DB_PASSWORD=***"),
            ("connecting with token=sk-live-0123456789abcdef", "connecting with token=***"),
            ("\"client_secret\": \"s3cr3t\",", "\"client_secret\": ***,"),
            ("--password hunter2 --user bob", "--password *** --user bob"),
            ("postgres://app:pa55word@db:5432/app", "postgres://app:***@db:5432/app"),
            ("Authorization: Bearer abcdefghijkl.mnop", "Authorization: Bearer ***"),
            ("key ghp_0123456789abcdefghijABCDEFGHIJ used", "key *** used"),
            ("id AKIAABCDEFGHIJKLMNOP", "id ***"),
            ("listening on port 8080", "listening on port 8080"),
            ("config/app.toml: No such file or directory", "config/app.toml: No such file or directory"),
        ] {
            assert_eq!(mask(input), expected, "{input}");
        }
        let key = "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\nb";
        assert_eq!(mask(key), "a\n-----PRIVATE KEY ***-----\nb");
    }

    #[test]
    fn a_secret_across_the_cut_is_masked_whole() {
        let secret = "sk-abcdefghij0123456789ABCDEFGH";
        let before = format!("{}\nconnecting with token {secret}", "x".repeat(5000));
        let after = format!(" and more\n{}", "y".repeat(4076));
        // The cut falls inside the secret: 4096 bytes from the end leave its last 10 characters.
        let output = Captured { text: format!("{before}{after}"), bytes: 0, truncated: false };
        assert_eq!(output.text.len() - 4096, before.len() - 10, "the cut is inside the secret");
        let piece = &secret[secret.len() - 10..];
        let shown = Masker::default().tail(&output, 4096);
        assert_eq!(shown.len(), 4096);
        assert!(!shown.contains(piece), "a piece of the secret survived the cut: {shown}");
        assert!(shown.contains("token ***"), "{shown}");
        // Cut first, the piece that is left has no shape a pattern knows.
        assert!(mask(&output.tail(4096)).starts_with(piece));
    }

    #[test]
    fn the_profiles_values_are_masked_wherever_they_appear() {
        let masker = Masker::with_values([
            "plain-Value-4821".to_owned(),
            "short".to_owned(),
            "plain-Value-4821-longer".to_owned(),
        ]);
        assert_eq!(masker.mask("key plain-Value-4821 used"), "key *** used");
        assert_eq!(masker.mask("key plain-Value-4821-longer!"), "key ***!", "the longer value whole");
        assert_eq!(masker.mask("a short word"), "a short word", "too short to be a secret");
        assert_eq!(masker.mask("API_TOKEN=abc123def"), "API_TOKEN=***", "the shapes too");
        let mut result = serde_json::json!({"evidence": ["was plain-Value-4821"], "n": 1, "nested": {"text": "plain-Value-4821"}});
        masker.mask_json(&mut result);
        assert_eq!(result, serde_json::json!({"evidence": ["was ***"], "n": 1, "nested": {"text": "***"}}));
        // Values that are regex syntax are literals.
        let dotted = Masker::with_values(["a.b*c(d)".to_owned()]);
        assert_eq!(dotted.mask("x a.b*c(d) y aXbbc(d)"), "x *** y aXbbc(d)");
    }

    #[test]
    fn masking_is_linear_in_the_text() {
        // Inputs that make backtracking engines blow up pass through in one go.
        let masker = Masker::with_values((0..200).map(|i| format!("value-{i:04}-secret")));
        let text = format!("{}{}", "API_TOKEN=".repeat(20_000), "a".repeat(200_000));
        let masked = masker.mask(&text);
        assert!(masked.len() <= text.len());
        let keys = "-----BEGIN RSA PRIVATE KEY-----\n".repeat(10_000);
        assert_eq!(mask(&keys), "-----PRIVATE KEY ***-----");
    }

    #[test]
    fn names_that_hold_secrets() {
        for name in ["DB_PASSWORD", "api-key", "secrets.yaml", "tls.key", "GITHUB_TOKEN", "id_rsa"] {
            assert!(names_a_secret(name), "{name}");
        }
        for name in ["config/app.toml", "PORT", ".env.example", "docker-compose.yml"] {
            assert!(!names_a_secret(name), "{name}");
        }
    }
}
