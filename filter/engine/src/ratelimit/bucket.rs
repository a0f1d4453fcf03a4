//! One bucket's counts and their arithmetic: fixed windows aligned to the Unix epoch, one per
//! rate; a charge of `hits` fits only if every window has room (no partial charge), counts
//! never overflow (checked), and a refusal says when the fullest window frees up.
//!
//! A window is kept as its end, so a bucket says by itself whether it still holds anything
//! (eviction judges buckets of other limits without their rates).

use mcp_access_bundle::Rate;

/// The counts of one bucket: per rate, the end of its current window and the count in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    /// (window end in seconds since the epoch, requests counted in it), one per rate.
    pub windows: Vec<(u64, u64)>,
}

/// Why a charge does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// The rate that has no room (index in the limit's rates).
    pub rate: usize,
    /// Seconds until its window ends (at least 1).
    pub retry_after: u64,
}

/// The end of the window of `window` seconds that `now` (s) is in: windows are
/// `[k·window, (k+1)·window)`, aligned to the Unix epoch.
fn window_end(now: u64, window: u32) -> u64 {
    let w = u64::from(window.max(1));
    (now - now % w).saturating_add(w)
}

impl Counts {
    /// Counts of `rates` as they stand at `now` (s): a window that has ended counts 0. A
    /// window that ends after the current one (the clock stepped back) keeps its count until
    /// it ends: a clock never gives requests back.
    pub fn current(&self, rates: &[Rate], now: u64) -> Counts {
        let windows = rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let end = window_end(now, r.window_seconds);
                match self.windows.get(i) {
                    Some((e, n)) if *e >= end => (*e, *n),
                    _ => (end, 0),
                }
            })
            .collect();
        Counts { windows }
    }

    /// These counts with `hits` more requests, or the first rate without room for them.
    pub fn charge(&self, rates: &[Rate], now: u64, hits: u64) -> Result<Counts, Full> {
        let cur = self.current(rates, now);
        let mut windows = Vec::with_capacity(rates.len());
        for (i, (r, (end, n))) in rates.iter().zip(&cur.windows).enumerate() {
            match n.checked_add(hits).filter(|total| *total <= r.limit) {
                Some(total) => windows.push((*end, total)),
                None => {
                    return Err(Full {
                        rate: i,
                        retry_after: end.saturating_sub(now).max(1),
                    });
                }
            }
        }
        Ok(Counts { windows })
    }

    /// These counts with every window of `rates` full (no room until it ends).
    pub fn full(rates: &[Rate], now: u64) -> Counts {
        Counts {
            windows: rates
                .iter()
                .map(|r| (window_end(now, r.window_seconds), r.limit))
                .collect(),
        }
    }

    /// These counts with `hits` requests charged at `at` (s) taken back, never below 0: only
    /// from the windows `at` was in (a window that has moved on since keeps its count).
    pub fn refund(&self, rates: &[Rate], at: u64, hits: u64) -> Counts {
        let windows = self
            .windows
            .iter()
            .zip(rates)
            .map(|(&(end, n), r)| {
                if end == window_end(at, r.window_seconds) {
                    (end, n.saturating_sub(hits))
                } else {
                    (end, n)
                }
            })
            .collect();
        Counts { windows }
    }

    /// Whether every window has ended by `now` or counts nothing (the bucket holds nothing).
    pub fn expired(&self, now: u64) -> bool {
        self.windows.iter().all(|(end, n)| *n == 0 || *end <= now)
    }

    /// Requests left before the tightest rate refuses, and seconds until that window ends
    /// (the IETF `RateLimit` header's `r` and `t`).
    pub fn remaining(&self, rates: &[Rate], now: u64) -> (u64, u64) {
        let cur = self.current(rates, now);
        rates
            .iter()
            .zip(&cur.windows)
            .map(|(r, (end, n))| (r.limit.saturating_sub(*n), end.saturating_sub(now)))
            .min()
            .unwrap_or((0, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates() -> Vec<Rate> {
        vec![
            Rate {
                limit: 2,
                window_seconds: 60,
            },
            Rate {
                limit: 3,
                window_seconds: 3600,
            },
        ]
    }

    #[test]
    fn windows_fill_refuse_and_reset_at_their_edges() {
        let r = rates();
        let c = Counts { windows: vec![] };
        // The first and the last second of one minute are one window.
        let c = c.charge(&r, 7200, 1).unwrap();
        let c = c.charge(&r, 7259, 1).unwrap();
        assert_eq!(c.windows, [(7260, 2), (10800, 2)]);
        // The minute is full until its last second.
        assert_eq!(
            c.charge(&r, 7259, 1),
            Err(Full {
                rate: 0,
                retry_after: 1
            })
        );
        // A new minute: the hour still has one left.
        let c = c.charge(&r, 7260, 1).unwrap();
        assert_eq!(c.windows, [(7320, 1), (10800, 3)]);
        assert_eq!(
            c.charge(&r, 7261, 1),
            Err(Full {
                rate: 1,
                retry_after: 3600 - 61
            })
        );
        assert_eq!(c.remaining(&r, 7261), (0, 3539));
        // The hour's last second is still that hour.
        assert!(c.charge(&r, 10799, 1).is_err());
        // A new hour: both windows reset.
        let c = c.charge(&r, 10800, 1).unwrap();
        assert_eq!(c.windows, [(10860, 1), (14400, 1)]);
        assert!(!c.expired(10859));
        assert!(c.expired(14400));
    }

    #[test]
    fn windows_are_aligned_to_the_epoch_whatever_their_length() {
        // 7 days: the windows start on Thursdays 00:00 UTC (1970-01-01 was one).
        let week = [Rate {
            limit: 1,
            window_seconds: 7 * 86_400,
        }];
        // 2026-12-04 (a Friday) 16:00 UTC.
        let now = 1_796_400_000;
        let c = Counts { windows: vec![] }.charge(&week, now, 1).unwrap();
        let end = c.windows.first().map(|w| w.0).unwrap();
        assert_eq!(end % (7 * 86_400), 0);
        // It began Thursday 2026-12-03 00:00 UTC.
        assert_eq!(end - 7 * 86_400, 1_796_400_000 - 40 * 3600);
    }

    #[test]
    fn a_clock_that_steps_back_gives_nothing_back() {
        let r = rates();
        let c = Counts { windows: vec![] }.charge(&r, 7300, 2).unwrap();
        // The clock goes back a minute: the later minute's count stands until it ends.
        assert_eq!(
            c.charge(&r, 7240, 1),
            Err(Full {
                rate: 0,
                retry_after: 7320 - 7240
            })
        );
        assert_eq!(c.current(&r, 7240).windows, [(7320, 2), (10800, 2)]);
    }

    #[test]
    fn whether_a_bucket_holds_anything_needs_no_rates() {
        let c = Counts {
            windows: vec![(60, 0), (3600, 1)],
        };
        assert!(!c.expired(59));
        assert!(!c.expired(3599));
        assert!(c.expired(3600));
        assert!(Counts { windows: vec![] }.expired(0));
        // Full: every rate at its limit until its window ends.
        let r = rates();
        let full = Counts::full(&r, 7230);
        assert_eq!(full.windows, [(7260, 2), (10800, 3)]);
        assert_eq!(
            full.charge(&r, 7230, 1),
            Err(Full {
                rate: 0,
                retry_after: 30
            })
        );
    }

    #[test]
    fn no_partial_charge_and_no_overflow() {
        let r = rates();
        let c = Counts {
            windows: vec![(60, 1), (3600, 3)],
        };
        // The minute has room, the hour has none: nothing is charged.
        assert_eq!(
            c.charge(&r, 1, 1),
            Err(Full {
                rate: 1,
                retry_after: 3599
            })
        );
        let huge = [Rate {
            limit: u64::MAX,
            window_seconds: 1,
        }];
        let c = Counts {
            windows: vec![(6, u64::MAX)],
        };
        assert!(c.charge(&huge, 5, 1).is_err(), "u64::MAX + 1 does not wrap");
        assert_eq!(c.refund(&huge, 5, 2).windows, [(6, u64::MAX - 2)]);
        assert_eq!(
            c.refund(&huge, 4, 2).windows,
            [(6, u64::MAX)],
            "a charge of an earlier window is not taken from its successor"
        );
        // The last second of time does not overflow the window's end.
        let c = Counts { windows: vec![] };
        let far = [Rate {
            limit: 1,
            window_seconds: 31_622_400,
        }];
        let c = c.charge(&far, u64::MAX, 1).unwrap();
        assert_eq!(c.windows, [(u64::MAX, 1)]);
        assert_eq!(
            c.charge(&far, u64::MAX, 1),
            Err(Full {
                rate: 0,
                retry_after: 1
            })
        );
    }
}
