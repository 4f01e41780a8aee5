package config

import (
	"reflect"
	"strings"

	"github.com/agnivade/levenshtein"
	"gopkg.in/yaml.v3"
)

// Key is one key of the configuration file, as Keys lists it.
type Key struct {
	// Path is the key as messages and docs name it: "data_dir",
	// "pipeline.queue_size", "infer.tensorrt.fp16", "streams[].id".
	Path string
	// Name is the last element of Path, the YAML key itself ("queue_size").
	Name string
	// In is the struct type that declares the key (config.Pipeline), and
	// Field its Go field.
	In    reflect.Type
	Field reflect.StructField
	// Section is true for a key that holds a struct (a mapping of further
	// keys) or a list of structs ("streams"); its keys follow it in Keys.
	Section bool
}

// Keys lists every key of the file, depth first in declaration order: a
// section, then its keys. It walks Config by reflection, so a field added
// to a config struct is listed with nothing else to change.
func Keys() []Key {
	var out []Key
	walkKeys(reflect.TypeFor[Config](), "", &out)
	return out
}

var unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

// sectionType returns the struct type a field of type t holds keys of
// (t itself, or the element of a list or pointer), or nil for a value:
// scalars, maps, lists of scalars and types that decode themselves
// (Duration).
func sectionType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshaler) {
		return nil
	}
	return t
}

func walkKeys(t reflect.Type, prefix string, out *[]Key) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := yamlName(f)
		if !ok {
			continue
		}
		k := Key{Path: prefix + name, Name: name, In: t, Field: f}
		st := sectionType(f.Type)
		k.Section = st != nil
		*out = append(*out, k)
		if st == nil {
			continue
		}
		sub := k.Path
		if f.Type.Kind() == reflect.Slice {
			sub += "[]"
		}
		walkKeys(st, sub+".", out)
	}
}

// yamlName is the key yaml.v3 decodes field f from; false for fields it
// skips (unexported, or tagged "-").
func yamlName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	switch name {
	case "-":
		return "", false
	case "":
		return strings.ToLower(f.Name), true
	}
	return name, true
}

// sectionName returns how messages name the section of struct type t
// ("top level", "infer.tensorrt", "streams[]") and its keys, or false
// when t is not part of the file.
func sectionName(t reflect.Type) (string, []string, bool) {
	var names []string
	for _, k := range Keys() {
		if k.In == t {
			names = append(names, k.Name)
		}
	}
	if t == reflect.TypeFor[Config]() {
		return "top level", names, true
	}
	for _, k := range Keys() {
		if k.Section && sectionType(k.Field.Type) == t {
			if k.Field.Type.Kind() == reflect.Slice {
				return k.Path + "[]", names, true
			}
			return k.Path, names, true
		}
	}
	return "", nil, false
}

// sectionByTypeName finds a section's struct type by the name yaml.v3
// writes in its errors ("config.Stream").
func sectionByTypeName(name string) (reflect.Type, bool) {
	if name == reflect.TypeFor[Config]().String() {
		return reflect.TypeFor[Config](), true
	}
	for _, k := range Keys() {
		if st := sectionType(k.Field.Type); st != nil && st.String() == name {
			return st, true
		}
	}
	return nil, false
}

// suggest returns the key of keys closest to a misspelt one, or "" when
// none is close: at most a third of its characters, rounded up, are
// edits (a typo, a missing letter, two letters swapped). Case is ignored.
// Ties go to the key declared first.
func suggest(unknown string, keys []string) string {
	best, bestD := "", 0
	for _, k := range keys {
		d := levenshtein.ComputeDistance(strings.ToLower(unknown), k)
		if d > (len(k)+2)/3 || (best != "" && d >= bestD) {
			continue
		}
		best, bestD = k, d
	}
	return best
}
