package fsm

import "testing"

func TestScratchTiers(t *testing.T) {
	h := newHarness(t)
	a, b := gpu("g1", 80), gpu("g2", 80)
	a.Labels = map[string]string{"tier": "fast"}
	h.must(host("h1", a, b))
	r := gpuReq(8)
	r.Request.Claims[0].Count = 2
	r.Request.Labels.Preferred = map[string]string{"tier": "fast"}
	res := h.apply(r)
	t.Logf("%v %+v", res.Err, res.Allocation)
}
