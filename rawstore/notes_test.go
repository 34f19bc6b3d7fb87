package rawstore

import (
	"reflect"
	"testing"
)

// Notes of one kind read back as written, apart from other kinds; a nil
// value deletes; they survive a reopen and leave the archive's stats and
// check alone.
func TestNotes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.PutNotes('s', map[string][]byte{"wss://a.example": []byte("1"), "wss://b.example": []byte("2")}))
	must(s.PutNotes('f', map[string][]byte{"wss://a.example": []byte("found")}))
	must(s.PutNotes('s', map[string][]byte{"wss://b.example": nil, "wss://c.example": []byte("3")}))
	must(s.Close())

	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for kind, want := range map[byte]map[string][]byte{
		's': {"wss://a.example": []byte("1"), "wss://c.example": []byte("3")},
		'f': {"wss://a.example": []byte("found")},
		'x': {},
	} {
		got, err := s.Notes(kind)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Notes(%c) = %q, %v; want %q", kind, got, err, want)
		}
	}
	if st := mustStats(t, s); st.Events != 0 {
		t.Errorf("stats %+v", st)
	}
	rep, err := s.Check()
	if err != nil || rep.Damaged != 0 || rep.Records < 3 {
		t.Errorf("check %+v, %v", rep, err)
	}
}
