//! Quoting for a POSIX shell: the one quoter of the harness (guest scripts,
//! SSH commands, the `qemu.cmdline` kept to rerun a guest by hand).

/// Quotes one word: `it's` becomes `'it'\''s'`; a word of only safe
/// characters stays as it is, and an empty word becomes `''`.
pub fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quotes_only_what_needs_it() {
        assert_eq!(quote("/tmp/a.txt"), "/tmp/a.txt");
        assert_eq!(
            quote("if=none,id=vol,file=/v.raw"),
            "if=none,id=vol,file=/v.raw"
        );
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$(reboot)"), "'$(reboot)'");
    }

    #[test]
    fn a_shell_reads_back_every_word() {
        let words = [
            "plain",
            "",
            "a b",
            "it's",
            "$(x) `y` \"z\"",
            "tab\there",
            "ünï",
        ];
        let script = format!(
            "printf '%s\\n' {}",
            words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().collect::<Vec<_>>(), words);
    }
}
