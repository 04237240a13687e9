//! Keeping secrets and hostile text out of what we print.
//!
//! - [`redact`]: a URL with its password replaced by `***`, for messages
//!   that name a server.
//! - [`remember`] and [`scrub`]: every password redlock-run was given is
//!   noted, and removed from any text before it is printed: the last line
//!   of defence for messages that quote a server or a library.
//! - [`untrusted`]: text from Redis (holder fields, keys, error texts) made
//!   safe for one line of a terminal.

use std::sync::{Mutex, OnceLock};

use percent_encoding::percent_decode_str;

/// Where the user-info of a URL is, and its password part.
struct UserInfo<'a> {
    /// Everything before the user-info: `redis://`.
    before: &'a str,
    /// The user name, when the user-info has a `:`.
    user: Option<&'a str>,
    /// The password (`redis://secret@host` is read as one by some clients).
    password: &'a str,
    /// Everything after the `@`.
    after: &'a str,
}

/// The one parser of a URL's user-info: between `://` and the last `@`
/// before the query. A password may hold `@`, and `/` or `?` that were
/// not percent-encoded (base64 passwords do): a `/` or `?` ends the
/// user-info only when no `@` follows before the query.
fn userinfo(url: &str) -> Option<UserInfo<'_>> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let query = query_start(rest).unwrap_or(rest.len());
    let at = rest[..query].rfind('@')?;
    let info = &rest[..at];
    let (user, password) = match info.split_once(':') {
        Some((user, password)) => (Some(user), password),
        None => (None, info),
    };
    Some(UserInfo {
        before: &url[..start],
        user,
        password,
        after: &rest[at + 1..],
    })
}

/// The query options a Redis URL may have (redis-rs reads `db` and
/// `protocol`; Sentinel URLs have ours).
const QUERY_NAMES: [&str; 4] = ["sentinel_username", "sentinel_password", "db", "protocol"];

/// Where the query of `rest` (a URL after `://`) begins: at the first `?`
/// followed by nothing but known `name=value` pairs, whose values (a
/// sentinel password) may hold `@`. Any other `?` may be a password's.
fn query_start(rest: &str) -> Option<usize> {
    let known = |name: &str| QUERY_NAMES.contains(&&*percent_decode_str(name).decode_utf8_lossy());
    rest.match_indices('?').map(|(i, _)| i).find(|&i| {
        rest[i + 1..]
            .split('&')
            .all(|pair| pair.split_once('=').is_some_and(|(name, _)| known(name)))
    })
}

/// The pairs of a URL's query, each with where its value is in `url`;
/// names percent-decoded (`sentinel%5Fpassword` is `sentinel_password`).
pub fn query_pairs(url: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return Vec::new();
    };
    let rest = &url[start..];
    let after_at = userinfo(url).map_or(0, |info| url.len() - info.after.len() - start);
    let query = match query_start(rest) {
        Some(q) => q,
        None => match rest[after_at..].find('?') {
            Some(q) => after_at + q,
            None => return Vec::new(),
        },
    };
    let mut at = start + query + 1;
    let mut pairs = Vec::new();
    for pair in url[at..].split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_decode_str(name).decode_utf8_lossy().into_owned();
        let value_at = at + pair.len() - value.len();
        pairs.push((name, value_at..value_at + value.len()));
        at += pair.len() + 1;
    }
    pairs
}

/// Where the values of every `sentinel_password=` query option are in
/// `url` (a Sentinel URL's password for the sentinels themselves), however
/// the name is spelled and however often it is given.
fn query_passwords(url: &str) -> Vec<std::ops::Range<usize>> {
    query_pairs(url)
        .into_iter()
        .filter(|(name, range)| name == "sentinel_password" && !range.is_empty())
        .map(|(_, range)| range)
        .collect()
}

/// The user-info of `url` with `/`, `?`, `#` and `@` percent-encoded, so
/// that a URL parser finds the host where [`redact`] does; the password
/// is the same once decoded.
pub fn encode_userinfo(url: &str) -> String {
    let Some(info) = userinfo(url) else {
        return url.to_string();
    };
    let encode = |text: &str| {
        text.chars()
            .map(|c| match c {
                '/' => "%2F".to_string(),
                '?' => "%3F".to_string(),
                '#' => "%23".to_string(),
                '@' => "%40".to_string(),
                c => c.to_string(),
            })
            .collect::<String>()
    };
    let user = info
        .user
        .map(|u| format!("{}:", encode(u)))
        .unwrap_or_default();
    format!(
        "{}{user}{}@{}",
        info.before,
        encode(info.password),
        info.after
    )
}

/// A URL with its passwords (of the user-info part, and of a
/// `sentinel_password=` query option) replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut url = url.to_string();
    // From the last, so that the earlier ranges stay where they are.
    for range in query_passwords(&url).into_iter().rev() {
        url.replace_range(range, "***");
    }
    let url = url.as_str();
    let Some(info) = userinfo(url) else {
        return url.to_string();
    };
    let shown = match (info.user, info.password) {
        (Some(user), _) => format!("{user}:***"),
        (None, "") => String::new(),
        (None, _) => "***".to_string(),
    };
    format!("{}{shown}@{}", info.before, info.after)
}

