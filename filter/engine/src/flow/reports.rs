//! The callouts that ended with one event, for the host's stats and logs.

use crate::callout::CalloutReport;

/// The callouts that ended with one event: usually none or one, held without allocating.
/// Reads as a slice; iterates by value.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Reports {
    #[default]
    None,
    One(CalloutReport),
    Many(Vec<CalloutReport>),
}

impl Reports {
    pub(super) fn push(&mut self, report: CalloutReport) {
        *self = match std::mem::take(self) {
            Reports::None => Reports::One(report),
            Reports::One(first) => Reports::Many(vec![first, report]),
            Reports::Many(mut all) => {
                all.push(report);
                Reports::Many(all)
            }
        };
    }
}

impl std::ops::Deref for Reports {
    type Target = [CalloutReport];

    fn deref(&self) -> &[CalloutReport] {
        match self {
            Reports::None => &[],
            Reports::One(r) => std::slice::from_ref(r),
            Reports::Many(all) => all,
        }
    }
}

impl IntoIterator for Reports {
    type Item = CalloutReport;
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<CalloutReport>, std::vec::IntoIter<CalloutReport>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            Reports::None => (None, Vec::new()),
            Reports::One(r) => (Some(r), Vec::new()),
            Reports::Many(all) => (None, all),
        };
        one.into_iter().chain(many)
    }
}
