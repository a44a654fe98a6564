package fsm

import (
	"time"

	"github.com/google/btree"
)

// State is the whole scheduler state. It changes only through Apply, which
// is deterministic: the same commands in the same order give the same state
// and the same snapshot bytes. State is not safe for concurrent use; the
// Raft adapter serializes access.
type State struct {
	now  int64
	seq  uint64
	last uint64 // index of the last applied command

	// eventsOn makes commands record events (events.go) in events, which
	// are not part of the state.
	eventsOn bool
	events   []Event

	hosts   map[string]*Host
	devices map[string]*Device
	// allocs holds live (pending and active) allocations.
	allocs  map[string]*Allocation
	history *history
	queue   *btree.BTreeG[queueKey]
	timers  *btree.BTreeG[timerKey]
	cache   *requestCache

	typePolicies map[DeviceType]PolicyConfig
	poolPolicies map[string]PolicyConfig
	cursors      map[DeviceType]string
	retention    Retention
	shapes       *shapeWindow
	// removedServers are the servers an operator removed, with when.
	removedServers map[string]int64
	acl            *aclState
	// quotas are the namespaces' quotas; use what each namespace holds,
	// derived from the devices' allocations (quota.go).
	quotas map[string]*Quota
	use    map[useKey]*held
	// fair is the fair-share state, nil while it is off (fairshare.go).
	fair *fairShare
	// preemptWaiting: waiting requests may preempt (SetQueueConfig).
	preemptWaiting bool
	// reclaims are the victims in their grace of each reclaiming request,
	// sorted (reclaim.go); derived from the allocations' Preempting.
	reclaims map[string][]string
	// spared: this command spared victims of a reclaim; Apply then
	// re-examines the queue.
	spared bool
	// gangs are the waiting gangs in queue order; reserving those with a
	// reservation, by ID; reserved the gang holding each reserved host
	// (reserve.go). All derived from the allocations.
	gangs     *btree.BTreeG[queueKey]
	reserving map[string]*Allocation
	reserved  map[string]*Allocation
	// reopened: a reservation ended in this command; Apply then
	// re-examines the queue.
	reopened bool

	idx *index
	// agg holds the figures of Stats (stats_agg.go), derived state.
	agg *statsAgg
	// head keeps what the snapshot's head lists (snapcache.go).
	head *headCache
}

// Result is what applying a command gives back.
type Result struct {
	// Index is the log index of the command that produced this result
	// (for a repeated request ID, the first one).
	Index uint64 `json:"index"`
	// Allocation is the allocation the command created or changed, as it
	// is now.
	Allocation *Allocation `json:"allocation,omitempty"`
	// Err is nil or an *Error.
	Err error `json:"-"`
	// Batch holds the result of each command of a Batch, in order.
	Batch []Result `json:"-"`
}

// New returns an empty state with the default policies and retention.
func New() *State {
	s := &State{
		hosts:        map[string]*Host{},
		devices:      map[string]*Device{},
		allocs:       map[string]*Allocation{},
		history:      newHistory(),
		queue:        btree.NewG(btreeDegree, queueKeyLess),
		timers:       btree.NewG(btreeDegree, timerKeyLess),
		cache:        newRequestCache(),
		typePolicies: map[DeviceType]PolicyConfig{},
		poolPolicies: map[string]PolicyConfig{},
		cursors:      map[DeviceType]string{},
		quotas:       map[string]*Quota{},
		use:          map[useKey]*held{},
		reclaims:     map[string][]string{},
		gangs:        btree.NewG(btreeDegree, queueKeyLess),
		reserving:    map[string]*Allocation{},
		reserved:     map[string]*Allocation{},
		retention:    DefaultRetention,
		shapes:       newShapeWindow(),
		idx:          newIndex(),
		agg:          newStatsAgg(),
		head:         newHeadCache(),

		removedServers: map[string]int64{},
		acl:            newACLState(),
	}
	for t, p := range DefaultPolicies {
		s.typePolicies[t] = PolicyConfig{Policy: p}
	}
	return s
}

// Now is the state's clock: the latest leader time it has applied.
func (s *State) Now() time.Time { return time.Unix(0, s.now) }

// LastIndex is the index of the last command applied.
func (s *State) LastIndex() uint64 { return s.last }

