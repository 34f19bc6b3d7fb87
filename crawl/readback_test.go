package crawl

import (
	"reflect"
	"testing"

	"github.com/nostr-archiver/archiver/shard"
)

func TestUnpaged(t *testing.T) {
	for _, c := range []struct {
		name         string
		since, until int64
		paged        [][2]int64
		want         [][2]int64
	}{
		{"nothing paged", 10, 100, nil, [][2]int64{{10, 100}}},
		{"all paged", 10, 100, [][2]int64{{10, 100}}, nil},
		{"an extended open job", 10, shard.OpenTop, [][2]int64{{80, shard.OpenTop}}, [][2]int64{{10, 79}}},
		{"a resumed shard", 10, 100, [][2]int64{{10, 60}, {61, 70}}, [][2]int64{{71, 100}}},
		{"holes, out of order", 0, 100, [][2]int64{{50, 60}, {10, 20}, {15, 30}}, [][2]int64{{0, 9}, {31, 49}, {61, 100}}},
		{"past the range", 10, 100, [][2]int64{{5, 200}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := unpaged(c.since, c.until, c.paged); !reflect.DeepEqual(got, c.want) {
				t.Errorf("unpaged(%d, %d, %v) = %v, want %v", c.since, c.until, c.paged, got, c.want)
			}
		})
	}
}
