//! `[log] denied`: whether a refused request's access line is written. Sampling counts refusals
//! on the worker thread that answers them, so that a flood of 429s costs each one a decrement
//! of a thread-local counter, with no atomic shared between workers and no random draw.

use std::cell::Cell;

use crate::config::DeniedLines;

thread_local! {
    /// Refusals still to skip on this thread before the next line is written.
    static REFUSALS_TO_SKIP: Cell<u32> = const { Cell::new(0) };
}

/// Whether the access line of a refused request is written: with `1/N`, the first refusal a
/// worker answers and every Nth after it.
pub(super) fn write_line(policy: DeniedLines) -> bool {
    match policy {
        DeniedLines::All => true,
        DeniedLines::Skip => false,
        DeniedLines::OneIn(n) => REFUSALS_TO_SKIP.with(|to_skip| match to_skip.get() {
            0 => {
                to_skip.set(n.get() - 1);
                true
            }
            left => {
                // A reload to a smaller N takes effect at once.
                to_skip.set((left - 1).min(n.get() - 1));
                false
            }
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    fn one_in(n: u32) -> DeniedLines {
        DeniedLines::OneIn(NonZeroU32::new(n).unwrap())
    }

    /// Which of `refusals` (under each policy in turn) are written, on a thread of its own so
    /// that no other test's refusals share its counter.
    fn written(refusals: Vec<DeniedLines>) -> Vec<usize> {
        std::thread::spawn(move || {
            let policies = refusals.into_iter().enumerate();
            policies
                .filter(|(_, policy)| write_line(*policy))
                .map(|(i, _)| i)
                .collect()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn one_in_n_writes_the_first_refusal_and_every_nth_after_it() {
        assert_eq!(written(vec![one_in(4); 10]), [0, 4, 8]);
        assert_eq!(written(vec![DeniedLines::All; 3]), [0, 1, 2]);
        assert!(written(vec![DeniedLines::Skip; 3]).is_empty());
    }

    #[test]
    fn a_smaller_n_after_a_reload_takes_effect_at_once() {
        let mut refusals = vec![one_in(1000)];
        refusals.extend([one_in(3); 7]);
        assert_eq!(written(refusals), [0, 4, 7]);
    }
}
