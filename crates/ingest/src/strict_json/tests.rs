use super::*;
use serde_json::{Value, json};

#[test]
fn values_compare_as_json_and_repeated_keys_are_refused() {
    let text = br#"{"a":"0x1","b":[1,true,null],"c":{"d":"e\u0041","f":2}}"#;
    let parsed = Json::parse(text).unwrap();
    assert!(parsed.is(&json!({"c": {"f": 2, "d": "eA"}, "b": [1, true, null], "a": "0x1"})));
    assert!(!parsed.is(&json!({"a": "0x1", "b": [1, true, null], "c": {"d": "eA"}})));
    assert!(!parsed.get("a").unwrap().is(&json!("0x01")));
    assert!(!parsed.get("b").unwrap().is(&json!([1, "true", null])));
    assert_eq!(
        parsed.to_value(),
        serde_json::from_slice::<Value>(text).unwrap()
    );
    let repeated = Json::parse(br#"{"x":{"a":1,"b":2,"a":1}}"#).unwrap_err();
    assert!(repeated.to_string().contains("key a appears twice"));
    assert!(
        Json::parse(br#"{"a\u0062":1,"ab":2}"#).is_err(),
        "escaped keys too"
    );
}

#[test]
fn every_value_knows_where_it_lies_in_the_text() {
    let text = " {\"a\" : [1, \"x\\ny\", {\"b\":null}] ,\"c\":true}\n";
    let parsed = Json::parse_noting_repeats(text).unwrap();
    assert!(parsed.repeated.is_none());
    let at = |json: &Json<'_>| {
        let span = json.span();
        &text[span.offset as usize..(span.offset + span.len) as usize]
    };
    let tree = &parsed.tree;
    assert_eq!(at(tree), text.trim());
    let a = tree.get("a").unwrap();
    assert_eq!(at(a), "[1, \"x\\ny\", {\"b\":null}]");
    let items = a.as_array().unwrap();
    assert_eq!(
        items.iter().map(at).collect::<Vec<_>>(),
        ["1", "\"x\\ny\"", "{\"b\":null}"]
    );
    assert_eq!(items[1].as_borrowed_str(), None, "an escaped string is not");
    assert_eq!(at(items[2].get("b").unwrap()), "null");
    assert_eq!(at(tree.get("c").unwrap()), "true");
}

#[test]
fn a_repeated_key_is_noted_where_the_tree_is_still_wanted() {
    let parsed = Json::parse_noting_repeats(r#"[{"a":1},{"b":{"c":1,"c":2}}]"#).unwrap();
    let repeated = parsed.repeated.expect("noted");
    assert!(repeated.to_string().contains("key c appears twice"));
    let many: String = (0..100).map(|i| format!("\"k{i}\":{i},")).collect();
    let text = format!("{{{many}\"k42\":0}}");
    assert!(
        Json::parse(text.as_bytes()).is_err(),
        "in a large object too"
    );
    assert!(Json::parse(format!("{{{many}\"k\":0}}").as_bytes()).is_ok());
}

/// The parser accepts exactly what serde_json accepts, and reads the
/// same values.
#[test]
fn the_parser_accepts_and_reads_what_serde_json_does() {
    let texts: &[&str] = &[
        "null",
        " true ",
        "false",
        "0",
        "-0",
        "12345678901234567890",
        "123456789012345678901",
        "-9223372036854775809",
        "1.5e3",
        "-2.25E-2",
        "1e400",
        "01",
        "1.",
        ".5",
        "-",
        "+1",
        "1e",
        "\"\"",
        "\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
        "\"\\ud83d\"",
        "\"\\x\"",
        "\"tab\there\"",
        "\"é ü 😀\"",
        "\"unterminated",
        "[]",
        "[1,]",
        "[1 2]",
        "{}",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{1:2}",
        "[[[[]]]]",
        "",
        "   ",
        "nul",
        "truex",
        "[true] x",
        "{\"a\":[{\"b\":\"c\"}],\"d\":-1.0}",
    ];
    for text in texts {
        let ours = Json::parse(text.as_bytes());
        let theirs = serde_json::from_str::<Value>(text);
        match (&ours, &theirs) {
            (Ok(ours), Ok(theirs)) => assert_eq!(&ours.to_value(), theirs, "{text}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{text}: ours {ours:?}, serde_json {theirs:?}"),
        }
    }
    let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
    for n in [127, 128, 1000] {
        assert_eq!(
            Json::parse(deep(n).as_bytes()).is_ok(),
            serde_json::from_str::<Value>(&deep(n)).is_ok(),
            "{n} deep"
        );
    }
    assert!(Json::parse(b"\"\xff\"").is_err());
}