// Apply applies one command at log index idx. A command whose request ID
// was seen before in its namespace returns the first result and changes
// nothing; if it is not the same command (another type or body), it is
// refused with ErrRequestIDReused. A refused command returns an *Error and
// changes nothing, except a request refused for lack of capacity, which is
// recorded in the history as failed.
func (s *State) Apply(idx uint64, c Command) Result {
	if b, ok := c.(*Batch); ok {
		res, _ := s.applyBatch(idx, b)
		return res
	}
	m := c.meta()
	digest := m.Digest
	if m.RequestID != "" {
		if digest == "" {
			digest = commandDigest(c)
		}
		if e, ok := s.cache.get(requestKey{m.Namespace, m.RequestID}); ok {
			if e.Digest != "" && e.Digest != digest {
				return Result{Index: idx, Err: errf(ErrRequestIDReused, "request id %q was used for another request at index %d", m.RequestID, e.Index)}
			}
			return s.cachedResult(e)
		}
	}
	prevNow, prevLast, prevEvents := s.now, s.last, len(s.events)
	if m.Time > s.now {
		s.now = m.Time
	}
	s.last = idx
	res := s.apply(idx, c)
	for s.spared {
		// Victims a reclaim spared are borrowed still: another waiting
		// owner may reclaim them (reclaim.go).
		s.spared = false
		s.kickQueue()
	}
	res.Index = idx
	if res.Err != nil && !isRecorded(res.Err) {
		// Refused: nothing changed, not even the clock.
		s.now, s.last = prevNow, prevLast
		s.events = s.events[:prevEvents]
		return res
	}
	s.settleReservations()
	if a := res.Allocation; a != nil && a.Request.IsGang() && s.allocs[a.ID] != nil {
		res.Allocation = s.allocs[a.ID].clone() // with the reservation settled
	}
	if m.RequestID != "" {
		e := cacheEntry{RequestID: m.RequestID, Namespace: m.Namespace, Digest: digest, Index: idx, Time: s.now}
		if res.Allocation != nil {
			e.AllocationID = res.Allocation.ID
		}
		if res.Err != nil {
			e.Err = res.Err.(*Error)
		}
		s.cache.put(e)
	}
	s.cache.trim(s.now)
	s.history.trim(s.now, s.retention, s.aggDropped)
	return res
}

// isRecorded reports whether a refusal still changed the state (a request
// refused for capacity or quota is kept in the history).
func isRecorded(err error) bool {
	e, ok := err.(*Error)
	return ok && (e.Code == ErrNoCapacity.Code || e.Code == ErrQuotaExceeded.Code)
}

func (s *State) cachedResult(e cacheEntry) Result {
	r := Result{Index: e.Index}
	if e.AllocationID != "" {
		if a := s.lookup(e.AllocationID); a != nil {
			r.Allocation = a.clone()
		}
	}
	if e.Err != nil {
		r.Err = e.Err
	}
	return r
}

func (s *State) apply(idx uint64, c Command) Result {
	switch c := c.(type) {
	case *RegisterHost:
		return s.registerHost(c)
	case *RemoveHost:
		return s.removeHost(c)
	case *SetHostStatus:
		return s.setHostStatus(c)
	case *SetDeviceStatus:
		return s.setDeviceStatus(c)
	case *DrainHost:
		return s.drainHost(c)
	case *SetQuota:
		return s.setQuota(idx, c)
	case *SetQueueConfig:
		return s.setQueueConfig(c)
	case *Allocate:
		return s.allocate(idx, c)
	case *Release:
		return s.release(c)
	case *Renew:
		return s.renew(c)
	case *Cancel:
		return s.cancel(c)
	case *SetPolicy:
		return s.setPolicy(c)
	case *SetRetention:
		return s.setRetention(c)
	case *Tick:
		s.tick()
		return Result{}
	case *SetServerRemoved:
		return s.setServerRemoved(c)
	case *ACLBootstrap:
		return s.aclBootstrap(idx, c)
	case *ACLPolicyUpsert:
		return s.aclPolicyUpsert(idx, c)
	case *ACLPolicyDelete:
		return s.aclPolicyDelete(c)
	case *ACLTokenUpsert:
		return s.aclTokenUpsert(idx, c)
	case *ACLTokenDelete:
		return s.aclTokenDelete(c)
	case *TestNoop:
		return Result{}
	}
	return Result{Err: errf(ErrUnknownCommand, "%T", c)}
}

