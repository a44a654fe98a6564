package fsm

import "testing"

// TestEveryCommandTypeHasAVersion checks the table of fsm/versions.go:
// every command type this binary decodes says when it appeared.
func TestEveryCommandTypeHasAVersion(t *testing.T) {
	for i := range 256 {
		typ := CommandType(i)
		c, err := Decode([]byte{byte(typ), '{', '}'})
		if err != nil {
			continue
		}
		since, ok := CommandSince(c.Type())
		if !ok || since.Level < 1 || since.Level > FeatureLevel() || since.Version == "" {
			t.Errorf("command type %d: since %+v, %v", typ, since, ok)
		}
	}
}
