//! Hex-blind scans: scan results shared between messages that differ only in the hex numbers
//! they print (`comm 0x55d0c8a3b2f0`, `commId 0x9f1c2e...`), on top of digit-blindness.
//!
//! NCCL prints a pointer and a hash on every communicator line, so on a 16k-rank job most
//! messages the scan memo has never seen are one-off only because of them: masking digits
//! ([`crate::digits`]) leaves their letters, and each such line cost a Hyperscan scan.
//!
//! A *hex token* is `0x` followed by lowercase hex digits, with a non-word character (or the
//! edge of the message) on both sides. [`mask_hex_tokens`] turns the letters of each token in
//! a digit-masked key into `0`. That is sound for a database only when no pattern can tell
//! the letters of a token apart: [`is_token_blind`] decides it for one pattern, on its
//! Thompson NFA, by a search over the pairs (NFA state, where the text is relative to a
//! token). A pattern is token-blind unless some match passes through a state whose move on a
//! token's digit depends on which hex digit it is (`0x\d+`, a literal `dead`). Word
//! boundaries and anchors are treated as always holding, which only adds paths: the answer
//! errs towards "not blind".

use regex_automata::nfa::thompson::{self, State, WhichCaptures, NFA};
use regex_automata::util::primitives::StateID;
use regex_automata::util::syntax;

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_hex(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// Replaces the letters of each hex token of `key` (a message with its digits masked) with
/// `0`.
pub fn mask_hex_tokens(key: &mut [u8]) {
    // Found by their `x`: digits are masked to `0` already, so `0` is everywhere.
    let mut from = 1;
    while let Some(found) = key.get(from..).and_then(|rest| memchr::memchr(b'x', rest)) {
        let x = from + found;
        let run = x + 1;
        let end = run + key[run..].iter().take_while(|&&b| is_hex(b)).count();
        let starts = key[x - 1] == b'0' && (x == 1 || !is_word(key[x - 2]));
        let ends = key.get(end).is_none_or(|&b| !is_word(b));
        if starts && ends && end > run {
            key[run..end].iter_mut().for_each(|b| *b = b'0');
        }
        from = end.max(run);
    }
}

/// Where the text is, relative to hex tokens, as a pattern consumes it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Spot {
    /// After a non-word character or at the start: a `0` here may begin a token.
    Open,
    /// After a word character.
    InWord,
    /// After a `0` that may begin a token.
    Zero,
    /// After `0x`.
    Prefix,
    /// Inside a token's digits (the token is masked: it must end at a non-word character).
    Digits,
}

const SPOTS: usize = 5;

impl Spot {
    fn index(self) -> usize {
        self as usize
    }

    /// The spots after byte `b`, and whether `b` is a masked digit of a token there.
    fn step(self, b: u8, out: &mut Vec<(Spot, bool)>) {
        out.clear();
        let plain = if is_word(b) { Spot::InWord } else { Spot::Open };
        match self {
            Spot::Open if b == b'0' => out.push((Spot::Zero, false)),
            Spot::Zero if b == b'x' => out.push((Spot::Prefix, false)),
            // The digits after `0x` are a masked token only if it ends at a non-word
            // character; both readings are followed.
            Spot::Prefix if is_hex(b) => {
                out.push((Spot::Digits, true));
                out.push((Spot::InWord, false));
            }
            Spot::Digits if is_hex(b) => out.push((Spot::Digits, true)),
            // A masked token cannot go on with another word character.
            Spot::Digits if is_word(b) => {}
            _ => out.push((plain, false)),
        }
    }
}

/// Whether `pattern` (Hyperscan syntax, as the database compiles it) matches a message
/// exactly when it matches the message with its hex tokens' letters masked; `Err` when it
/// cannot be read here (the caller then does not share results by hex token).
pub fn is_token_blind(pattern: &str, caseless: bool) -> Result<bool, String> {
    let nfa = thompson::Compiler::new()
        .syntax(
            syntax::Config::new()
                .unicode(false)
                .utf8(false)
                .case_insensitive(caseless),
        )
        .configure(
            thompson::Config::new()
                .utf8(false)
                .which_captures(WhichCaptures::None),
        )
        .build(pattern)
        .map_err(|e| format!("cannot read {pattern:?}: {e}"))?;
    Ok(!Search::new(&nfa).finds_telling_path())
}

/// The search for a match that tells a token's digits apart.
struct Search<'a> {
    nfa: &'a NFA,
    /// One byte for each combination of NFA byte class and what a byte is to [`Spot`].
    bytes: Vec<u8>,
    /// Visited (state, spot, told) triples.
    seen: Vec<bool>,
    work: Vec<(StateID, Spot, bool)>,
}

