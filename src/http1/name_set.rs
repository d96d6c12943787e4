//! A set of field names fixed at load and looked up in any case, without allocating, for every
//! field of every request: one bucket per name length, so most names are told apart from all
//! of the set by their length alone, and the few of the same length compared eight bytes at a
//! time (`same_name`).

use http::HeaderName;

use super::fields::same_name;

/// The names of one length, lowercase.
type Names = Box<[Box<[u8]>]>;

/// Field names (lowercase, as `HeaderName`s are), bucketed by length.
#[derive(Clone, Debug, Default)]
pub(crate) struct NameSet {
    /// `by_length[n]`: the names of `n` bytes, as bytes (a `HeaderName`'s `as_str` takes a
    /// branch, and a standard name a table lookup, on every comparison); as long as the
    /// longest name plus one.
    by_length: Box<[Names]>,
    names: Box<[HeaderName]>,
}

impl NameSet {
    /// The set of `names`; one given twice is kept once.
    pub(crate) fn new(names: impl IntoIterator<Item = HeaderName>) -> NameSet {
        let mut by_length: Vec<Vec<HeaderName>> = Vec::new();
        for name in names {
            let length = name.as_str().len();
            if by_length.len() <= length {
                by_length.resize_with(length + 1, Vec::new);
            }
            if !by_length[length].contains(&name) {
                by_length[length].push(name);
            }
        }
        let bytes = |names: &Vec<HeaderName>| {
            (names.iter())
                .map(|name| Box::from(name.as_str().as_bytes()))
                .collect()
        };
        NameSet {
            by_length: by_length.iter().map(bytes).collect(),
            names: by_length.into_iter().flatten().collect(),
        }
    }

    /// Whether `name`, in any case, is in the set.
    pub(crate) fn contains(&self, name: &[u8]) -> bool {
        (self.by_length.get(name.len()))
            .is_some_and(|names| names.iter().any(|known| same_name(name, known)))
    }

    /// Every name of the set, shortest first.
    pub(crate) fn names(&self) -> impl Iterator<Item = &HeaderName> {
        self.names.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&'static str]) -> NameSet {
        NameSet::new(names.iter().map(|name| HeaderName::from_static(name)))
    }

    #[test]
    fn names_are_found_in_any_case_and_near_misses_are_not() {
        let names = set(&["x-real-ip", "true-client-ip", "forwarded", "client-ip"]);
        for found in ["X-Real-IP", "tRuE-cLiEnT-iP", "FORWARDED", "client-ip"] {
            assert!(names.contains(found.as_bytes()), "{found}");
        }
        for missed in [
            "x-real-ips",
            "x-real-i",
            "x-real_ip",
            "forwarde",
            "",
            "true-client-ip\0",
            "a-much-longer-name-than-any-in-the-set",
        ] {
            assert!(!names.contains(missed.as_bytes()), "{missed}");
        }
    }

    #[test]
    fn an_empty_set_holds_nothing_and_a_repeated_name_is_kept_once() {
        assert!(!NameSet::default().contains(b"x-real-ip"));
        let names = set(&["forwarded", "forwarded", "x-real-ip"]);
        assert_eq!(names.names().count(), 2);
    }
}
