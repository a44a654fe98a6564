package api

import "context"

// caller is who made a request, as the API's checks established it: the
// token's accessor ("anonymous" for none; "" while ACLs are off) and the
// namespace the request acts in. The ACL check sets it; the audit log and
// the handlers read it.
type caller struct {
	accessor  string
	namespace string
}

type callerKey struct{}

// withCaller returns ctx carrying c.
func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf returns the caller ctx carries, the zero caller when none.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}
