package testrelay

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// Ways real relays serve pages that are not the newest events of a
// filter's range (see the Options fields named here).

// hashMod hashes id under salt, so that the knobs picking events by id
// pick unrelated sets.
func hashMod(salt, id string, n int) uint32 {
	h := fnv.New32a()
	h.Write([]byte(salt))
	h.Write([]byte(id))
	return h.Sum32() % uint32(n)
}

// Broken reports whether o's BrokenEvery makes the event with this (hex)
// id a dangling index entry: the relay never serves it.
func (o Options) Broken(id string) bool {
	return o.BrokenEvery > 0 && hashMod("broken", id, o.BrokenEvery) == 0
}

// splitStores keeps, of a page's positions (newest first), each store's
// first lim (negative: all), and sends the stores' pages one after the
// other (SplitStores).
func splitStores(pos []int32, snap *snapshot, stores, lim int) []int32 {
	parts := make([][]int32, stores)
	for _, p := range pos {
		k := hashMod("store", snap.items[p].ID, stores)
		if lim < 0 || len(parts[k]) < lim {
			parts[k] = append(parts[k], p)
		}
	}
	out := pos[:0]
	for _, part := range parts {
		out = append(out, part...)
	}
	return out
}

// cutAtBroken ends a page at its first dangling entry (BrokenEvery).
func cutAtBroken(pos []int32, snap *snapshot, o *Options) []int32 {
	for i, p := range pos {
		if o.Broken(snap.items[p].ID) {
			return pos[:i]
		}
	}
	return pos
}

// PageOrder values.
const (
	PageOldest = "oldest"
	PageByID   = "id"
)

// pickUnordered keeps lim (negative: all) of a range's positions (newest
// first) as a relay serving order o does, in the order it sends them.
func pickUnordered(pos []int32, snap *snapshot, o string, lim int) []int32 {
	if o == PageByID {
		slices.SortFunc(pos, func(a, b int32) int { return cmp.Compare(snap.items[a].ID, snap.items[b].ID) })
	} else {
		slices.Reverse(pos)
	}
	if lim >= 0 && len(pos) > lim {
		pos = pos[:lim]
	}
	return pos
}
