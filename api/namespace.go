package api

import (
	"net/url"

	"github.com/dmsc/dmsc/fsm"
)

// AllNamespaces, as ?namespace=, asks for every namespace.
const AllNamespaces = "*"

// namespacesParam reads ?namespace= of the statistics and advice: one
// namespace (default "default", as every allocation route), or "*" for
// all (nil).
func namespacesParam(q url.Values) ([]string, error) {
	ns := q.Get("namespace")
	switch {
	case ns == "":
		return []string{fsm.DefaultNamespace}, nil
	case ns == AllNamespaces:
		return nil, nil
	case !fsm.ValidNamespace(ns):
		return nil, badParam("namespace", ns, "1 to 64 letters, digits, '-' or '_', or * for all")
	}
	return []string{ns}, nil
}
