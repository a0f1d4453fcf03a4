//! One block applied to the units of one (listener, backend), by kind and strategy.

use std::collections::{BTreeMap, BTreeSet};

use super::{lower_id, BlockPolicy, Cond, Effects, Prepared, Scope, Unit};
use mcp_access_bundle::{Action, BlockKind, Strategy};

/// The rules of a block that apply: some (by index), or None for all as written.
type Kept = Option<Vec<usize>>;

/// Applies block `k` to the units of one (listener, backend).
pub(super) fn apply(
    scope: &Scope<'_>,
    k: usize,
    (conds, unset): (&[Cond], &BTreeMap<String, String>),
    units: &mut Vec<Unit>,
    fx: &mut Effects,
) {
    let (Some(b), Some(prepared)) = (scope.blocks.get(k), scope.prepared.get(k)) else {
        return;
    };
    if let Some((holds, error)) = conds.get(k) {
        if let Some(e) = error {
            fx.condition_errors.insert(b.object.clone(), e.clone());
        }
        if !holds {
            return;
        }
    }
    let block = Block {
        scope,
        b,
        unset,
        ext: b.action == Action::ExternalAuth,
        prepared,
        my_key: &prepared.key,
        all: &prepared.all,
    };
    let kept = match (b.kind, b.strategy) {
        (BlockKind::Defaults, Strategy::Atomic) => block.defaults_atomic(units),
        (BlockKind::Defaults, Strategy::Merge) if block.ext || b.rules.is_none() => {
            block.defaults_whole(units, fx)
        }
        (BlockKind::Defaults, Strategy::Merge) => block.defaults_by_rule(units, fx),
        (BlockKind::Overrides, Strategy::Atomic) => block.overrides_atomic(units, fx),
        (BlockKind::Overrides, Strategy::Merge) => block.overrides_merge(units, fx),
    };
    let Some(kept) = kept else { return };
    if b.kind == BlockKind::Overrides {
        block.refuse_unsets(&kept, fx);
    }
    fx.applied.insert(b.object.clone());
    units.push(Unit::Block { k, kept });
}

/// A block being applied, with what its phases share. Each phase returns the rules that apply,
/// or None when the block does not apply here.
struct Block<'s> {
    scope: &'s Scope<'s>,
    b: &'s BlockPolicy,
    /// `unset` entries of the lower policies: name -> the policy that unsets it.
    unset: &'s BTreeMap<String, String>,
    /// An ExternalAuth block: merged by its own key, not by rule names.
    ext: bool,
    prepared: &'s Prepared,
    /// The block's bundle `namespace/name`.
    my_key: &'s str,
    /// Its rules' indices (None: it has no rules).
    all: &'s Option<Vec<usize>>,
}

impl<'s> Block<'s> {
    fn of_action(&self, u: &Unit) -> bool {
        self.scope.action(u) == Some(self.b.action)
    }

    /// Whether unit `u` has merge key `name`.
    fn keyed(&self, u: &Unit, name: &str) -> bool {
        if self.ext {
            self.scope.has_key(u, name)
        } else {
            self.scope.has_name(u, name)
        }
    }

    /// Whether the lower set (with the blocks applied so far) has merge key `name`.
    fn present(&self, units: &[Unit], name: &str) -> bool {
        units
            .iter()
            .filter(|u| self.of_action(u))
            .any(|u| self.keyed(u, name))
    }

    /// Whether a more senior override (applied before) holds merge key `name`.
    fn senior(&self, units: &[Unit], name: &str) -> bool {
        units
            .iter()
            .any(|u| self.of_action(u) && self.scope.is_override(u) && self.keyed(u, name))
    }

    fn set_empty(&self, units: &[Unit]) -> bool {
        !units.iter().any(|u| self.of_action(u))
    }