// lookup finds a live or historic allocation.
func (s *State) lookup(id string) *Allocation {
	if a := s.allocs[id]; a != nil {
		return a
	}
	return s.history.get(id)
}

// MaxDevicesPerHost bounds one host's inventory.
const MaxDevicesPerHost = 4096

// MaxInventoryHashLength bounds RegisterHost.InventoryHash.
const MaxInventoryHashLength = 64

func (s *State) registerHost(c *RegisterHost) Result {
	if err := precheckHost(c); err != nil {
		return Result{Err: err}
	}
	if len(c.InventoryHash) > MaxInventoryHashLength {
		return Result{Err: errf(ErrInvalid, "host %q: inventory hash longer than %d", c.Host.ID, MaxInventoryHashLength)}
	}
	for i := range c.Devices {
		d := &c.Devices[i]
		if old := s.devices[d.ID]; old != nil && old.Host != c.Host.ID {
			return Result{Err: errf(ErrConflict, "device %q belongs to host %q", d.ID, old.Host)}
		}
	}

	h := s.hosts[c.Host.ID]
	hostEvent := EventUpdated
	if h == nil {
		h = &Host{HostSpec: c.Host, Since: s.now}
		s.hosts[h.ID] = h
		s.head.hostIDs = nil
		hostEvent = EventRegistered
	}
	delete(s.head.hosts, h.ID)
	h.HostSpec = c.Host
	h.InventoryHash = c.InventoryHash
	wanted := map[string]DeviceSpec{}
	for _, d := range c.Devices {
		d.Labels = mergeLabels(c.Host.Labels, d.Labels)
		if d.Pool == "" {
			d.Pool = DefaultPool
		}
		wanted[d.ID] = d
	}
	// Devices gone or changed lose their allocations and leave.
	for _, id := range append([]string(nil), h.Devices...) {
		d := s.devices[id]
		if spec, keep := wanted[id]; keep && specEqual(d.DeviceSpec, spec) {
			continue
		}
		for _, aid := range append([]string(nil), d.Allocations...) {
			s.endAllocation(s.allocs[aid], Lost, "device "+id+" removed or changed")
		}
		s.emitDevice(d, EventRemoved)
		s.unindex(d)
		s.removeClassDevice(d)
		s.aggDeviceChanging(id)
		delete(s.devices, id)
		s.head.deviceIDs = nil
		s.aggDeviceChanged(id)
		h.Devices = removeSorted(h.Devices, id)
		s.hostDevicesChanged(h)
	}
	// A registering host is up.
	if !h.Up {
		s.changeHost(h, func() {
			h.Up = true
			h.Since = s.now
		})
	}
	for _, spec := range c.Devices {
		if _, ok := s.devices[spec.ID]; ok {
			continue
		}
		d := &Device{DeviceSpec: wanted[spec.ID], Host: h.ID, Status: Available}
		s.aggDeviceChanging(d.ID)
		s.devices[d.ID] = d
		s.head.deviceIDs = nil
		s.aggDeviceChanged(d.ID)
		s.addClassDevice(d)
		h.Devices = insertSorted(h.Devices, d.ID)
		s.hostDevicesChanged(h)
		s.reindex(d)
		s.emitDevice(d, EventRegistered)
	}
	for _, t := range DeviceTypes {
		if h.load[t] != nil {
			s.refreshLoad(h, t)
		}
	}
	s.emitHost(h, hostEvent)
	s.kickQueue()
	return Result{}
}

// DefaultPool is the pool of a device registered without one.
const DefaultPool = "default"

func mergeLabels(host, dev map[string]string) map[string]string {
	if len(host) == 0 {
		return dev
	}
	out := map[string]string{}
	for k, v := range host {
		out[k] = v
	}
	for k, v := range dev {
		out[k] = v
	}
	return out
}

func specEqual(a, b DeviceSpec) bool {
	if a.ID != b.ID || a.Type != b.Type || a.Name != b.Name || a.Pool != b.Pool || a.Shareable != b.Shareable ||
		a.Capabilities.Resources != b.Capabilities.Resources {
		return false
	}
	return mapEqual(a.Capabilities.Custom, b.Capabilities.Custom) && mapEqual(a.Labels, b.Labels) && topologyEqual(a.Topology, b.Topology)
}

func mapEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (s *State) removeHost(c *RemoveHost) Result {
	h := s.hosts[c.HostID]
	if h == nil {
		return Result{Err: errf(ErrNotFound, "host %q", c.HostID)}
	}
	freed := s.loseHostAllocations(h, "host "+h.ID+" removed")
	s.setDrain(h, nil)
	for _, id := range h.Devices {
		d := s.devices[id]
		s.emitDevice(d, EventRemoved)
		s.unindex(d)
		s.removeClassDevice(d)
		s.aggDeviceChanging(id)
		delete(s.devices, id)
		s.head.deviceIDs = nil
		s.aggDeviceChanged(id)
	}
	delete(s.hosts, h.ID)
	delete(s.head.hosts, h.ID)
	s.head.hostIDs = nil
	s.emitHost(h, EventRemoved)
	if freed {
		s.kickQueue()
	}
	return Result{}
}

// loseHostAllocations ends every active allocation on a host as lost. It
// reports whether a gang among them freed devices on other hosts: the
// caller then examines the queue, once the host is out.
func (s *State) loseHostAllocations(h *Host, reason string) (freedElsewhere bool) {
	for _, aid := range s.hostAllocations(h) {
		a := s.allocs[aid]
		freedElsewhere = freedElsewhere || len(a.Hosts) > 1
		s.endAllocation(a, Lost, reason)
	}
	return freedElsewhere
}

func (s *State) setHostStatus(c *SetHostStatus) Result {
	h := s.hosts[c.HostID]
	if h == nil {
		return Result{Err: errf(ErrNotFound, "host %q", c.HostID)}
	}
	if h.Up == c.Up {
		return Result{}
	}
	delete(s.head.hosts, h.ID)
	freed := false
	if !c.Up {
		freed = s.loseHostAllocations(h, "host "+h.ID+" down")
	}
	s.changeHost(h, func() {
		h.Up = c.Up
		h.Since = s.now
	})
	s.emitHost(h, EventUpdated)
	if c.Up || freed {
		s.kickQueue()
	}
	return Result{}
}

func (s *State) setDeviceStatus(c *SetDeviceStatus) Result {
	d := s.devices[c.DeviceID]
	if d == nil {
		return Result{Err: errf(ErrNotFound, "device %q", c.DeviceID)}
	}
	if !c.Status.Valid() {
		return Result{Err: errf(ErrInvalid, "status %q cannot be set (use available, draining or unhealthy)", c.Status)}
	}
	if d.Status == c.Status {
		return Result{}
	}
	s.unindex(d)
	d.Status = c.Status
	s.reindex(d)
	s.emitDevice(d, EventUpdated)
	if c.Status == Available {
		s.kickQueue()
	}
	return Result{}
}

func (s *State) setPolicy(c *SetPolicy) Result {
	if c.Config.PreemptionGap < 0 || c.Config.PreemptionGap > MaxPriority {
		return Result{Err: errf(ErrInvalid, "preemption gap %d out of 0..%d", c.Config.PreemptionGap, MaxPriority)}
	}
	if c.Pool != "" {
		if c.Config.Policy == "" {
			delete(s.poolPolicies, c.Pool)
			s.emitPolicy("", c.Pool, PolicyConfig{}, EventDeleted)
			s.kickQueue()
			return Result{}
		}
		if !c.Config.Policy.Valid() {
			return Result{Err: errf(ErrInvalid, "unknown policy %q", c.Config.Policy)}
		}
		s.poolPolicies[c.Pool] = c.Config
		s.emitPolicy("", c.Pool, c.Config, EventUpdated)
		s.kickQueue()
		return Result{}
	}
	if !c.DeviceType.Valid() {
		return Result{Err: errf(ErrInvalid, "unknown device type %q", c.DeviceType)}
	}
	if !c.Config.Policy.Valid() {
		return Result{Err: errf(ErrInvalid, "unknown policy %q", c.Config.Policy)}
	}
	s.typePolicies[c.DeviceType] = c.Config
	s.emitPolicy(c.DeviceType, "", c.Config, EventUpdated)
	s.kickQueue()
	return Result{}
}

func (s *State) setRetention(c *SetRetention) Result {
	r := c.Retention
	if r.MaxCount < 1 || r.MaxCount > MaxRetentionCount {
		return Result{Err: errf(ErrInvalid, "retention count %d out of 1..%d", r.MaxCount, MaxRetentionCount)}
	}
	if r.MaxAge <= 0 {
		return Result{Err: errf(ErrInvalid, "retention age %v must be positive", r.MaxAge)}
	}
	s.retention = r
	return Result{}
}

