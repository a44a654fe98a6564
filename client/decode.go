package client

import (
	"io"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// asEncodingJSON makes the implementation of encoding/json/v2
// (github.com/go-json-experiment/json) read JSON exactly as encoding/json
// does, in half of encoding/json's time or less; a client busy with many
// requests spends much of its CPU reading answers.
var asEncodingJSON = jsonv1.DefaultOptionsV1()

// unmarshal reads one JSON answer into out, as json.Unmarshal would.
func unmarshal(data []byte, out any) error {
	return jsonv2.Unmarshal(data, out, asEncodingJSON)
}

// decode reads a body that holds one JSON answer into out.
func decode(r io.Reader, out any) error {
	return jsonv2.UnmarshalRead(r, out, asEncodingJSON)
}
