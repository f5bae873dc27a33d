// Package humanize is vigil's one set of formatting helpers for people:
// counts with thousands separators, durations in the few styles pages,
// logs and the status page use, wall-clock stamps, and the Markdown
// tables the demo and the benchmarks print (Table).
//
// Each style has its own name because each says something different: a
// measured span (Duration, Span) is exact to what it measured; an
// estimate (Estimate, Rough) must not look more precise than it is; the
// Go-notation styles (GoTenths, GoMinutes) keep the recovery journal's
// and the digest's established wording. Before this package the same
// names (human, count, clock) meant different things in different
// packages.
package humanize
