//! One bucket's counts and their arithmetic: fixed windows aligned to the Unix epoch, one per
//! rate; a charge of `hits` fits only if every window has room (no partial charge), counts
//! never overflow (checked), and a refusal says when the fullest window frees up.

use mcp_access_bundle::Rate;

/// The counts of one bucket: per rate, the start of its current window and the count in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    /// (window start in seconds since the epoch, requests counted in it), one per rate.
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

/// The start of the window of `window` seconds that `now` (s) is in.
fn window_start(now: u64, window: u32) -> u64 {
    let w = u64::from(window.max(1));
    now - now % w
}

impl Counts {
    /// Counts of `rates` as they stand at `now` (s): a window that has ended counts 0.
    pub fn current(&self, rates: &[Rate], now: u64) -> Counts {
        let windows = rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let start = window_start(now, r.window_seconds);
                match self.windows.get(i) {
                    Some((s, n)) if *s == start => (start, *n),
                    _ => (start, 0),
                }
            })
            .collect();
        Counts { windows }
    }

    /// These counts with `hits` more requests, or the first rate without room for them.
    pub fn charge(&self, rates: &[Rate], now: u64, hits: u64) -> Result<Counts, Full> {
        let cur = self.current(rates, now);
        let mut windows = Vec::with_capacity(rates.len());
        for (i, (r, (start, n))) in rates.iter().zip(&cur.windows).enumerate() {
            match n.checked_add(hits).filter(|total| *total <= r.limit) {
                Some(total) => windows.push((*start, total)),
                None => {
                    let end = start.saturating_add(u64::from(r.window_seconds));
                    return Err(Full {
                        rate: i,
                        retry_after: end.saturating_sub(now).max(1),
                    });
                }
            }
        }
        Ok(Counts { windows })
    }

    /// These counts with `hits` requests charged at `at` (s) taken back, never below 0: only
    /// from the windows `at` was in (a window that has moved on since keeps its count).
    pub fn refund(&self, rates: &[Rate], at: u64, hits: u64) -> Counts {
        let windows = self
            .windows
            .iter()
            .zip(rates)
            .map(|(&(s, n), r)| {
                if s == window_start(at, r.window_seconds) {
                    (s, n.saturating_sub(hits))
                } else {
                    (s, n)
                }
            })
            .collect();
        Counts { windows }
    }

    /// Whether every window has ended by `now` (the bucket holds nothing).
    pub fn expired(&self, rates: &[Rate], now: u64) -> bool {
        self.current(rates, now)
            .windows
            .iter()
            .all(|(_, n)| *n == 0)
    }

    /// Requests left before the tightest rate refuses, and seconds until that window ends
    /// (the IETF `RateLimit` header's `r` and `t`).
    pub fn remaining(&self, rates: &[Rate], now: u64) -> (u64, u64) {
        let cur = self.current(rates, now);
        rates
            .iter()
            .zip(&cur.windows)
            .map(|(r, (start, n))| {
                let end = start.saturating_add(u64::from(r.window_seconds));
                (r.limit.saturating_sub(*n), end.saturating_sub(now))
            })
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
        let c = c.charge(&r, 7200, 1).unwrap();
        let c = c.charge(&r, 7259, 1).unwrap();
        assert_eq!(c.windows, [(7200, 2), (7200, 2)]);
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
        assert_eq!(c.windows, [(7260, 1), (7200, 3)]);
        assert_eq!(
            c.charge(&r, 7261, 1),
            Err(Full {
                rate: 1,
                retry_after: 3600 - 61
            })
        );
        assert_eq!(c.remaining(&r, 7261), (0, 3539));
        // A new hour: both windows reset.
        let c = c.charge(&r, 10800, 1).unwrap();
        assert_eq!(c.windows, [(10800, 1), (10800, 1)]);
        assert!(!c.expired(&r, 10859));
        assert!(c.expired(&r, 14400));
    }

    #[test]
    fn no_partial_charge_and_no_overflow() {
        let r = rates();
        let c = Counts {
            windows: vec![(0, 1), (0, 3)],
        };
        // The minute has room, the hour has none: nothing is charged.
        assert!(c.charge(&r, 1, 1).is_err());
        let huge = [Rate {
            limit: u64::MAX,
            window_seconds: 1,
        }];
        let c = Counts {
            windows: vec![(5, u64::MAX)],
        };
        assert!(c.charge(&huge, 5, 1).is_err(), "u64::MAX + 1 does not wrap");
        assert_eq!(c.refund(&huge, 5, 2).windows, [(5, u64::MAX - 2)]);
        assert_eq!(
            c.refund(&huge, 4, 2).windows,
            [(5, u64::MAX)],
            "a charge of an earlier window is not taken from its successor"
        );
        // The last second of time does not overflow the window's end.
        let c = Counts { windows: vec![] };
        let far = [Rate {
            limit: 1,
            window_seconds: 31_622_400,
        }];
        let c = c.charge(&far, u64::MAX, 1).unwrap();
        assert_eq!(
            c.charge(&far, u64::MAX, 1).map_err(|f| f.retry_after >= 1),
            Err(true)
        );
    }
}