// Devices, hosts, policies: read accessors return copies.

// Device returns a copy of a device, with status offline if its host is down.
func (s *State) Device(id string) (Device, bool) {
	d := s.devices[id]
	if d == nil {
		return Device{}, false
	}
	return s.deviceView(d), true
}

func (s *State) deviceView(d *Device) Device {
	v := *d
	v.cls, v.indexed, v.idxFree = nil, false, 0
	v.Allocations = append([]string(nil), d.Allocations...)
	if h := s.hosts[d.Host]; h == nil || !h.Up {
		v.Status = Offline
	}
	return v
}

// Devices returns every device, sorted by ID.
func (s *State) Devices() []Device {
	out := make([]Device, 0, len(s.devices))
	for _, id := range sortedKeys(s.devices) {
		out = append(out, s.deviceView(s.devices[id]))
	}
	return out
}

// Host returns a copy of a host.
func (s *State) Host(id string) (Host, bool) {
	h := s.hosts[id]
	if h == nil {
		return Host{}, false
	}
	return hostView(h), true
}

func hostView(h *Host) Host {
	v := *h
	v.load = nil
	v.Devices = append([]string(nil), h.Devices...)
	if h.Drain != nil {
		d := *h.Drain
		v.Drain = &d
	}
	return v
}

// Hosts returns every host, sorted by ID.
func (s *State) Hosts() []Host {
	out := make([]Host, 0, len(s.hosts))
	for _, id := range sortedKeys(s.hosts) {
		out = append(out, hostView(s.hosts[id]))
	}
	return out
}

// Allocation returns a copy of a live or historic allocation.
func (s *State) Allocation(id string) (*Allocation, bool) {
	a := s.lookup(id)
	if a == nil {
		return nil, false
	}
	c := a.clone()
	c.ExpectedStart = s.expectedStart(a)
	return c, true
}

// PolicyOf returns the policy in force for a type and pool ("" for none).
func (s *State) PolicyOf(t DeviceType, pool string) PolicyConfig { return s.policyFor(t, pool) }

// TypePolicies returns the policy of every device type, defaults included.
func (s *State) TypePolicies() map[DeviceType]PolicyConfig {
	out := map[DeviceType]PolicyConfig{}
	for _, t := range DeviceTypes {
		out[t] = s.policyFor(t, "")
	}
	return out
}

// PoolPolicies returns the per-pool overrides.
func (s *State) PoolPolicies() map[string]PolicyConfig {
	out := map[string]PolicyConfig{}
	for k, v := range s.poolPolicies {
		out[k] = v
	}
	return out
}

// Retention returns the history retention in force.
func (s *State) Retention() Retention { return s.retention }

// MaxServerIDLength bounds a server's ID in SetServerRemoved.
const MaxServerIDLength = 128

func (s *State) setServerRemoved(c *SetServerRemoved) Result {
	if c.ServerID == "" || len(c.ServerID) > MaxServerIDLength {
		return Result{Err: errf(ErrInvalid, "server id %q is empty or longer than %d bytes", c.ServerID, MaxServerIDLength)}
	}
	if !c.Removed {
		if _, ok := s.removedServers[c.ServerID]; !ok {
			return Result{Err: errf(ErrNotFound, "server %q is not removed", c.ServerID)}
		}
		delete(s.removedServers, c.ServerID)
		return Result{}
	}
	if _, ok := s.removedServers[c.ServerID]; !ok {
		s.removedServers[c.ServerID] = s.now
	}
	return Result{}
}

// RemovedServer is a server an operator removed, and when (Unix
// nanoseconds of the leader's clock).
type RemovedServer struct {
	ID    string `json:"id"`
	Since int64  `json:"since"`
}

// RemovedServers lists the servers an operator removed, by ID.
func (s *State) RemovedServers() []RemovedServer {
	out := make([]RemovedServer, 0, len(s.removedServers))
	for _, id := range sortedKeys(s.removedServers) {
		out = append(out, RemovedServer{ID: id, Since: s.removedServers[id]})
	}
	return out
}

// ServerRemoved reports whether an operator removed the server.
func (s *State) ServerRemoved(id string) bool {
	_, ok := s.removedServers[id]
	return ok
}
