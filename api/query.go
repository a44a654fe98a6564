package api

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// boolParam reads a flag parameter: present without a value, or with a
// value strconv.ParseBool accepts.
func boolParam(q url.Values, name string) (bool, error) {
	if !q.Has(name) {
		return false, nil
	}
	v := q.Get(name)
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badParam(name, v, "want true or false")
	}
	return b, nil
}

// durationParam reads a Go duration parameter; 0 when absent.
func durationParam(q url.Values, name string) (time.Duration, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, badParam(name, v, `want a duration such as "30s"`)
	}
	return d, nil
}

// readOptions reads the consistency and blocking parameters of a read:
// ?consistent, ?stale with ?max_stale=, ?index= with ?wait=.
func readOptions(r *http.Request) (cluster.ReadOptions, error) {
	q := r.URL.Query()
	var opts cluster.ReadOptions
	var err error
	if opts.Consistent, err = boolParam(q, "consistent"); err != nil {
		return opts, err
	}
	stale, err := boolParam(q, "stale")
	if err != nil {
		return opts, err
	}
	if opts.MaxStale, err = durationParam(q, "max_stale"); err != nil {
		return opts, err
	}
	if opts.Consistent && (stale || opts.MaxStale > 0) {
		return opts, badRequest("?consistent and ?stale/?max_stale exclude each other")
	}
	if v := q.Get("index"); v != "" {
		if opts.MinIndex, err = strconv.ParseUint(v, 10, 64); err != nil {
			return opts, badParam("index", v, "want a state index (X-Dmsc-Index of an earlier answer)")
		}
	}
	if opts.Wait, err = durationParam(q, "wait"); err != nil {
		return opts, err
	}
	if opts.Wait > cluster.MaxWait {
		opts.Wait = cluster.MaxWait
	}
	return opts, nil
}

// isBlocking reports whether a request is a blocking query.
func isBlocking(r *http.Request) bool {
	v := r.URL.Query().Get("index")
	return v != "" && v != "0"
}

// setReadMeta writes the freshness headers of a read.
func setReadMeta(w http.ResponseWriter, m cluster.ReadMeta) {
	h := w.Header()
	h.Set(wire.HeaderIndex, strconv.FormatUint(m.Index, 10))
	lc := int64(-1)
	if m.LastContact >= 0 {
		lc = m.LastContact.Milliseconds()
	}
	h.Set(wire.HeaderLastContact, strconv.FormatInt(lc, 10))
	h.Set(wire.HeaderKnownLeader, strconv.FormatBool(m.KnownLeader))
}

// typeParam reads an optional device type parameter.
func typeParam(q url.Values) (fsm.DeviceType, error) {
	v := q.Get("type")
	if v == "" {
		return "", nil
	}
	t := fsm.DeviceType(v)
	if !t.Valid() {
		return "", badParam("type", v, "want one of "+typeList())
	}
	return t, nil
}

func typeList() string {
	names := make([]string, len(fsm.DeviceTypes))
	for i, t := range fsm.DeviceTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// allocFilter selects allocations by the list parameters.
type allocFilter struct {
	statuses []fsm.AllocStatus
	typ      fsm.DeviceType
	pool     string
	host     string
}

// parseAllocFilter reads ?status= (comma-separated), ?type=, ?pool=, ?host=.
func parseAllocFilter(q url.Values) (allocFilter, error) {
	var f allocFilter
	var err error
	if f.typ, err = typeParam(q); err != nil {
		return f, err
	}
	f.pool, f.host = q.Get("pool"), q.Get("host")
	if v := q.Get("status"); v != "" {
		for _, s := range strings.Split(v, ",") {
			st := fsm.AllocStatus(strings.TrimSpace(s))
			if !slices.Contains(fsm.AllocStatuses, st) {
				return f, badParam("status", v, "want a comma-separated list of "+statusList())
			}
			f.statuses = append(f.statuses, st)
		}
	}
	return f, nil
}

func statusList() string {
	names := make([]string, len(fsm.AllocStatuses))
	for i, s := range fsm.AllocStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// match reports whether an allocation passes the filter. The pool matches
// the request's pool, a claim's pool, or the pool of a device it holds.
func (f *allocFilter) match(st *fsm.State, a *fsm.Allocation) bool {
	if len(f.statuses) > 0 && !slices.Contains(f.statuses, a.Status) {
		return false
	}
	if f.host != "" && a.Host != f.host {
		return false
	}
	if f.typ != "" && !slices.ContainsFunc(a.Request.Claims, func(c fsm.Claim) bool { return c.Type == f.typ }) {
		return false
	}
	if f.pool == "" || a.Request.Pool == f.pool ||
		slices.ContainsFunc(a.Request.Claims, func(c fsm.Claim) bool { return c.Pool == f.pool }) {
		return true
	}
	for _, as := range a.Devices {
		if d, ok := st.Device(as.DeviceID); ok && d.Pool == f.pool {
			return true
		}
	}
	return false
}

// Page sizes of the paginated lists.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// pageParams are ?limit=, ?next= and ?reverse of a paginated list. The
// list runs in arrival order (oldest first; newest first with reverse);
// next is the token an earlier page returned.
type pageParams struct {
	limit   int
	from    uint64
	hasFrom bool
	reverse bool
}

func parsePage(q url.Values) (pageParams, error) {
	p := pageParams{limit: DefaultPageSize}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			return p, badParam("limit", v, "want 1.."+strconv.Itoa(MaxPageSize))
		}
		p.limit = n
	}
	if v := q.Get("next"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return p, badParam("next", v, "want the next token of an earlier page")
		}
		p.from, p.hasFrom = n, true
	}
	var err error
	p.reverse, err = boolParam(q, "reverse")
	return p, err
}

// paginate sorts allocations by arrival and cuts the page; next is the
// token of the following page, "" at the end.
func paginate(list []*fsm.Allocation, p pageParams) (page []*fsm.Allocation, next string) {
	list = pageWindow(list, p)
	if len(list) > p.limit {
		next = strconv.FormatUint(list[p.limit].Seq, 10)
		list = list[:p.limit]
	}
	return list, next
}

// pageWindow sorts allocations by arrival and keeps what paginate reads:
// the page and the first after it. A list cut to its window paginates
// as the whole list would.
func pageWindow(list []*fsm.Allocation, p pageParams) []*fsm.Allocation {
	slices.SortFunc(list, func(a, b *fsm.Allocation) int {
		if p.reverse {
			return cmpSeq(b.Seq, a.Seq)
		}
		return cmpSeq(a.Seq, b.Seq)
	})
	start := 0
	if p.hasFrom {
		start = len(list)
		for i, a := range list {
			if !p.reverse && a.Seq >= p.from || p.reverse && a.Seq <= p.from {
				start = i
				break
			}
		}
	}
	n := copy(list, list[start:min(start+p.limit+1, len(list))])
	clear(list[n:])
	return list[:n]
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// allocationList converts a page.
func allocationList(page []*fsm.Allocation, next string) wire.AllocationList {
	return wire.AllocationList{Allocations: mapSlice(page, allocationToWire), Next: next}
}
