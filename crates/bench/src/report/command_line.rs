//! The command line a run records, its URLs redacted.

/// `args` as one line to record: a URL in any of them (the whole word, or
/// what follows a `NAME=`, `--flag=` or `,`) redacted as target URLs are,
/// and a word a shell would split or expand quoted.
pub fn command_line(args: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    args.into_iter()
        .map(|arg| shell_word(&redact_url(arg.as_ref())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `arg` with the URL in it redacted: from its scheme to the end.
fn redact_url(arg: &str) -> String {
    let Some(scheme_end) = arg.find("://") else {
        return arg.to_owned();
    };
    let start = arg[..scheme_end].rfind(['=', ',']).map_or(0, |i| i + 1);
    format!(
        "{}{}",
        &arg[..start],
        neve_upstream::RedactedUrl::of(&arg[start..])
    )
}

/// `word` as a POSIX shell reads it back: bare when it holds nothing the
/// shell treats specially, else single-quoted.
fn shell_word(word: &str) -> String {
    let bare = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_=:/.,@%+".contains(&b));
    if bare {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
