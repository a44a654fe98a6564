package api

import (
	"context"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// Keyring answers as a cluster of two members would: the key "refused"
// is refused, the key "partial" fails on one member, any other key is
// reported held by both, primary on both when it was used.
func (b *fakeBackend) Keyring(ctx context.Context, op cluster.KeyringOp, key string) (cluster.KeyringResult, error) {
	res := cluster.KeyringResult{Members: 2, Keys: []cluster.KeyringKey{{Key: "k1", Installed: 2, Primary: 2}}}
	switch {
	case key == "refused":
		return cluster.KeyringResult{}, &fsm.Error{Code: fsm.ErrConflict.Code, Message: "refused: " + string(op)}
	case key == "partial":
		res.Failed = []cluster.KeyringFailure{{Node: "h1", Error: "node unreachable"}}
	case op == cluster.KeyringUse:
		res.Keys = []cluster.KeyringKey{{Key: key, Installed: 2, Primary: 2}, {Key: "k1", Installed: 2}}
	case key != "":
		res.Keys = append(res.Keys, cluster.KeyringKey{Key: key + "/" + string(op), Installed: 2})
	}
	return res, nil
}

func TestKeyringRoutes(t *testing.T) {
	e := newEnv(t, Options{})
	var got wire.KeyringResponse
	e.do("GET", "/v1/operator/keyring", "").ok(200).decode(&got)
	if got.Members != 2 || len(got.Keys) != 1 || got.Keys[0] != (wire.KeyringKey{Key: "k1", Installed: 2, Primary: 2}) || got.Failed != nil {
		t.Fatalf("list: %+v", got)
	}
	for method, op := range map[string]string{"POST": "install", "DELETE": "remove"} {
		got = wire.KeyringResponse{}
		e.do(method, "/v1/operator/keyring", `{"key":"k2"}`).ok(200).decode(&got)
		if len(got.Keys) != 2 || got.Keys[1].Key != "k2/"+op {
			t.Errorf("%s: %+v", method, got)
		}
	}
	got = wire.KeyringResponse{}
	e.do("PUT", "/v1/operator/keyring", `{"key":"k2"}`).ok(200).decode(&got)
	if got.Keys[0] != (wire.KeyringKey{Key: "k2", Installed: 2, Primary: 2}) {
		t.Errorf("use: %+v", got)
	}
	got = wire.KeyringResponse{}
	e.do("POST", "/v1/operator/keyring", `{"key":"partial"}`).ok(200).decode(&got)
	if len(got.Failed) != 1 || got.Failed[0] != (wire.KeyringFailure{Node: "h1", Error: "node unreachable"}) {
		t.Errorf("partial: %+v", got)
	}

	for _, method := range []string{"POST", "PUT", "DELETE"} {
		e.do(method, "/v1/operator/keyring", "").apiErr(400, wire.CodeBadRequest)
		e.do(method, "/v1/operator/keyring", `{}`).apiErr(400, wire.CodeBadRequest)
		e.do(method, "/v1/operator/keyring", `{"key":"k2","primary":true}`).apiErr(400, wire.CodeBadRequest)
		e.do(method, "/v1/operator/keyring", `{"key":"refused"}`).apiErr(409, wire.CodeConflict)
	}
	e.do("PATCH", "/v1/operator/keyring", `{"key":"k2"}`).apiErr(405, wire.CodeMethodNotAllowed)
}
