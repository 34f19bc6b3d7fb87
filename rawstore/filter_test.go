package rawstore

import (
	"encoding/binary"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

func TestKeyFilter(t *testing.T) {
	id := func(i int) *[32]byte {
		var b [32]byte
		binary.BigEndian.PutUint64(b[:], uint64(i)*0x9e3779b97f4a7c15)
		return &b
	}
	var point, scan [][]byte
	for i := range 1000 {
		point = append(point, eventKey(id(i)), verdictKey(id(i)))
		scan = append(scan, idsKey(uint64(i), id(i)), sightingKey(7, uint64(i), id(i)),
			appendIndexSuffix(kindIndexPrefix(1), int64(i), id(i)))
	}
	build := func(p pebble.FilterPolicy, keys ...[][]byte) []byte {
		w := p.NewWriter(pebble.TableFilter)
		for _, ks := range keys {
			for _, k := range ks {
				w.AddKey(k)
			}
		}
		return w.Finish(nil)
	}
	f := newKeyFilter()
	mixed := build(f, point, scan)
	if only := build(f, point); len(mixed) != len(only) {
		t.Errorf("the filter of %d point and %d index keys takes %d bytes, of the point keys alone %d: index keys went in",
			len(point), len(scan), len(mixed), len(only))
	}
	if all := build(bloom.FilterPolicy(10), point, scan); len(all) <= len(mixed) {
		t.Errorf("bloom's filter of every key takes %d bytes, the key filter %d", len(all), len(mixed))
	}
	for _, k := range append(point, scan...) {
		if !f.MayContain(pebble.TableFilter, mixed, k) {
			t.Fatalf("a table holding %x: its filter says it cannot", k)
		}
	}
	// An index key is "may contain" even for a filter that holds nothing.
	empty := build(f, scan)
	if !f.MayContain(pebble.TableFilter, empty, scan[0]) {
		t.Error("an index key was ruled out by a filter that leaves index keys out")
	}
	// Absent point keys are ruled out (bloom's 10 bits a key: ~1% pass).
	passed := 0
	for i := 1000; i < 3000; i++ {
		if f.MayContain(pebble.TableFilter, mixed, eventKey(id(i))) {
			passed++
		}
	}
	if passed > 60 {
		t.Errorf("%d of 2000 absent E keys passed the filter", passed)
	}
	// The name is bloom's: tables written by either read with either.
	if f.Name() != bloom.FilterPolicy(10).Name() {
		t.Errorf("filter name %q, bloom's %q", f.Name(), bloom.FilterPolicy(10).Name())
	}
}
