package config

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// schemaKey is one key of the file, found by reflection on the toml tags.
type schemaKey struct {
	name string        // "data_dir", "limits.page_timeout", "relay.url"
	typ  string        // as configs/README.md writes it
	def  reflect.Value // the default
}

// schema lists every key with its type and default.
func schema(t *testing.T) []schemaKey {
	var keys []schemaKey
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			name = prefix + name
			switch f.Type {
			case reflect.TypeFor[Limits](), reflect.TypeFor[Discover]():
				walk(name+".", v.Field(i))
			case reflect.TypeFor[[]Relay]():
				walk(name+".", reflect.ValueOf(DefaultRelay()))
			case reflect.TypeFor[*NATS]():
				walk(name+".", reflect.ValueOf(DefaultNATS()))
			case reflect.TypeFor[*Serve]():
				walk(name+".", reflect.ValueOf(DefaultServe()))
			default:
				keys = append(keys, schemaKey{name, typeName(t, f.Type), v.Field(i)})
			}
		}
	}
	walk("", reflect.ValueOf(Defaults()))
	return keys
}

func typeName(t *testing.T, typ reflect.Type) string {
	switch typ {
	case reflect.TypeFor[Duration]():
		return "duration"
	case reflect.TypeFor[ByteSize]():
		return "size"
	case reflect.TypeFor[Timestamp]():
		return "time"
	case reflect.TypeFor[[]int]():
		return "integers"
	case reflect.TypeFor[[]string]():
		return "strings"
	}
	switch typ.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int:
		return "integer"
	case reflect.Bool:
		return "boolean"
	}
	t.Fatalf("no README type for %v", typ)
	return ""
}

// documents reports whether a README default cell states k's default:
// "required" for the keys Validate requires, "—" for unset, else the
// value in TOML (a duration or size in any equal form: "60s" or "1m").
func (k schemaKey) documents(cell string) bool {
	if k.name == "relay.url" || k.name == "nats.url" || k.name == "serve.listen" {
		return cell == "required"
	}
	if k.def.Kind() == reflect.Bool || k.def.Kind() == reflect.Int {
		return cell == "`"+fmt.Sprint(k.def.Interface())+"`"
	}
	if k.def.IsZero() {
		return cell == "—"
	}
	s, err := strconv.Unquote(strings.Trim(cell, "`"))
	if err != nil {
		return false
	}
	switch def := k.def.Interface().(type) {
	case Duration:
		d, err := time.ParseDuration(s)
		return err == nil && Duration(d) == def
	case ByteSize:
		b, err := ParseByteSize(s)
		return err == nil && b == def
	case string:
		return s == def
	}
	return false
}

// configs/README.md tables every key with the type and default of this
// package, and nothing else.
func TestReadmeTable(t *testing.T) {
	f, err := os.Open("../configs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if cells := strings.Split(sc.Text(), "|"); len(cells) > 4 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			key := strings.Trim(strings.TrimSpace(cells[1]), "`")
			rows[key] = []string{strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])}
		}
	}
	for _, k := range schema(t) {
		row, ok := rows[k.name]
		if !ok {
			t.Errorf("README has no row for %s", k.name)
			continue
		}
		delete(rows, k.name)
		if row[0] != k.typ || !k.documents(row[1]) {
			t.Errorf("README row %s: type %s, default %s; want type %s, default %v", k.name, row[0], row[1], k.typ, k.def)
		}
	}
	for k := range rows {
		t.Errorf("README has a row for %s, which is not a key", k)
	}
}

// The check above must be able to fail: a wrong cell is refused.
func TestDocuments(t *testing.T) {
	cells := map[string][2]string{ // key: {a right cell, a wrong cell}
		"limits.stop_timeout":    {"`\"60s\"`", "`\"59s\"`"},
		"limits.max_frame_bytes": {"`\"8MiB\"`", "`\"8MB\"`"},
		"relay.live":             {"`true`", "`false`"},
		"limits.verify_workers":  {"`0`", "—"},
		"relay.since":            {"—", "`0`"},
		"nats.url":               {"required", "—"},
		"nats.stream":            {"`\"ARCHIVER_JOBS\"`", "`\"JOBS\"`"},
	}
	for _, k := range schema(t) {
		c, ok := cells[k.name]
		if !ok {
			continue
		}
		delete(cells, k.name)
		if !k.documents(c[0]) || k.documents(c[1]) {
			t.Errorf("%s: documents(%s) = %v, documents(%s) = %v", k.name, c[0], k.documents(c[0]), c[1], k.documents(c[1]))
		}
	}
	if len(cells) > 0 {
		t.Errorf("schema lacks %v", cells)
	}
}

// configs/archiver.toml is valid and shows every key, set or commented out
// in its section.
func TestExample(t *testing.T) {
	const file = "../configs/archiver.toml"
	c, err := Load(file, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Relays) == 0 {
		t.Error("the example archives no relay")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	header := regexp.MustCompile(`^#?\s*\[\[?(\w+)\]\]?\s*$`)
	assign := regexp.MustCompile(`^#?\s*(\w+)\s*=`)
	shown := map[string]bool{}
	section := ""
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if m := header.FindStringSubmatch(line); m != nil {
			section = m[1] + "."
		} else if m := assign.FindStringSubmatch(line); m != nil {
			shown[section+m[1]] = true
		}
	}
	for _, k := range schema(t) {
		if !shown[k.name] {
			t.Errorf("%s does not show %s", file, k.name)
		}
	}
}