impl<'a> Search<'a> {
    fn new(nfa: &'a NFA) -> Search<'a> {
        let classes = nfa.byte_classes();
        let kind = |b: u8| (b == b'0', b == b'x', is_hex(b), is_word(b));
        let mut bytes: Vec<u8> = Vec::new();
        for b in 0..=255u8 {
            let same = |&o: &u8| classes.get(o) == classes.get(b) && kind(o) == kind(b);
            if !bytes.iter().any(same) {
                bytes.push(b);
            }
        }
        Search {
            nfa,
            bytes,
            seen: vec![false; nfa.states().len() * SPOTS * 2],
            work: Vec::new(),
        }
    }

    fn push(&mut self, id: StateID, spot: Spot, told: bool) {
        let i = (id.as_usize() * SPOTS + spot.index()) * 2 + usize::from(told);
        if !self.seen[i] {
            self.seen[i] = true;
            self.work.push((id, spot, told));
        }
    }

    /// Whether some path from the unanchored start reaches a match after taking, at a masked
    /// token digit, a state whose move depends on which hex digit it is.
    fn finds_telling_path(&mut self) -> bool {
        self.push(self.nfa.start_unanchored(), Spot::Open, false);
        let mut steps = Vec::new();
        while let Some((id, spot, told)) = self.work.pop() {
            match self.nfa.state(id) {
                State::Match { .. } if told => return true,
                State::Match { .. } | State::Fail => {}
                State::Look { next, .. } | State::Capture { next, .. } => {
                    self.push(*next, spot, told)
                }
                State::BinaryUnion { alt1, alt2 } => {
                    self.push(*alt1, spot, told);
                    self.push(*alt2, spot, told);
                }
                State::Union { alternates } => {
                    for &alt in alternates.iter() {
                        self.push(alt, spot, told);
                    }
                }
                state => {
                    let depends = !moves_alike_on_hex(state);
                    for i in 0..self.bytes.len() {
                        let b = self.bytes[i];
                        let Some(next) = move_on(state, b) else {
                            continue;
                        };
                        spot.step(b, &mut steps);
                        for &(after, masked) in &steps {
                            self.push(next, after, told || (masked && depends));
                        }
                    }
                }
            }
        }
        false
    }
}

/// Where a byte-consuming state goes on `b`.
fn move_on(state: &State, b: u8) -> Option<StateID> {
    match state {
        State::ByteRange { trans } => trans.matches_byte(b).then_some(trans.next),
        State::Sparse(sparse) => sparse.matches_byte(b),
        State::Dense(dense) => dense.matches_byte(b),
        _ => None,
    }
}

/// Whether a state moves the same way on every hex digit `0-9a-f`.
fn moves_alike_on_hex(state: &State) -> bool {
    let first = move_on(state, b'0');
    (b'1'..=b'9')
        .chain(b'a'..=b'f')
        .all(|b| move_on(state, b) == first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(msg: &str) -> String {
        let mut key = msg.as_bytes().to_vec();
        mask_hex_tokens(&mut key);
        String::from_utf8(key).unwrap()
    }

    #[test]
    fn masks_the_letters_of_whole_tokens_only() {
        assert_eq!(masked("comm 0x7f3a00b0 rank 0"), "comm 0x00000000 rank 0");
        assert_eq!(masked("0xdead,0xbeef"), "0x0000,0x0000");
        assert_eq!(masked("id=0xabc."), "id=0x000.");
        // Not a token: glued to a word on either side, uppercase, or no digits.
        assert_eq!(
            masked("a0xabc 0xabcg 0xABC 0x 10xab"),
            "a0xabc 0xabcg 0xABC 0x 10xab"
        );
        assert_eq!(masked("0x0xab"), "0x0xab");
    }

    #[test]
    fn patterns_that_cannot_see_token_letters_are_blind() {
        for p in [
            r"ncclCommInitRank comm 0x[0-9a-f]+ rank \d+",
            r"comm 0x\S+ rank",
            r"Init COMPLETE",
            r"failed",
            r"NET/IB : Got completion from peer [\w.]+ with error \d+",
            r"rank \d+ nranks \d+",
            r"[0-9a-fA-F]{4}",
            r"Bad address",
        ] {
            assert_eq!(is_token_blind(p, false), Ok(true), "{p}");
        }
    }

    #[test]
    fn patterns_that_tell_token_letters_apart_are_not_blind() {
        for p in [
            r"0x\d+ rank",
            r"dead\b",
            r"0xdead",
            r"[a-z]+ failed",
            r"x[0-9]",
            "fa",
        ] {
            assert_eq!(is_token_blind(p, false), Ok(false), "{p}");
        }
        // Caseless letters are classes that hold one hex letter in two cases.
        assert_eq!(is_token_blind("dead beef", true), Ok(false));
    }

    /// The analysis agrees with what a regex actually does: for each pattern it calls blind,
    /// every message and its masked form match alike.
    #[test]
    fn blind_patterns_match_masked_messages_alike() {
        let patterns = [
            r"comm 0x[0-9a-f]+ rank",
            r"failed",
            r"\w+ \d",
            r"0x\S+$",
            r"fa",
        ];
        let messages = [
            "comm 0x7fab rank 3",
            "0xfa failed",
            "x 0xfa",
            "id 0xf0 9",
            "0xfailed",
            "fa 0xfa",
        ];
        for p in patterns {
            let re = regex_automata::meta::Regex::new(p).unwrap();
            let blind = is_token_blind(p, false).unwrap();
            for m in messages {
                let same = re.is_match(m) == re.is_match(masked(m).as_str());
                assert!(!blind || same, "{p} on {m:?}");
            }
        }
    }
}