    fn rule_name(&self, ix: usize) -> &'s str {
        self.b
            .rules
            .as_ref()
            .and_then(|rs| rs.get(ix))
            .map_or("", |r| r.name.as_str())
    }

    /// The block's rules that no more senior override holds (None: none are left).
    fn not_senior(&self, units: &[Unit], all: &[usize]) -> Option<Vec<usize>> {
        let kept: Vec<usize> = all
            .iter()
            .copied()
            .filter(|ix| !self.senior(units, self.rule_name(*ix)))
            .collect();
        (!kept.is_empty()).then_some(kept)
    }

    fn defaults_atomic(&self, units: &[Unit]) -> Option<Kept> {
        self.set_empty(units).then_some(None)
    }

    /// Defaults merged whole: an ExternalAuth block, or one without rules.
    fn defaults_whole(&self, units: &[Unit], fx: &mut Effects) -> Option<Kept> {
        let (b, my_key) = (self.b, self.my_key);
        if let Some(by) = self.unset.get(my_key).or_else(|| self.unset.get(&b.name)) {
            fx.not_added.insert(
                format!("{my_key} of {}", b.object),
                format!("unset by {by}"),
            );
            return None;
        }
        let ext = self.ext;
        if (ext && self.present(units, my_key)) || (!ext && !self.set_empty(units)) {
            return None;
        }
        Some(None)
    }

    /// Defaults merged by rule name: the rules no lower rule of that name holds or unsets.
    fn defaults_by_rule(&self, units: &[Unit], fx: &mut Effects) -> Option<Kept> {
        let mut kept = Vec::new();
        for ix in self.all.iter().flatten().copied() {
            let name = self.rule_name(ix);
            let key = || {
                self.prepared
                    .not_added
                    .get(ix)
                    .cloned()
                    .unwrap_or_else(|| format!("{name} of {}", self.b.object))
            };
            if let Some(by) = self.unset.get(name) {
                fx.not_added.insert(key(), format!("unset by {by}"));
            } else if self.present(units, name) {
                fx.not_added
                    .insert(key(), "a lower rule of that name is kept".into());
            } else {
                kept.push(ix);
            }
        }
        if kept.is_empty() {
            return None;
        }
        let names: Vec<&str> = kept.iter().map(|ix| self.rule_name(*ix)).collect();
        for u in units.iter().filter(|u| self.of_action(u)) {
            if let Unit::Lower { i, .. } = u {
                if let Some(p) = self.scope.lower.get(*i) {
                    fx.added
                        .entry(lower_id(p))
                        .or_default()
                        .extend(names.iter().map(|n| n.to_string()));
                }
            }
        }
        Some(Some(kept))
    }

    /// Replaces everything of this action but more senior overrides (and stand-ins).
    fn overrides_atomic(&self, units: &mut Vec<Unit>, fx: &mut Effects) -> Option<Kept> {
        let scope = self.scope;
        for u in units
            .iter()
            .filter(|u| self.of_action(u) && !scope.is_standin(u))
        {
            if let Unit::Lower { i, .. } = u {
                let Some(p) = scope.lower.get(*i) else {
                    continue;
                };
                let mut names: Vec<String> =
                    scope.names(u).into_iter().map(str::to_string).collect();
                if p.rules.is_none() {
                    names.push("(all traffic)".into());
                }
                fx.replaced.entry(lower_id(p)).or_default().extend(names);
                fx.whole.insert(lower_id(p));
            }
        }
        units.retain(|u| !self.of_action(u) || scope.is_standin(u) || scope.is_override(u));
        match self.all {
            Some(all) => Some(Some(self.not_senior(units, all)?)),
            None => Some(None),
        }
    }

    /// Overrides merged: an ExternalAuth block by its key, else rule by rule.
    fn overrides_merge(&self, units: &mut Vec<Unit>, fx: &mut Effects) -> Option<Kept> {
        if self.ext {
            if self.senior(units, self.my_key) {
                return None;
            }
            units.retain(|u| !(self.of_action(u) && self.scope.has_key(u, self.my_key)));
            return Some(None);
        }
        let Some(all) = self.all else {
            return Some(None);
        };
        let kept = self.not_senior(units, all)?;
        let names: BTreeSet<&str> = kept.iter().map(|ix| self.rule_name(*ix)).collect();
        for u in units.iter_mut() {
            self.replace_rules(u, &names, fx);
        }
        units.retain(|u| !self.scope.emptied(u));
        Some(Some(kept))
    }

    /// Removes the rules named `names` from unit `u` (of this block's action).
    fn replace_rules(&self, u: &mut Unit, names: &BTreeSet<&str>, fx: &mut Effects) {
        let scope = self.scope;
        if scope.action(u) != Some(self.b.action) {
            return;
        }
        if !names.iter().any(|n| scope.has_name(u, n)) {
            return;
        }
        let hit: Vec<String> = scope
            .names(u)
            .into_iter()
            .filter(|n| names.contains(*n))
            .map(str::to_string)
            .collect();
        if hit.is_empty() {
            return;
        }
        match u {
            Unit::Lower { i, removed } => {
                if let Some(p) = scope.lower.get(*i) {
                    fx.replaced
                        .entry(lower_id(p))
                        .or_default()
                        .extend(hit.iter().cloned());
                }
                removed.extend(hit);
                removed.sort();
                removed.dedup();
            }
            Unit::Block { k: bk, kept } => {
                let rs = scope.blocks.get(*bk).and_then(|x| x.rules.as_ref());
                let left: Vec<usize> = match kept {
                    Some(kept) => kept.clone(),
                    None => rs.map(|rs| (0..rs.len()).collect()).unwrap_or_default(),
                };
                *kept = Some(
                    left.into_iter()
                        .filter(|ix| {
                            rs.and_then(|rs| rs.get(*ix))
                                .is_none_or(|r| !names.contains(r.name.as_str()))
                        })
                        .collect(),
                );
            }
        }
    }

    /// An `unset` of an override is refused (and reported on the lower policy).
    fn refuse_unsets(&self, kept: &Kept, fx: &mut Effects) {
        let mine: Vec<&str> = match kept {
            Some(k) => k.iter().map(|ix| self.rule_name(*ix)).collect(),
            None => self
                .all
                .iter()
                .flatten()
                .map(|ix| self.rule_name(*ix))
                .collect(),
        };
        for (n, by) in self.unset {
            if mine.contains(&n.as_str()) || (self.ext && (n == self.my_key || n == &self.b.name)) {
                fx.unset_refused
                    .entry(by.clone())
                    .or_default()
                    .insert(n.clone());
            }
        }
    }
}
