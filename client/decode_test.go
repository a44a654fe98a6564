package client

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// TestDecodeReadsAsEncodingJSON: the SDK's decoder reads answers as
// encoding/json does, the cases where encoding/json/v2's defaults differ
// included.
func TestDecodeReadsAsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 4, time.UTC)
	full, err := json.Marshal(wire.Allocation{
		ID: "a1", RequestID: "r1", Namespace: "ml", Status: "active", Policy: "BestFit",
		Host: "h1", Hosts: []string{"h1"},
		Devices:     []wire.Assignment{{DeviceID: "h1-gpu0", Claim: 0}},
		Request:     wire.Request{Claims: []wire.Claim{{Type: "GPU", Count: 1}}, Timeout: wire.Duration(time.Minute), Labels: wire.LabelSelector{Required: map[string]string{"zone": "a"}}},
		RequestedAt: at, AllocatedAt: at.Add(time.Second), Seq: 7, CreateIndex: 9, ModifyIndex: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		body string
	}{
		{"an allocation", string(full)},
		{"names in another case", `{"ID":"a1","Request_ID":"r1","STATUS":"active"}`},
		{"a name twice", `{"id":"a1","id":"a2"}`},
		{"invalid UTF-8", "{\"id\":\"a\xff1\"}"},
		{"null for a string and a slice", `{"id":null,"hosts":null}`},
		{"a duration", `{"request":{"claims":[],"timeout":"1m30s"}}`},
		{"a duration as a number", `{"request":{"timeout":60000000000}}`},
		{"an unknown member", `{"id":"a1","new_field":{"x":[1,2]}}`},
		{"a number for a string", `{"id":5}`},
		{"not an object", `[1]`},
		{"trailing newline", string(full) + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Both start from a filled answer: encoding/json keeps what
			// a null or an absent member does not set.
			want, got := wire.Allocation{ID: "kept", Hosts: []string{"kept"}}, wire.Allocation{ID: "kept", Hosts: []string{"kept"}}
			wantErr := json.Unmarshal([]byte(tc.body), &want)
			gotErr := unmarshal([]byte(tc.body), &got)
			if (wantErr == nil) != (gotErr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("unmarshal: %+v, %v\nencoding/json: %+v, %v", got, gotErr, want, wantErr)
			}
			var streamed wire.Allocation
			streamedErr := decode(strings.NewReader(tc.body), &streamed)
			var wantStreamed wire.Allocation
			wantStreamedErr := json.NewDecoder(strings.NewReader(tc.body)).Decode(&wantStreamed)
			if (wantStreamedErr == nil) != (streamedErr == nil) || !reflect.DeepEqual(streamed, wantStreamed) {
				t.Fatalf("decode: %+v, %v\nencoding/json: %+v, %v", streamed, streamedErr, wantStreamed, wantStreamedErr)
			}
		})
	}
}
