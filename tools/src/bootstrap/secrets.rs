//! Masking secrets in what a bootstrap run prints, before anything is stored in Redis or returned:
//! tokens of known shapes, private keys, credentials in URLs, and the values of variables,
//! options and keys named like secrets.

use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What a masked value is replaced with.
pub const MASK: &str = "***";

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
    fn names_that_hold_secrets() {
        for name in ["DB_PASSWORD", "api-key", "secrets.yaml", "tls.key", "GITHUB_TOKEN", "id_rsa"] {
            assert!(names_a_secret(name), "{name}");
        }
        for name in ["config/app.toml", "PORT", ".env.example", "docker-compose.yml"] {
            assert!(!names_a_secret(name), "{name}");
        }
    }
}