/// `text` with the password of every URL in it redacted ([`redact`]). A
/// URL starts at its scheme (letters, digits, `+`, `-`, `.` before `://`)
/// and ends at white space, a comma, a semicolon or a quote, so each URL
/// of a list (`redis://:a@h1,redis://:b@h2`) is one of its own.
pub fn redact_urls(text: &str) -> String {
    let is_scheme = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
    let ends = |c: char| c.is_whitespace() || matches!(c, ',' | ';' | '"' | '\'' | '`');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        let start = rest[..sep]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_scheme(*c))
            .last()
            .map_or(sep, |(i, _)| i);
        let len = rest[sep..].find(ends).unwrap_or(rest.len() - sep);
        let end = sep + len;
        out.push_str(&rest[..start]);
        out.push_str(&redact(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

static SECRETS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();

fn secrets() -> std::sync::MutexGuard<'static, Vec<String>> {
    SECRETS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Note the password of `url` so that [`scrub`] can remove it from any text.
pub fn remember(url: &str) {
    let from_query = query_passwords(url).into_iter().map(|range| &url[range]);
    let from_userinfo = userinfo(url).map(|info| info.password);
    for password in from_userinfo.into_iter().chain(from_query) {
        if password.is_empty() {
            continue;
        }
        let mut secrets = secrets();
        secrets.push(password.to_string());
        // Percent-decoded form too: that is what the client sends and may echo.
        if let Ok(decoded) = percent_decode_str(password).decode_utf8() {
            secrets.push(decoded.into_owned());
        }
    }
}

/// Note a password given outside a URL (`--password-file`).
pub fn remember_password(password: &str) {
    secrets().push(password.to_string());
}

/// `text` with every known password replaced by `***`.
pub fn scrub(text: &str) -> String {
    let Some(secrets) = SECRETS.get() else {
        return text.to_string();
    };
    let secrets = secrets.lock().unwrap_or_else(|e| e.into_inner());
    // Short ones would mangle ordinary words; the longest go first so that
    // a password containing another is replaced whole.
    let mut known: Vec<&String> = secrets.iter().filter(|s| s.len() >= 3).collect();
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
    known
        .into_iter()
        .fold(text.to_string(), |acc, s| acc.replace(s.as_str(), "***"))
}

/// The longest field [`untrusted`] prints, in characters.
pub const MAX_FIELD: usize = 200;

/// Text from Redis made safe for one line of a terminal: control
/// characters (a newline in a `-c` script) and bidi overrides (which can
/// make a line read differently from what it holds) escaped, known
/// passwords redacted, and cut to [`MAX_FIELD`] characters with an
/// ellipsis.
pub fn untrusted(text: &str) -> String {
    let cut = match text.char_indices().nth(MAX_FIELD) {
        Some((at, _)) => &text[..at],
        None => text,
    };
    let mut out = escaped(cut);
    if cut.len() < text.len() {
        out.push('…');
    }
    out
}

/// [`untrusted`] without the cut: for a line that mixes our own words
/// with a server's (doctor's details), whatever its length.
pub fn escaped(text: &str) -> String {
    let text = scrub(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_bidi(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that reorder the text around them.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_url_of_a_list_is_redacted() {
        let line = "job --redis=redis://u:first@h1:1,rediss://:second@h2/0;x 'redis://third@h3' \
                    redis://h4 plain://";
        let shown = redact_urls(line);
        for secret in ["first", "second", "third"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert_eq!(
            shown,
            "job --redis=redis://u:***@h1:1,rediss://:***@h2/0;x 'redis://***@h3' \
             redis://h4 plain://"
        );
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact("redis://pw@h"), "redis://***@h");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("rediss://u:p@ss@h"), "rediss://u:***@h");
        assert_eq!(redact("redis://@h"), "redis://@h");
        assert_eq!(redact("unix:///tmp/x.sock"), "unix:///tmp/x.sock");
        assert_eq!(
            redact("redis+sentinel://u:pw@h1,h2/m?sentinel_username=s&sentinel_password=sp"),
            "redis+sentinel://u:***@h1,h2/m?sentinel_username=s&sentinel_password=***"
        );
        assert_eq!(
            redact("redis+sentinel://h/m?sentinel_password=a@b"),
            "redis+sentinel://h/m?sentinel_password=***"
        );
    }

    #[test]
    fn passwords_with_slash_question_mark_and_at_are_found_whole() {
        assert_eq!(redact("redis://:ab/cd+ef@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://u:a?b/c@d@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:x?y=z@h"), "redis://:***@h");
        assert_eq!(
            redact("redis+sentinel://u:a?b@h/m?sentinel_password=p@q&sentinel%5Fpassword=r"),
            "redis+sentinel://u:***@h/m?sentinel_password=***&sentinel%5Fpassword=***"
        );
        assert_eq!(
            encode_userinfo("redis://u:a?b/c@d@h:1/0?db=1"),
            "redis://u:a%3Fb%2Fc%40d@h:1/0?db=1"
        );
        assert_eq!(encode_userinfo("redis://h:1/0"), "redis://h:1/0");
    }

    #[test]
    fn scrubbing() {
        remember("redis://u:s%40cret@h");
        assert_eq!(scrub("bad s@cret and s%40cret"), "bad *** and ***");
    }

    #[test]
    fn untrusted_text_is_escaped_and_cut() {
        assert_eq!(untrusted("a b {c}: ü"), "a b {c}: ü");
        assert_eq!(untrusted("make\nmake install\t"), "make\\nmake install\\t");
        assert_eq!(untrusted("x\u{202E}y\u{2066}z"), "x\\u{202e}y\\u{2066}z");
        let long = "é".repeat(500);
        let cut = untrusted(&long);
        assert_eq!(cut.chars().count(), MAX_FIELD + 1);
        assert!(cut.ends_with('…'));
    }
}
