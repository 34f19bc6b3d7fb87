package rawstore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"github.com/nostr-archiver/archiver/testrelay"
)

// TestIndexSortCutOff: a process that dies while its index keys wait in
// sorted runs leaves an archive whose indexes say they need building
// (none answers a query without its keys), and the next writable open
// removes the runs.
func TestIndexSortCutOff(t *testing.T) {
	defer rawstore.SetIndexSort(300, 4)()
	fix, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 21, Events: 200, Authors: 5, CacheDir: fixtureCache()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeferIndexes(); err != nil {
		t.Fatal(err)
	}
	storetest.Ingest(t, s, fix.Items)
	verifyAll(t, s)
	s.AbandonIndexSort()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	runs, _ := filepath.Glob(filepath.Join(dir, "*.index-run"))
	if len(runs) == 0 {
		t.Fatal("no index run on disk: the sort was not cut off with keys waiting")
	}

	s, err = rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if runs, _ := filepath.Glob(filepath.Join(dir, "*.index-run")); len(runs) != 0 {
		t.Fatalf("%d index runs left after a writable open", len(runs))
	}
	if ready, err := s.IndexesReady(); err != nil || ready {
		t.Fatalf("indexes ready %v (%v) after a sort cut off", ready, err)
	}
	n, err := s.BuildIndexes(context.Background(), nil)
	if err != nil || n != int64(len(fix.Valid)) {
		t.Fatalf("built %d of %d valid events: %v", n, len(fix.Valid), err)
	}
	if ready, err := s.IndexesReady(); err != nil || !ready {
		t.Fatalf("indexes ready %v (%v) after the build", ready, err)
	}
}
